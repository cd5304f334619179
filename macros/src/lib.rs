//! The `#[checkpoint]` attribute of remat. Use it through the `remat` crate
//! (`use remat::prelude::*;`), whose re-export carries compiled examples of every form.

mod attr;
mod error;
mod expand;
mod item;
mod krate;
mod kw;
mod stmt;

use proc_macro::TokenStream;

/// Makes a function a checkpointed region: each call opens a fresh region instance on the active
/// trace, and every op recorded until the call returns — by the function, by helpers it calls,
/// by nested checkpointed calls (child regions, whose own policy governs their ops) — carries the
/// region and the policy resolved for it.
///
/// ```text
/// #[checkpoint]                                     every op prefer_recompute (classic checkpointing)
/// #[checkpoint(policy = recompute_all)]             the same
/// #[checkpoint(policy = save_all)]                  every op prefer_save
/// #[checkpoint(policy = save(matmul, ..))]          listed kinds must_save, others prefer_recompute
/// #[checkpoint(policy = recompute(gelu, ..))]       listed kinds must_recompute, others prefer_save
/// #[checkpoint(policy = offload(matmul, ..))]       listed kinds must_offload (kept in host memory
///                                                   between forward and backward), others
///                                                   prefer_recompute
/// #[checkpoint(policy = save_names("attn", ..))]    values named so must_save, others prefer_recompute
/// #[checkpoint(policy = offload_names("attn", ..))] values named so must_offload, others
///                                                   prefer_recompute
/// #[checkpoint(policy = rules(must_save = [..], prefer_save = [..], must_recompute = [..],
///                             prefer_recompute = [..], must_offload = [..],
///                             prefer_offload = [..], default = <policy>))]
///                                                   every key optional; default prefer_recompute
/// #[checkpoint(.., budget = 0.5)]                   keep at most this fraction of the region's
///                                                   save-everything bytes
/// #[checkpoint(policy = arg(p))]                    the policy is the value of parameter `p`
///                                                   (a `RegionPolicy`, chosen at run time)
/// #[checkpoint(.., crate = "my_remat")]             name remat by this path instead of `::remat`
///                                                   (a renamed dependency, a re-export)
/// ```
///
/// Inside the function, `#[save] let v = ..;`, `#[recompute] let v = ..;` and
/// `#[offload] let v = ..;` make the value the statement binds must_save / must_recompute /
/// must_offload, whatever the region's policy and names say. They
/// apply to a `Tensor`, or a reference, tuple (up to 12 elements; nest tuples for more), array,
/// slice, `Vec` or `Option` of tensors, computed by the function or by a checkpointed function it
/// calls (under `policy = none` a value of its own ops is left alone: nothing is checkpointed), and
/// are found in nested blocks (`if`, `match`, loops, closures), not in nested items. Outside a
/// checkpointed function they are not attributes at all: the compiler cannot find `save`.
///
/// Applies to free functions and methods (`&self`, `&mut self`, `self`), with generics,
/// lifetimes, `where` clauses, `impl Trait` arguments and any return type; the signature,
/// attributes and doc comments are kept. The region closes after the body's value is computed,
/// on every path (`return`, `?`).
///
/// Compiled examples of every form are on `remat::checkpoint`.
///
/// # Compile errors
///
/// Each spans the offending token and, where one exists, suggests a fix; every error of one
/// attribute is reported at once:
///
/// - `policy = arg(p)` where `p` is not a parameter of the function (or is not a
///   `RegionPolicy`: a type error on `p`);
/// - an unknown policy (`policy = sav_all`: did you mean `save_all`?), or a form without its key
///   (`#[checkpoint(save(matmul))]`);
/// - an unknown key (`polcy`: did you mean `policy`?), in `#[checkpoint(..)]` or in `rules(..)`;
/// - a duplicate key (`policy`, `budget`, or a key of `rules(..)`);
/// - an unknown op kind (`matmull`: did you mean `matmul`?), including internal kinds of the
///   backward pass (`relu_grad`), which cannot be named;
/// - a view op (`reshape`, `transpose`, `expand`) in a save or offload list: views are never
///   saved nor offloaded, their base is;
/// - `#[save]` or `#[offload]` on a `let` whose initializer ends with a view method
///   (`.reshape(..)`, `.t()`);
/// - one op kind in two lists of `rules(..)` (say `must_save` and `prefer_offload`), or twice in
///   one list;
/// - an empty list (`save()`, `recompute()`, `offload()`, `save_names()`, `must_save = []`);
/// - `budget` outside [0, 1], or not a number;
/// - `crate` that is not a path in a string (`crate = "my_remat"`);
/// - `save_names` / `offload_names` arguments that are not string literals, or are empty;
/// - `#[checkpoint]` on something other than a function with a body, on an `async fn` or on a
///   `const fn`;
/// - two of `#[save]`, `#[recompute]`, `#[offload]` on one statement, one with arguments or
///   twice, or on a statement that binds nothing (an expression, a `let` without initializer,
///   `let .. else`);
/// - `#[save]` / `#[recompute]` / `#[offload]` on a value that is not made of tensors (a type
///   error pointing at the pattern).
#[proc_macro_attribute]
pub fn checkpoint(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::checkpoint(args.into(), input.into()).into()
}

/// A policy value, checked at compile time like `#[checkpoint]`: `policy!(save(matmul))`,
/// `policy!(save_all, budget = 0.5)`. It is a `remat::RegionPolicy`, usable in a `const`, to
/// pass to a function checkpointed with `#[checkpoint(policy = arg(p))]`. The same text parses
/// at run time with `RegionPolicy::parse`, with the same messages. `crate = "my_remat"` names
/// remat by another path, as on `#[checkpoint]`: `policy!(save(matmul), crate = "my_remat")`.
///
/// Compiled examples are on `remat::policy`.
#[proc_macro]
pub fn policy(input: TokenStream) -> TokenStream {
    expand::policy(input.into()).into()
}
