//! The CPU backend: the reference implementation of every op.
//!
//! Values are stored in their own dtype (2 bytes for bf16/f16, 1 for fp8) and computed in f32,
//! or in f64 when the result is f64. Matrix products go through `matrixmultiply` on all cores.
//! Every buffer is metered: [`Backend::memory`] reports exactly the bytes of live buffers. The
//! host tier for offloaded values is a second pool with its own meter ([`Backend::host_memory`]);
//! an offload copies the tensor into it synchronously, a fetch copies it back.

mod guard;
mod heap;
pub(crate) mod kernels;
pub(crate) mod threads;

pub use heap::{keep_freed_memory, release_freed_memory};

use super::{Backend, KernelCall, MemoryStats, TransferStats};
use crate::error::Result;
use crate::host::HostTensor;
use crate::update::UpdateCall;
use std::cell::Cell;
use std::rc::Rc;

/// Live and peak byte counters shared by a backend and its buffers.
#[derive(Debug, Default)]
struct Meter {
    live: Cell<usize>,
    peak: Cell<usize>,
}

impl Meter {
    fn add(&self, bytes: usize) {
        let live = self.live.get() + bytes;
        self.live.set(live);
        self.peak.set(self.peak.get().max(live));
    }
}

/// A tensor held by the CPU backend; its bytes count as live until it is dropped.
#[derive(Debug)]
pub struct CpuBuffer {
    tensor: HostTensor,
    meter: Rc<Meter>,
}

impl CpuBuffer {
    /// The tensor inside.
    pub fn tensor(&self) -> &HostTensor {
        &self.tensor
    }

    /// The tensor inside, its bytes leaving the meter.
    fn into_tensor(mut self) -> HostTensor {
        take_metered(&mut self.tensor, &self.meter)
    }
}

/// Moves `tensor` out, leaving an empty one, and takes its bytes off `meter` (the holder's `Drop`
/// then takes off nothing).
fn take_metered(tensor: &mut HostTensor, meter: &Meter) -> HostTensor {
    meter.live.set(meter.live.get() - tensor.bytes());
    std::mem::replace(tensor, HostTensor::empty())
}

impl Drop for CpuBuffer {
    fn drop(&mut self) {
        self.meter.live.set(self.meter.live.get() - self.tensor.bytes());
    }
}

/// An offloaded tensor in the CPU backend's host pool; its bytes count until it is dropped.
#[derive(Debug)]
pub struct CpuHostBuffer {
    tensor: HostTensor,
    meter: Rc<Meter>,
}

impl CpuHostBuffer {
    /// The tensor inside, its bytes leaving the host meter.
    fn into_tensor(mut self) -> HostTensor {
        take_metered(&mut self.tensor, &self.meter)
    }
}

impl Drop for CpuHostBuffer {
    fn drop(&mut self) {
        self.meter.live.set(self.meter.live.get() - self.tensor.bytes());
    }
}

/// The CPU backend.
///
/// Its tensors come from the process's global allocator. With glibc's, a training step faults
/// its tensors' pages in afresh unless freed memory is kept: [`keep_freed_memory`] (or
/// `REMAT_KEEP_FREED_MEMORY=1`, read by every new backend) asks for that, and
/// [`release_freed_memory`] gives it back.
#[derive(Debug)]
pub struct CpuBackend {
    meter: Rc<Meter>,
    host: Rc<Meter>,
    /// The kernels' threads: a rayon pool of this backend's own.
    pool: threads::Pool,
    /// Bytes copied in and out ([`Backend::transfers`]).
    transfers: TransferStats,
}

impl Default for CpuBackend {
    fn default() -> Self {
        heap::from_environment();
        Self::with_pool(threads::default_threads())
    }
}

impl CpuBackend {
    /// A CPU backend with nothing allocated, its kernels on the default number of threads
    /// ([`CpuBackend::default_threads`]). The backend owns those threads (started at its first
    /// kernel, ended when it is dropped): keep one for a training loop rather than one a step.
    pub fn new() -> Self {
        Self::default()
    }

    /// A CPU backend whose kernels use at most `threads` threads (a pool of its own; 0 is taken
    /// as 1). Results are the same bits for every count: kernels split work only where each
    /// element is computed the same way whatever the split.
    pub fn with_threads(threads: usize) -> Self {
        heap::from_environment();
        Self::with_pool(threads)
    }

    fn with_pool(threads: usize) -> Self {
        CpuBackend {
            meter: Rc::default(),
            host: Rc::default(),
            pool: threads::Pool::new(threads),
            transfers: TransferStats::default(),
        }
    }

    /// The threads this backend's kernels may use: a pool of its own (started at its first
    /// kernel), so backends on different threads each run on their own count.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The thread count of [`CpuBackend::new`]: `REMAT_NUM_THREADS` when set,
    /// else the CPUs this process may run on (so `taskset` limits it), capped by
    /// `MATMUL_NUM_THREADS` when that is set. Kernels split their work into many more chunks
    /// than threads, which the threads take as they get free, so a thread that shares its core
    /// with another process takes fewer.
    pub fn default_threads() -> usize {
        threads::default_threads()
    }

    fn hold(&self, tensor: HostTensor) -> CpuBuffer {
        self.meter.add(tensor.bytes());
        CpuBuffer { tensor, meter: self.meter.clone() }
    }
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;
    type Host = CpuHostBuffer;

    fn name(&self) -> String {
        "cpu".to_string()
    }

    fn upload(&mut self, tensor: &HostTensor) -> Result<CpuBuffer> {
        self.transfers.to_device_bytes += tensor.bytes() as u64;
        Ok(self.hold(tensor.clone()))
    }

    fn download(&mut self, buffer: &CpuBuffer) -> Result<HostTensor> {
        self.transfers.to_host_bytes += buffer.tensor.bytes() as u64;
        Ok(buffer.tensor.clone())
    }

    /// The same tensor under the call's shape (the meter is unchanged: same bytes).
    fn reshape_owned(&mut self, call: &KernelCall<'_>, mut input: CpuBuffer) -> Result<CpuBuffer> {
        input.tensor.reshape_in_place(call.out_shape).map_err(|e| e.at_node(call.node, call.op.name()))?;
        Ok(input)
    }

    /// The buffer's tensor itself: it is host memory already.
    fn move_to_host(&mut self, buffer: CpuBuffer) -> Result<HostTensor> {
        self.transfers.to_host_bytes += buffer.tensor.bytes() as u64;
        Ok(buffer.into_tensor())
    }

    fn execute(&mut self, call: &KernelCall<'_>, inputs: &[&CpuBuffer]) -> Result<CpuBuffer> {
        let tensors: Vec<&HostTensor> = inputs.iter().map(|b| &b.tensor).collect();
        let out = self.pool.enter(|| kernels::execute(call, &tensors))?;
        if matches!(call.op, crate::op::Op::ConstantData { .. }) {
            // The graph's host data, copied in as an upload would be.
            self.transfers.to_device_bytes += out.bytes() as u64;
        }
        debug_assert_eq!(out.shape(), call.out_shape, "{} produced the wrong shape", call.op.name());
        debug_assert_eq!(out.dtype(), call.out_dtype, "{} produced the wrong dtype", call.op.name());
        Ok(self.hold(out))
    }

    fn memory(&self) -> MemoryStats {
        MemoryStats { live_bytes: self.meter.live.get(), peak_bytes: self.meter.peak.get() }
    }

    fn reset_peak(&mut self) {
        self.meter.peak.set(self.meter.live.get());
        self.host.peak.set(self.host.live.get());
    }

    fn offload(&mut self, buffer: &CpuBuffer) -> Result<CpuHostBuffer> {
        let tensor = buffer.tensor.clone();
        self.transfers.to_host_bytes += tensor.bytes() as u64;
        self.host.add(tensor.bytes());
        Ok(CpuHostBuffer { tensor, meter: self.host.clone() })
    }

    fn fetch(&mut self, host: CpuHostBuffer) -> Result<CpuBuffer> {
        // The host copy leaves the host meter as it is dropped, and its tensor moves to the device
        // meter (on the CPU both tiers are host memory: nothing is copied).
        let tensor = host.into_tensor();
        self.transfers.to_device_bytes += tensor.bytes() as u64;
        Ok(self.hold(tensor))
    }

    fn host_memory(&self) -> MemoryStats {
        MemoryStats { live_bytes: self.host.live.get(), peak_bytes: self.host.peak.get() }
    }

    fn transfers(&self) -> TransferStats {
        self.transfers
    }

    fn host_view<'a>(&self, buffer: &'a CpuBuffer) -> Option<&'a HostTensor> {
        Some(&buffer.tensor)
    }

    /// In place: the meter does not move.
    fn write(&mut self, buffer: &mut CpuBuffer, values: &HostTensor) -> Result<()> {
        if values.shape() != buffer.tensor.shape() || values.dtype() != buffer.tensor.dtype() {
            return Err(crate::Error::config(
                "values",
                format!(
                    "writing {} {} into a buffer of {} {}",
                    crate::fmt_shape(values.shape()),
                    values.dtype(),
                    crate::fmt_shape(buffer.tensor.shape()),
                    buffer.tensor.dtype()
                ),
            ));
        }
        self.transfers.to_device_bytes += values.bytes() as u64;
        buffer.tensor.set_data(values.data().clone())
    }

    fn sum_squares(&mut self, tensors: &[&CpuBuffer]) -> Result<CpuBuffer> {
        let tensors: Vec<&HostTensor> = tensors.iter().map(|b| &b.tensor).collect();
        let sum = crate::update::host_sum_squares(&tensors)?;
        Ok(self.hold(HostTensor::f64(Vec::new(), vec![sum])?))
    }

    /// In place: the buffers keep their sizes, so the meter does not move.
    fn update(
        &mut self,
        call: &UpdateCall<'_>,
        param: &mut CpuBuffer,
        grad: &CpuBuffer,
        state: &mut [CpuBuffer],
        sum_squares: Option<&CpuBuffer>,
    ) -> Result<()> {
        let sum = sum_squares.map(|s| s.tensor.scalar()).transpose()?;
        let mut tensors: Vec<&mut HostTensor> = state.iter_mut().map(|s| &mut s.tensor).collect();
        self.pool.enter(|| kernels::optim::update(call, &mut param.tensor, &grad.tensor, &mut tensors, sum))
    }
}
