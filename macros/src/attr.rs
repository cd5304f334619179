//! Parsing `#[checkpoint(..)]` and `policy!(..)`.
//!
//! The keys of `#[checkpoint(..)]` (`policy`, `budget`) are read here; the policy forms
//! themselves are lowered to `remat_catalog::forms::Expr`, spanned by the user's tokens, and
//! resolved by the catalog's grammar — the same code that reads a policy string at run time, so
//! both say the same things. Every problem is reported, and parsing goes on past it.

use crate::error::Errors;
use crate::kw;
use proc_macro2::TokenStream;
use quote::ToTokens;
use remat_catalog::forms::{self, Diagnostics, Expr as Form, Resolved, Spec};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, Meta, Token, UnOp};

/// The arguments of one `#[checkpoint(..)]`.
#[derive(Default)]
pub struct Args {
    /// `policy = ..`; `None` means `recompute_all`.
    pub policy: Option<PolicyArg>,
    /// `budget = ..`, in [0, 1].
    pub budget: Option<f64>,
    /// `crate = "path"`: the path the expansion names remat by; `None` means `::remat`.
    pub krate: Option<syn::Path>,
}

impl Args {
    /// The path the expansion names remat by.
    pub fn krate(&self) -> syn::Path {
        self.krate.clone().unwrap_or_else(crate::krate::default)
    }
}

/// Where a region's policy comes from.
pub enum PolicyArg {
    /// A form written in the attribute, resolved at compile time.
    Static(Resolved),
    /// `arg(p)`: the value of parameter `p` at run time.
    Arg(Ident),
}

/// `tokens` with every op name that is a Rust keyword (`where`) made a raw identifier, so that
/// `save(where)` parses as an expression; [`lower`] reads `r#where` back as `where`.
fn raw_op_keywords(tokens: TokenStream) -> TokenStream {
    use proc_macro2::{Group, TokenTree};
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Ident(ident) if ident == "where" => TokenTree::Ident(Ident::new_raw("where", ident.span())),
            TokenTree::Group(g) => {
                let mut inner = Group::new(g.delimiter(), raw_op_keywords(g.stream()));
                inner.set_span(g.span());
                TokenTree::Group(inner)
            }
            other => other,
        })
        .collect()
}

/// Parses the attribute's arguments, reporting every problem into `errors`.
pub fn parse(args: TokenStream, errors: &mut Errors) -> Args {
    let mut parsed = Args::default();
    let args = raw_op_keywords(args);
    let metas = match syn::parse::Parser::parse2(Punctuated::<Meta, Token![,]>::parse_terminated, args) {
        Ok(metas) => metas,
        Err(error) => {
            errors.push(error);
            return parsed;
        }
    };
    // The first `policy`, `budget` and `crate` given; later ones are duplicates.
    let mut policy: Option<Expr> = None;
    let mut budget: Option<Expr> = None;
    let mut krate: Option<Expr> = None;
    for meta in metas {
        let Some(key) = meta.path().get_ident().cloned() else {
            errors.spanned(meta.path(), "expected `policy = ..`, `budget = ..` or `crate = ..`");
            continue;
        };
        let name = key.to_string();
        if !kw::KEYS.contains(&name.as_str()) {
            if forms::kw::FORMS.contains(&name.as_str()) {
                let written = if matches!(meta, Meta::List(_)) { format!("{name}(..)") } else { name.clone() };
                errors.spanned(&key, format!("expected a key; write `policy = {written}`"));
            } else {
                let hint = forms::did_you_mean(&name, kw::KEYS.iter().copied());
                let hint = if hint.is_empty() { "; expected `policy`, `budget` or `crate`".to_string() } else { hint };
                errors.spanned(&key, format!("unknown key `{name}` in `#[checkpoint(..)]`{hint}"));
            }
            continue;
        }
        let slot = match name.as_str() {
            kw::POLICY => &mut policy,
            kw::BUDGET => &mut budget,
            _ => &mut krate,
        };
        if slot.is_some() {
            errors.spanned(&key, format!("duplicate `{name}`; give it once"));
            continue;
        }
        match meta {
            Meta::NameValue(nv) => *slot = Some(nv.value),
            other => errors.spanned(other, format!("expected `{name} = ..`")),
        }
    }
    let mut diags = Diagnostics::new();
    parsed.policy = policy.and_then(|value| match arg_form(&value, errors) {
        Some(arg) => arg,
        None => Some(PolicyArg::Static(forms::resolve_policy(&lower(&value), &mut diags))),
    });
    parsed.budget = budget.and_then(|value| forms::resolve_budget(&lower(&value), &mut diags));
    parsed.krate = krate.and_then(|value| crate_path(&value, errors));
    push_all(errors, diags);
    parsed
}

/// `arg(p)`: `Some(Some(p))`, or `Some(None)` after reporting a malformed one; `None` for any
/// other form.
fn arg_form(value: &Expr, errors: &mut Errors) -> Option<Option<PolicyArg>> {
    let Expr::Call(call) = value else { return None };
    let Expr::Path(func) = &*call.func else { return None };
    if !func.path.is_ident(kw::ARG) {
        return None;
    }
    let mut args = call.args.iter();
    match (args.next(), args.next()) {
        (Some(Expr::Path(p)), None) if p.path.get_ident().is_some() => {
            Some(Some(PolicyArg::Arg(p.path.get_ident().unwrap().clone())))
        }
        _ => {
            errors.spanned(
                value,
                "`arg` takes the name of one parameter of the function holding its policy, as in `policy = arg(policy)`",
            );
            Some(None)
        }
    }
}

/// `crate = "path"`: the path in the string (serde's form), or `None` after reporting what is
/// not one.
fn crate_path(value: &Expr, errors: &mut Errors) -> Option<syn::Path> {
    let parsed = match value {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => s.parse::<syn::Path>().ok(),
        _ => None,
    };
    if parsed.is_none() {
        errors.spanned(value, "`crate` takes a path to remat in a string, as in `crate = \"my_remat\"`");
    }
    parsed
}

/// `policy!(..)`'s arguments: the policy, and the path the expansion names remat by.
pub struct PolicyMacro {
    pub spec: Spec,
    /// `crate = "path"`; `None` means `::remat`.
    pub krate: Option<syn::Path>,
}

/// Parses and resolves `policy!(<form>, budget = .., crate = "..")`.
pub fn parse_policy_macro(input: TokenStream, errors: &mut Errors) -> PolicyMacro {
    let input = raw_op_keywords(input);
    let items = match syn::parse::Parser::parse2(Punctuated::<Expr, Token![,]>::parse_terminated, input.clone()) {
        Ok(items) => items,
        Err(error) => {
            errors.push(error);
            return PolicyMacro { spec: Spec::default(), krate: None };
        }
    };
    // The first `crate` given; later ones are duplicates. Every other item is the policy's.
    let mut krate: Option<&Expr> = None;
    let mut lowered: Vec<Form<TokenStream>> = Vec::new();
    for item in &items {
        match crate_item(item) {
            Some((key, _)) if krate.is_some() => {
                errors.spanned(key, format!("duplicate `{}`; give it once", kw::CRATE))
            }
            Some((_, value)) => krate = Some(value),
            None => lowered.push(lower(item)),
        }
    }
    let krate = krate.and_then(|value| crate_path(value, errors));
    let mut diags = Diagnostics::new();
    let spec = forms::resolve_items(&lowered, &input, &mut diags);
    push_all(errors, diags);
    PolicyMacro { spec, krate }
}

/// The key and value of a `crate = ..` item of `policy!`.
fn crate_item(item: &Expr) -> Option<(&Expr, &Expr)> {
    let Expr::Assign(assign) = item else { return None };
    let Expr::Path(key) = &*assign.left else { return None };
    (key.qself.is_none() && key.path.is_ident(kw::CRATE)).then_some((&*assign.left, &*assign.right))
}

fn push_all(errors: &mut Errors, diags: Diagnostics<TokenStream>) {
    for d in diags {
        errors.spanned(d.span, d.message);
    }
}

/// The catalog grammar's view of an expression, spanned by its tokens.
fn lower(expr: &Expr) -> Form<TokenStream> {
    let tokens = expr.to_token_stream();
    match expr {
        Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
            Form::Ident(p.path.get_ident().unwrap().unraw().to_string(), tokens)
        }
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Form::Str(s.value(), tokens),
        Expr::Lit(ExprLit { lit, .. }) => number(lit).map_or(Form::Other(tokens.clone()), |n| Form::Number(n, tokens)),
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match &*u.expr {
            Expr::Lit(ExprLit { lit, .. }) => {
                number(lit).map_or(Form::Other(tokens.clone()), |n| Form::Number(-n, tokens))
            }
            _ => Form::Other(tokens),
        },
        Expr::Call(call) => {
            Form::Call { func: Box::new(lower(&call.func)), args: call.args.iter().map(lower).collect(), span: tokens }
        }
        Expr::Assign(a) => {
            Form::Assign { key: Box::new(lower(&a.left)), value: Box::new(lower(&a.right)), span: tokens }
        }
        Expr::Array(a) => Form::List(a.elems.iter().map(lower).collect(), tokens),
        _ => Form::Other(tokens),
    }
}

fn number(lit: &Lit) -> Option<f64> {
    match lit {
        Lit::Float(f) => f.base10_parse::<f64>().ok(),
        Lit::Int(i) => i.base10_parse::<u64>().ok().map(|i| i as f64),
        _ => None,
    }
}
