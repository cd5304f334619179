//! Host ↔ device transfers without the driver: a host tensor's bytes and a host tensor from
//! bytes (what uploads, downloads and fetches copy), and the bookkeeping of the asynchronous
//! offload copies — a queue of pinned host blocks waiting for the copy that last touched them,
//! and a cache of idle pinned blocks.
//!
//! Both are generic over the completion signal and the block, so their logic is unit-tested here
//! with stand-ins; [`crate::device::Device`] instantiates them with CUDA events and pinned
//! pointers.

use remat_core::{DType, HostData, HostTensor};
use std::collections::VecDeque;

/// Something that completes on the device: a CUDA event in the backend, a flag in the tests.
pub(crate) trait Completion {
    /// Whether the work it stands for has finished (never blocks).
    fn done(&self) -> Result<bool, String>;
    /// Blocks until the work has finished.
    fn wait(&self) -> Result<(), String>;
}

/// Blocks that a copy may still be reading or writing, each with the signal of the last copy
/// that touches it. A block leaves the queue only once its signal has completed; completions
/// come from two streams (copies out and copies back), so they are not FIFO and every entry is
/// checked.
#[derive(Debug)]
pub(crate) struct ReleaseQueue<E, T> {
    items: VecDeque<(Option<E>, T)>,
}

impl<E: Completion, T> ReleaseQueue<E, T> {
    pub(crate) fn new() -> Self {
        ReleaseQueue { items: VecDeque::new() }
    }

    /// Queues `item` until `signal` completes (`None`: nothing pending, released at the next
    /// [`ReleaseQueue::take_done`]).
    pub(crate) fn push(&mut self, signal: Option<E>, item: T) {
        self.items.push_back((signal, item));
    }

    /// Number of blocks still queued.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Removes and returns the blocks whose copies have finished, oldest first. On an error of
    /// the signal the blocks stay queued (a later [`ReleaseQueue::take_all`] waits for them).
    pub(crate) fn take_done(&mut self) -> Result<Vec<T>, String> {
        let mut done = Vec::new();
        let mut keep = VecDeque::with_capacity(self.items.len());
        let mut first_err = None;
        for (signal, item) in self.items.drain(..) {
            let finished = match &signal {
                None => Ok(true),
                Some(s) => s.done(),
            };
            match finished {
                Ok(true) => done.push(item),
                Ok(false) => keep.push_back((signal, item)),
                Err(e) => {
                    first_err.get_or_insert(e);
                    keep.push_back((signal, item));
                }
            }
        }
        self.items = keep;
        match first_err {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }

    /// Waits for every queued copy and returns all blocks. A block whose signal fails is returned
    /// too (the caller has synchronised the streams, or is tearing down) and the first error is
    /// reported beside them.
    pub(crate) fn take_all(&mut self) -> (Vec<T>, Option<String>) {
        let mut first_err = None;
        let items = self
            .items
            .drain(..)
            .map(|(signal, item)| {
                if let Some(Err(e)) = signal.as_ref().map(Completion::wait) {
                    first_err.get_or_insert(e);
                }
                item
            })
            .collect();
        (items, first_err)
    }
}

/// Idle pinned host blocks by exact size, so that a training loop's offloads, which ask for the
/// same sizes every step, reuse page-locked memory instead of pinning pages on the hot path
/// (`cuMemHostAlloc` costs milliseconds per large block). The cache holds at most `limit` bytes;
/// putting a block beyond it evicts the oldest blocks, which the caller frees.
#[derive(Debug)]
pub(crate) struct HostCache<T> {
    blocks: VecDeque<(usize, T)>,
    bytes: usize,
}

impl<T> HostCache<T> {
    pub(crate) fn new() -> Self {
        HostCache { blocks: VecDeque::new(), bytes: 0 }
    }

    /// Bytes of the idle blocks.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// An idle block of exactly `bytes` bytes, the most recently put first.
    pub(crate) fn take(&mut self, bytes: usize) -> Option<T> {
        let i = self.blocks.iter().rposition(|(b, _)| *b == bytes)?;
        let (b, block) = self.blocks.remove(i).expect("index found above");
        self.bytes -= b;
        Some(block)
    }

    /// Keeps `block` of `bytes` bytes for reuse and returns the blocks evicted to stay within
    /// `limit` bytes (possibly `block` itself, when it alone exceeds the limit).
    pub(crate) fn put(&mut self, bytes: usize, block: T, limit: usize) -> Vec<T> {
        self.blocks.push_back((bytes, block));
        self.bytes += bytes;
        let mut evicted = Vec::new();
        while self.bytes > limit {
            let (b, old) = self.blocks.pop_front().expect("bytes > 0 means a block is cached");
            self.bytes -= b;
            evicted.push(old);
        }
        evicted
    }

    /// Empties the cache, returning every block.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.bytes = 0;
        self.blocks.drain(..).map(|(_, b)| b).collect()
    }
}

/// The raw little-endian bytes of a host tensor's elements.
pub(crate) fn host_bytes(t: &HostTensor) -> &[u8] {
    fn raw<T>(v: &[T]) -> &[u8] {
        // SAFETY: f32/f64/i64/i32/u8/bf16/f16 are plain old data without padding; the byte slice
        // covers exactly the elements and borrows them.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
    }
    match t.data() {
        HostData::F32(v) => raw(v),
        HostData::F64(v) => raw(v),
        HostData::BF16(v) => raw(v),
        HostData::F16(v) => raw(v),
        HostData::F8E4M3(v) | HostData::F8E5M2(v) => raw(v),
        HostData::I64(v) => raw(v),
        HostData::I32(v) => raw(v),
        HostData::Bool(v) => raw(v),
    }
}

/// A host tensor from the raw little-endian bytes of its elements (a download).
pub(crate) fn host_from_bytes(shape: &[usize], dtype: DType, bytes: &[u8]) -> remat_core::Result<HostTensor> {
    fn elems<T: Copy, const N: usize>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        b.chunks_exact(N).map(|c| f(c.try_into().expect("chunk of N bytes"))).collect()
    }
    let data = match dtype {
        DType::F32 => HostData::F32(elems(bytes, f32::from_ne_bytes)),
        DType::F64 => HostData::F64(elems(bytes, f64::from_ne_bytes)),
        DType::BF16 => HostData::BF16(elems(bytes, |b| half::bf16::from_bits(u16::from_ne_bytes(b)))),
        DType::F16 => HostData::F16(elems(bytes, |b| half::f16::from_bits(u16::from_ne_bytes(b)))),
        DType::F8E4M3 => HostData::F8E4M3(bytes.to_vec()),
        DType::F8E5M2 => HostData::F8E5M2(bytes.to_vec()),
        DType::I64 => HostData::I64(elems(bytes, i64::from_ne_bytes)),
        DType::I32 => HostData::I32(elems(bytes, i32::from_ne_bytes)),
        DType::Bool => HostData::Bool(bytes.iter().map(|&b| b != 0).collect()),
    };
    HostTensor::new(shape.to_vec(), data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A signal the test completes by hand; `wait` completes it (as a synchronising wait would).
    #[derive(Clone)]
    struct Flag(Rc<Cell<u8>>);

    const PENDING: u8 = 0;
    const DONE: u8 = 1;
    const BROKEN: u8 = 2;

    impl Flag {
        fn new() -> Flag {
            Flag(Rc::new(Cell::new(PENDING)))
        }
        fn set(&self, v: u8) {
            self.0.set(v)
        }
    }

    impl Completion for Flag {
        fn done(&self) -> Result<bool, String> {
            match self.0.get() {
                PENDING => Ok(false),
                DONE => Ok(true),
                _ => Err("broken".into()),
            }
        }
        fn wait(&self) -> Result<(), String> {
            if self.0.get() == BROKEN {
                return Err("broken".into());
            }
            self.0.set(DONE);
            Ok(())
        }
    }

    #[test]
    fn a_block_is_released_only_after_its_copy_completes_in_any_order() {
        let (a, b) = (Flag::new(), Flag::new());
        let mut q = ReleaseQueue::new();
        q.push(Some(a.clone()), "a");
        q.push(Some(b.clone()), "b");
        q.push(None, "idle");
        assert_eq!(q.take_done().unwrap(), vec!["idle"], "nothing pending goes at once");
        b.set(DONE);
        assert_eq!(q.take_done().unwrap(), vec!["b"], "a later copy may finish first");
        assert_eq!(q.len(), 1);
        assert!(q.take_done().unwrap().is_empty());
        a.set(DONE);
        assert_eq!(q.take_done().unwrap(), vec!["a"]);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn take_all_waits_for_every_copy_and_reports_a_failed_one() {
        let (a, b) = (Flag::new(), Flag::new());
        let mut q = ReleaseQueue::new();
        q.push(Some(a.clone()), 1);
        q.push(Some(b.clone()), 2);
        b.set(BROKEN);
        let (items, err) = q.take_all();
        assert_eq!(items, vec![1, 2]);
        assert_eq!(err.as_deref(), Some("broken"));
        assert_eq!(a.done(), Ok(true), "take_all waited for the pending copy");
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_failing_signal_keeps_its_block_queued() {
        let (a, b) = (Flag::new(), Flag::new());
        let mut q = ReleaseQueue::new();
        q.push(Some(a.clone()), "a");
        q.push(Some(b.clone()), "b");
        a.set(BROKEN);
        b.set(DONE);
        assert_eq!(q.take_done().unwrap_err(), "broken");
        assert_eq!(q.len(), 1, "the finished block left, the broken one stays");
        let (items, _) = q.take_all();
        assert_eq!(items, vec!["a"]);
    }

    #[test]
    fn the_cache_reuses_exact_sizes_and_stays_within_its_limit() {
        let mut c = HostCache::new();
        assert!(c.put(100, "a", 1000).is_empty());
        assert!(c.put(200, "b", 1000).is_empty());
        assert!(c.put(100, "c", 1000).is_empty());
        assert_eq!(c.bytes(), 400);
        assert_eq!(c.take(100), Some("c"), "the most recent block of that size");
        assert_eq!(c.take(150), None, "sizes match exactly");
        assert_eq!(c.bytes(), 300);
        assert_eq!(c.put(800, "d", 1000), vec!["a"], "the oldest block is evicted");
        assert_eq!(c.bytes(), 1000);
        assert_eq!(c.put(2000, "e", 1000), vec!["b", "d", "e"], "a block over the limit is not kept");
        assert_eq!(c.bytes(), 0);
        assert!(c.put(10, "f", 1000).is_empty());
        assert_eq!(c.drain(), vec!["f"]);
        assert_eq!(c.bytes(), 0);
    }
}
