//! The region API the `#[checkpoint]` macro expands into.
//!
//! Calling a checkpointed function enters its [`RegionSpec`] with [`enter_region`], which pushes a
//! fresh region instance on a thread-local stack and returns a guard that pops it. Every op
//! recorded while the instance is innermost — by the function itself, by helpers it calls, or by
//! ops that expand into several — is tagged with the instance and the policy its spec resolves
//! for that op ([`PolicyTable::resolve`]). Instances nest: an instance entered while another is
//! open records it as its parent.
//!
//! [`PolicyTable`] (`table.rs`) is a region's per-op policy; [`RegionPolicy`] (`policy.rs`) the
//! same as a run-time value; [`RegionSpec`] (`spec.rs`) what the macro knows of a function;
//! `stack.rs` the thread's open instances.

mod policy;
mod spec;
mod stack;
mod table;

pub use policy::RegionPolicy;
pub use spec::{enter_region_with, RegionSpec};
#[cfg(test)]
pub(crate) use stack::active_regions;
pub use stack::{enter_region, in_region, RegionGuard};
pub(crate) use stack::{with_active_regions, ActiveRegion};
pub use table::PolicyTable;

#[cfg(test)]
mod tests;
