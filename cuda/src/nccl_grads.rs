//! [`NcclGradients`]: the gradients of a data-parallel step averaged over the ranks on the GPUs,
//! where the backward leaves them, by NCCL on the backend's own compute stream.
//!
//! One stream: NCCL's collectives are queued between the backend's kernels, so they are ordered
//! with the backward that wrote the gradients and the update that reads them without events, and
//! the host never waits. Sums are rank-order sums, as every `remat_dist` engine's: each bucket is
//! all-gathered and every rank adds the rows in rank order (NCCL's own ring sum adds in an order
//! that depends on the topology), so the bits are those of the host path
//! (`DataParallel::train_step`).

use crate::backend::{CudaBackend, CudaBuffer};
use crate::device::{Device, Meter};
use crate::nccl::{self, NcclStatus};
use crate::ops::buckets;
use cudarc::driver::result as driver;
use cudarc::nccl::result::{self as nccl_result, NcclError};
use cudarc::nccl::safe::Id;
use cudarc::nccl::sys as nccl_sys;
use remat_core::{CollectiveKind, DType, Error, GradientReducer, Gradients, Result};
use remat_dist::{Collective, StepComm};
use std::ffi::{c_void, CStr};
use std::rc::Rc;

/// Bytes of one bucket value (f32).
const F32: usize = 4;

/// A [`GradientReducer`] for the CUDA backend that averages the gradients over the ranks on the
/// device, for `remat_dist::DataParallel::train_step_with`: nothing crosses to the host.
///
/// Each gradient is packed into an f32 bucket (f32, bf16 and f16 gradients, the dtypes the host
/// path reduces) the moment the backward hands it over; a bucket that holds at least
/// `bucket_bytes` is all-gathered from every rank at once, and its rank-order mean computed into
/// it, while the backward goes on queueing kernels. The buckets follow `DataParallel`'s rule, so
/// [`remat_dist::CommPlan`] (`DataParallel::plan_comm` with the same bucket size) predicts them.
/// [`GradientReducer::finish`] sends the last bucket and writes each mean into its gradient, in
/// the gradient's dtype. The result is the host path's bit for bit: the f32 sum in rank order,
/// one f32 division by the world size, one rounding to nearest even to the dtype.
///
/// **Memory.** Buckets are device allocations from the backend's pool, not metered (like its
/// scratch: [`CudaBackend::pool_peak`] sees them, `Backend::memory` does not). During a step it
/// holds the f32 mean of every bucket sent so far, the bucket being filled, and while a bucket is
/// sent its gather of `world` rows: at most `4 · (V + world · B) + bucket_bytes` bytes, `V` the
/// values of all gradients and `B` those of the largest bucket (under `bucket_bytes / 4` plus the
/// largest gradient's; the last `bucket_bytes` is a bucket's room left unfilled).
/// [`NcclGradients::stats`] gives the step's measured high-water mark. Everything is freed
/// (stream-ordered) by the end of `finish`.
///
/// Every rank must reduce the same buckets: the same model and `bucket_bytes` on each. NCCL
/// cannot tell; `DataParallel::agree` compares [`remat_dist::RankConfig`]'s bucket layout before
/// the first step when the `DataParallel` has the same bucket size (`with_bucket_bytes`). A failed step leaves the communicator out of step with the other ranks: the
/// reducer then refuses every call; make a new one on every rank.
pub struct NcclGradients {
    /// Dropped before `dev`: aborting needs the device's context.
    comm: Comm,
    dev: Rc<Device>,
    rank: usize,
    world: usize,
    /// Values a bucket holds before it is sent (`DataParallel`'s rule: `bucket_bytes / 4`, at
    /// least one).
    capacity: usize,
    filling: Option<Bucket>,
    /// Buckets sent this step, each holding its mean.
    reduced: Vec<Bucket>,
    /// Which parameters this step has packed.
    added: Vec<bool>,
    /// Bytes of this reducer's device allocations, live and at most since the step began.
    meter: Rc<Meter>,
    step: StepComm,
    last: StepComm,
    sent: u64,
    /// A call failed mid-step: the buckets no longer match the other ranks'.
    broken: bool,
}

/// An NCCL communicator, aborted on drop.
struct Comm(nccl_sys::ncclComm_t);

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: the communicator is live and used by nothing after this.
        if let Err(e) = unsafe { nccl_result::comm_abort(self.0) } {
            log::error!("aborting the NCCL communicator failed: {:?}", e.0);
        }
    }
}

/// A device allocation of this reducer, returned to the pool (stream-ordered) on drop.
struct Block {
    dev: Rc<Device>,
    meter: Rc<Meter>,
    ptr: u64,
    bytes: usize,
}

impl Drop for Block {
    fn drop(&mut self) {
        self.dev.free_raw(self.ptr);
        self.meter.live.set(self.meter.live.get() - self.bytes);
    }
}

/// An f32 bucket: the gradients packed so far, then (once sent) their means.
struct Bucket {
    block: Block,
    filled: usize,
    entries: Vec<Entry>,
}

/// Where one parameter's gradient sits in a bucket (in values).
struct Entry {
    param: usize,
    offset: usize,
    len: usize,
}

impl NcclGradients {
    /// Joins the NCCL job of `bootstrap`'s ranks (same rank, same world size) on `backend`'s
    /// device, its collectives queued on `backend`'s compute stream; NCCL's id is made by rank 0
    /// and broadcast over `bootstrap`, as [`crate::Nccl::init`] does. Buckets are sent once they
    /// hold `bucket_bytes` of f32 values (at least one gradient each). An error on every rank,
    /// naming what is missing and where, when a rank lacks NCCL or cannot open its communicator.
    pub fn new(backend: &CudaBackend, bootstrap: &mut dyn Collective, bucket_bytes: usize) -> Result<Self> {
        let (rank, world) = (bootstrap.rank(), bootstrap.world_size());
        let dev = backend.device().clone();
        ready_everywhere(bootstrap, nccl::nccl_present().and_then(|()| nccl_ranks(rank, world)))?;
        let id = nccl::share_id(bootstrap)?;
        let comm = ready_everywhere(bootstrap, open_comm(&dev, rank, world, id))?;
        Ok(NcclGradients {
            comm,
            dev,
            rank,
            world,
            capacity: (bucket_bytes.max(F32) / F32).max(1),
            filling: None,
            reduced: Vec::new(),
            added: Vec::new(),
            meter: Rc::new(Meter::default()),
            step: StepComm::default(),
            last: StepComm::default(),
            sent: 0,
            broken: false,
        })
    }

    /// Bytes this rank has sent to the others so far, all steps together (an all-gather of `n`
    /// bytes sends them to each of the `world − 1` others).
    pub fn bytes_sent(&self) -> u64 {
        self.sent
    }

    /// The last finished step's communication: buckets reduced, bytes sent, and the most bytes
    /// of buckets held at once (`buffer_peak_bytes`). The times are 0: the work is queued on the
    /// GPU, and timing it would need the host to wait.
    pub fn stats(&self) -> StepComm {
        self.last
    }

    /// The step's gradient of `param`, packed into the bucket being filled; sends the bucket
    /// when it is full.
    fn add(&mut self, backend: &CudaBackend, param: usize, grad: &CudaBuffer) -> Result<()> {
        self.mark(param)?;
        check_dtype(param, grad.dtype())?;
        backend.ready(grad, &|| format!("the gradient of parameter {param}"))?;
        let len = grad.view().numel();
        self.room(len)?;
        let bucket = self.filling.as_mut().ok_or_else(|| Error::internal("no bucket to fill"))?;
        let offset = bucket.filled;
        buckets::pack(&self.dev, grad.view(), bucket.block.ptr + (offset * F32) as u64)?;
        bucket.entries.push(Entry { param, offset, len });
        bucket.filled += len;
        if bucket.filled >= self.capacity {
            self.flush()?;
        }
        Ok(())
    }

    /// Records that `param` joins this step's buckets; a second time means that a step ended
    /// without [`GradientReducer::finish`] (an error in its backward), whose buckets are stale.
    fn mark(&mut self, param: usize) -> Result<()> {
        if self.added.len() <= param {
            self.added.resize(param + 1, false);
        }
        if std::mem::replace(&mut self.added[param], true) {
            return Err(self.stopped(&format!(
                "parameter {param}'s gradient was handed over twice in one step (an earlier step ended mid-backward)"
            )));
        }
        Ok(())
    }

    /// The bucket being filled, with room for `len` more values: a new one of `capacity` values
    /// (more for a larger gradient), or the current one moved to a larger block when the
    /// gradient that fills it overflows it.
    fn room(&mut self, len: usize) -> Result<()> {
        let filled = self.filling.as_ref().map_or(0, |b| b.filled);
        let needed = filled + len;
        if self.filling.as_ref().is_some_and(|b| b.block.bytes >= needed * F32) {
            return Ok(());
        }
        let block = self.alloc(needed.max(self.capacity) * F32)?;
        let bucket = match self.filling.take() {
            Some(old) => self.moved(old, block)?,
            None => Bucket { block, filled: 0, entries: Vec::new() },
        };
        self.filling = Some(bucket);
        Ok(())
    }

    /// `old`'s values copied into `block` (on the stream; `old` is freed after the copy).
    fn moved(&self, old: Bucket, block: Block) -> Result<Bucket> {
        let bytes = old.filled * F32;
        if bytes > 0 {
            // SAFETY: both blocks are live allocations of this device, `old` holds `bytes` bytes
            // and `block` more; the copy is on the stream their frees are ordered on.
            unsafe { driver::memcpy_dtod_async(block.ptr, old.block.ptr, bytes, self.dev.stream.cu_stream()) }
                .map_err(|e| self.dev.fail(format!("moving a gradient bucket of {bytes} bytes"), e))?;
        }
        Ok(Bucket { block, filled: old.filled, entries: old.entries })
    }

    /// Sends the bucket being filled: all-gathered from every rank, its mean computed in place,
    /// the gather freed. Nothing waits: the stream runs it between the backward's kernels.
    fn flush(&mut self) -> Result<()> {
        let Some(bucket) = self.filling.take() else { return Ok(()) };
        if bucket.filled > 0 {
            let (ptr, n) = (bucket.block.ptr, bucket.filled);
            let gathered = self.alloc(self.world * n * F32)?;
            self.all_gather(ptr, gathered.ptr, n)?;
            buckets::mean(&self.dev, gathered.ptr, n, self.world, ptr)?;
            let sent = (n * F32 * (self.world - 1)) as u64;
            self.step.bytes_sent += sent;
            self.sent += sent;
            self.step.buckets += 1;
        }
        self.reduced.push(bucket);
        Ok(())
    }

    /// `count` f32 values at `send` from every rank into `recv`, rank 0's first, on the stream.
    fn all_gather(&self, send: u64, recv: u64, count: usize) -> Result<()> {
        self.dev.ctx.bind_to_thread().map_err(|e| self.dev.fail("binding the context for NCCL", e))?;
        let stream = self.dev.stream.cu_stream() as nccl_sys::cudaStream_t;
        let f32 = nccl_sys::ncclDataType_t::ncclFloat32;
        // SAFETY: `send` holds `count` f32 and `recv` `world · count`, both live on this device
        // until the stream has run the collective (their frees are queued after it).
        unsafe { nccl_result::all_gather(send as *const c_void, recv as *mut c_void, count, f32, self.comm.0, stream) }
            .map(drop)
            .map_err(|e| nccl_failed(CollectiveKind::Transport, self.rank, "ncclAllGather", e, self.comm.0))
    }

    /// Each mean of each bucket written into its parameter's gradient, the buckets then freed.
    fn write_back(&mut self, backend: &CudaBackend, grads: &mut Gradients<'_, CudaBackend>) -> Result<()> {
        for bucket in std::mem::take(&mut self.reduced) {
            for e in &bucket.entries {
                let grad = grads.get_mut(e.param).ok_or_else(|| no_gradient(e.param))?;
                if grad.view().numel() != e.len || !buckets::reducible(grad.dtype()) {
                    return Err(Error::internal(format!("parameter {}'s gradient changed during the step", e.param)));
                }
                backend.ready_to_overwrite(grad, &|| format!("the gradient of parameter {}", e.param))?;
                buckets::unpack(&self.dev, bucket.block.ptr + (e.offset * F32) as u64, grad.view())?;
            }
        }
        Ok(())
    }

    /// The gradients the backward did not hand over (one shared with another parameter) join,
    /// the last bucket goes, and every mean is written back.
    fn reduce_all(&mut self, backend: &CudaBackend, grads: &mut Gradients<'_, CudaBackend>) -> Result<()> {
        for param in 0..grads.len() {
            if !self.added.get(param).copied().unwrap_or(false) {
                let grad = grads.get(param).ok_or_else(|| no_gradient(param))?;
                self.add(backend, param, grad)?;
            }
        }
        self.flush()?;
        self.write_back(backend, grads)
    }

    /// The step's record kept for [`NcclGradients::stats`], and the next step starts afresh.
    fn end_step(&mut self) {
        self.step.buffer_peak_bytes = self.meter.peak.get();
        self.last = std::mem::take(&mut self.step);
        self.added.clear();
        self.meter.peak.set(self.meter.live.get());
    }

    /// `bytes` of device memory from the pool, counted in the meter.
    fn alloc(&self, bytes: usize) -> Result<Block> {
        let ptr = self.dev.alloc_raw(bytes)?;
        let live = self.meter.live.get() + bytes;
        self.meter.live.set(live);
        self.meter.peak.set(self.meter.peak.get().max(live));
        Ok(Block { dev: self.dev.clone(), meter: self.meter.clone(), ptr, bytes })
    }

    /// Refuses a broken reducer, or a backend other than the one its communicator lives on.
    fn usable(&self, backend: &CudaBackend) -> Result<()> {
        if self.broken {
            return Err(self.stopped("an earlier step failed while its gradients were being reduced"));
        }
        if !Rc::ptr_eq(backend.device(), &self.dev) {
            return Err(Error::config(
                "backend",
                "this NcclGradients was made for another CUDA backend: its communicator lives on that backend's stream",
            ));
        }
        Ok(())
    }

    fn stopped(&self, why: &str) -> Error {
        Error::collective(
            CollectiveKind::Stopped,
            format!(
                "rank {}: {why}; the gradient buckets are out of step with the other ranks' (make a new NcclGradients on every rank)",
                self.rank
            ),
        )
    }

    /// `result`, marking the reducer broken when it is an error: the other ranks' buckets no
    /// longer match this one's.
    fn guard<T>(&mut self, result: Result<T>) -> Result<T> {
        self.broken |= result.is_err();
        result
    }
}

impl GradientReducer<CudaBackend> for NcclGradients {
    fn gradient(&mut self, backend: &mut CudaBackend, param: usize, grad: &CudaBuffer) -> Result<()> {
        self.usable(backend)?;
        let added = self.add(backend, param, grad);
        self.guard(added)
    }

    fn finish(&mut self, backend: &mut CudaBackend, grads: &mut Gradients<'_, CudaBackend>) -> Result<()> {
        self.usable(backend)?;
        let reduced = self.reduce_all(backend, grads);
        self.guard(reduced)?;
        self.end_step();
        Ok(())
    }
}

impl Drop for NcclGradients {
    fn drop(&mut self) {
        self.filling = None;
        self.reduced.clear();
        // Collectives still queued would be cut short by the abort: let them finish, unless a
        // step broke (another rank may never join them).
        if !self.broken {
            if let Err(e) = self.dev.stream.synchronize() {
                log::error!("cuda:{}: waiting for the last gradient buckets failed: {e:?}", self.dev.ordinal);
            }
        }
        if let Err(e) = self.dev.ctx.bind_to_thread() {
            log::error!("cuda:{}: binding the context to abort NCCL failed: {e:?}", self.dev.ordinal);
        }
    }
}

/// `mine` on every rank that is ready and no rank failed; otherwise an error on every rank: this
/// rank's own, or one naming the first rank that failed and why.
fn ready_everywhere<T>(bootstrap: &mut dyn Collective, mine: Result<T>) -> Result<T> {
    let text = mine.as_ref().err().map_or_else(String::new, |e| e.to_string());
    let all = bootstrap.all_gather_varied(text.as_bytes())?;
    let mine = mine?;
    match all.iter().position(|t| !t.is_empty()) {
        None => Ok(mine),
        Some(r) => Err(Error::collective(
            CollectiveKind::Start,
            format!("rank {}: rank {r} cannot start NCCL: {}", bootstrap.rank(), String::from_utf8_lossy(&all[r])),
        )),
    }
}

/// NCCL counts ranks in a C `int`.
fn nccl_ranks(rank: usize, world: usize) -> Result<()> {
    if i32::try_from(world).is_ok() && rank < world {
        Ok(())
    } else {
        Err(Error::collective(CollectiveKind::Start, format!("rank {rank} of {world}: NCCL cannot count these ranks")))
    }
}

/// The communicator of rank `rank` of `world` on `dev` (NCCL takes the device from the context
/// current on this thread).
fn open_comm(dev: &Device, rank: usize, world: usize, id: Id) -> Result<Comm> {
    dev.ctx.bind_to_thread().map_err(|e| {
        nccl::start_failed(format!("rank {rank}: cannot bind GPU {}'s context for NCCL: {e:?}", dev.ordinal), e)
    })?;
    let id = nccl_sys::ncclUniqueId { internal: *id.internal() };
    let mut raw = std::mem::MaybeUninit::uninit();
    // SAFETY: `raw` is a valid out pointer; `rank < world`, both fit an i32 (`nccl_ranks`).
    unsafe { nccl_result::comm_init_rank(raw.as_mut_ptr(), world as i32, id, rank as i32) }
        .map_err(|e| nccl_failed(CollectiveKind::Start, rank, "ncclCommInitRank", e, std::ptr::null_mut()))?;
    // SAFETY: ncclCommInitRank succeeded, so it wrote the communicator.
    Ok(Comm(unsafe { raw.assume_init() }))
}

/// An NCCL failure of `what`, with NCCL's code and its last error message (of `comm`, or of this
/// thread when null).
fn nccl_failed(kind: CollectiveKind, rank: usize, what: &str, e: NcclError, comm: nccl_sys::ncclComm_t) -> Error {
    // SAFETY: NCCL is loaded (a call just returned); `comm` is live or null, which NCCL accepts.
    let last = unsafe { nccl_sys::ncclGetLastError(comm) };
    let detail = if last.is_null() {
        String::new()
    } else {
        // SAFETY: NCCL returns a NUL-terminated string it owns, read at once.
        let text = unsafe { CStr::from_ptr(last) }.to_string_lossy().into_owned();
        if text.is_empty() {
            text
        } else {
            format!(" ({text})")
        }
    };
    Error::Collective {
        kind,
        message: format!("rank {rank}: {what} failed: {:?}{detail}", e.0),
        source: Some(Box::new(NcclStatus(e))),
    }
}

/// Refuses the gradient dtypes the host path does not reduce (the same words as its error).
fn check_dtype(param: usize, dtype: DType) -> Result<()> {
    if buckets::reducible(dtype) {
        Ok(())
    } else {
        Err(Error::config(
            "gradients",
            format!("parameter {param}: data-parallel steps reduce f32, f16 and bf16 gradients; this one is {dtype}"),
        ))
    }
}

fn no_gradient(param: usize) -> Error {
    Error::internal(format!("the step gave no gradient for parameter {param}"))
}
