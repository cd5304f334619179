//! One device: its context, its compute stream and two copy streams, the memory pool with exact
//! byte accounting, pinned host memory for offloaded values, the loaded kernel modules, the
//! cuBLAS handle, and the device-side error flag.
//!
//! Memory comes from the device's default pool, stream-ordered (`cuMemAllocAsync`) on the
//! compute stream, which runs every kernel, with the release threshold at `u64::MAX` so freed
//! blocks stay in the pool. Offload copies run on their own streams, one each way, ordered
//! against the compute stream by events (see [`crate::CudaBackend`]'s `offload` and `fetch`). The meter counts the bytes of live [`crate::CudaBuffer`]s exactly like the CPU
//! backend counts its tensors; scratch space (reduction partials, casts of mixed-dtype inputs)
//! and the cuBLAS workspace ([`CUBLAS_WORKSPACE`], shared with cuBLASLt) come from the same pool
//! but are not metered.

use crate::compile::{self, Target};
use crate::kernels::{Arg, Source};
use crate::probe;
use crate::transfer::{Completion, HostCache, ReleaseQueue};
use cudarc::cublas::sys as cublas_sys;
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use remat_core::{Error, KernelCall, NodeId, Result, CATALOG};
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// Bytes of the cuBLAS workspace, allocated once per backend from the pool and not metered.
pub const CUBLAS_WORKSPACE: usize = 32 << 20;

/// Threads per block of the 1-D kernels.
pub const THREADS: u32 = 256;

/// Live and peak bytes of metered buffers.
#[derive(Debug, Default)]
pub struct Meter {
    pub(crate) live: Cell<usize>,
    pub(crate) peak: Cell<usize>,
}

/// A device and everything loaded on it.
pub struct Device {
    pub(crate) name: String,
    pub(crate) ordinal: usize,
    pub(crate) cc: u32,
    pub(crate) sm_count: u32,
    pub(crate) ctx: Arc<CudaContext>,
    /// The compute stream: every kernel, cuBLAS call, allocation and (unless a copy is pending on
    /// a copy stream) every free.
    pub(crate) stream: Arc<CudaStream>,
    /// Device-to-host copies of offloaded values, and the frees of their device copies.
    pub(crate) d2h: Arc<CudaStream>,
    /// Host-to-device copies of fetched values.
    pub(crate) h2d: Arc<CudaStream>,
    pool: sys::CUmemoryPool,
    pub(crate) meter: Meter,
    /// Live and peak bytes of offloaded values held in host memory, counted from `offload` until
    /// the value is fetched (or its host copy dropped), as on the CPU backend and in the plan.
    pub(crate) host_meter: Meter,
    /// Pinned blocks a copy may still read or write, released once its event completes.
    pinned_pending: RefCell<ReleaseQueue<Rc<CudaEvent>, Pinned>>,
    /// Idle pinned blocks, reused by later offloads of the same size.
    pinned_cache: RefCell<HostCache<Pinned>>,
    /// Bytes of pinned blocks in use now (held by host buffers or pending) and at most: the
    /// cache keeps at most the high-water mark, so pinned memory stays within twice the most
    /// ever in use at once.
    pinned_used: Cell<usize>,
    pinned_high: Cell<usize>,
    modules: RefCell<HashMap<&'static str, Arc<CudaModule>>>,
    functions: RefCell<HashMap<String, CudaFunction>>,
    pub(crate) blas: cublas_sys::cublasHandle_t,
    /// cuBLASLt, created on the first fp8 product (only `scaled_matmul` needs the library).
    blas_lt: OnceCell<cudarc::cublaslt::sys::cublasLtHandle_t>,
    workspace: sys::CUdeviceptr,
    /// 4 × u64 written by kernels that find a bad id or a zero divisor: what they found
    /// (`REPORT_*`), the [`Origin`], position, value.
    pub(crate) flag: sys::CUdeviceptr,
}

/// `REPORT_BAD_ID` in the prelude: an id out of range.
const REPORT_BAD_ID: u64 = 1;
/// `REPORT_DIV_ZERO` in the prelude: an integer division by zero.
const REPORT_DIV_ZERO: u64 = 2;

/// Who a kernel's device-side report names: the node and its op kind, packed into the `u64 node`
/// argument of every kernel that reports (`node | kind << 32`) and unpacked by
/// [`Device::sync_and_check`], which runs long after the op's call is gone.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin(u64);

impl Origin {
    /// The node of `call` and its op.
    pub(crate) fn of(call: &KernelCall<'_>) -> Origin {
        Origin(u64::from(call.node.raw()) | ((call.op.kind() as u64) << 32))
    }

    /// The kernel argument.
    pub(crate) fn arg(self) -> Arg {
        Arg::U64(self.0)
    }

    /// The node and its op's name.
    fn unpack(self) -> (NodeId, &'static str) {
        let op = CATALOG.get((self.0 >> 32) as usize).map_or("unknown op", |i| i.name);
        (NodeId::new(self.0 as u32), op)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("ordinal", &self.ordinal)
            .field("cc", &self.cc)
            .finish()
    }
}

/// An error of the backend on device `ordinal`.
pub(crate) fn backend_err(ordinal: usize, message: impl Into<String>) -> Error {
    Error::Backend { backend: format!("cuda:{ordinal}"), message: message.into(), source: None }
}

/// An error of the backend on device `ordinal` caused by a driver or library error, which is
/// kept as the source (and shown in the message).
pub(crate) fn driver_err<E>(ordinal: usize, what: impl Into<String>, source: E) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    let message = format!("{}: {source:?}", what.into());
    Error::Backend { backend: format!("cuda:{ordinal}"), message, source: Some(Box::new(source)) }
}

impl Device {
    /// Opens device `ordinal`: context, the compute stream and the two copy streams (cudarc's
    /// per-slice event tracking off: this backend orders the streams with its own events), pool,
    /// cuBLAS handle and workspace, error flag.
    pub fn open(ordinal: usize) -> Result<Device> {
        let err = |m: String| backend_err(ordinal, m);
        probe::usable(ordinal).map_err(err)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| err(format!("cannot create a context: {e:?}")))?;
        // SAFETY: this backend allocates no `CudaSlice`; its raw buffers are ordered across the
        // compute and copy streams by the events of `CudaBackend::offload`/`fetch`, so cudarc's
        // per-slice events are not needed.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| err(format!("cannot create a stream: {e:?}")))?;
        let d2h = ctx.new_stream().map_err(|e| err(format!("cannot create the device-to-host stream: {e:?}")))?;
        let h2d = ctx.new_stream().map_err(|e| err(format!("cannot create the host-to-device stream: {e:?}")))?;
        let (major, minor) = ctx.compute_capability().map_err(|e| err(format!("compute capability: {e:?}")))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| err(format!("multiprocessor count: {e:?}")))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        if !ctx.has_async_alloc() {
            return Err(err(format!("{name} does not support stream-ordered memory pools")));
        }
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: the context is current (CudaContext::new binds it); `pool` is a valid out pointer.
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
            .result()
            .map_err(|e| err(format!("default memory pool: {e:?}")))?;
        let mut threshold = u64::MAX;
        // SAFETY: the release threshold attribute takes a u64.
        unsafe {
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut _,
            )
        }
        .map_err(|e| err(format!("pool release threshold: {e:?}")))?;
        let blas = cudarc::cublas::result::create_handle().map_err(|e| err(format!("cuBLAS handle: {e:?}")))?;
        let mut dev = Device {
            name,
            ordinal,
            cc: (major * 10 + minor) as u32,
            sm_count: sm_count.max(1) as u32,
            ctx,
            stream,
            d2h,
            h2d,
            pool,
            meter: Meter::default(),
            host_meter: Meter::default(),
            pinned_pending: RefCell::new(ReleaseQueue::new()),
            pinned_cache: RefCell::new(HostCache::new()),
            pinned_used: Cell::new(0),
            pinned_high: Cell::new(0),
            modules: RefCell::new(HashMap::new()),
            functions: RefCell::new(HashMap::new()),
            blas,
            blas_lt: OnceCell::new(),
            workspace: 0,
            flag: 0,
        };
        // SAFETY: the handle is live; the stream belongs to this context.
        unsafe { cudarc::cublas::result::set_stream(dev.blas, dev.stream.cu_stream() as _) }
            .map_err(|e| err(format!("cuBLAS stream: {e:?}")))?;
        // bf16/f16 products accumulate in f32 and round once, as on the CPU: no split-K partial
        // sums rounded to the output type (cuBLAS's default allows them). TF32 stays off.
        // SAFETY: the handle is live.
        unsafe {
            cublas_sys::cublasSetMathMode(
                dev.blas,
                cublas_sys::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
            )
        }
        .result()
        .map_err(|e| err(format!("cuBLAS math mode: {e:?}")))?;
        dev.workspace = dev.alloc_raw(CUBLAS_WORKSPACE)?;
        // SAFETY: the workspace is CUBLAS_WORKSPACE bytes of device memory owned by `dev`, used
        // only on the handle's stream, and freed after the handle is destroyed.
        unsafe { cublas_sys::cublasSetWorkspace_v2(dev.blas, dev.workspace as *mut _, CUBLAS_WORKSPACE) }
            .result()
            .map_err(|e| err(format!("cuBLAS workspace: {e:?}")))?;
        dev.flag = dev.alloc_raw(32)?;
        // SAFETY: `flag` holds 32 bytes allocated above on this stream.
        unsafe { result::memset_d8_async(dev.flag, 0, 32, dev.stream.cu_stream()) }
            .map_err(|e| err(format!("memset: {e:?}")))?;
        Ok(dev)
    }

    pub(crate) fn err(&self, message: impl Into<String>) -> Error {
        backend_err(self.ordinal, message)
    }

    /// [`Device::err`] for a driver or library error, kept as the source.
    pub(crate) fn fail<E: std::error::Error + Send + Sync + 'static>(
        &self,
        what: impl Into<String>,
        source: E,
    ) -> Error {
        driver_err(self.ordinal, what, source)
    }

    /// The cuBLASLt handle, created on first use; an error when `libcublasLt` is missing.
    pub(crate) fn cublaslt(&self) -> Result<cudarc::cublaslt::sys::cublasLtHandle_t> {
        if let Some(h) = self.blas_lt.get() {
            return Ok(*h);
        }
        probe::cublaslt().map_err(|m| self.err(m))?;
        let h = cudarc::cublaslt::result::create_handle().map_err(|e| self.fail("cuBLASLt handle", e))?;
        Ok(*self.blas_lt.get_or_init(|| h))
    }

    /// The workspace shared by cuBLAS and cuBLASLt ([`CUBLAS_WORKSPACE`] bytes): both run on the
    /// one stream, so they never use it at the same time.
    pub(crate) fn workspace_ptr(&self) -> sys::CUdeviceptr {
        self.workspace
    }

    /// Stream-ordered allocation from the pool (not metered). 0 bytes give a null pointer. When
    /// the pool cannot grow, its cached blocks are returned to the driver and the request is
    /// retried once; failing that, [`Error::OutOfMemory`] gives the requested and the free bytes
    /// (the executor adds the plan's predicted peak).
    pub(crate) fn alloc_raw(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        if bytes == 0 {
            return Ok(0);
        }
        let stream = self.stream.cu_stream();
        // SAFETY: the stream is live; the memory is only used on it.
        if let Ok(p) = unsafe { result::malloc_async(stream, bytes) } {
            return Ok(p);
        }
        // SAFETY: synchronising the streams and trimming the pool only release unused blocks
        // (the copy streams hold the frees of offloaded values' device copies).
        unsafe {
            let _ = result::stream::synchronize(stream);
            let _ = result::stream::synchronize(self.d2h.cu_stream());
            let _ = result::stream::synchronize(self.h2d.cu_stream());
            let _ = sys::cuMemPoolTrimTo(self.pool, 0);
        }
        // SAFETY: as above.
        let e = match unsafe { result::malloc_async(stream, bytes) } {
            Ok(p) => return Ok(p),
            Err(e) => e,
        };
        let (free, total) = result::mem_get_info().unwrap_or((0, 0));
        // A request beyond the device's memory may fail as an invalid value rather than as OOM.
        if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY || bytes > free {
            return Err(Error::OutOfMemory {
                backend: format!("cuda:{}", self.ordinal),
                node: None,
                requested: bytes as u64,
                free: free as u64,
                total: total as u64,
                live: self.meter.live.get() as u64,
                predicted_peak: None,
            });
        }
        Err(self.fail(format!("allocating {bytes} bytes failed"), e))
    }

    /// Returns memory to the pool after the stream's pending work (stream-ordered).
    pub(crate) fn free_raw(&self, ptr: sys::CUdeviceptr) {
        if ptr != 0 {
            // SAFETY: `ptr` came from `alloc_raw` on this stream and is not used afterwards.
            if let Err(e) = unsafe { result::free_async(ptr, self.stream.cu_stream()) } {
                log::error!("cuda:{}: freeing device memory failed: {e:?}", self.ordinal);
            }
        }
    }

    /// Frees `ptr`, whose contents a device-to-host copy on [`Device::d2h`] may still be reading,
    /// once that copy and all compute work issued so far (its last readers) are done: the copy
    /// stream waits for the compute stream's current point and frees there, after the copy. The
    /// compute stream does not wait; the pool reuses the block for compute-stream allocations only
    /// once the free has executed (its cross-stream reuse rules). Should the event fail, the copy
    /// stream and the compute stream are synchronised and the block is freed on the compute
    /// stream, which is safe and merely slow.
    pub(crate) fn free_after_copy(&self, ptr: sys::CUdeviceptr) {
        if ptr == 0 {
            return;
        }
        let ordered = self.stream.record_event(None).and_then(|e| self.d2h.wait(&e));
        let freed = match ordered {
            // SAFETY: `ptr` came from `alloc_raw`; the d2h stream now runs the free after the copy
            // reading it and after every compute-stream use issued so far; nothing uses it later.
            Ok(()) => unsafe { result::free_async(ptr, self.d2h.cu_stream()) },
            Err(e) => Err(e),
        };
        if let Err(e) = freed {
            log::error!("cuda:{}: ordering the free of an offloaded buffer failed: {e:?}", self.ordinal);
            let _ = self.d2h.synchronize();
            let _ = self.stream.synchronize();
            self.free_raw(ptr);
        }
    }

    /// Makes the compute stream wait for `ready` (the host-to-device copy of a fetched value) if
    /// it has not yet: later kernels then see the copied bytes. Non-blocking for the host.
    pub(crate) fn wait_ready(&self, ready: &RefCell<Option<Rc<CudaEvent>>>) -> Result<()> {
        let pending = ready.borrow_mut().take();
        if let Some(e) = pending {
            if let Err(err) = self.stream.wait(&e) {
                *ready.borrow_mut() = Some(e);
                return Err(self.err(format!("waiting for a fetched value's copy: {err:?}")));
            }
        }
        Ok(())
    }

    /// A pinned host block of `bytes` bytes (null for 0): an idle cached one of that size, or a
    /// fresh page-locked allocation. Blocks whose copies have finished are reclaimed first.
    pub(crate) fn pinned_alloc(&self, bytes: usize) -> Result<Pinned> {
        if bytes == 0 {
            return Ok(Pinned { ptr: std::ptr::null_mut(), bytes: 0 });
        }
        self.reclaim_pinned()?;
        let cached = self.pinned_cache.borrow_mut().take(bytes);
        let block = match cached {
            Some(b) => b,
            None => {
                // SAFETY: a fresh page-locked allocation of `bytes` bytes, freed by `free_pinned`.
                let ptr = unsafe { result::malloc_host(bytes, 0) }
                    .map_err(|e| self.fail(format!("pinned host allocation of {bytes} bytes"), e))?;
                Pinned { ptr: ptr as *mut u8, bytes }
            }
        };
        let used = self.pinned_used.get() + bytes;
        self.pinned_used.set(used);
        self.pinned_high.set(self.pinned_high.get().max(used));
        Ok(block)
    }

    /// Gives `block` back once `last` (the last copy into or out of it) has completed; `None`
    /// when no copy is pending.
    pub(crate) fn pinned_release(&self, block: Pinned, last: Option<Rc<CudaEvent>>) {
        if !block.ptr.is_null() {
            self.pinned_pending.borrow_mut().push(last, block);
        }
    }

    /// Moves the pinned blocks whose copies have finished from the pending queue to the cache
    /// (freeing what the cache evicts). Never blocks.
    pub(crate) fn reclaim_pinned(&self) -> Result<()> {
        let done = self.pinned_pending.borrow_mut().take_done();
        let done = done.map_err(|m| self.err(format!("querying a copy's event: {m}")))?;
        for block in done {
            self.pinned_used.set(self.pinned_used.get() - block.bytes);
            let bytes = block.bytes;
            let evicted = self.pinned_cache.borrow_mut().put(bytes, block, self.pinned_high.get());
            evicted.into_iter().for_each(|b| self.free_pinned(b));
        }
        Ok(())
    }

    /// Frees the idle cached pinned blocks (those still in use are kept).
    pub(crate) fn release_pinned_cache(&self) -> Result<()> {
        self.reclaim_pinned()?;
        let idle = self.pinned_cache.borrow_mut().drain();
        idle.into_iter().for_each(|b| self.free_pinned(b));
        Ok(())
    }

    /// Bytes of pinned host memory allocated now: in use (host copies, pending copies) and idle
    /// in the cache.
    pub(crate) fn pinned_bytes(&self) -> usize {
        self.pinned_used.get() + self.pinned_cache.borrow().bytes()
    }

    fn free_pinned(&self, block: Pinned) {
        // SAFETY: `block` came from `malloc_host` and no copy into or out of it is pending (its
        // event completed, or the copy streams were synchronised).
        if let Err(e) = unsafe { result::free_host(block.ptr as *mut std::ffi::c_void) } {
            log::error!("cuda:{}: freeing pinned host memory failed: {e:?}", self.ordinal);
        }
    }

    /// The pool's high-water mark of bytes in use (metered and unmetered) since the last reset.
    pub fn pool_used_high(&self) -> Result<u64> {
        let mut v = 0u64;
        // SAFETY: the attribute is a u64.
        unsafe {
            result::mem_pool::get_attribute(
                self.pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                &mut v as *mut u64 as *mut _,
            )
        }
        .map_err(|e| self.fail("pool attribute", e))?;
        Ok(v)
    }

    /// Resets the pool's high-water mark to the bytes in use now.
    pub fn reset_pool_high(&self) -> Result<()> {
        let mut zero = 0u64;
        // SAFETY: writing 0 to USED_MEM_HIGH resets it; the attribute is a u64.
        unsafe {
            result::mem_pool::set_attribute(
                self.pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                &mut zero as *mut u64 as *mut _,
            )
        }
        .map_err(|e| self.fail("pool attribute", e))
    }

    /// The kernel `name` of `source`, compiled to a cubin for this device on first use.
    pub(crate) fn function(&self, source: &Source, name: &str) -> Result<CudaFunction> {
        if let Some(f) = self.functions.borrow().get(name) {
            return Ok(f.clone());
        }
        let module = match self.modules.borrow().get(source.name).cloned() {
            Some(m) => m,
            None => {
                let image = compile::compile(source, Target::Cubin(self.cc)).map_err(|m| self.err(m))?;
                let m = self
                    .ctx
                    .load_module(Ptx::from_binary(image.to_vec()))
                    .map_err(|e| self.fail(format!("loading {} for sm_{}", source.name, self.cc), e))?;
                self.modules.borrow_mut().insert(source.name, m.clone());
                m
            }
        };
        let f = module.load_function(name).map_err(|e| self.fail(format!("kernel {name} of {}", source.name), e))?;
        self.functions.borrow_mut().insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Launches `name` of `source` with `grid` × `block` threads and `args` (which must match the
    /// kernel's C signature, in order and type).
    pub(crate) fn launch(
        &self,
        source: &Source,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg],
    ) -> Result<()> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let f = self.function(source, name)?;
        let mut owned: Vec<Arg> = args.to_vec();
        let mut params: Vec<*mut std::ffi::c_void> = owned.iter_mut().map(Arg::as_param).collect();
        // SAFETY: the caller passes arguments matching the kernel's signature; `owned` outlives
        // the call (cuLaunchKernel copies the values before returning); pointers in the args were
        // allocated on this stream and stay live until the stream reaches their frees.
        unsafe { result::launch_kernel(f.cu_function(), grid, block, 0, self.stream.cu_stream(), &mut params) }
            .map_err(|e| self.fail(format!("launching {name}"), e))
    }

    /// A 1-D grid-stride launch over `n` items.
    pub(crate) fn launch_1d(&self, source: &Source, name: &str, n: usize, args: &[Arg]) -> Result<()> {
        let blocks = n.div_ceil(THREADS as usize).clamp(1, (self.sm_count * 16) as usize) as u32;
        if n == 0 {
            return Ok(());
        }
        self.launch(source, name, (blocks, 1, 1), (THREADS, 1, 1), args)
    }

    /// Waits for the compute stream (and so for every fetch it has consumed), reclaims finished
    /// pinned blocks, then reports the first bad id or zero divisor a kernel flagged (and clears
    /// it).
    pub(crate) fn sync_and_check(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| self.fail("stream synchronize", e))?;
        self.reclaim_pinned()?;
        let mut flag = [0u64; 4];
        // SAFETY: `flag` is 32 bytes of device memory; the stream is idle.
        unsafe { result::memcpy_dtoh_sync(&mut flag[..], self.flag) }
            .map_err(|e| self.fail("reading the error flag", e))?;
        if flag[0] != 0 {
            // SAFETY: as above.
            unsafe { result::memset_d8_sync(self.flag, 0, 32) }.map_err(|e| self.fail("memset", e))?;
            let (node, op) = Origin(flag[1]).unpack();
            let found = match flag[0] {
                REPORT_DIV_ZERO => format!("integer division by zero at output element {}", flag[2]),
                REPORT_BAD_ID => format!("id {} at position {} is out of range", flag[3] as i64, flag[2]),
                other => format!("unknown device report {other} at position {}", flag[2]),
            };
            let message = format!("{found} (found on the GPU; reported at the next synchronisation)");
            return Err(Error::Node { node, op, message });
        }
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        let _ = self.d2h.synchronize();
        let _ = self.h2d.synchronize();
        let (pending, _) = self.pinned_pending.get_mut().take_all();
        let idle = self.pinned_cache.get_mut().drain();
        pending.into_iter().chain(idle).for_each(|b| self.free_pinned(b));
        // SAFETY: the handle is live and no longer used; the workspace is freed after it.
        unsafe {
            let _ = cudarc::cublas::result::destroy_handle(self.blas);
            if let Some(&h) = self.blas_lt.get() {
                let _ = cudarc::cublaslt::result::destroy_handle(h);
            }
        }
        self.free_raw(self.workspace);
        self.free_raw(self.flag);
        let _ = self.stream.synchronize();
    }
}

/// A page-locked host block (null when empty).
#[derive(Debug)]
pub(crate) struct Pinned {
    pub(crate) ptr: *mut u8,
    pub(crate) bytes: usize,
}

impl Completion for Rc<CudaEvent> {
    fn done(&self) -> std::result::Result<bool, String> {
        self.context().bind_to_thread().map_err(|e| format!("{e:?}"))?;
        // SAFETY: the event is live (this Rc holds it) and was created by cudarc.
        match unsafe { result::event::query(self.cu_event()) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(format!("{e:?}")),
        }
    }

    fn wait(&self) -> std::result::Result<(), String> {
        self.synchronize().map_err(|e| format!("{e:?}"))
    }
}
