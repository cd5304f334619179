//! Emitting the checkpointed function: a static `RegionSpec` and a region guard around the body.

use crate::attr::PolicyKw;
use crate::error::Errors;
use crate::valid::Table;
use crate::{attr, item, stmt, valid};
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::{Block, Ident, ItemFn};

/// `#[checkpoint(args)] input`: the expanded function, or every error plus the input with its
/// statement attributes removed (so the user sees our errors, not the compiler's about them).
pub fn checkpoint(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let parsed = attr::parse(args, &mut errors);
    let table = valid::validate(&parsed, &mut errors);
    let Some(mut function) = item::function(input.clone(), &mut errors) else {
        return fallback(errors, input);
    };
    let mut stripped = function.clone();
    stmt::walk(&mut stripped.block, false, &mut errors);
    if !errors.is_empty() {
        return fallback(errors, stripped.into_token_stream());
    }
    stmt::walk(&mut function.block, true, &mut errors);
    emit(&mut function, &table);
    function.into_token_stream()
}

fn fallback(errors: Errors, item: TokenStream) -> TokenStream {
    let error = errors.finish().err().map(syn::Error::into_compile_error);
    quote!(#error #item)
}

/// Opens the region at the start of the body. The guard is the body's first local, so it drops
/// last: after the value of the body (or of a `return`, or of `?`) has been computed.
fn emit(function: &mut ItemFn, table: &Table) {
    let ident = &function.sig.ident;
    let name = ident.to_string();
    let span = ident.span();
    let lists = table.lists.iter().map(|list| {
        let kinds = list.iter().map(|info| Ident::new(&format!("{:?}", info.kind), Span::call_site()));
        quote!(&[#(::remat::__private::OpKind::#kinds),*])
    });
    let fields = crate::kw::POLICIES.iter().map(|p| Ident::new(p, Span::call_site()));
    let names = &table.save_names;
    let default = policy_variant(table.default);
    let budget = match table.budget {
        Some(b) => quote!(::core::option::Option::Some(#b)),
        None => quote!(::core::option::Option::None),
    };
    let location = quote_spanned!(span=> module: ::core::module_path!(), file: ::core::file!(), line: ::core::line!(),);
    let guard = Ident::new("__remat_region", Span::mixed_site());
    let open: Block = syn::parse_quote! {{
        let #guard = {
            static SPEC: ::remat::__private::RegionSpec = ::remat::__private::RegionSpec {
                name: #name,
                #location
                policy: ::remat::__private::PolicyTable {
                    #(#fields: #lists,)*
                    save_names: &[#(#names),*],
                    default: ::remat::__private::Policy::#default,
                },
                budget: #budget,
            };
            ::remat::__private::enter_region(&SPEC)
        };
    }};
    function.block.stmts.splice(0..0, open.stmts);
}

fn policy_variant(policy: PolicyKw) -> Ident {
    let name = match policy {
        PolicyKw::MUST_SAVE => "MustSave",
        PolicyKw::PREFER_SAVE => "PreferSave",
        PolicyKw::MUST_RECOMPUTE => "MustRecompute",
        _ => "PreferRecompute",
    };
    Ident::new(name, Span::call_site())
}
