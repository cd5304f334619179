//! The command's global allocator, chosen by a cargo feature (at most one): `alloc-jemalloc`,
//! `alloc-mimalloc`, `alloc-large-blocks` ([`large_blocks::LargeBlockAlloc`]); none of them, the
//! system allocator. docs/performance.md compares them on the 10⁶-node documents.

/// Compiled only where it is the one installed: the features are a choice of one, jemalloc
/// and mimalloc first.
#[cfg(all(feature = "alloc-large-blocks", not(any(feature = "alloc-jemalloc", feature = "alloc-mimalloc"))))]
mod large_blocks;

#[cfg(feature = "alloc-jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(all(feature = "alloc-mimalloc", not(feature = "alloc-jemalloc")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(feature = "alloc-large-blocks", not(any(feature = "alloc-jemalloc", feature = "alloc-mimalloc"))))]
#[global_allocator]
static ALLOCATOR: large_blocks::LargeBlockAlloc = large_blocks::LargeBlockAlloc;

/// The allocator this build installed, as the A/B bench names it (the command itself does not
/// read it).
#[allow(dead_code)]
pub const NAME: &str = if cfg!(feature = "alloc-jemalloc") {
    "jemalloc"
} else if cfg!(feature = "alloc-mimalloc") {
    "mimalloc"
} else if cfg!(feature = "alloc-large-blocks") {
    "large-blocks"
} else {
    "system"
};
