//! The words of the `#[checkpoint(..)]` DSL, each in one place. The policy forms' words live
//! with their grammar in `remat_catalog::forms::kw`, shared with the run-time parser.

pub use remat_catalog::forms::kw::{BUDGET, POLICY};

/// `crate = "path"`: where the expansion finds remat, for code that renames the dependency or
/// re-exports it (serde's `#[serde(crate = "..")]`).
pub const CRATE: &str = "crate";

/// The keys of `#[checkpoint(..)]`.
pub const KEYS: &[&str] = &[POLICY, BUDGET, CRATE];

/// `policy = arg(p)`: the policy is the value of the function's parameter `p`, chosen at run time.
pub const ARG: &str = "arg";

/// The statement attribute `#[save]`.
pub const STMT_SAVE: &str = "save";
/// The statement attribute `#[recompute]`.
pub const STMT_RECOMPUTE: &str = "recompute";
/// The statement attribute `#[offload]`.
pub const STMT_OFFLOAD: &str = "offload";

/// Tensor methods that record a view under another op's name (`t()` records `transpose`).
pub const VIEW_METHOD_ALIASES: &[(&str, &str)] = &[("t", "transpose")];
