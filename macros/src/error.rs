//! Accumulating errors, so that a user sees every problem of an attribute in one compile.

use quote::ToTokens;
use std::fmt::Display;

/// Errors collected so far, combined into one [`syn::Error`].
#[derive(Default)]
pub struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds an error (which may itself hold several).
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Adds an error spanning `tokens`.
    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// `Ok` if nothing was reported, else every error.
    pub fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
