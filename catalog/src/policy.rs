//! The policy vocabulary: what a user can ask for a value, and which rule asked it.
//!
//! Shared by the `#[checkpoint]` macro (which resolves policies at compile time) and the runtime
//! (which tags every traced op with one), so both speak the same names.

/// What the user asked for a value: save it for the backward pass, or recompute it there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Always saved when the backward needs it; no strategy trades it away.
    MustSave,
    /// Saved under `Respect`; a min-cut or a budget may recompute it instead.
    PreferSave,
    /// Never saved: recomputed in the backward.
    MustRecompute,
    /// Recomputed under `Respect`; a budget may save it instead.
    PreferRecompute,
    /// Kept in host memory between the forward and the backward (copied out after it is
    /// produced, fetched back before its first backward use); never saved on the device nor
    /// recomputed. An error on a value that cannot leave the device (input, parameter, output).
    MustOffload,
    /// Offloaded under `Respect` when kept; a budget may save it on the device or recompute it.
    /// On a value that cannot leave the device it falls back to the other rules.
    PreferOffload,
}

impl Policy {
    /// All policies.
    pub const ALL: [Policy; 6] = [
        Policy::MustSave,
        Policy::PreferSave,
        Policy::MustRecompute,
        Policy::PreferRecompute,
        Policy::MustOffload,
        Policy::PreferOffload,
    ];

    /// The snake_case name (`"must_save"`), as in policies and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Policy::MustSave => "must_save",
            Policy::PreferSave => "prefer_save",
            Policy::MustRecompute => "must_recompute",
            Policy::PreferRecompute => "prefer_recompute",
            Policy::MustOffload => "must_offload",
            Policy::PreferOffload => "prefer_offload",
        }
    }

    /// The policy named `name`.
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether the policy leans to saving.
    pub fn is_save(self) -> bool {
        matches!(self, Policy::MustSave | Policy::PreferSave)
    }

    /// Whether the policy is a hard constraint.
    pub fn is_must(self) -> bool {
        matches!(self, Policy::MustSave | Policy::MustRecompute | Policy::MustOffload)
    }

    /// Whether the policy asks for the value to be kept in host memory.
    pub fn is_offload(self) -> bool {
        matches!(self, Policy::MustOffload | Policy::PreferOffload)
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a node has the policy it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicySource {
    /// The region's rule for the op kind.
    OpKind,
    /// The region's rule for the value's name (`save_names`).
    Name,
    /// The region's default.
    Default,
    /// A `#[save]` / `#[recompute]` statement attribute.
    Statement,
    /// Given explicitly (imported graphs).
    Explicit,
}

impl PolicySource {
    /// All sources.
    pub const ALL: [PolicySource; 5] = [
        PolicySource::OpKind,
        PolicySource::Name,
        PolicySource::Default,
        PolicySource::Statement,
        PolicySource::Explicit,
    ];

    /// The snake_case name (`"op_kind"`), as in dumps and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PolicySource::OpKind => "op_kind",
            PolicySource::Name => "name",
            PolicySource::Default => "default",
            PolicySource::Statement => "statement",
            PolicySource::Explicit => "explicit",
        }
    }

    /// The source named `name`.
    pub fn from_name(name: &str) -> Option<PolicySource> {
        PolicySource::ALL.into_iter().find(|s| s.name() == name)
    }
}
