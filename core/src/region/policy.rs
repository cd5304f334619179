//! A region's policy as a value chosen at run time.

use super::PolicyTable;
use remat_catalog::forms::{self, PolicyError};

/// A region's policy as a value, to choose at run time (from a flag, a config file) and pass to
/// a function checkpointed with `#[checkpoint(policy = arg(p))]`.
///
/// Built by the `policy!` macro (checked at compile time, like `#[checkpoint]`) or parsed from
/// the same text at run time ([`RegionPolicy::parse`], or `str::parse`), with the same messages
/// as a [`PolicyError`]. The text is one policy form, optionally followed by `, budget = f`:
///
/// ```
/// use remat_core::RegionPolicy;
/// use remat_core::{OpKind, Policy};
/// let p: RegionPolicy = "save(matmul), budget = 0.5".parse().unwrap();
/// assert_eq!(p.table().must_save, &[OpKind::Matmul]);
/// assert_eq!(p.budget(), Some(0.5));
/// assert_eq!(p.to_string(), "save(matmul), budget = 0.5");
/// let err = RegionPolicy::parse("save(matmull)").unwrap_err();
/// assert!(err.to_string().contains("unknown op kind `matmull`; did you mean `matmul`?"));
/// ```
///
/// `"none"` ([`RegionPolicy::NONE`]) means no region at all: the function's ops are recorded as
/// if it were not checkpointed, so one `arg(p)` function serves every choice, no checkpointing
/// included.
///
/// Cheap to copy: the table is `'static` (interned when parsed).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionPolicy {
    table: &'static PolicyTable,
    budget: Option<f64>,
    /// No region: [`RegionPolicy::NONE`].
    none: bool,
}

impl RegionPolicy {
    /// `recompute_all`.
    pub const RECOMPUTE_ALL: RegionPolicy = RegionPolicy::from_static(&PolicyTable::RECOMPUTE_ALL, None);
    /// `save_all`.
    pub const SAVE_ALL: RegionPolicy = RegionPolicy::from_static(&PolicyTable::SAVE_ALL, None);
    /// `none`: no region. A function checkpointed with `arg(p)` and called with this policy
    /// opens no region; its ops are tagged by the enclosing region, if any, as if the function
    /// had no `#[checkpoint]`.
    pub const NONE: RegionPolicy = RegionPolicy { table: &PolicyTable::RECOMPUTE_ALL, budget: None, none: true };

    /// A policy from a table known at compile time (what `policy!` expands to).
    pub const fn from_static(table: &'static PolicyTable, budget: Option<f64>) -> RegionPolicy {
        RegionPolicy { table, budget, none: false }
    }

    /// [`RegionPolicy::NONE`]: no region.
    pub const fn none() -> RegionPolicy {
        RegionPolicy::NONE
    }

    /// Whether this is [`RegionPolicy::NONE`].
    pub fn is_none(&self) -> bool {
        self.none
    }

    /// Reads a policy written as in `#[checkpoint(policy = ..)]`: a form, optionally preceded by
    /// `policy =` and followed by `, budget = f`, or `none` (no region). Every problem is
    /// reported, each with its place in `text` and the message the macro gives for it at
    /// compile time.
    pub fn parse(text: &str) -> Result<RegionPolicy, PolicyError> {
        let bare = text.trim();
        let bare = bare.strip_prefix("policy").map_or(bare, |rest| rest.trim_start().strip_prefix('=').unwrap_or(bare));
        if bare.trim() == "none" {
            return Ok(RegionPolicy::NONE);
        }
        let spec = forms::parse(text)?;
        Ok(RegionPolicy { table: PolicyTable::intern(&spec.policy), budget: spec.budget, none: false })
    }

    /// The per-op table (`recompute_all`'s for [`RegionPolicy::NONE`], which tags nothing).
    pub fn table(&self) -> &'static PolicyTable {
        self.table
    }

    /// `budget = f`, if given.
    pub fn budget(&self) -> Option<f64> {
        self.budget
    }

    /// This policy with another budget (`None`: no budget); a budget outside [0, 1] is the error
    /// the parser gives for `budget = f`.
    pub fn with_budget(self, budget: Option<f64>) -> Result<RegionPolicy, PolicyError> {
        let budget = budget.map(forms::check_budget).transpose()?;
        Ok(RegionPolicy { budget: budget.filter(|_| !self.none), ..self })
    }

    /// [`RegionPolicy::with_budget`] for a budget the `#[checkpoint]` macro checked at compile time.
    #[doc(hidden)]
    pub const fn with_checked_budget(self, budget: Option<f64>) -> RegionPolicy {
        if self.none {
            return self;
        }
        RegionPolicy { budget, ..self }
    }
}

impl Default for RegionPolicy {
    /// `recompute_all`, as a bare `#[checkpoint]`.
    fn default() -> Self {
        RegionPolicy::RECOMPUTE_ALL
    }
}

impl std::str::FromStr for RegionPolicy {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RegionPolicy::parse(text)
    }
}

impl std::fmt::Display for RegionPolicy {
    /// The text [`RegionPolicy::parse`] reads back to this policy.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.none {
            return f.write_str("none");
        }
        write!(f, "{}", self.table)?;
        if let Some(b) = self.budget {
            write!(f, ", budget = {b}")?;
        }
        Ok(())
    }
}
