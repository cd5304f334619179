//! Emitting the checkpointed function (a static `RegionSpec` and a region guard around the body)
//! and `policy!` values.

use crate::attr::{Args, PolicyArg};
use crate::error::Errors;
use crate::{attr, item, krate, stmt};
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use remat_catalog::forms::{self, did_you_mean, Resolved};
use remat_catalog::Policy;
use syn::{Block, FnArg, Ident, ItemFn, Pat};

/// `#[checkpoint(args)] input`: the expanded function, or every error plus the input with its
/// statement attributes removed (so the user sees our errors, not the compiler's about them).
pub fn checkpoint(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let parsed = attr::parse(args, &mut errors);
    let Some(mut function) = item::function(input.clone(), &mut errors) else {
        return fallback(errors, input);
    };
    if let Some(PolicyArg::Arg(param)) = &parsed.policy {
        check_param(&function, param, &mut errors);
    }
    let mut stripped = function.clone();
    let krate = parsed.krate();
    stmt::walk(&mut stripped.block, false, &krate, &mut errors);
    if !errors.is_empty() {
        return fallback(errors, stripped.into_token_stream());
    }
    stmt::walk(&mut function.block, true, &krate, &mut errors);
    emit(&mut function, &parsed);
    function.into_token_stream()
}

/// `policy!(input)`: a `RegionPolicy` value, or the errors and a placeholder value (so the user
/// sees our errors, not type errors).
pub fn policy(input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let parsed = attr::parse_policy_macro(input, &mut errors);
    let krate = parsed.krate.unwrap_or_else(crate::krate::default);
    if let Err(error) = errors.finish() {
        let error = error.into_compile_error();
        return quote!({ #error #krate::__private::RegionPolicy::RECOMPUTE_ALL });
    }
    let table = table(&parsed.spec.policy, &krate);
    let budget = budget(parsed.spec.budget);
    quote!({
        const __REMAT_TABLE: #krate::__private::PolicyTable = #table;
        #krate::__private::RegionPolicy::from_static(&__REMAT_TABLE, #budget)
    })
}

fn fallback(errors: Errors, item: TokenStream) -> TokenStream {
    let error = errors.finish().err().map(syn::Error::into_compile_error);
    quote!(#error #item)
}

/// `policy = arg(p)` names a parameter bound by a plain identifier.
fn check_param(function: &ItemFn, param: &Ident, errors: &mut Errors) {
    let names: Vec<String> = function
        .sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(t) => match &*t.pat {
                Pat::Ident(p) => Some(p.ident.to_string()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect();
    let name = param.to_string();
    if names.contains(&name) {
        return;
    }
    let function = &function.sig.ident;
    // One- and two-letter names are all "close" to each other: list the parameters instead.
    let hint =
        if name.chars().count() > 2 { did_you_mean(&name, names.iter().map(String::as_str)) } else { String::new() };
    let hint = match (hint.is_empty(), names.is_empty()) {
        (false, _) => hint,
        (true, true) => "; it has none: add `policy: &RegionPolicy` and write `policy = arg(policy)`".to_string(),
        (true, false) => format!(
            " (its parameters: {}); add `policy: &RegionPolicy` and write `policy = arg(policy)`",
            names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        ),
    };
    errors.spanned(param, format!("`{name}` is not a parameter of `{function}`{hint}"));
}

/// `PolicyTable { .. }` for `policy`, naming remat by `krate`.
fn table(policy: &Resolved, krate: &syn::Path) -> TokenStream {
    let lists = policy.lists.iter().map(|list| {
        let kinds = list.iter().map(|kind| Ident::new(&format!("{kind:?}"), Span::call_site()));
        quote!(&[#(#krate::__private::OpKind::#kinds),*])
    });
    let fields = forms::kw::POLICIES.iter().map(|p| Ident::new(p, Span::call_site()));
    let save_names = &policy.save_names;
    let offload_names = &policy.offload_names;
    let default = Ident::new(&format!("{:?}", policy.default), Span::call_site());
    quote! {
        #krate::__private::PolicyTable {
            #(#fields: #lists,)*
            save_names: &[#(#save_names),*],
            offload_names: &[#(#offload_names),*],
            default: #krate::__private::Policy::#default,
        }
    }
}

fn budget(budget: Option<f64>) -> TokenStream {
    match budget {
        Some(b) => quote!(::core::option::Option::Some(#b)),
        None => quote!(::core::option::Option::None),
    }
}

/// Opens the region at the start of the body. The guard is the body's first local, so it drops
/// last: after the value of the body (or of a `return`, or of `?`) has been computed.
fn emit(function: &mut ItemFn, args: &Args) {
    let ident = &function.sig.ident;
    let name = ident.to_string();
    let span = ident.span();
    let default = Resolved::default();
    let (policy, param) = match &args.policy {
        None => (&default, None),
        Some(PolicyArg::Static(policy)) => (policy, None),
        Some(PolicyArg::Arg(param)) => (&default, Some(param)),
    };
    debug_assert_eq!(default.default, Policy::PreferRecompute);
    let krate = args.krate();
    let table = table(policy, &krate);
    let budget = budget(args.budget);
    let location = quote_spanned!(span=> module: ::core::module_path!(), file: ::core::file!(), line: ::core::line!(),);
    let guard = Ident::new("__remat_region", Span::mixed_site());
    let spec = quote! {
        static SPEC: #krate::__private::RegionSpec = #krate::__private::RegionSpec {
            name: #name,
            #location
            policy: #table,
            budget: #budget,
        };
    };
    let enter = match param {
        None => quote!(#krate::__private::enter_region(&SPEC)),
        Some(param) => {
            // A coercion, not a trait: a parameter of another type is a mismatch that names
            // `RegionPolicy` (a `&RegionPolicy`, `Box<RegionPolicy>`, ... deref-coerce to it).
            let at_param = krate::respanned(&krate, param.span());
            let arg = quote_spanned!(param.span()=> (*{
                let __remat_policy: &#at_param::RegionPolicy = &#param;
                __remat_policy
            }));
            // `budget = ..` beside `arg(..)` overrides the value's own budget.
            match args.budget {
                Some(_) => quote!(#krate::__private::enter_region_with(&SPEC, #arg.with_checked_budget(#budget))),
                None => quote!(#krate::__private::enter_region_with(&SPEC, #arg)),
            }
        }
    };
    let open: Block = syn::parse_quote! {{
        let #guard = {
            #spec
            #enter
        };
    }};
    function.block.stmts.splice(0..0, open.stmts);
}
