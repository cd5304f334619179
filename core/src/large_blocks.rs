//! Global allocators for processes that read and partition very large graphs: every block of
//! [`LARGE_FROM`] bytes or more in a mapping of its own, kept when freed for the next large
//! block up to a bound and given back to the system past it; the system allocator for the rest
//! ([`LargeBlockAlloc`], which the `remat` command installs) — and, in [`HugePageAlloc`], large
//! blocks advised to use transparent huge pages as well.
//!
//! Left to glibc, a large block is a mapping of its own only below glibc's dynamic mmap
//! threshold, which rises (up to 32 MiB) each time such a block is freed; past that, blocks come
//! from the heap, where freed memory stays with the process for as long as anything near its end
//! lives: at 10⁶ nodes, 130 MB of the min-cut's freed network stayed resident through the plan
//! and the report. Given back at once instead, the memory one stage frees is faulted in again,
//! page by page, by the next: 500 000 faults and over a second of system time for a run whose
//! peak is 0.9 GB. So large blocks are mapped here, and a freed one is kept, up to 256 MiB in
//! all, for the next large block to reuse with its pages backed already (`retained`, on Linux;
//! elsewhere large blocks are the system allocator's, with glibc's threshold fixed where glibc
//! is the system allocator). The blocks below [`LARGE_FROM`] stay with glibc, whose threshold is
//! fixed at that size, so that they never become mappings of their own.
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

/// Blocks of at least this many bytes get a mapping of its own each (and, from
/// [`HugePageAlloc`], the huge-page advice): two huge pages, so that every such block has at
/// least one aligned huge page inside it.
const LARGE_FROM: usize = 4 << 20;

/// The size of a transparent huge page on the platforms where the advice is given (x86-64 and
/// 4 KiB-page aarch64); elsewhere the advised ranges just hold no whole huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Every block of 4 MiB or more in a mapping of its own, kept when freed (up to 256 MiB) for
/// the next large block to reuse and given back to the system past that; the system allocator
/// for the rest. Installed by the `remat` command: what one stage of reading and partitioning a
/// large document frees neither stays in the next stage's peak nor is faulted in again by it
/// (see the module's notes; off Linux, large blocks are the system allocator's).
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

/// Blocks of one allocator: the large ones from (and kept in) `pool`, the others the system
/// allocator's.
struct Blocks(&'static retained::Pool);

/// The large blocks [`LargeBlockAlloc`] keeps, and those [`HugePageAlloc`] keeps (advised).
static PLAIN: retained::Pool = retained::Pool::new();
static HUGE: retained::Pool = retained::Pool::new();

// SAFETY (of every method): a block goes back to where it came from: a large block (by its
// layout, which the caller passes back unchanged) to the pool, the others to `System`; a block
// that changes sides in `realloc` is copied and freed where it came from. Fixing glibc's mmap
// threshold only changes where the system allocator takes blocks from.
impl Blocks {
    unsafe fn alloc(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        own_mapping(layout.size());
        // SAFETY: the caller's contract for `GlobalAlloc::alloc`, which the pool's is.
        unsafe {
            match (retained::is_large(layout.size(), layout.align()), zeroed) {
                (true, _) => self.0.alloc(layout.size(), zeroed),
                (false, false) => System.alloc(layout),
                (false, true) => System.alloc_zeroed(layout),
            }
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: a large layout's block came from the pool with this size, the others from
        // `System` with `layout`.
        unsafe {
            if retained::is_large(layout.size(), layout.align()) {
                self.0.free(block, layout.size())
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
                    let remapped = self.0.realloc(block, layout.size(), new_size);
                    if !remapped.is_null() {
                        return remapped;
                    }
                }
                _ => {}
            }
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let fresh = self.alloc(new_layout, false);
            if !fresh.is_null() {
                std::ptr::copy_nonoverlapping(block, fresh, layout.size().min(new_size));
                self.dealloc(block, layout);
            }
            fresh
        }
    }
}

// SAFETY: `Blocks` hands out and takes back every block (see there).
unsafe impl GlobalAlloc for LargeBlockAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is `Blocks`'.
        unsafe { Blocks(&PLAIN).alloc(layout, false) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { Blocks(&PLAIN).alloc(layout, true) }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from `Blocks(&PLAIN)` with `layout`.
        unsafe { Blocks(&PLAIN).dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is `Blocks`'.
        unsafe { Blocks(&PLAIN).realloc(block, layout, new_size) }
    }
}

// SAFETY: `Blocks` hands out and takes back every block; the advice only changes how the kernel
// backs pages inside a block just handed out, never their contents or their ownership.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is `Blocks`'.
        advise(unsafe { Blocks(&HUGE).alloc(layout, false) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        advise(unsafe { Blocks(&HUGE).alloc(layout, true) }, layout.size())
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from `Blocks(&HUGE)` with `layout`.
        unsafe { Blocks(&HUGE).dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is `Blocks`'.
        advise(unsafe { Blocks(&HUGE).realloc(block, layout, new_size) }, new_size)
    }
}

/// Before the first block of [`LARGE_FROM`] bytes or more: fixes glibc's mmap threshold
/// (`M_MMAP_THRESHOLD`) at `LARGE_FROM`, so that the smaller blocks come from its heap and the
/// large ones it is given (those off Linux, and those of an alignment above a page) are mappings
/// of their own, returned to the system when freed (see the module's notes).
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

/// The least spare room [`fault_in_spare`] starts a thread for.
const FAULT_IN_FROM: usize = 32 << 20;

/// Has the pages of `v`'s spare capacity (the room past its length) faulted in on a thread of
/// its own (`MADV_POPULATE_WRITE`, Linux 5.14 and later), for a caller about to fill that room
/// while the other core idles: at 10⁶ nodes, differentiating writes 210 MB of new nodes on one
/// thread, and a quarter of its time went to the kernel faulting their pages in. The handle
/// (where a thread started: at least [`FAULT_IN_FROM`] bytes of room, and a thread to be had)
/// gives whether the kernel did it.
///
/// Nothing is written: the advice backs pages as a write would, without writing, so it cannot
/// race with the caller's writes, and if `v` is moved or freed meanwhile it backs pages of
/// whatever holds the range then, or fails on an unmapped one (failures are ignored: the pages
/// are then faulted in as they are written, as without it). Off Linux nothing starts.
pub(crate) fn fault_in_spare<T>(v: &Vec<T>) -> Option<std::thread::JoinHandle<bool>> {
    let size = std::mem::size_of::<T>();
    let start = v.as_ptr() as usize + v.len() * size;
    let end = v.as_ptr() as usize + v.capacity() * size;
    if !cfg!(target_os = "linux") || end < start + FAULT_IN_FROM {
        return None;
    }
    std::thread::Builder::new().name("fault-in".into()).spawn(move || imp::populate(start, end)).ok()
}

#[cfg(target_os = "linux")]
mod imp {
    /// Backs the whole pages from `start` to `end` as a write would; whether the kernel did
    /// (before Linux 5.14 it knows no such advice; it takes only page-aligned ranges, of the
    /// system's page size).
    pub(super) fn populate(start: usize, end: usize) -> bool {
        let page = super::retained::page();
        let (start, end) = (start.next_multiple_of(page), end / page * page);
        // SAFETY: the advice changes no byte of memory (it backs pages as writing would, and
        // fails on a range that is not mapped writable); the range is the caller's to name.
        end > start && unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) == 0 }
    }

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
    pub(super) fn populate(_start: usize, _end: usize) -> bool {
        false
    }
}

#[cfg(test)]
#[path = "../../benches/common/require.rs"]
mod require;

#[cfg(test)]
mod tests {
    use super::require;
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
            return require::skip("thp", "this kernel has no transparent huge pages");
        }
        assert!(advised(HugePageAlloc), "no huge-page advice on a large block of HugePageAlloc");
        assert!(!advised(LargeBlockAlloc), "huge-page advice on a large block of LargeBlockAlloc");
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

    /// The room past a vector's length is backed on another thread, without a byte of the
    /// vector changing: filling it afterwards takes (almost) no page fault here. Too little
    /// room starts no thread.
    #[cfg(target_os = "linux")]
    #[test]
    fn spare_room_is_faulted_in_elsewhere_and_nothing_is_written() {
        let mut v: Vec<u64> = Vec::with_capacity((FAULT_IN_FROM + (8 << 20)) / 8);
        v.extend((0..100_000u64).map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let thread = fault_in_spare(&v).expect("no thread for 40 MiB of room");
        let done = thread.join().unwrap();
        assert!(v.iter().enumerate().all(|(k, &x)| x == (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        if !done {
            return require::skip(
                "populate",
                "this kernel cannot back pages without writing them (MADV_POPULATE_WRITE)",
            );
        }
        let (room, before) = (v.capacity() - v.len(), faults());
        v.resize(v.capacity(), 7);
        let taken = faults() - before;
        let pages = (room * 8 / 4096) as i64;
        assert!(taken < pages / 4, "{taken} page faults filling {pages} pages of room faulted in already");
        assert!(fault_in_spare(&Vec::<u64>::with_capacity(1 << 20)).is_none(), "a thread for 8 MiB of room");
        assert!(fault_in_spare(&v).is_none(), "a thread for a vector with no room");
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
