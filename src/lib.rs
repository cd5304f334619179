//! remat: precise, explainable activation checkpointing for Rust.
//!
//! Annotate model functions with `#[checkpoint(policy = ...)]`, trace the model into a tagged
//! graph, and remat derives the backward pass, decides which forward values to save and which to
//! recompute — honouring every tag — and runs forward + backward on the CPU (or a GPU),
//! measuring the memory it really used.
//!
//! This crate re-exports [`remat_core`] (ops, tracing, autodiff, planning, the CPU backend),
//! the `#[checkpoint]` attribute, and the CUDA backend.

#![warn(missing_docs)]

pub use remat_core::*;

/// The CUDA backend.
pub use remat_cuda as cuda;

/// What model code needs: `use remat::prelude::*;`.
pub mod prelude {
    pub use remat_core::{AdamW, Backend, CpuBackend, DType, Feeds, HostTensor, Init, Model, Optimizer, Params, Sgd};
    pub use remat_core::{Policy, Tensor, Trace};
    pub use remat_macros::checkpoint;
}

/// Items the `#[checkpoint]` expansion refers to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use remat_core::region::{enter_region, PolicyTable, RegionGuard, RegionSpec};
    pub use remat_core::{OpKind, Policy, Tensor};

    /// What `#[save]` / `#[recompute]` apply their policy to: the value their `let` binds.
    #[diagnostic::on_unimplemented(
        message = "`#[save]` / `#[recompute]` apply to tensors, not to `{Self}`",
        label = "the value this statement binds is a `{Self}`",
        note = "the statement must bind a `Tensor`, or a reference, tuple, array, slice, `Vec` or `Option` of them"
    )]
    pub trait StatementPolicy {
        /// Gives every tensor in `self` the policy (see [`Tensor::set_policy`]).
        fn statement_policy(&self, policy: Policy);
    }

    impl StatementPolicy for Tensor {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            self.set_policy(policy);
        }
    }

    impl<T: StatementPolicy + ?Sized> StatementPolicy for &T {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            (**self).statement_policy(policy);
        }
    }

    impl<T: StatementPolicy> StatementPolicy for [T] {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            for value in self {
                value.statement_policy(policy);
            }
        }
    }

    impl<T: StatementPolicy, const N: usize> StatementPolicy for [T; N] {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            self.as_slice().statement_policy(policy);
        }
    }

    impl<T: StatementPolicy> StatementPolicy for Vec<T> {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            self.as_slice().statement_policy(policy);
        }
    }

    impl<T: StatementPolicy> StatementPolicy for Option<T> {
        #[track_caller]
        fn statement_policy(&self, policy: Policy) {
            if let Some(value) = self {
                value.statement_policy(policy);
            }
        }
    }

    macro_rules! tuples {
        ($( ($($t:ident $i:tt),+) )*) => {$(
            impl<$($t: StatementPolicy),+> StatementPolicy for ($($t,)+) {
                #[track_caller]
                fn statement_policy(&self, policy: Policy) {
                    $( self.$i.statement_policy(policy); )+
                }
            }
        )*};
    }

    tuples! {
        (A 0)
        (A 0, B 1)
        (A 0, B 1, C 2)
        (A 0, B 1, C 2, D 3)
        (A 0, B 1, C 2, D 3, E 4)
        (A 0, B 1, C 2, D 3, E 4, F 5)
    }
}
