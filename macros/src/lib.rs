//! The `#[checkpoint]` attribute of remat. Use it through the `remat` crate
//! (`use remat::prelude::*;`), whose re-export carries compiled examples of every form.

mod attr;
mod error;
mod expand;
mod item;
mod kw;
mod stmt;
mod valid;

use proc_macro::TokenStream;

/// Marks a function as a checkpointed region. DOCS
#[proc_macro_attribute]
pub fn checkpoint(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::checkpoint(args.into(), input.into()).into()
}
