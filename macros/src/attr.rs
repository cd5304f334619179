//! Parsing `#[checkpoint(..)]` into a typed view that keeps the user's spans.
//!
//! Only the shape of the attribute is checked here (keys, forms, literals); what the names mean
//! (catalog op kinds, conflicts, ranges) is `valid.rs`'s business. Every problem is reported, and
//! parsing goes on past it.

use crate::error::{did_you_mean, Errors};
use crate::kw;
use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Meta, Token, UnOp};

/// The arguments of one `#[checkpoint(..)]`.
#[derive(Default)]
pub struct Args {
    /// `policy = ..`; `None` means `recompute_all`.
    pub policy: Option<PolicyForm>,
    /// `budget = ..`.
    pub budget: Option<Budget>,
}

/// A policy form, as written.
pub enum PolicyForm {
    /// `recompute_all`.
    RecomputeAll,
    /// `save_all`.
    SaveAll,
    /// `save(op, ..)`.
    Save(OpList),
    /// `recompute(op, ..)`.
    Recompute(OpList),
    /// `save_names("a", ..)`.
    SaveNames {
        /// The names given.
        names: Vec<LitStr>,
        /// Whether the parentheses were empty.
        empty: bool,
        /// The whole form, for errors about it.
        whole: TokenStream,
    },
    /// `rules(..)`.
    Rules(Rules),
}

/// A list of op kind names, with the tokens of the whole list for errors about it.
pub struct OpList {
    /// The key or form naming the list (`save`, `must_save`).
    pub key: Ident,
    /// The op kinds, as written.
    pub ops: Vec<Ident>,
    /// The whole list (`save()`, `must_save = []`).
    pub whole: TokenStream,
}

/// One of the four policies, an index into [`kw::POLICIES`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PolicyKw(pub usize);

impl PolicyKw {
    pub const MUST_SAVE: PolicyKw = PolicyKw(0);
    pub const PREFER_SAVE: PolicyKw = PolicyKw(1);
    pub const MUST_RECOMPUTE: PolicyKw = PolicyKw(2);
    pub const PREFER_RECOMPUTE: PolicyKw = PolicyKw(3);

    fn from_name(name: &str) -> Option<PolicyKw> {
        kw::POLICIES.iter().position(|p| *p == name).map(PolicyKw)
    }

    /// The DSL name (`must_save`).
    pub fn name(self) -> &'static str {
        kw::POLICIES[self.0]
    }

    /// Whether the policy leans to saving.
    pub fn is_save(self) -> bool {
        self == PolicyKw::MUST_SAVE || self == PolicyKw::PREFER_SAVE
    }
}

/// `rules(must_save = [..], .., default = ..)`.
#[derive(Default)]
pub struct Rules {
    /// The lists given, in the order written.
    pub lists: Vec<(PolicyKw, OpList)>,
    /// `default = ..`; `None` means `prefer_recompute`.
    pub default: Option<PolicyKw>,
}

/// `budget = f`, before its range is checked.
pub struct Budget {
    /// The value (negative if written with a minus sign).
    pub value: f64,
    /// The value's tokens.
    pub tokens: TokenStream,
}

/// Parses the attribute's arguments, reporting every problem into `errors`.
pub fn parse(args: TokenStream, errors: &mut Errors) -> Args {
    let mut parsed = Args::default();
    let metas = match syn::parse::Parser::parse2(Punctuated::<Meta, Token![,]>::parse_terminated, args) {
        Ok(metas) => metas,
        Err(error) => {
            errors.push(error);
            return parsed;
        }
    };
    // The key of the first `policy` / `budget`, for duplicate errors.
    let mut seen: Vec<String> = Vec::new();
    for meta in metas {
        let Some(key) = meta.path().get_ident().cloned() else {
            errors.spanned(meta.path(), "expected `policy = ..` or `budget = ..`");
            continue;
        };
        let name = key.to_string();
        if !kw::KEYS.contains(&name.as_str()) {
            if kw::FORMS.contains(&name.as_str()) {
                let written = if matches!(meta, Meta::List(_)) { format!("{name}(..)") } else { name.clone() };
                errors.spanned(&key, format!("expected a key; write `policy = {written}`"));
            } else {
                let hint = did_you_mean(&name, kw::KEYS.iter().copied());
                let hint = if hint.is_empty() { "; expected `policy` or `budget`".to_string() } else { hint };
                errors.spanned(&key, format!("unknown key `{name}` in `#[checkpoint(..)]`{hint}"));
            }
            continue;
        }
        let duplicate = seen.contains(&name);
        if duplicate {
            errors.spanned(&key, format!("duplicate `{name}`; give it once"));
        } else {
            seen.push(name.clone());
        }
        let value = match meta {
            Meta::NameValue(nv) => nv.value,
            other => {
                errors.spanned(other, format!("expected `{name} = ..`"));
                continue;
            }
        };
        if name == kw::POLICY {
            let form = parse_policy(&value, errors);
            if !duplicate {
                parsed.policy = form;
            }
        } else {
            let budget = parse_budget(&value, errors);
            if !duplicate {
                parsed.budget = budget;
            }
        }
    }
    parsed
}

const EXPECTED_POLICY: &str =
    "expected one of `recompute_all`, `save_all`, `save(..)`, `recompute(..)`, `save_names(..)`, `rules(..)`";

fn parse_policy(value: &Expr, errors: &mut Errors) -> Option<PolicyForm> {
    let (form, args) = match value {
        Expr::Path(p) if p.attrs.is_empty() && p.qself.is_none() && p.path.get_ident().is_some() => {
            (p.path.get_ident().unwrap().clone(), None)
        }
        Expr::Call(call) => match &*call.func {
            Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
                (p.path.get_ident().unwrap().clone(), Some(&call.args))
            }
            other => {
                errors.spanned(other, format!("unknown policy; {EXPECTED_POLICY}"));
                return None;
            }
        },
        other => {
            errors.spanned(other, format!("expected a policy, {}", &EXPECTED_POLICY["expected ".len()..]));
            return None;
        }
    };
    let name = form.to_string();
    let whole = value.to_token_stream();
    match (name.as_str(), args) {
        (kw::RECOMPUTE_ALL, None) => Some(PolicyForm::RecomputeAll),
        (kw::SAVE_ALL, None) => Some(PolicyForm::SaveAll),
        (kw::RECOMPUTE_ALL | kw::SAVE_ALL, Some(_)) => {
            errors.spanned(value, format!("`{name}` takes no arguments; write `policy = {name}`"));
            None
        }
        (kw::SAVE | kw::RECOMPUTE, Some(args)) => {
            let ops = op_names(args.iter(), errors);
            let list = OpList { key: form, ops, whole };
            Some(if name == kw::SAVE { PolicyForm::Save(list) } else { PolicyForm::Recompute(list) })
        }
        (kw::SAVE_NAMES, Some(args)) => {
            let mut names = Vec::new();
            for arg in args {
                match arg {
                    Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => names.push(s.clone()),
                    Expr::Path(p) if p.path.get_ident().is_some() => {
                        let ident = p.path.get_ident().unwrap();
                        errors.spanned(
                            arg,
                            format!(
                                "`save_names` takes string literals; write `\"{ident}\"` to match `.name(\"{ident}\")`"
                            ),
                        );
                    }
                    other => errors.spanned(
                        other,
                        "`save_names` takes string literals naming values, as in `save_names(\"attn\")`",
                    ),
                }
            }
            Some(PolicyForm::SaveNames { names, empty: args.is_empty(), whole })
        }
        (kw::RULES, Some(args)) => Some(PolicyForm::Rules(parse_rules(args, errors))),
        (kw::SAVE | kw::RECOMPUTE, None) => {
            errors.spanned(&form, format!("`{name}` needs the op kinds it applies to, as in `{name}(matmul)`"));
            None
        }
        (kw::SAVE_NAMES, None) => {
            errors.spanned(&form, "`save_names` needs the value names it saves, as in `save_names(\"attn\")`");
            None
        }
        (kw::RULES, None) => {
            errors.spanned(&form, "`rules` needs its lists, as in `rules(must_save = [matmul])`");
            None
        }
        _ => {
            let hint = did_you_mean(&name, kw::FORMS.iter().copied());
            let hint = if hint.is_empty() { format!("; {EXPECTED_POLICY}") } else { hint };
            errors.spanned(&form, format!("unknown policy `{name}`{hint}"));
            None
        }
    }
}

/// Op kind names: plain identifiers.
fn op_names<'a>(args: impl Iterator<Item = &'a Expr>, errors: &mut Errors) -> Vec<Ident> {
    let mut ops = Vec::new();
    for arg in args {
        match arg {
            Expr::Path(p) if p.attrs.is_empty() && p.qself.is_none() && p.path.get_ident().is_some() => {
                ops.push(p.path.get_ident().unwrap().clone());
            }
            Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => {
                errors.spanned(s, format!("write op kinds without quotes: `{}`", s.value()));
            }
            other => errors.spanned(other, "expected an op kind, such as `matmul`"),
        }
    }
    ops
}

fn parse_rules(args: &Punctuated<Expr, Token![,]>, errors: &mut Errors) -> Rules {
    let mut rules = Rules::default();
    let mut seen: Vec<String> = Vec::new();
    let keys = || kw::POLICIES.iter().copied().chain([kw::DEFAULT]);
    for arg in args {
        let Expr::Assign(assign) = arg else {
            errors.spanned(arg, "expected `must_save = [..]`, `prefer_save = [..]`, `must_recompute = [..]`, `prefer_recompute = [..]` or `default = ..`");
            continue;
        };
        let key = match &*assign.left {
            Expr::Path(p) if p.path.get_ident().is_some() => p.path.get_ident().unwrap().clone(),
            other => {
                errors.spanned(other, "expected a key of `rules(..)`");
                continue;
            }
        };
        let name = key.to_string();
        if !keys().any(|k| k == name) {
            let hint = did_you_mean(&name, keys());
            let hint = if hint.is_empty() {
                "; expected `must_save`, `prefer_save`, `must_recompute`, `prefer_recompute` or `default`".to_string()
            } else {
                hint
            };
            errors.spanned(&key, format!("unknown key `{name}` in `rules(..)`{hint}"));
            continue;
        }
        let duplicate = seen.contains(&name);
        if duplicate {
            errors.spanned(&key, format!("duplicate `{name}` in `rules(..)`; give it once"));
            continue;
        }
        seen.push(name.clone());
        let value = &*assign.right;
        if name == kw::DEFAULT {
            let policy = match value {
                Expr::Path(p) if p.path.get_ident().is_some() => {
                    let ident = p.path.get_ident().unwrap();
                    let policy = PolicyKw::from_name(&ident.to_string());
                    if policy.is_none() {
                        let hint = did_you_mean(&ident.to_string(), kw::POLICIES.iter().copied());
                        errors.spanned(ident, format!("unknown default policy `{ident}`{hint}; expected `must_save`, `prefer_save`, `must_recompute` or `prefer_recompute`"));
                    }
                    policy
                }
                other => {
                    errors.spanned(
                        other,
                        "expected a policy: `must_save`, `prefer_save`, `must_recompute` or `prefer_recompute`",
                    );
                    None
                }
            };
            rules.default = policy;
            continue;
        }
        let policy = PolicyKw::from_name(&name).expect("checked above");
        let ops = match value {
            Expr::Array(array) => op_names(array.elems.iter(), errors),
            Expr::Path(p) if p.path.get_ident().is_some() => {
                let op = p.path.get_ident().unwrap();
                errors.spanned(value, format!("expected a list; write `{name} = [{op}]`"));
                continue;
            }
            other => {
                errors.spanned(other, format!("expected a list of op kinds, as in `{name} = [matmul]`"));
                continue;
            }
        };
        rules.lists.push((policy, OpList { key, ops, whole: arg.to_token_stream() }));
    }
    rules
}

fn parse_budget(value: &Expr, errors: &mut Errors) -> Option<Budget> {
    let (negative, lit) = match value {
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => (true, &*u.expr),
        other => (false, other),
    };
    let number = match lit {
        Expr::Lit(ExprLit { lit: Lit::Float(f), .. }) => f.base10_parse::<f64>().ok(),
        Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => i.base10_parse::<u64>().ok().map(|i| i as f64),
        _ => None,
    };
    match number {
        Some(n) => Some(Budget { value: if negative { -n } else { n }, tokens: value.to_token_stream() }),
        None => {
            errors.spanned(value, "`budget` must be a number in [0, 1], the fraction of the region's save-everything bytes it may keep, as in `budget = 0.5`");
            None
        }
    }
}
