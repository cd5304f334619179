//! Large blocks mapped by the allocator itself, and kept when freed for the next large block
//! to reuse (Linux only; elsewhere [`super::LargeBlockAlloc`] leaves every block to the system
//! allocator).
//!
//! Each stage of reading and partitioning a large document frees hundreds of megabytes that
//! the next stage allocates again: returned to the system at once, the same memory is faulted
//! in anew page by page (docs/performance.md, "The command's allocator"). Kept, a freed block's
//! pages are already backed: the next large block
//! is carved out of it with no fault at all. At most [`RETAIN`] bytes are kept, in at most
//! [`SPANS`] spans; past that the oldest are returned to the system, so that memory nobody
//! asks for again adds at most that much to the process's resident size.
//!
//! A span is a page-aligned range of one or more of this module's mappings (adjacent freed
//! ranges are merged, so that a block freed in parts can serve a block as large again); a block
//! handed out is a prefix of a span, the rest staying kept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The most bytes kept for reuse: fewer page faults than 128 MiB, without raising the peaks
/// as more did (docs/performance.md, "The command's allocator").
pub(super) const RETAIN: usize = 256 << 20;
/// The most spans kept (the table is fixed: an allocator cannot allocate its own bookkeeping).
const SPANS: usize = 64;

/// Freed spans, oldest first: `(address, length)`, both page-aligned, none overlapping.
struct Kept {
    spans: [(usize, usize); SPANS],
    len: usize,
    bytes: usize,
}

/// The spans the allocator keeps.
pub(super) struct Pool(Mutex<Kept>);

/// Whether a block of `size` bytes and `align` is one this module maps: a large one (mappings
/// are page-aligned).
pub(super) fn is_large(size: usize, align: usize) -> bool {
    size >= super::LARGE_FROM && align <= page()
}

impl Pool {
    pub(super) const fn new() -> Pool {
        Pool(Mutex::new(Kept { spans: [(0, 0); SPANS], len: 0, bytes: 0 }))
    }

    /// A block of at least `size` bytes (zeroed where asked), or null when the system has no
    /// memory left.
    ///
    /// # Safety
    /// `size` is non-zero; the block goes back through [`Pool::free`] or [`Pool::realloc`] with
    /// the same size.
    pub(super) unsafe fn alloc(&self, size: usize, zeroed: bool) -> *mut u8 {
        let len = pages(size);
        let (at, reused) = match self.take(len) {
            Some(at) => (at as *mut u8, len),
            // SAFETY: a fresh block of `len` bytes, as `alloc` promises.
            None => unsafe { self.grown_or_mapped(len) },
        };
        if zeroed && !at.is_null() {
            // A fresh mapping is zeroed by the system; only reused bytes are cleared.
            // SAFETY: the block is mapped, writable and the caller's alone from here on.
            unsafe { std::ptr::write_bytes(at, 0, reused.min(size)) };
        }
        at
    }

    /// A block of `len` bytes where no kept span is that large: the largest kept span, grown to
    /// `len` (the system moves its pages, backed already, and maps the rest), else a fresh
    /// mapping; and how many of its first bytes were reused. Null when the system has no memory
    /// left.
    ///
    /// # Safety
    /// As for [`Pool::alloc`].
    unsafe fn grown_or_mapped(&self, len: usize) -> (*mut u8, usize) {
        if let Some((at, span)) = self.take_largest() {
            // SAFETY: the span is mapped by this module and used by nobody; the kernel moves it
            // where it must.
            let grown = unsafe { libc::mremap(at as *mut libc::c_void, span, len, libc::MREMAP_MAYMOVE) };
            if grown != libc::MAP_FAILED {
                return (grown as *mut u8, span);
            }
            // A span made of two mappings (merged freed ranges) cannot be remapped as one.
            self.keep(at, span);
        }
        // SAFETY: an anonymous private mapping at an address of the system's choosing.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            (std::ptr::null_mut(), 0)
        } else {
            (at as *mut u8, 0)
        }
    }

    /// Keeps a block of [`Pool::alloc`] for reuse.
    ///
    /// # Safety
    /// `block` came from [`Pool::alloc`] or [`Pool::realloc`] with `size` and is not used after
    /// this call.
    pub(super) unsafe fn free(&self, block: *mut u8, size: usize) {
        self.keep(block as usize, pages(size));
    }

    /// The block at `block` (of `size` bytes) resized to `new_size` bytes in place or moved by
    /// the kernel, its contents kept up to the smaller size; null where it cannot be (the block
    /// spans two mappings, made of merged freed ranges, which one remap cannot move; or the
    /// system has no memory left): the block is then unchanged, for the caller to copy.
    ///
    /// # Safety
    /// As for [`Pool::free`]; the block goes back with `new_size` unless null is returned.
    pub(super) unsafe fn realloc(&self, block: *mut u8, size: usize, new_size: usize) -> *mut u8 {
        let (len, new_len) = (pages(size), pages(new_size));
        if new_len <= len {
            // The tail is kept like any freed block.
            if new_len < len {
                self.keep(block as usize + new_len, len - new_len);
            }
            return block;
        }
        // SAFETY: the block is a mapped range of `len` bytes; the kernel moves it where it must.
        let moved = unsafe { libc::mremap(block as *mut libc::c_void, len, new_len, libc::MREMAP_MAYMOVE) };
        if moved == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            moved as *mut u8
        }
    }

    /// The prefix of the smallest kept span of at least `len` bytes, taken out of it.
    fn take(&self, len: usize) -> Option<usize> {
        let mut kept = self.kept();
        let kept = &mut *kept;
        let best = (0..kept.len).filter(|&k| kept.spans[k].1 >= len).min_by_key(|&k| kept.spans[k].1)?;
        let (at, span) = kept.spans[best];
        if span == len {
            kept.remove(best);
        } else {
            kept.spans[best] = (at + len, span - len);
            kept.bytes -= len;
        }
        Some(at)
    }

    /// The largest kept span, taken out.
    fn take_largest(&self) -> Option<(usize, usize)> {
        let mut kept = self.kept();
        let largest = (0..kept.len).max_by_key(|&k| kept.spans[k].1)?;
        let span = kept.spans[largest];
        kept.remove(largest);
        Some(span)
    }

    /// Keeps `len` bytes at `at`, merged with the kept spans next to them (kept spans are never
    /// adjacent, so only the one ending at `at` and the one starting at its end can be); returns
    /// the oldest spans to the system past [`RETAIN`] bytes or [`SPANS`] spans.
    fn keep(&self, mut at: usize, mut len: usize) {
        let mut kept = self.kept();
        let kept = &mut *kept;
        let mut k = 0;
        while k < kept.len {
            let (a, l) = kept.spans[k];
            if a + l == at || at + len == a {
                at = at.min(a);
                len += l;
                kept.remove(k);
            } else {
                k += 1;
            }
        }
        if len > RETAIN {
            // Only the first `RETAIN` bytes can be kept.
            unmap(at + RETAIN, len - RETAIN);
            len = RETAIN;
        }
        // Room is made from the oldest spans, from their ends: what stays of a span is still
        // one block for the next large allocation.
        while kept.len == SPANS || kept.bytes + len > RETAIN {
            let (a, l) = kept.spans[0];
            let excess = if kept.len == SPANS { l } else { kept.bytes + len - RETAIN };
            if excess >= l {
                kept.remove(0);
                unmap(a, l);
            } else {
                kept.spans[0].1 = l - excess;
                kept.bytes -= excess;
                unmap(a + l - excess, excess);
            }
        }
        kept.spans[kept.len] = (at, len);
        kept.len += 1;
        kept.bytes += len;
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The system's page size (read once).
pub(super) fn page() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: `sysconf` reads a constant of the system.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(4096);
            PAGE.store(page, Ordering::Relaxed);
            page
        }
        page => page,
    }
}

/// `size` rounded up to whole pages.
fn pages(size: usize) -> usize {
    size.next_multiple_of(page())
}

impl Kept {
    fn remove(&mut self, k: usize) {
        self.bytes -= self.spans[k].1;
        self.spans.copy_within(k + 1..self.len, k);
        self.len -= 1;
    }
}

fn unmap(at: usize, len: usize) {
    // SAFETY: the range is a kept span: mapped by this module and used by nobody.
    unsafe { libc::munmap(at as *mut libc::c_void, len) };
}
