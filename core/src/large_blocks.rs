//! Global allocators for processes that read and partition very large graphs: the system
//! allocator, with every block of [`LARGE_FROM`] bytes or more in a mapping of its own, given
//! back to the system when freed ([`LargeBlockAlloc`], which the `remat` command installs) —
//! and, in [`HugePageAlloc`], advised to use transparent huge pages as well.
//!
//! With glibc a large block is a mapping of its own only below glibc's dynamic mmap threshold,
//! which rises (up to 32 MiB) each time such a block is freed; past that, blocks come from the
//! heap, where freed memory stays with the process. Fixing the threshold (`M_MMAP_THRESHOLD`)
//! before the first large block keeps what one stage freed out of the next stage's peak: at 10⁶
//! nodes, 130 MB of the min-cut's freed network stayed resident through the plan and the report.
//!
//! Huge pages are a choice, not the default, because of what they cost where the memory comes
//! from. Reading and partitioning a 10⁶-node document touches one to two gigabytes of fresh
//! memory; with `MADV_HUGEPAGE` it faults in 2 MiB at a time (about 70 000 faults instead of
//! 250 000). Where the machine's memory is backed as it is touched, that halves the system time
//! (0.65 s → 0.38 s on the 10⁶-node joint document when it was measured). But on virtual
//! machines whose host takes free guest memory back (virtio-balloon free page reporting, as on
//! the Firecracker machines this project is measured on), the host takes back free blocks of
//! exactly that size: every huge page then comes from a block the host must back anew, and the
//! same runs spent 2.5–4.6 s in the kernel with huge pages against 0.8–1.2 s without
//! (docs/performance.md). Huge pages where they pay: [`HugePageAlloc`]. Where transparent huge
//! pages are off (`never`) or absent, and off Linux, the advice is ignored.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of at least this many bytes get a mapping of its own each (and, from
/// [`HugePageAlloc`], the huge-page advice): two huge pages, so that every such block has at
/// least one aligned huge page inside it.
const LARGE_FROM: usize = 4 << 20;

/// The size of a transparent huge page on the platforms where the advice is given (x86-64 and
/// 4 KiB-page aarch64); elsewhere the advised ranges just hold no whole huge page.
const HUGE_PAGE: usize = 2 << 20;

/// The system allocator, with every block of 4 MiB or more in a mapping of its own, given back
/// to the system when freed (glibc's mmap threshold, fixed before the first such block; elsewhere
/// this is the system allocator). Installed by the `remat` command: what one stage of reading
/// and partitioning a large document frees does not count in the next stage's peak.
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: remat_core::LargeBlockAlloc = remat_core::LargeBlockAlloc;
/// # fn main() {}
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct LargeBlockAlloc;

/// [`LargeBlockAlloc`], with every large block advised to use transparent huge pages
/// (`madvise(MADV_HUGEPAGE)` on its 2 MiB-aligned interior, as glibc's `glibc.malloc.hugetlb=1`
/// tunable does, which a started binary cannot set for itself): a third of the page faults. It
/// pays where memory is backed as it is touched, and costs seconds on virtual machines whose
/// host takes free memory back (`docs/performance.md`); measure both on your machines.
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: remat_core::HugePageAlloc = remat_core::HugePageAlloc;
/// # fn main() {}
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePageAlloc;

// SAFETY: every block comes from `System` and goes back to it with the layout it was made with;
// fixing glibc's mmap threshold only changes where the system allocator takes blocks from.
unsafe impl GlobalAlloc for LargeBlockAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        own_mapping(layout.size());
        // SAFETY: the caller's contract for `alloc` is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        own_mapping(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from `System` with `layout` (every block of this allocator does).
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        own_mapping(new_size);
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is `System`'s.
        unsafe { System.realloc(block, layout, new_size) }
    }
}

// SAFETY: every block comes from `LargeBlockAlloc` and goes back to it with the layout it was
// made with; the advice only changes how the kernel backs pages inside a block this allocator
// just handed out, never their contents or their ownership.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is `LargeBlockAlloc`'s.
        advise(unsafe { LargeBlockAlloc.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        advise(unsafe { LargeBlockAlloc.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from `LargeBlockAlloc` with `layout`.
        unsafe { LargeBlockAlloc.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is `LargeBlockAlloc`'s.
        advise(unsafe { LargeBlockAlloc.realloc(block, layout, new_size) }, new_size)
    }
}

/// Before the first block of [`LARGE_FROM`] bytes or more: has the system allocator map every
/// such block on its own, to be returned to the system when freed (glibc's threshold for that,
/// `M_MMAP_THRESHOLD`, fixed at `LARGE_FROM`: see the module's notes).
fn own_mapping(size: usize) {
    if size >= LARGE_FROM {
        imp::fix_mmap_threshold();
    }
}

/// Advises the huge pages inside `size` bytes at `block`, when the block is large enough, and
/// hands the block on. A failure (no transparent huge pages in this kernel) leaves the block as
/// it is.
fn advise(block: *mut u8, size: usize) -> *mut u8 {
    if block.is_null() || size < LARGE_FROM {
        return block;
    }
    let start = (block as usize).next_multiple_of(HUGE_PAGE);
    let end = (block as usize + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        imp::advise(start, end - start);
    }
    block
}

#[cfg(target_os = "linux")]
mod imp {
    /// Sets glibc's mmap threshold to [`super::LARGE_FROM`], once (see [`super::own_mapping`]).
    pub(super) fn fix_mmap_threshold() {
        #[cfg(target_env = "gnu")]
        {
            static FIXED: std::sync::Once = std::sync::Once::new();
            // SAFETY: `mallopt` only sets a tunable of the allocator; it allocates nothing, so
            // calling it from inside an allocation is sound.
            FIXED.call_once(|| unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, super::LARGE_FROM as libc::c_int);
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
        hold_contents(LargeBlockAlloc);
        hold_contents(HugePageAlloc);
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

    /// Whether the mapping holding the aligned interior of a fresh large block from `alloc` is
    /// advised to use huge pages (`hg`, the kernel's mark for `MADV_HUGEPAGE`).
    #[cfg(target_os = "linux")]
    fn advised(alloc: impl GlobalAlloc) -> bool {
        let layout = Layout::from_size_align(8 * HUGE_PAGE, 64).unwrap();
        // SAFETY: a non-zero layout, freed with the same layout.
        unsafe {
            let block = alloc.alloc(layout);
            let inside = (block as usize).next_multiple_of(HUGE_PAGE);
            let flags = vm_flags_at(inside).expect("the block's mapping is listed in /proc/self/smaps");
            alloc.dealloc(block, layout);
            flags.split_whitespace().any(|f| f == "hg")
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn only_the_huge_page_allocator_advises_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            println!("skipped: this kernel has no transparent huge pages");
            return;
        }
        assert!(advised(HugePageAlloc), "no huge-page advice on a large block of HugePageAlloc");
        assert!(!advised(LargeBlockAlloc), "huge-page advice on a large block of LargeBlockAlloc");
    }

    /// Set in the process [`large_blocks_stay_mapped_on_their_own_after_a_larger_one_is_freed`]
    /// starts for its check.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    const ALONE: &str = "REMAT_LARGE_BLOCKS_TEST_ALONE";

    /// Checked in a process of its own: beside other tests, glibc may serve a large block from
    /// memory they freed into the same arena (the threshold only decides how the arena grows),
    /// and the block is then no mapping of its own whatever the threshold.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn large_blocks_stay_mapped_on_their_own_after_a_larger_one_is_freed() {
        if std::env::var_os(ALONE).is_some() {
            stays_mapped(LargeBlockAlloc);
            stays_mapped(HugePageAlloc);
            return;
        }
        let module = module_path!().split_once("::").map_or(module_path!(), |(_, rest)| rest);
        let name = format!("{module}::large_blocks_stay_mapped_on_their_own_after_a_larger_one_is_freed");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("1 passed"), "the check did not run in its own process:\n{stdout}");
    }

    /// Stock glibc raises its mmap threshold to the size of a mapped block when that block is
    /// freed (up to 32 MiB), so that the next blocks below that size come from an arena, where
    /// freed memory stays with the process.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn stays_mapped(alloc: impl GlobalAlloc) {
        let big = Layout::from_size_align(24 << 20, 8).unwrap();
        let next = Layout::from_size_align(LARGE_FROM + 12_345, 8).unwrap();
        // SAFETY: non-zero layouts, each block freed with its own; the word read lies just
        // before the block, in the header glibc keeps for it.
        unsafe {
            // `black_box`: a block nobody reads could be optimised away with its `malloc`.
            let block = std::hint::black_box(alloc.alloc(big));
            assert!(!block.is_null());
            alloc.dealloc(block, big);
            let block = std::hint::black_box(alloc.alloc(next));
            assert!(!block.is_null());
            // glibc's chunk header: the word before the block is its size, with bit 1 set when
            // the chunk is a mapping of its own (IS_MMAPPED).
            let mapped = (block as *const usize).sub(1).read() & 2 != 0;
            alloc.dealloc(block, next);
            assert!(mapped, "a {}-byte block came from an arena, not a mapping of its own", next.size());
        }
    }
}
