//! A region's per-op policy: which op kinds and names are must/prefer save, recompute and
//! offload, and the default; interned when parsed.

use crate::op::OpKind;
use crate::policy::{Policy, PolicySource};
use remat_catalog::forms::{self, Resolved};
use std::sync::Mutex;

/// The per-op policy of a region, resolved at compile time by the macro (or at run time by
/// [`RegionPolicy::parse`](super::RegionPolicy::parse)).
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
    pub(super) fn intern(resolved: &Resolved) -> &'static PolicyTable {
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
