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
use remat_catalog::forms::{self, PolicyError, Resolved};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The per-op policy of a region, resolved at compile time by the macro (or at run time by
/// [`RegionPolicy::parse`]).
///
/// Precedence: a listed name (`save_names`, then `offload_names`), then a listed op kind (must
/// lists before prefer lists; save, recompute, offload within each), then the default.
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
    /// Op kinds that must be offloaded to host memory.
    pub must_offload: &'static [OpKind],
    /// Op kinds preferably offloaded.
    pub prefer_offload: &'static [OpKind],
    /// Value names (`.name("attn")`) that must be saved.
    pub save_names: &'static [&'static str],
    /// Value names that must be offloaded.
    pub offload_names: &'static [&'static str],
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
            must_offload: &[],
            prefer_offload: &[],
            save_names: &[],
            offload_names: &[],
            default,
        }
    }

    /// The op-kind lists, in the order of [`forms::kw::POLICIES`] / [`forms::POLICY_ORDER`].
    pub fn lists(&self) -> [&'static [OpKind]; 6] {
        [
            self.must_save,
            self.prefer_save,
            self.must_recompute,
            self.prefer_recompute,
            self.must_offload,
            self.prefer_offload,
        ]
    }

    /// The policy for an op of `kind` whose value is named `name`, and which rule gave it.
    pub fn resolve(&self, kind: OpKind, name: Option<&str>) -> (Policy, PolicySource) {
        if let Some(name) = name {
            if self.save_names.contains(&name) {
                return (Policy::MustSave, PolicySource::Name);
            }
            if self.offload_names.contains(&name) {
                return (Policy::MustOffload, PolicySource::Name);
            }
        }
        let lists = self.lists();
        let musts_first = forms::POLICY_ORDER.iter().enumerate().filter(|(_, p)| p.is_must());
        let then_prefers = forms::POLICY_ORDER.iter().enumerate().filter(|(_, p)| !p.is_must());
        for (i, &policy) in musts_first.chain(then_prefers) {
            if lists[i].contains(&kind) {
                return (policy, PolicySource::OpKind);
            }
        }
        (self.default, PolicySource::Default)
    }

    /// The value names the table lists, with the form that lists them (`save_names`,
    /// `offload_names`).
    pub fn names(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        let save = self.save_names.iter().map(|n| (forms::kw::SAVE_NAMES, *n));
        save.chain(self.offload_names.iter().map(|n| (forms::kw::OFFLOAD_NAMES, *n)))
    }
}

impl PolicyTable {
    /// The table of a resolved form, interned: equal tables share one `'static` copy, so parsing
    /// a policy many times does not grow memory.
    fn intern(resolved: &Resolved) -> &'static PolicyTable {
        static TABLES: Mutex<Vec<&'static PolicyTable>> = Mutex::new(Vec::new());
        let leak = |kinds: &[OpKind]| -> &'static [OpKind] { Box::leak(kinds.to_vec().into_boxed_slice()) };
        let same_names = |a: &[&str], b: &[String]| a.iter().copied().eq(b.iter().map(String::as_str));
        let same = |t: &PolicyTable| {
            t.lists().iter().zip(&resolved.lists).all(|(a, b)| *a == b.as_slice())
                && same_names(t.save_names, &resolved.save_names)
                && same_names(t.offload_names, &resolved.offload_names)
                && t.default == resolved.default
        };
        let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tables.iter().find(|t| same(t)) {
            return t;
        }
        let names = |names: &[String]| -> &'static [&'static str] {
            let leaked: Vec<&'static str> = names.iter().map(|n| &*Box::leak(n.clone().into_boxed_str())).collect();
            Box::leak(leaked.into_boxed_slice())
        };
        let [must_save, prefer_save, must_recompute, prefer_recompute, must_offload, prefer_offload] =
            resolved.lists.each_ref().map(|l| leak(l));
        let table = Box::leak(Box::new(PolicyTable {
            must_save,
            prefer_save,
            must_recompute,
            prefer_recompute,
            must_offload,
            prefer_offload,
            save_names: names(&resolved.save_names),
            offload_names: names(&resolved.offload_names),
            default: resolved.default,
        }));
        tables.push(table);
        table
    }
}

impl std::fmt::Display for PolicyTable {
    /// The form that builds this table (`save(matmul)`), in the policy grammar; a table with
    /// both names and op lists, or with both kinds of names (only written by hand), shows as
    /// `rules(..)` followed by its names.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use forms::kw;
        let list = |kinds: &[OpKind]| kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
        let quoted = |names: &[&str]| names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
        let lists = self.lists();
        let nonempty: Vec<Policy> =
            forms::POLICY_ORDER.into_iter().filter(|&p| !lists[forms::list_index(p)].is_empty()).collect();
        let names = (!self.save_names.is_empty(), !self.offload_names.is_empty());
        match (nonempty.as_slice(), names, self.default) {
            ([], (false, false), Policy::PreferRecompute) => f.write_str(kw::RECOMPUTE_ALL),
            ([], (false, false), Policy::PreferSave) => f.write_str(kw::SAVE_ALL),
            ([Policy::MustSave], (false, false), Policy::PreferRecompute) => {
                write!(f, "save({})", list(self.must_save))
            }
            ([Policy::MustRecompute], (false, false), Policy::PreferSave) => {
                write!(f, "recompute({})", list(self.must_recompute))
            }
            ([Policy::MustOffload], (false, false), Policy::PreferRecompute) => {
                write!(f, "offload({})", list(self.must_offload))
            }
            ([], (true, false), Policy::PreferRecompute) => write!(f, "save_names({})", quoted(self.save_names)),
            ([], (false, true), Policy::PreferRecompute) => {
                write!(f, "offload_names({})", quoted(self.offload_names))
            }
            _ => {
                let mut parts: Vec<String> =
                    nonempty.iter().map(|&p| format!("{p} = [{}]", list(lists[forms::list_index(p)]))).collect();
                parts.push(format!("default = {}", self.default));
                write!(f, "rules({})", parts.join(", "))?;
                if !self.save_names.is_empty() {
                    write!(f, " + save_names({})", quoted(self.save_names))?;
                }
                if !self.offload_names.is_empty() {
                    write!(f, " + offload_names({})", quoted(self.offload_names))?;
                }
                Ok(())
            }
        }
    }
}

/// A region's policy as a value, to choose at run time (from a flag, a config file) and pass to
/// a function checkpointed with `#[checkpoint(policy = arg(p))]`.
///
/// Built by the `policy!` macro (checked at compile time, like `#[checkpoint]`) or parsed from
/// the same text at run time ([`RegionPolicy::parse`], or `str::parse`), with the same messages
/// as a [`PolicyError`]. The text is one policy form, optionally followed by `, budget = f`:
///
/// ```
/// use remat_core::region::RegionPolicy;
/// use remat_core::{OpKind, Policy};
/// let p: RegionPolicy = "save(matmul), budget = 0.5".parse().unwrap();
/// assert_eq!(p.table().must_save, &[OpKind::Matmul]);
/// assert_eq!(p.budget(), Some(0.5));
/// assert_eq!(p.to_string(), "save(matmul), budget = 0.5");
/// let err = RegionPolicy::parse("save(matmull)").unwrap_err();
/// assert!(err.to_string().contains("unknown op kind `matmull`; did you mean `matmul`?"));
/// ```
///
/// Cheap to copy: the table is `'static` (interned when parsed).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionPolicy {
    table: &'static PolicyTable,
    budget: Option<f64>,
}

impl RegionPolicy {
    /// `recompute_all`.
    pub const RECOMPUTE_ALL: RegionPolicy = RegionPolicy::from_static(&PolicyTable::RECOMPUTE_ALL, None);
    /// `save_all`.
    pub const SAVE_ALL: RegionPolicy = RegionPolicy::from_static(&PolicyTable::SAVE_ALL, None);

    /// A policy from a table known at compile time (what `policy!` expands to).
    pub const fn from_static(table: &'static PolicyTable, budget: Option<f64>) -> RegionPolicy {
        RegionPolicy { table, budget }
    }

    /// Reads a policy written as in `#[checkpoint(policy = ..)]`: a form, optionally preceded by
    /// `policy =` and followed by `, budget = f`. Every problem is reported, each with its
    /// place in `text` and the message the macro gives for it at compile time.
    pub fn parse(text: &str) -> Result<RegionPolicy, PolicyError> {
        let spec = forms::parse(text)?;
        Ok(RegionPolicy { table: PolicyTable::intern(&spec.policy), budget: spec.budget })
    }

    /// The per-op table.
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
        Ok(RegionPolicy { budget, ..self })
    }

    /// [`RegionPolicy::with_budget`] for a budget the `#[checkpoint]` macro checked at compile time.
    #[doc(hidden)]
    pub const fn with_checked_budget(self, budget: Option<f64>) -> RegionPolicy {
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
        write!(f, "{}", self.table)?;
        if let Some(b) = self.budget {
            write!(f, ", budget = {b}")?;
        }
        Ok(())
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

/// Opens a fresh instance of the function `site` describes with `policy` in place of the spec's
/// own policy and budget (what `#[checkpoint(policy = arg(p))]` expands to).
///
/// Region specs are `'static` (reports and graphs refer to them); one spec per distinct
/// (site, policy) pair is kept for the life of the process.
pub fn enter_region_with(site: &'static RegionSpec, policy: RegionPolicy) -> RegionGuard {
    if site.policy == *policy.table && site.budget == policy.budget {
        return enter_region(site);
    }
    static SPECS: Mutex<Vec<&'static RegionSpec>> = Mutex::new(Vec::new());
    let wanted = RegionSpec { policy: *policy.table, budget: policy.budget, ..*site };
    let spec = {
        let mut specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
        match specs.iter().find(|s| ***s == wanted) {
            Some(s) => *s,
            None => {
                let s: &'static RegionSpec = Box::leak(Box::new(wanted));
                specs.push(s);
                s
            }
        }
    };
    enter_region(spec)
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
            must_offload: &[OpKind::Softmax],
            prefer_offload: &[OpKind::Add],
            save_names: &["attn"],
            offload_names: &["ctx"],
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
        assert_eq!(p.resolve(OpKind::Gelu, Some("ctx")), (Policy::MustOffload, PolicySource::Name));
        assert_eq!(p.resolve(OpKind::Softmax, None), (Policy::MustOffload, PolicySource::OpKind));
        assert_eq!(p.resolve(OpKind::Add, None), (Policy::PreferOffload, PolicySource::OpKind));
        assert_eq!(p.resolve(OpKind::Mul, None), (Policy::PreferRecompute, PolicySource::Default));
    }

    #[test]
    fn runtime_policies_round_trip_and_share_tables() {
        for text in [
            "recompute_all",
            "save_all",
            "save(matmul, gelu)",
            "recompute(gelu)",
            "save_names(\"attn\")",
            "offload(matmul, gelu)",
            "offload_names(\"ctx\")",
            "rules(must_save = [matmul], must_recompute = [softmax], default = prefer_save)",
            "rules(must_save = [matmul], prefer_offload = [gelu], default = prefer_offload)",
            "save_all, budget = 0.25",
        ] {
            let p = RegionPolicy::parse(text).unwrap();
            assert_eq!(p.to_string(), text);
            assert_eq!(RegionPolicy::parse(&p.to_string()).unwrap(), p);
        }
        let a = RegionPolicy::parse("save(matmul)").unwrap();
        let b: RegionPolicy = "policy = save(matmul)".parse().unwrap();
        assert!(std::ptr::eq(a.table(), b.table()));
        assert_eq!(a.table().resolve(OpKind::Matmul, None), (Policy::MustSave, PolicySource::OpKind));
    }

    #[test]
    fn a_runtime_policy_tags_like_the_spec_it_replaces() {
        static SITE: RegionSpec = RegionSpec::new("site", PolicyTable::RECOMPUTE_ALL);
        let p = RegionPolicy::parse("save(matmul), budget = 0.5").unwrap();
        let guard = enter_region_with(&SITE, p);
        let open = active_regions();
        let spec = open.last().unwrap().spec;
        assert_eq!((spec.name, spec.line, spec.budget), ("site", SITE.line, Some(0.5)));
        assert_eq!(spec.policy.must_save, &[OpKind::Matmul]);
        drop(guard);
        let again = enter_region_with(&SITE, p);
        assert!(std::ptr::eq(active_regions().last().unwrap().spec, spec));
        drop(again);
        let plain = enter_region_with(&SITE, RegionPolicy::RECOMPUTE_ALL);
        assert!(std::ptr::eq(active_regions().last().unwrap().spec, &SITE));
        drop(plain);
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
