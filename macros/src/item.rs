//! What `#[checkpoint]` may be applied to: a plain function (free or method) with a body.

use crate::error::Errors;
use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{Item, ItemFn};

/// The function `input` is, or `None` after reporting why it cannot be checkpointed. A function
/// that is `async` or `const` is reported but still returned, so its body is checked too.
pub fn function(input: TokenStream, errors: &mut Errors) -> Option<ItemFn> {
    let item = match syn::parse2::<Item>(input) {
        Ok(item) => item,
        Err(error) => {
            errors.push(error);
            return None;
        }
    };
    let (tokens, what): (TokenStream, &str) = match item {
        Item::Fn(function) => {
            check_signature(&function, errors);
            return Some(function);
        }
        Item::Struct(i) => (i.struct_token.to_token_stream(), "a struct"),
        Item::Enum(i) => (i.enum_token.to_token_stream(), "an enum"),
        Item::Union(i) => (i.union_token.to_token_stream(), "a union"),
        Item::Impl(i) => (i.impl_token.to_token_stream(), "an impl block; put it on the methods to checkpoint"),
        Item::Trait(i) => (i.trait_token.to_token_stream(), "a trait; put it on the methods of its implementations"),
        Item::Mod(i) => (i.mod_token.to_token_stream(), "a module"),
        Item::Const(i) => (i.const_token.to_token_stream(), "a const"),
        Item::Static(i) => (i.static_token.to_token_stream(), "a static"),
        Item::Type(i) => (i.type_token.to_token_stream(), "a type alias"),
        Item::Verbatim(tokens) if tokens.to_string().contains("fn") => {
            (tokens, "a function without a body; put it on a function that has one")
        }
        other => (other.to_token_stream(), "this item"),
    };
    errors.spanned(tokens, format!("`#[checkpoint]` applies to a function, not to {what}"));
    None
}

fn check_signature(function: &ItemFn, errors: &mut Errors) {
    let sig = &function.sig;
    if let Some(token) = &sig.asyncness {
        errors.spanned(
            token,
            "`#[checkpoint]` cannot be applied to an `async fn`: its region would close when the future is created, \
             not when it completes; checkpoint a synchronous function and call it from the async one",
        );
    }
    if let Some(token) = &sig.constness {
        errors.spanned(
            token,
            "`#[checkpoint]` cannot be applied to a `const fn`: a region is opened when the function runs, \
             which a const evaluation cannot do; remove `const`",
        );
    }
}
