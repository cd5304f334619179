//! The path the expansion names remat by: `::remat`, or what `crate = ".."` gives.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;

/// `::remat`, for code that depends on remat under its own name.
pub fn default() -> syn::Path {
    syn::parse_quote!(::remat)
}

/// `path`'s tokens spanned at `span`, so that what the compiler says about an item named through
/// it points where the rest of the emitted code does.
pub fn respanned(path: &syn::Path, span: Span) -> TokenStream {
    path.to_token_stream()
        .into_iter()
        .map(|mut token| {
            token.set_span(span);
            token
        })
        .collect()
}
