//! What a policy as written means: op kinds per policy, names, the default, the budget — every
//! problem reported at once.

use super::syntax::{report, Diagnostics, Expr};
use super::words::*;
use crate::{lookup, suggest, OpKind, Policy};

/// A resolved policy: op kinds per policy, names that must be saved or offloaded, the default.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// Op kinds per policy, indexed like [`kw::POLICIES`] / [`POLICY_ORDER`].
    pub lists: [Vec<OpKind>; 6],
    /// Value names (`.name("attn")`) that must be saved.
    pub save_names: Vec<String>,
    /// Value names that must be offloaded.
    pub offload_names: Vec<String>,
    /// The policy of every other op.
    pub default: Policy,
}

impl Default for Resolved {
    /// `recompute_all`.
    fn default() -> Self {
        Resolved {
            lists: Default::default(),
            save_names: Vec::new(),
            offload_names: Vec::new(),
            default: Policy::PreferRecompute,
        }
    }
}

/// A policy with its optional budget: what `policy!(..)` and a policy string mean.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Spec {
    /// The policy.
    pub policy: Resolved,
    /// `budget = f`, in [0, 1].
    pub budget: Option<f64>,
}

/// Resolves one policy form, reporting every problem into `diags` (the result is meaningless
/// when something was reported).
pub fn resolve_policy<S: Clone>(value: &Expr<S>, diags: &mut Diagnostics<S>) -> Resolved {
    let mut resolved = Resolved::default();
    let (form, form_span, args) = match value {
        Expr::Ident(name, span) => (name.as_str(), span, None),
        Expr::Call { func, args, .. } => match func.ident() {
            Some((name, span)) => (name, span, Some(args)),
            None => {
                report(diags, func.span(), format!("unknown policy; {EXPECTED_POLICY}"));
                return resolved;
            }
        },
        other => {
            report(diags, other.span(), format!("expected a policy, {}", &EXPECTED_POLICY["expected ".len()..]));
            return resolved;
        }
    };
    match (form, args) {
        (kw::RECOMPUTE_ALL, None) => {}
        (kw::SAVE_ALL, None) => resolved.default = Policy::PreferSave,
        (kw::RECOMPUTE_ALL | kw::SAVE_ALL, Some(_)) => {
            report(diags, value.span(), format!("`{form}` takes no arguments; write `policy = {form}`"));
        }
        (kw::SAVE | kw::RECOMPUTE | kw::OFFLOAD, Some(args)) => {
            let (policy, or_else) = match form {
                kw::SAVE => (Policy::MustSave, "or use `policy = recompute_all`"),
                kw::RECOMPUTE => (Policy::MustRecompute, "or use `policy = save_all`"),
                _ => (Policy::MustOffload, "or use `policy = recompute_all`"),
            };
            let list = OpList { key: form, items: op_names(args, diags), whole: value.span() };
            resolved.lists[list_index(policy)] = kinds(list.resolve(policy, or_else, diags));
            if policy == Policy::MustRecompute {
                resolved.default = Policy::PreferSave;
            }
        }
        (kw::SAVE_NAMES, Some(args)) => resolved.save_names = value_names(form, args, value.span(), diags),
        (kw::OFFLOAD_NAMES, Some(args)) => resolved.offload_names = value_names(form, args, value.span(), diags),
        (kw::RULES, Some(args)) => rules(args, &mut resolved, diags),
        (kw::SAVE | kw::RECOMPUTE | kw::OFFLOAD, None) => {
            report(diags, form_span, format!("`{form}` needs the op kinds it applies to, as in `{form}(matmul)`"));
        }
        (kw::SAVE_NAMES | kw::OFFLOAD_NAMES, None) => {
            let verb = if form == kw::SAVE_NAMES { "saves" } else { "offloads" };
            report(diags, form_span, format!("`{form}` needs the value names it {verb}, as in `{form}(\"attn\")`"));
        }
        (kw::RULES, None) => {
            report(diags, form_span, "`rules` needs its lists, as in `rules(must_save = [matmul])`");
        }
        _ => {
            let hint = did_you_mean(form, kw::FORMS.iter().copied());
            let hint = if hint.is_empty() { format!("; {EXPECTED_POLICY}") } else { hint };
            report(diags, form_span, format!("unknown policy `{form}`{hint}"));
        }
    }
    resolved
}

/// Resolves `budget = value`: a number in [0, 1].
pub fn resolve_budget<S: Clone>(value: &Expr<S>, diags: &mut Diagnostics<S>) -> Option<f64> {
    match value {
        Expr::Number(n, _) if (0.0..=1.0).contains(n) => Some(*n),
        Expr::Number(n, span) => {
            report(
                diags,
                span,
                format!(
                    "`budget` must be in [0, 1], the fraction of the region's save-everything bytes it may keep; got {n:?}"
                ),
            );
            None
        }
        other => {
            report(diags, other.span(), "`budget` must be a number in [0, 1], the fraction of the region's save-everything bytes it may keep, as in `budget = 0.5`");
            None
        }
    }
}

/// Resolves the items of `policy!(..)` or of a policy string: a form (or `policy = <form>`),
/// then optionally `budget = f`. `whole` spans everything, for an empty input.
pub fn resolve_items<S: Clone>(items: &[Expr<S>], whole: &S, diags: &mut Diagnostics<S>) -> Spec {
    let mut spec = Spec::default();
    let mut form_seen = false;
    let mut budget_seen = false;
    for item in items {
        let (key, value) = match item {
            Expr::Assign { key, value, .. } => match key.ident() {
                Some((name, span)) => (Some((name, span)), &**value),
                None => {
                    report(diags, key.span(), "expected `budget = ..`");
                    continue;
                }
            },
            other => (None, other),
        };
        match key {
            None | Some((kw::POLICY, _)) => {
                if form_seen {
                    let span = key.map_or(value.span(), |(_, s)| s);
                    report(diags, span, "a second policy; give one form, then optionally `budget = ..`");
                    continue;
                }
                form_seen = true;
                spec.policy = resolve_policy(value, diags);
            }
            Some((kw::BUDGET, span)) => {
                if budget_seen {
                    report(diags, span, "duplicate `budget`; give it once");
                    continue;
                }
                budget_seen = true;
                spec.budget = resolve_budget(value, diags);
            }
            Some((name, span)) => {
                let hint = did_you_mean(name, [kw::POLICY, kw::BUDGET]);
                let hint = if hint.is_empty() { "; expected `budget = ..`".to_string() } else { hint };
                report(diags, span, format!("unknown key `{name}` in a policy{hint}"));
            }
        }
    }
    if !form_seen && diags.is_empty() {
        report(diags, whole, format!("no policy given; {EXPECTED_POLICY}"));
    }
    spec
}

/// A list of op kinds as written, with the whole list for errors about it.
struct OpList<'a, S> {
    /// The key or form naming the list (`save`, `must_save`).
    key: &'a str,
    items: Vec<(&'a str, &'a S)>,
    whole: &'a S,
}

impl<'a, S: Clone> OpList<'a, S> {
    /// The op kinds, reporting unknown kinds, views in save and offload lists, duplicates and an
    /// empty list (`or_else` says what to write instead).
    fn resolve(&self, policy: Policy, or_else: &str, diags: &mut Diagnostics<S>) -> Vec<(OpKind, &'a S)> {
        let key = self.key;
        if self.items.is_empty() {
            let call_form = key == kw::SAVE || key == kw::RECOMPUTE || key == kw::OFFLOAD;
            let written = if call_form { format!("{key}()") } else { format!("{key} = []") };
            let example = if call_form { format!("{key}(matmul)") } else { format!("{key} = [matmul]") };
            report(
                diags,
                self.whole,
                format!("`{written}` lists no op kind; name at least one, as in `{example}`, {or_else}"),
            );
            return Vec::new();
        }
        let mut resolved: Vec<(OpKind, &S)> = Vec::new();
        for &(name, span) in &self.items {
            let Some(info) = lookup(name) else {
                let message = if OpKind::from_name(name).is_some() {
                    format!(
                        "unknown op kind `{name}`: it is internal to the backward pass and cannot be named in a policy"
                    )
                } else if let Some(close) = suggest(name) {
                    format!("unknown op kind `{name}`; did you mean `{close}`?")
                } else {
                    format!("unknown op kind `{name}`; op kinds are named like the tensor methods that record them, as in `matmul`, `gelu`, `softmax`")
                };
                report(diags, span, message);
                continue;
            };
            if policy.is_save() && info.view {
                report(diags, span, format!("`{name}` is a view op: views are never saved, their base is; save the op that produces the base instead"));
                continue;
            }
            if policy.is_offload() && info.view {
                report(diags, span, format!("`{name}` is a view op: views are never offloaded, their base is; offload the op that produces the base instead"));
                continue;
            }
            if resolved.iter().any(|(k, _)| *k == info.kind) {
                report(diags, span, format!("`{name}` is listed twice in `{key}`"));
                continue;
            }
            resolved.push((info.kind, span));
        }
        resolved
    }
}

fn kinds<S>(ops: Vec<(OpKind, &S)>) -> Vec<OpKind> {
    ops.into_iter().map(|(k, _)| k).collect()
}

/// Op kind names: plain identifiers.
fn op_names<'a, S: Clone>(args: &'a [Expr<S>], diags: &mut Diagnostics<S>) -> Vec<(&'a str, &'a S)> {
    let mut ops = Vec::new();
    for arg in args {
        match arg {
            Expr::Ident(name, span) => ops.push((name.as_str(), span)),
            Expr::Str(s, span) => report(diags, span, format!("write op kinds without quotes: `{s}`")),
            other => report(diags, other.span(), "expected an op kind, such as `matmul`"),
        }
    }
    ops
}

/// The string literals of `save_names(..)` / `offload_names(..)` (`form`).
fn value_names<S: Clone>(form: &str, args: &[Expr<S>], whole: &S, diags: &mut Diagnostics<S>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    if args.is_empty() {
        report(diags, whole, format!("`{form}()` lists no name; name at least one, as in `{form}(\"attn\")`"));
    }
    for arg in args {
        match arg {
            Expr::Str(value, span) => {
                if value.is_empty() {
                    report(diags, span, "an empty name matches no value; write the name given with `.name(..)`");
                } else if names.contains(value) {
                    report(diags, span, format!("`\"{value}\"` is listed twice in `{form}(..)`"));
                } else {
                    names.push(value.clone());
                }
            }
            Expr::Ident(ident, span) => report(
                diags,
                span,
                format!("`{form}` takes string literals; write `\"{ident}\"` to match `.name(\"{ident}\")`"),
            ),
            other => report(
                diags,
                other.span(),
                format!("`{form}` takes string literals naming values, as in `{form}(\"attn\")`"),
            ),
        }
    }
    names
}

fn rules<S: Clone>(args: &[Expr<S>], resolved: &mut Resolved, diags: &mut Diagnostics<S>) {
    let mut seen: Vec<&str> = Vec::new();
    let keys = || kw::POLICIES.iter().copied().chain([kw::DEFAULT]);
    // Which list each op kind went to first, for conflicts.
    let mut placed: Vec<(OpKind, Policy)> = Vec::new();
    for arg in args {
        let Expr::Assign { key, value, span: whole } = arg else {
            let forms = one_of(policy_names(" = [..]").chain(["`default = ..`".to_string()]));
            report(diags, arg.span(), format!("expected {forms}"));
            continue;
        };
        let Some((name, key_span)) = key.ident() else {
            report(diags, key.span(), "expected a key of `rules(..)`");
            continue;
        };
        if !keys().any(|k| k == name) {
            let hint = did_you_mean(name, keys());
            let hint = if hint.is_empty() {
                format!("; expected {}", one_of(policy_names("").chain(["`default`".to_string()])))
            } else {
                hint
            };
            report(diags, key_span, format!("unknown key `{name}` in `rules(..)`{hint}"));
            continue;
        }
        if seen.contains(&name) {
            report(diags, key_span, format!("duplicate `{name}` in `rules(..)`; give it once"));
            continue;
        }
        seen.push(name);
        if name == kw::DEFAULT {
            match &**value {
                Expr::Ident(ident, span) => match Policy::from_name(ident) {
                    Some(policy) => resolved.default = policy,
                    None => {
                        let hint = did_you_mean(ident, kw::POLICIES.iter().copied());
                        report(
                            diags,
                            span,
                            format!("unknown default policy `{ident}`{hint}; expected {}", policy_words()),
                        );
                    }
                },
                other => report(diags, other.span(), format!("expected a policy: {}", policy_words())),
            }
            continue;
        }
        let index = kw::POLICIES.iter().position(|p| *p == name).expect("checked above");
        let policy = POLICY_ORDER[index];
        let items = match &**value {
            Expr::List(elems, _) => op_names(elems, diags),
            Expr::Ident(op, _) => {
                report(diags, value.span(), format!("expected a list; write `{name} = [{op}]`"));
                continue;
            }
            other => {
                report(diags, other.span(), format!("expected a list of op kinds, as in `{name} = [matmul]`"));
                continue;
            }
        };
        let list = OpList { key: name, items, whole };
        let mut kept = Vec::new();
        for (kind, span) in list.resolve(policy, "or remove the key", diags) {
            match placed.iter().find(|(k, _)| *k == kind) {
                Some((_, first)) => report(
                    diags,
                    span,
                    format!(
                        "`{}` is in both `{}` and `{}`; an op kind has one policy, keep it in one list",
                        kind.name(),
                        first.name(),
                        policy.name()
                    ),
                ),
                None => {
                    placed.push((kind, policy));
                    kept.push(kind);
                }
            }
        }
        resolved.lists[index] = kept;
    }
}
