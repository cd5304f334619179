//! The policy vocabulary, defined once in `remat-catalog` (the macro uses the same names) and
//! re-exported here for the runtime.

pub use remat_catalog::{Policy, PolicySource};
