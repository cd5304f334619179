//! A global allocator for processes that read and partition very large graphs: the system
//! allocator, with every block of [`HUGE_FROM`] bytes or more advised to use transparent huge
//! pages.
//!
//! Reading and partitioning a 10⁶-node document touches about a gigabyte of fresh memory (the
//! text, the node arrays, the id table, the flow networks), and with 4 KiB pages each page is a
//! fault and a zeroing: about 250 000 faults, three quarters of a second of system time on the
//! machines measured. Where the kernel's transparent huge pages are in `madvise` mode (the usual
//! default, `/sys/kernel/mm/transparent_hugepage/enabled`), a large block advised with
//! `MADV_HUGEPAGE` faults in 2 MiB at a time: about 70 000 faults and half the system time on the
//! same run. This is what glibc's `glibc.malloc.hugetlb=1` tunable does; a binary cannot set that
//! tunable for itself once started, so the `remat` command installs this allocator instead.
//!
//! Only the 2 MiB-aligned interior of a large block is advised, so no memory outside the block
//! is affected; blocks below [`HUGE_FROM`] are left alone (a huge page there could hold memory
//! nobody uses). Where transparent huge pages are off (`never`) or absent, and on other platforms,
//! the advice is ignored and this is the system allocator.
//!
//! With glibc, blocks of [`HUGE_FROM`] bytes or more are also kept each in a mapping of its own
//! (the `M_MMAP_THRESHOLD` tunable, fixed there before the first such block): freeing one gives
//! its memory back to the system, so that what one stage freed does not count in the peak of the
//! next.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of at least this many bytes are advised to use huge pages: two huge pages, so that
/// every such block has at least one aligned huge page inside it.
const HUGE_FROM: usize = 4 << 20;

/// The size of a transparent huge page on the platforms where the advice is given (x86-64 and
/// 4 KiB-page aarch64); elsewhere the advised ranges just hold no whole huge page.
const HUGE_PAGE: usize = 2 << 20;

/// The system allocator, with blocks of 4 MiB or more advised to use transparent huge pages
/// (`madvise(MADV_HUGEPAGE)` on the 2 MiB-aligned interior of each): reading and partitioning a
/// 10⁶-node document then takes ~78 000 page faults instead of ~240 000. Where transparent huge
/// pages are off, and off Linux, it is the system allocator.
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: remat_core::HugePageAlloc = remat_core::HugePageAlloc;
/// # fn main() {}
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePageAlloc;

// SAFETY: every block comes from `System` and goes back to it with the layout it was made with;
// the advice only changes how the kernel backs pages inside a block this allocator just handed
// out, never their contents or their ownership.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        own_mapping(layout.size());
        // SAFETY: the caller's contract for `alloc` is `System`'s.
        let block = unsafe { System.alloc(layout) };
        advise(block, layout.size());
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        own_mapping(layout.size());
        // SAFETY: as for `alloc`.
        let block = unsafe { System.alloc_zeroed(layout) };
        advise(block, layout.size());
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from `System` with `layout` (every block of this allocator does).
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        own_mapping(new_size);
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is `System`'s.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        advise(moved, new_size);
        moved
    }
}

/// Before the first block of [`HUGE_FROM`] bytes or more: has the system allocator map every
/// such block on its own, to be returned to the system when freed. glibc's threshold for that
/// is dynamic: once a mapped block is freed, blocks up to its size (up to 32 MiB) come from the
/// heap instead, where freed memory stays with the process — at 10⁶ nodes, 130 MB of the
/// min-cut's freed network stayed resident through the plan and the report. Fixed at
/// `HUGE_FROM` (glibc's `M_MMAP_THRESHOLD`), it does not move.
fn own_mapping(size: usize) {
    if size >= HUGE_FROM {
        imp::fix_mmap_threshold();
    }
}

/// Advises the huge pages inside `size` bytes at `block`, when the block is large enough. A
/// failure (no transparent huge pages in this kernel) leaves the block as it is.
fn advise(block: *mut u8, size: usize) {
    if block.is_null() || size < HUGE_FROM {
        return;
    }
    let start = (block as usize).next_multiple_of(HUGE_PAGE);
    let end = (block as usize + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        imp::advise(start, end - start);
    }
}

#[cfg(target_os = "linux")]
mod imp {
    /// Sets glibc's mmap threshold to [`super::HUGE_FROM`], once (see [`super::own_mapping`]).
    pub(super) fn fix_mmap_threshold() {
        #[cfg(target_env = "gnu")]
        {
            static FIXED: std::sync::Once = std::sync::Once::new();
            // SAFETY: `mallopt` only sets a tunable of the allocator; it allocates nothing, so
            // calling it from inside an allocation is sound.
            FIXED.call_once(|| unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, super::HUGE_FROM as libc::c_int);
            });
        }
    }

    pub(super) fn advise(start: usize, len: usize) {
        // SAFETY: the range lies inside a block the allocator just handed out (so it is mapped,
        // and `start` is page-aligned); `MADV_HUGEPAGE` changes how its pages are backed, not
        // their contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn fix_mmap_threshold() {}
    pub(super) fn advise(_start: usize, _len: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_hold_their_contents_through_growth_and_shrinking() {
        let alloc = HugePageAlloc;
        for size in [16, HUGE_FROM - 1, HUGE_FROM, 3 * HUGE_FROM + 12_345] {
            let layout = Layout::from_size_align(size, 64).unwrap();
            // SAFETY: a non-zero layout; the block is written within its size and freed with it.
            unsafe {
                let block = alloc.alloc(layout);
                assert!(!block.is_null());
                for k in (0..size).step_by(4093) {
                    *block.add(k) = (k % 251) as u8;
                }
                let grown = alloc.realloc(block, layout, 2 * size + HUGE_FROM);
                assert!(!grown.is_null());
                for k in (0..size).step_by(4093) {
                    assert_eq!(*grown.add(k), (k % 251) as u8, "byte {k} of a {size}-byte block after growing");
                }
                let grown_layout = Layout::from_size_align(2 * size + HUGE_FROM, 64).unwrap();
                let shrunk = alloc.realloc(grown, grown_layout, size / 2 + 1);
                for k in (0..size / 2 + 1).step_by(4093) {
                    assert_eq!(*shrunk.add(k), (k % 251) as u8, "byte {k} after shrinking");
                }
                alloc.dealloc(shrunk, Layout::from_size_align(size / 2 + 1, 64).unwrap());
                let zeroed = alloc.alloc_zeroed(layout);
                assert!((0..size).step_by(4093).all(|k| *zeroed.add(k) == 0), "a zeroed {size}-byte block");
                alloc.dealloc(zeroed, layout);
            }
        }
    }

    /// The kernel's record of the mapping holding `address`: its `VmFlags` line in
    /// `/proc/self/smaps`.
    #[cfg(target_os = "linux")]
    fn vm_flags_at(address: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
            let bounds =
                range.and_then(|(a, b)| Some((usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?)));
            if let Some((a, b)) = bounds.filter(|_| !line.starts_with("VmFlags")) {
                inside = (a..b).contains(&address);
            } else if inside && line.starts_with("VmFlags:") {
                return Some(line.to_string());
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_block_is_advised_to_use_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            println!("skipped: this kernel has no transparent huge pages");
            return;
        }
        let layout = Layout::from_size_align(8 * HUGE_PAGE, 64).unwrap();
        // SAFETY: a non-zero layout, freed with the same layout.
        unsafe {
            let block = HugePageAlloc.alloc(layout);
            let inside = (block as usize).next_multiple_of(HUGE_PAGE);
            let flags = vm_flags_at(inside).expect("the block's mapping is listed in /proc/self/smaps");
            // `hg`: the kernel's mark for a range advised with MADV_HUGEPAGE.
            assert!(flags.split_whitespace().any(|f| f == "hg"), "no huge-page advice on the block: {flags}");
            HugePageAlloc.dealloc(block, layout);
        }
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn large_blocks_stay_mapped_on_their_own_after_a_larger_one_is_freed() {
        // Stock glibc raises its mmap threshold to the size of a mapped block when that block is
        // freed (up to 32 MiB), so that the next blocks below that size come from an arena, where
        // freed memory stays with the process.
        let big = Layout::from_size_align(24 << 20, 8).unwrap();
        let next = Layout::from_size_align(HUGE_FROM + 12_345, 8).unwrap();
        // SAFETY: non-zero layouts, each block freed with its own; the word read lies just
        // before the block, in the header glibc keeps for it.
        unsafe {
            let block = HugePageAlloc.alloc(big);
            assert!(!block.is_null());
            HugePageAlloc.dealloc(block, big);
            let block = HugePageAlloc.alloc(next);
            assert!(!block.is_null());
            // glibc's chunk header: the word before the block is its size, with bit 1 set when
            // the chunk is a mapping of its own (IS_MMAPPED).
            let mapped = (block as *const usize).sub(1).read() & 2 != 0;
            HugePageAlloc.dealloc(block, next);
            assert!(mapped, "a {}-byte block came from an arena, not a mapping of its own", next.size());
        }
    }
}
