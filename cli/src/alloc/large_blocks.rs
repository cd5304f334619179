//! The `remat` command's allocator (feature `alloc-large-blocks`): every block of
//! [`LARGE_FROM`] bytes or more in a mapping of its own, kept when freed for the next large
//! block up to a bound and given back to the system past it; the system allocator for the rest.
//!
//! Left to glibc, a large block is a mapping of its own only below glibc's dynamic mmap
//! threshold, which rises (up to 32 MiB) each time such a block is freed; past that, blocks come
//! from the heap, where freed memory stays with the process for as long as anything near its end
//! lives, through the later stages' peaks. Given back at once instead, the memory one stage
//! frees is faulted in again, page by page, by the next. So large blocks are mapped here, and a
//! freed one is kept, up to 256 MiB in all, for the next large block to reuse with its pages
//! backed already (`retained`, on Linux; elsewhere large blocks are the system allocator's,
//! with glibc's threshold fixed where glibc is the system allocator). The blocks below
//! [`LARGE_FROM`] stay with glibc, whose threshold is fixed at that size, so that they never
//! become mappings of their own. docs/performance.md ("The command's allocator") has the
//! figures, and those of jemalloc and mimalloc beside it.

use std::alloc::{GlobalAlloc, Layout, System};

#[cfg(target_os = "linux")]
mod retained;

/// Off Linux, no block is large here: every block is the system allocator's.
#[cfg(not(target_os = "linux"))]
mod retained {
    pub(super) struct Pool;

    pub(super) fn is_large(_size: usize, _align: usize) -> bool {
        false
    }

    impl Pool {
        pub(super) const fn new() -> Pool {
            Pool
        }
        pub(super) unsafe fn alloc(&self, _size: usize, _zeroed: bool) -> *mut u8 {
            unreachable!("no block is large off Linux")
        }
        pub(super) unsafe fn free(&self, _block: *mut u8, _size: usize) {
            unreachable!("no block is large off Linux")
        }
        pub(super) unsafe fn realloc(&self, _block: *mut u8, _size: usize, _new_size: usize) -> *mut u8 {
            unreachable!("no block is large off Linux")
        }
    }
}

/// Blocks of at least this many bytes get a mapping of its own each.
const LARGE_FROM: usize = 4 << 20;

/// Every block of 4 MiB or more in a mapping of its own, kept when freed (up to 256 MiB) for
/// the next large block to reuse and given back to the system past that; the system allocator
/// for the rest: what one stage of reading and partitioning a large document frees neither
/// stays in the next stage's peak nor is faulted in again by it (see the module's notes; off
/// Linux, large blocks are the system allocator's).
#[derive(Clone, Copy, Debug, Default)]
pub struct LargeBlockAlloc;

/// The large blocks [`LargeBlockAlloc`] keeps.
static POOL: retained::Pool = retained::Pool::new();

// SAFETY (of every method): a block goes back to where it came from: a large block (by its
// layout, which the caller passes back unchanged) to the pool, the others to `System`; a block
// that changes sides in `realloc` is copied and freed where it came from. Fixing glibc's mmap
// threshold only changes where the system allocator takes blocks from.
unsafe impl GlobalAlloc for LargeBlockAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `GlobalAlloc::alloc`, which the pool's is.
        unsafe { alloc(layout, false) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { alloc(layout, true) }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: a large layout's block came from the pool with this size, the others from
        // `System` with `layout`.
        unsafe {
            if retained::is_large(layout.size(), layout.align()) {
                POOL.free(block, layout.size())
            } else {
                System.dealloc(block, layout)
            }
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        own_mapping(new_size);
        let (was_large, large) =
            (retained::is_large(layout.size(), layout.align()), retained::is_large(new_size, layout.align()));
        // SAFETY: each block goes back where it came from; a block that changes sides, or a
        // large one the pool cannot remap, is copied (up to the smaller size) into a fresh one
        // first, and freed only when that one was made.
        unsafe {
            match (was_large, large) {
                (false, false) => return System.realloc(block, layout, new_size),
                (true, true) => {
                    let remapped = POOL.realloc(block, layout.size(), new_size);
                    if !remapped.is_null() {
                        return remapped;
                    }
                }
                _ => {}
            }
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let fresh = alloc(new_layout, false);
            if !fresh.is_null() {
                std::ptr::copy_nonoverlapping(block, fresh, layout.size().min(new_size));
                self.dealloc(block, layout);
            }
            fresh
        }
    }
}

/// A block of `layout` (zeroed where asked): a large one from the pool, the others `System`'s.
///
/// # Safety
/// The caller's contract for `GlobalAlloc::alloc`.
unsafe fn alloc(layout: Layout, zeroed: bool) -> *mut u8 {
    own_mapping(layout.size());
    // SAFETY: the caller's contract for `GlobalAlloc::alloc`, which the pool's is.
    unsafe {
        match (retained::is_large(layout.size(), layout.align()), zeroed) {
            (true, _) => POOL.alloc(layout.size(), zeroed),
            (false, false) => System.alloc(layout),
            (false, true) => System.alloc_zeroed(layout),
        }
    }
}

/// Before the first block of [`LARGE_FROM`] bytes or more: fixes glibc's mmap threshold
/// (`M_MMAP_THRESHOLD`) at `LARGE_FROM`, so that the smaller blocks come from its heap and the
/// large ones it is given (those off Linux, and those of an alignment above a page) are mappings
/// of their own, returned to the system when freed (see the module's notes).
fn own_mapping(size: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if size >= LARGE_FROM {
        static FIXED: std::sync::Once = std::sync::Once::new();
        // SAFETY: `mallopt` only sets a tunable of the allocator; it allocates nothing, so
        // calling it from inside an allocation is sound.
        FIXED.call_once(|| unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE_FROM as libc::c_int);
        });
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = size;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_hold_their_contents_through_growth_and_shrinking() {
        hold_contents(LargeBlockAlloc);
    }

    fn hold_contents(alloc: impl GlobalAlloc) {
        for size in [16, LARGE_FROM - 1, LARGE_FROM, 3 * LARGE_FROM + 12_345] {
            let layout = Layout::from_size_align(size, 64).unwrap();
            // SAFETY: a non-zero layout; the block is written within its size and freed with it.
            unsafe {
                let block = alloc.alloc(layout);
                assert!(!block.is_null());
                for k in (0..size).step_by(4093) {
                    *block.add(k) = (k % 251) as u8;
                }
                let grown = alloc.realloc(block, layout, 2 * size + LARGE_FROM);
                assert!(!grown.is_null());
                for k in (0..size).step_by(4093) {
                    assert_eq!(*grown.add(k), (k % 251) as u8, "byte {k} of a {size}-byte block after growing");
                }
                let grown_layout = Layout::from_size_align(2 * size + LARGE_FROM, 64).unwrap();
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

    /// Set in the process [`kept_blocks_are_reused_cleared_where_asked_and_bounded`] starts for
    /// its checks.
    #[cfg(target_os = "linux")]
    const ALONE: &str = "REMAT_LARGE_BLOCKS_TEST_ALONE";

    /// Checked in a process of its own, where no other test's large block takes what is kept.
    #[cfg(target_os = "linux")]
    #[test]
    fn kept_blocks_are_reused_cleared_where_asked_and_bounded() {
        if std::env::var_os(ALONE).is_some() {
            reused_without_faults();
            grown_from_a_kept_block();
            bounded();
            return;
        }
        let module = module_path!().split_once("::").map_or(module_path!(), |(_, rest)| rest);
        let name = format!("{module}::kept_blocks_are_reused_cleared_where_asked_and_bounded");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("1 passed"), "the check did not run in its own process:\n{stdout}");
    }

    /// Page faults this thread has taken so far.
    #[cfg(target_os = "linux")]
    fn faults() -> i64 {
        // SAFETY: `getrusage` fills the zeroed struct it is given.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            usage.ru_minflt as i64
        }
    }

    /// Writes `fill` to one byte of every page of `size` bytes at `block`.
    ///
    /// # Safety
    /// The block is writable for `size` bytes.
    #[cfg(target_os = "linux")]
    unsafe fn touch(block: *mut u8, size: usize, fill: u8) {
        for k in (0..size).step_by(4096) {
            // SAFETY: within the block.
            unsafe { block.add(k).write_volatile(fill) };
        }
    }

    /// Whether sampled bytes of the block (one per page) are all zero.
    ///
    /// # Safety
    /// The block is readable for `size` bytes.
    #[cfg(target_os = "linux")]
    unsafe fn zeroed(block: *const u8, size: usize) -> bool {
        // SAFETY: within the block.
        (0..size).step_by(4093).chain([size - 1]).all(|k| unsafe { block.add(k).read_volatile() } == 0)
    }

    /// A freed large block is the next large block's (it is the smallest kept span that fits),
    /// whose pages are backed already; cleared where the block is asked zeroed.
    #[cfg(target_os = "linux")]
    fn reused_without_faults() {
        let big = Layout::from_size_align(24 << 20, 8).unwrap();
        let next = Layout::from_size_align(LARGE_FROM + 12_345, 8).unwrap();
        // SAFETY: non-zero layouts, each block written within its size and freed with its own.
        unsafe {
            let block = LargeBlockAlloc.alloc(big);
            assert!(!block.is_null());
            touch(block, big.size(), 0xAB);
            LargeBlockAlloc.dealloc(block, big);
            let before = faults();
            let reused = LargeBlockAlloc.alloc(next);
            touch(reused, next.size(), 0xCD);
            let taken = faults() - before;
            assert_eq!(reused, block, "the next large block is not carved out of the one just freed");
            let pages = next.size() / 4096;
            assert!(taken < pages as i64 / 4, "{taken} page faults writing the {pages} pages of a reused block");
            LargeBlockAlloc.dealloc(reused, next);
            let cleared = LargeBlockAlloc.alloc_zeroed(next);
            assert_eq!(cleared, block);
            assert!(zeroed(cleared, next.size()), "a reused block asked zeroed holds old bytes");
            LargeBlockAlloc.dealloc(cleared, next);
        }
    }

    /// A block larger than any kept one grows the largest in place of a fresh mapping: its
    /// first bytes are the kept block's pages, cleared where asked, the rest fresh.
    #[cfg(target_os = "linux")]
    fn grown_from_a_kept_block() {
        let larger = Layout::from_size_align(64 << 20, 8).unwrap();
        // SAFETY: as above.
        unsafe {
            let block = LargeBlockAlloc.alloc_zeroed(larger);
            assert!(!block.is_null());
            assert!(zeroed(block, larger.size()), "a block grown from a kept one, asked zeroed, holds old bytes");
            touch(block, larger.size(), 0xEF);
            LargeBlockAlloc.dealloc(block, larger);
        }
    }

    /// Past [`retained::RETAIN`] bytes, freed memory goes back to the system: the tail of a
    /// block larger than that is no longer mapped; its head is kept.
    #[cfg(target_os = "linux")]
    fn bounded() {
        let huge = Layout::from_size_align(retained::RETAIN + LARGE_FROM + 12_345, 8).unwrap();
        // SAFETY: as above; the addresses are only looked up, never read, after the block is freed.
        let block = unsafe {
            let block = LargeBlockAlloc.alloc(huge);
            assert!(!block.is_null());
            touch(block, huge.size(), 1);
            LargeBlockAlloc.dealloc(block, huge);
            block as usize
        };
        assert!(vm_flags_at(block).is_some(), "the head of a freed block is not kept");
        let tail = block + retained::RETAIN + 4096;
        assert!(vm_flags_at(tail).is_none(), "memory past the bound is still mapped after it was freed");
    }
}
