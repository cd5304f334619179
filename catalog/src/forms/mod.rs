//! The grammar of policy forms (`recompute_all`, `save_all`, `save(..)`, `recompute(..)`,
//! `offload(..)`, `save_names(..)`, `offload_names(..)`, `rules(..)`, `budget = f`), in one place.
//!
//! Two front ends read it: the `#[checkpoint]` and `policy!` macros, which turn their tokens into
//! an [`Expr`] spanned by the user's tokens, and [`parse`], which reads the same forms from a
//! string at run time (a flag, a config file), spanned by byte ranges. Both then call
//! [`resolve_policy`] / [`resolve_budget`] / [`resolve_items`], so a form means the same thing and
//! a mistake gets the same message at compile time and at run time.

//! One file per job: `words.rs` (the keywords and the words of messages), `syntax.rs` (the tree
//! both front ends build, and diagnostics), `resolve.rs` (what a tree means), `parse.rs` (the
//! run-time front end: lexer and parser).

mod parse;
mod resolve;
mod syntax;
mod words;

pub use parse::{check_budget, parse, PolicyError, MAX_DEPTH};
pub use resolve::{resolve_budget, resolve_items, resolve_policy, Resolved, Spec};
pub use syntax::{Diagnostic, Diagnostics, Expr};
pub use words::{did_you_mean, kw, list_index, EXPECTED_POLICY, POLICY_ORDER};

#[cfg(test)]
mod tests;
