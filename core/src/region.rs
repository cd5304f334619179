//! The region API the `#[checkpoint]` macro expands into.
//!
//! Calling a checkpointed function enters its [`RegionSpec`] with [`enter_region`], which pushes a
//! fresh region instance on a thread-local stack and returns a guard that pops it. Every op
//! recorded while the instance is innermost — by the function itself, by helpers it calls, or by
//! ops that expand into several — is tagged with the instance and the policy its spec resolves
//! for that op ([`PolicyTable::resolve`]). Instances nest: an instance entered while another is
//! open records it as its parent.

use crate::op::OpKind;
use crate::policy::{Policy, PolicySource};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The per-op policy of a region, resolved at compile time by the macro.
///
/// Precedence: a listed name (`save_names`), then a listed op kind (must lists before prefer
/// lists), then the default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyTable {
    /// Op kinds that must be saved.
    pub must_save: &'static [OpKind],
    /// Op kinds preferably saved.
    pub prefer_save: &'static [OpKind],
    /// Op kinds that must be recomputed.
    pub must_recompute: &'static [OpKind],
    /// Op kinds preferably recomputed.
    pub prefer_recompute: &'static [OpKind],
    /// Value names (`.name("attn")`) that must be saved.
    pub save_names: &'static [&'static str],
    /// The policy of everything else.
    pub default: Policy,
}

impl PolicyTable {
    /// `recompute_all`: classic checkpointing, every op preferably recomputed.
    pub const RECOMPUTE_ALL: PolicyTable = PolicyTable::uniform(Policy::PreferRecompute);
    /// `save_all`: a tagged region whose ops are all preferably saved.
    pub const SAVE_ALL: PolicyTable = PolicyTable::uniform(Policy::PreferSave);

    /// A table giving every op `default`.
    pub const fn uniform(default: Policy) -> PolicyTable {
        PolicyTable {
            must_save: &[],
            prefer_save: &[],
            must_recompute: &[],
            prefer_recompute: &[],
            save_names: &[],
            default,
        }
    }

    /// The policy for an op of `kind` whose value is named `name`, and which rule gave it.
    pub fn resolve(&self, kind: OpKind, name: Option<&str>) -> (Policy, PolicySource) {
        if name.is_some_and(|n| self.save_names.contains(&n)) {
            return (Policy::MustSave, PolicySource::Name);
        }
        let lists = [
            (self.must_save, Policy::MustSave),
            (self.must_recompute, Policy::MustRecompute),
            (self.prefer_save, Policy::PreferSave),
            (self.prefer_recompute, Policy::PreferRecompute),
        ];
        for (list, policy) in lists {
            if list.contains(&kind) {
                return (policy, PolicySource::OpKind);
            }
        }
        (self.default, PolicySource::Default)
    }
}

/// What the `#[checkpoint]` macro knows of a function at compile time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionSpec {
    /// The function's name.
    pub name: &'static str,
    /// `module_path!()` where it is defined.
    pub module: &'static str,
    /// `file!()` where it is defined.
    pub file: &'static str,
    /// The line of the function.
    pub line: u32,
    /// The policy of its ops.
    pub policy: PolicyTable,
    /// `budget = f`: the region may keep at most this fraction of its save-everything bytes.
    pub budget: Option<f64>,
}

impl RegionSpec {
    /// A spec with the given name and policy, located at the caller (for hand-written regions).
    #[track_caller]
    pub const fn new(name: &'static str, policy: PolicyTable) -> RegionSpec {
        let loc = std::panic::Location::caller();
        RegionSpec { name, module: "", file: loc.file(), line: loc.line(), policy, budget: None }
    }
}

/// An open region instance on this thread's stack.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActiveRegion {
    /// Unique per process: two calls never share an instance.
    pub instance: u64,
    pub spec: &'static RegionSpec,
}

thread_local! {
    static STACK: RefCell<Vec<ActiveRegion>> = const { RefCell::new(Vec::new()) };
}

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);

/// Closes its region instance when dropped.
#[must_use = "the region closes when this guard is dropped"]
#[derive(Debug)]
pub struct RegionGuard {
    depth: usize,
    // A guard must be dropped on the thread that opened it.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Opens a fresh instance of `spec` on this thread; ops recorded until the guard drops carry it.
pub fn enter_region(spec: &'static RegionSpec) -> RegionGuard {
    let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
    let depth = STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.push(ActiveRegion { instance, spec });
        s.len()
    });
    RegionGuard { depth, _not_send: std::marker::PhantomData }
}

impl Drop for RegionGuard {
    fn drop(&mut self) {
        // Truncating (rather than popping) keeps the stack right even if an inner guard leaked.
        STACK.with(|s| s.borrow_mut().truncate(self.depth - 1));
    }
}

/// The open instances, outermost first.
pub(crate) fn active_regions() -> Vec<ActiveRegion> {
    STACK.with(|s| s.borrow().clone())
}

/// Whether any region is open on this thread.
pub fn in_region() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    static MLP: RegionSpec = RegionSpec {
        name: "mlp",
        module: "tests",
        file: "region.rs",
        line: 1,
        policy: PolicyTable {
            must_save: &[OpKind::Matmul],
            prefer_save: &[],
            must_recompute: &[OpKind::Gelu],
            prefer_recompute: &[],
            save_names: &["attn"],
            default: Policy::PreferRecompute,
        },
        budget: None,
    };

    #[test]
    fn resolution_order() {
        let p = &MLP.policy;
        assert_eq!(p.resolve(OpKind::Matmul, None), (Policy::MustSave, PolicySource::OpKind));
        assert_eq!(p.resolve(OpKind::Gelu, Some("attn")), (Policy::MustSave, PolicySource::Name));
        assert_eq!(p.resolve(OpKind::Gelu, None), (Policy::MustRecompute, PolicySource::OpKind));
        assert_eq!(p.resolve(OpKind::Add, None), (Policy::PreferRecompute, PolicySource::Default));
    }

    #[test]
    fn guards_nest_and_unwind() {
        assert!(!in_region());
        let outer = enter_region(&MLP);
        let inner = enter_region(&MLP);
        let open = active_regions();
        assert_eq!(open.len(), 2);
        assert_ne!(open[0].instance, open[1].instance);
        drop(inner);
        assert_eq!(active_regions().len(), 1);
        drop(outer);
        assert!(!in_region());
    }
}
