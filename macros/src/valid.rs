//! Checking what a parsed `#[checkpoint(..)]` means: op kinds against the catalog, views in save
//! lists, conflicting lists, the budget's range. Produces the resolved policy table.

use crate::attr::{Args, OpList, PolicyForm, PolicyKw};
use crate::error::Errors;
use crate::kw;
use remat_catalog::{OpInfo, OpKind};
use syn::Ident;

/// The resolved policy of a region: what `PolicyTable` and `RegionSpec` are made of.
pub struct Table {
    /// Op kinds per policy, indexed like [`kw::POLICIES`].
    pub lists: [Vec<&'static OpInfo>; 4],
    /// Value names that must be saved.
    pub save_names: Vec<String>,
    /// The policy of every other op.
    pub default: PolicyKw,
    /// `budget = f`.
    pub budget: Option<f64>,
}

/// Resolves `args`, reporting every problem into `errors`.
pub fn validate(args: &Args, errors: &mut Errors) -> Table {
    let mut table =
        Table { lists: Default::default(), save_names: Vec::new(), default: PolicyKw::PREFER_RECOMPUTE, budget: None };
    match &args.policy {
        None | Some(PolicyForm::RecomputeAll) => {}
        Some(PolicyForm::SaveAll) => table.default = PolicyKw::PREFER_SAVE,
        Some(PolicyForm::Save(list)) => {
            table.lists[PolicyKw::MUST_SAVE.0] =
                kinds(ops(list, PolicyKw::MUST_SAVE, "or use `policy = recompute_all`", errors));
        }
        Some(PolicyForm::Recompute(list)) => {
            table.lists[PolicyKw::MUST_RECOMPUTE.0] =
                kinds(ops(list, PolicyKw::MUST_RECOMPUTE, "or use `policy = save_all`", errors));
            table.default = PolicyKw::PREFER_SAVE;
        }
        Some(PolicyForm::SaveNames { names, empty, whole }) => {
            if *empty {
                errors.spanned(whole, "`save_names()` lists no name; name at least one, as in `save_names(\"attn\")`");
            }
            for name in names {
                let value = name.value();
                if value.is_empty() {
                    errors.spanned(name, "an empty name matches no value; write the name given with `.name(..)`");
                } else if table.save_names.contains(&value) {
                    errors.spanned(name, format!("`\"{value}\"` is listed twice in `save_names(..)`"));
                } else {
                    table.save_names.push(value);
                }
            }
        }
        Some(PolicyForm::Rules(rules)) => {
            // Which list each op kind went to first, for conflicts.
            let mut placed: Vec<(OpKind, PolicyKw)> = Vec::new();
            for (policy, list) in &rules.lists {
                let mut kept = Vec::new();
                for (info, ident) in ops(list, *policy, "or remove the key", errors) {
                    match placed.iter().find(|(kind, _)| *kind == info.kind) {
                        Some((_, first)) => errors.spanned(
                            ident,
                            format!(
                                "`{}` is in both `{}` and `{}`; an op kind has one policy, keep it in one list",
                                info.name,
                                first.name(),
                                policy.name()
                            ),
                        ),
                        None => {
                            placed.push((info.kind, *policy));
                            kept.push(info);
                        }
                    }
                }
                table.lists[policy.0] = kept;
            }
            table.default = rules.default.unwrap_or(PolicyKw::PREFER_RECOMPUTE);
        }
    }
    if let Some(budget) = &args.budget {
        if (0.0..=1.0).contains(&budget.value) {
            table.budget = Some(budget.value);
        } else {
            errors.spanned(
                &budget.tokens,
                format!(
                    "`budget` must be in [0, 1], the fraction of the region's save-everything bytes it may keep; got {:?}",
                    budget.value
                ),
            );
        }
    }
    table
}

/// Resolves the op kinds of `list` (which gives them `policy`), reporting unknown kinds, views
/// in save lists, duplicates and an empty list (`or_else` says what to write instead).
fn ops<'a>(
    list: &'a OpList,
    policy: PolicyKw,
    or_else: &str,
    errors: &mut Errors,
) -> Vec<(&'static OpInfo, &'a Ident)> {
    let key = list.key.to_string();
    if list.ops.is_empty() {
        let written = if key == kw::SAVE || key == kw::RECOMPUTE { format!("{key}()") } else { format!("{key} = []") };
        errors.spanned(
            &list.whole,
            format!("`{written}` lists no op kind; name at least one, as in `{}`, {or_else}", example(&key)),
        );
        return Vec::new();
    }
    let mut resolved: Vec<(&'static OpInfo, &Ident)> = Vec::new();
    for ident in &list.ops {
        let name = ident.to_string();
        let Some(info) = remat_catalog::lookup(&name) else {
            let message = if OpKind::from_name(&name).is_some() {
                format!("unknown op kind `{name}`: it is internal to the backward pass and cannot be named in a policy")
            } else if let Some(close) = remat_catalog::suggest(&name) {
                format!("unknown op kind `{name}`; did you mean `{close}`?")
            } else {
                format!("unknown op kind `{name}`; op kinds are named like the tensor methods that record them, as in `matmul`, `gelu`, `softmax`")
            };
            errors.spanned(ident, message);
            continue;
        };
        if policy.is_save() && info.view {
            errors.spanned(
                ident,
                format!("`{name}` is a view op: views are never saved, their base is; save the op that produces the base instead"),
            );
            continue;
        }
        if resolved.iter().any(|(r, _)| r.kind == info.kind) {
            errors.spanned(ident, format!("`{name}` is listed twice in `{key}`"));
            continue;
        }
        resolved.push((info, ident));
    }
    resolved
}

fn kinds(ops: Vec<(&'static OpInfo, &Ident)>) -> Vec<&'static OpInfo> {
    ops.into_iter().map(|(info, _)| info).collect()
}

fn example(key: &str) -> String {
    if key == kw::SAVE || key == kw::RECOMPUTE {
        format!("{key}(matmul)")
    } else {
        format!("{key} = [matmul]")
    }
}
