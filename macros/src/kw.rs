//! The words of the `#[checkpoint(..)]` DSL, each in one place.

/// `policy = <form>`.
pub const POLICY: &str = "policy";
/// `budget = <fraction>`.
pub const BUDGET: &str = "budget";
/// The keys of `#[checkpoint(..)]`.
pub const KEYS: &[&str] = &[POLICY, BUDGET];

/// `policy = recompute_all`.
pub const RECOMPUTE_ALL: &str = "recompute_all";
/// `policy = save_all`.
pub const SAVE_ALL: &str = "save_all";
/// `policy = save(op, ..)`.
pub const SAVE: &str = "save";
/// `policy = recompute(op, ..)`.
pub const RECOMPUTE: &str = "recompute";
/// `policy = save_names("a", ..)`.
pub const SAVE_NAMES: &str = "save_names";
/// `policy = rules(..)`.
pub const RULES: &str = "rules";
/// The policy forms.
pub const FORMS: &[&str] = &[RECOMPUTE_ALL, SAVE_ALL, SAVE, RECOMPUTE, SAVE_NAMES, RULES];

/// The four policies, as `rules(..)` keys and as its `default`.
pub const MUST_SAVE: &str = "must_save";
/// See [`MUST_SAVE`].
pub const PREFER_SAVE: &str = "prefer_save";
/// See [`MUST_SAVE`].
pub const MUST_RECOMPUTE: &str = "must_recompute";
/// See [`MUST_SAVE`].
pub const PREFER_RECOMPUTE: &str = "prefer_recompute";
/// The policies, in the order of `PolicyTable`'s lists.
pub const POLICIES: &[&str] = &[MUST_SAVE, PREFER_SAVE, MUST_RECOMPUTE, PREFER_RECOMPUTE];
/// `rules(default = <policy>)`.
pub const DEFAULT: &str = "default";

/// The statement attribute `#[save]`.
pub const STMT_SAVE: &str = "save";
/// The statement attribute `#[recompute]`.
pub const STMT_RECOMPUTE: &str = "recompute";

/// Tensor methods that record a view under another op's name (`t()` records `transpose`).
pub const VIEW_METHOD_ALIASES: &[(&str, &str)] = &[("t", "transpose")];
