//! The statement attributes `#[save]`, `#[recompute]` and `#[offload]` inside a checkpointed
//! body.
//!
//! `#[save] let PAT: TY = EXPR;` becomes
//!
//! ```text
//! let remat_statement_value: TY = EXPR;
//! StatementPolicy::statement_policy(&remat_statement_value, Policy::MustSave);
//! let PAT = remat_statement_value;
//! ```
//!
//! so the policy applies to the value the statement computes, temporaries
//! are extended as in the original `let`, and the pattern binds as written. Nested blocks (`if`,
//! `match`, loops, closures, `unsafe`) are walked; nested items are not (a nested function is not
//! part of the region unless it is checkpointed itself).

use crate::error::Errors;
use crate::kw;
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Attribute, Block, Expr, Ident, Item, Local, Meta, Pat, Stmt};

/// Walks `block`, rewriting statement attributes (or, if `rewrite` is false, only removing
/// them), and reports every misuse into `errors`.
/// `krate` is the path the rewritten statements name remat by.
pub fn walk(block: &mut Block, rewrite: bool, krate: &syn::Path, errors: &mut Errors) {
    let mut walker = Walker { rewrite, krate, errors };
    walker.visit_block_mut(block);
}

struct Walker<'a> {
    rewrite: bool,
    krate: &'a syn::Path,
    errors: &'a mut Errors,
}

/// `#[save]`, `#[recompute]` or `#[offload]`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Save,
    Recompute,
    Offload,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Save, Kind::Recompute, Kind::Offload];

    fn of(attr: &Attribute) -> Option<Kind> {
        let ident = attr.path().get_ident()?;
        Kind::ALL.into_iter().find(|k| ident == k.name())
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Save => kw::STMT_SAVE,
            Kind::Recompute => kw::STMT_RECOMPUTE,
            Kind::Offload => kw::STMT_OFFLOAD,
        }
    }

    fn policy(self) -> TokenStream {
        match self {
            Kind::Save => quote!(MustSave),
            Kind::Recompute => quote!(MustRecompute),
            Kind::Offload => quote!(MustOffload),
        }
    }

    /// Whether the value is kept (on the device or in host memory), so a view cannot carry it.
    fn keeps(self) -> bool {
        matches!(self, Kind::Save | Kind::Offload)
    }
}

/// A statement attribute found on a statement.
struct Marker {
    kind: Kind,
    attr: Attribute,
}

impl Walker<'_> {
    /// Removes the statement attributes from `attrs`, reporting arguments and duplicates; returns
    /// the one that stands.
    fn take_markers(&mut self, attrs: &mut Vec<Attribute>) -> Option<Marker> {
        let mut found: Option<Marker> = None;
        let mut kept = Vec::with_capacity(attrs.len());
        for attr in attrs.drain(..) {
            let Some(kind) = Kind::of(&attr) else {
                kept.push(attr);
                continue;
            };
            let name = kind.name();
            if !matches!(attr.meta, Meta::Path(_)) {
                self.errors.spanned(&attr.meta, format!("`#[{name}]` takes no arguments; write `#[{name}]`"));
            }
            match &found {
                None => found = Some(Marker { kind, attr }),
                Some(first) if first.kind == kind => {
                    self.errors.spanned(&attr, format!("duplicate `#[{name}]` on this statement; give it once"))
                }
                Some(first) => {
                    let first = first.kind.name();
                    self.errors.spanned(
                        &attr,
                        format!(
                            "`#[{first}]` and `#[{name}]` on one statement: a value has one policy; keep one of them"
                        ),
                    )
                }
            }
        }
        *attrs = kept;
        found
    }

    /// The statements `stmt` (whose markers are already removed) becomes under `marker`.
    fn apply(&mut self, marker: Marker, stmt: Stmt, out: &mut Vec<Stmt>) {
        let name = marker.kind.name();
        let Stmt::Local(local) = stmt else {
            self.errors.spanned(
                &marker.attr,
                format!(
                    "`#[{name}]` applies to a `let` statement and the value it binds; this statement binds nothing, \
                     write `#[{name}] let value = ...;`"
                ),
            );
            out.push(stmt);
            return;
        };
        let Some(init) = &local.init else {
            self.errors.spanned(
                &marker.attr,
                format!(
                    "`#[{name}]` needs a `let` with an initializer: it applies to the value the statement computes; \
                     write `#[{name}] let value = ...;`"
                ),
            );
            out.push(Stmt::Local(local));
            return;
        };
        if let Some((_, diverge)) = &init.diverge {
            self.errors.spanned(
                diverge,
                format!("`#[{name}]` is not supported on `let ... else`; bind the value first with `#[{name}] let`"),
            );
            out.push(Stmt::Local(local));
            return;
        }
        if marker.kind.keeps() {
            if let Some((method, op)) = view_method(&init.expr) {
                let records = if method == op { String::new() } else { format!(" (it records `{op}`)") };
                let kept = if marker.kind == Kind::Save { "saved" } else { "offloaded" };
                self.errors.spanned(
                    method,
                    format!(
                        "`#[{name}]` on a view: `{method}`{records} is a view op, and views are never {kept}, their base is; \
                         put `#[{name}]` on the statement that computes the base"
                    ),
                );
            }
        }
        if !self.rewrite {
            out.push(Stmt::Local(local));
            return;
        }
        out.extend(rewrite(marker, local, self.krate));
    }
}

/// `let PAT: TY = EXPR;` under `marker`, as three statements.
fn rewrite(marker: Marker, local: Local, krate: &syn::Path) -> Vec<Stmt> {
    // At the pattern, so that a type error about the value points there (a mixed-site span would
    // point at `#[checkpoint]`); the name is reserved-looking, and the binding lives only until
    // the pattern takes it.
    let at_pat = local.pat.span();
    let value = Ident::new("remat_statement_value", at_pat);
    let arg = quote_spanned!(at_pat=> &#value);
    let cfgs: Vec<&Attribute> = local.attrs.iter().filter(|a| a.path().is_ident("cfg")).collect();
    let (pat, ty) = match &local.pat {
        Pat::Type(typed) => (&*typed.pat, Some(&typed.ty)),
        pat => (pat, None),
    };
    let ty = ty.map(|ty| quote!(: #ty));
    let expr = &local.init.as_ref().expect("checked by the caller").expr;
    let attrs = &local.attrs;
    let policy = marker.kind.policy();
    let span = marker.attr.pound_token.span;
    let krate = crate::krate::respanned(krate, span);
    let call = quote_spanned! {span=>
        #(#cfgs)*
        #krate::__private::StatementPolicy::statement_policy(#arg, #krate::__private::Policy::#policy);
    };
    let tokens = quote! {
        #(#cfgs)*
        let #value #ty = #expr;
        #call
        #(#attrs)*
        let #pat = #value;
    };
    syn::parse::Parser::parse2(Block::parse_within, tokens).expect("a rewritten `let` parses")
}

/// The method of a view op that `expr` ends with (through `.name(..)` and parentheses), and the
/// catalog op it records.
fn view_method(expr: &Expr) -> Option<(&Ident, &'static str)> {
    match expr {
        Expr::Paren(p) => view_method(&p.expr),
        Expr::MethodCall(call) if call.method == "name" => view_method(&call.receiver),
        Expr::MethodCall(call) => {
            let method = call.method.to_string();
            let op =
                kw::VIEW_METHOD_ALIASES.iter().find(|(alias, _)| *alias == method).map_or(method.as_str(), |a| a.1);
            let info = remat_catalog::lookup(op)?;
            info.view.then_some((&call.method, info.name))
        }
        _ => None,
    }
}

/// The outer attributes of an expression statement's expression, for the common kinds.
fn expr_attrs(expr: &mut Expr) -> Option<&mut Vec<Attribute>> {
    Some(match expr {
        Expr::Array(e) => &mut e.attrs,
        Expr::Assign(e) => &mut e.attrs,
        Expr::Binary(e) => &mut e.attrs,
        Expr::Block(e) => &mut e.attrs,
        Expr::Call(e) => &mut e.attrs,
        Expr::Field(e) => &mut e.attrs,
        Expr::ForLoop(e) => &mut e.attrs,
        Expr::If(e) => &mut e.attrs,
        Expr::Index(e) => &mut e.attrs,
        Expr::Lit(e) => &mut e.attrs,
        Expr::Loop(e) => &mut e.attrs,
        Expr::Macro(e) => &mut e.attrs,
        Expr::Match(e) => &mut e.attrs,
        Expr::MethodCall(e) => &mut e.attrs,
        Expr::Paren(e) => &mut e.attrs,
        Expr::Path(e) => &mut e.attrs,
        Expr::Reference(e) => &mut e.attrs,
        Expr::Return(e) => &mut e.attrs,
        Expr::Try(e) => &mut e.attrs,
        Expr::Tuple(e) => &mut e.attrs,
        Expr::Unary(e) => &mut e.attrs,
        Expr::Unsafe(e) => &mut e.attrs,
        Expr::While(e) => &mut e.attrs,
        _ => return None,
    })
}

impl VisitMut for Walker<'_> {
    fn visit_block_mut(&mut self, block: &mut Block) {
        let stmts = std::mem::take(&mut block.stmts);
        let mut out = Vec::with_capacity(stmts.len());
        for mut stmt in stmts {
            let marker = match &mut stmt {
                Stmt::Local(local) => self.take_markers(&mut local.attrs),
                Stmt::Macro(mac) => self.take_markers(&mut mac.attrs),
                Stmt::Expr(expr, _) => expr_attrs(expr).and_then(|attrs| self.take_markers(attrs)),
                Stmt::Item(_) => None,
            };
            self.visit_stmt_mut(&mut stmt);
            match marker {
                Some(marker) => self.apply(marker, stmt, &mut out),
                None => out.push(stmt),
            }
        }
        block.stmts = out;
    }

    fn visit_attribute_mut(&mut self, attr: &mut Attribute) {
        // Statement attributes still here are on something other than a statement.
        if let Some(kind) = Kind::of(attr) {
            let name = kind.name();
            self.errors.spanned(
                &*attr,
                format!("`#[{name}]` applies to a `let` statement in a `#[checkpoint]` function: `#[{name}] let value = ...;`"),
            );
        }
    }

    fn visit_item_mut(&mut self, _: &mut Item) {
        // A nested item is not part of the region; a nested `#[checkpoint]` handles its own body.
    }
}
