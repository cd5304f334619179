//! [`CudaBackend`]: the `Backend` trait on one GPU.

use crate::device::{Device, Origin, Pinned};
use crate::kernels::compute_dtype;
use crate::ops::{
    accumulate, attention, elementwise as ew, index, integer, layout, nn, optim, reduce, select, Scratch, View,
};
use crate::transfer::{host_bytes, host_from_bytes};
use crate::{fp8, gemm};
use cudarc::driver::{result, CudaEvent};
use remat_core::fmt_shape;
use remat_core::{
    Backend, DType, Error, HostTensor, KernelCall, MemoryStats, Op, OpKind, ReduceOp, Result, TransferStats, UpdateCall,
};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// The CUDA backend: one device, a compute stream, a copy stream each way, a metered memory pool.
///
/// Kernels run asynchronously on the compute stream; [`Backend::download`] waits for them. Ids
/// found out of range on the device (embedding, cross-entropy, indexing, one_hot, bincount) and
/// integer divisions by zero are reported at the next download or [`CudaBackend::synchronize`],
/// naming the node and its op, since checking at launch would need a host round trip per op.
///
/// **Offload.** [`Backend::offload`] copies a value into pinned host memory on the
/// device-to-host stream, and [`Backend::fetch`] copies it back on the host-to-device stream;
/// neither blocks the host, and both overlap with the kernels on the compute stream. Events order
/// the three streams:
///
/// - the copy out waits for an event recorded on the compute stream right after the value's
///   producer, so it reads finished bytes;
/// - the device copy, dropped by the executor after its last forward use, is freed on the
///   device-to-host stream after the copy out and after an event marking the compute stream's
///   point at the drop (its last readers), so the pool never hands its memory to another
///   buffer while the copy or a kernel still reads it;
/// - the copy back waits for the copy out's event (the host bytes are complete) and for an event
///   after the new buffer's allocation on the compute stream (the memory is the buffer's);
/// - the compute stream waits for the copy back's event only when a kernel (or a download, or a
///   second offload) first reads the fetched buffer, so the compute between the plan's `Fetch`
///   and the first use hides the transfer, as the planner assumed;
/// - a pinned block is reused or freed only once the event of the last copy into or out of it
///   has completed (checked without blocking at each offload, fetch and synchronisation).
///
/// Memory is counted as on the CPU backend, so measured peaks equal the plan's: device bytes from
/// allocation until the executor drops the buffer (the stream-ordered free follows), host bytes
/// from `offload` until `fetch` returns. Pinned blocks are cached by size for the next step's
/// offloads (not metered, like the device pool's cached blocks; see
/// [`CudaBackend::pinned_host_bytes`] and [`CudaBackend::release_pinned_cache`]).
#[derive(Debug)]
pub struct CudaBackend {
    dev: Rc<Device>,
    /// Bytes copied in and out ([`Backend::transfers`]).
    transfers: TransferStats,
}

/// A tensor in device memory; its bytes count as live until it is dropped.
#[derive(Debug)]
pub struct CudaBuffer {
    ptr: u64,
    shape: Vec<usize>,
    dtype: DType,
    dev: Rc<Device>,
    /// The host-to-device copy that fills a fetched buffer, until the compute stream has been
    /// made to wait for it.
    ready: RefCell<Option<Rc<CudaEvent>>>,
    /// A device-to-host copy on the copy stream reads this buffer: its free goes on that stream.
    offloaded: Cell<bool>,
}

impl CudaBuffer {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of device memory held (exactly the elements' bytes, as on the CPU).
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }

    pub(crate) fn view(&self) -> View<'_> {
        View { ptr: self.ptr, shape: &self.shape, dtype: self.dtype }
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        let m = &self.dev.meter;
        m.live.set(m.live.get() - self.bytes());
        // A fetched buffer never read: its free on the compute stream must follow the copy into it.
        if let Err(e) = self.dev.wait_ready(&self.ready) {
            log::error!("{e}");
            let _ = self.dev.h2d.synchronize();
        }
        if self.offloaded.get() {
            self.dev.free_after_copy(self.ptr);
        } else {
            self.dev.free_raw(self.ptr);
        }
    }
}

/// An offloaded value in pinned (page-locked) host memory; its bytes count in the host meter
/// until it is fetched or dropped. The pinned block itself returns to the device's cache only
/// once the last copy into or out of it has completed.
#[derive(Debug)]
pub struct CudaHostBuffer {
    ptr: *mut u8,
    shape: Vec<usize>,
    dtype: DType,
    dev: Rc<Device>,
    /// The last copy into or out of the block: the copy out, then the copy back.
    last: Option<Rc<CudaEvent>>,
}

impl CudaHostBuffer {
    /// Bytes of pinned host memory held.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

impl Drop for CudaHostBuffer {
    fn drop(&mut self) {
        let bytes = self.bytes();
        let m = &self.dev.host_meter;
        m.live.set(m.live.get() - bytes);
        let block = Pinned { ptr: std::mem::replace(&mut self.ptr, std::ptr::null_mut()), bytes };
        self.dev.pinned_release(block, self.last.take());
    }
}

impl CudaBackend {
    /// Opens device `ordinal`. On a machine without a usable GPU this is an error saying what is
    /// missing (the driver library, a device, NVRTC or cuBLAS) — never a panic.
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        Ok(CudaBackend { dev: Rc::new(Device::open(ordinal)?), transfers: TransferStats::default() })
    }

    /// Why no GPU backend can be opened here, or `None` when device 0 is usable.
    pub fn unavailable_reason() -> Option<String> {
        crate::probe::unavailable_reason()
    }

    /// The transfer and compute rates the planner assumes for this backend: documented H200
    /// figures ([`remat_core::CostModel::H200`]); override with measured ones.
    pub fn cost_model(&self) -> remat_core::CostModel {
        remat_core::CostModel::H200
    }

    /// The device's name (`"NVIDIA H200"`).
    pub fn device_name(&self) -> &str {
        &self.dev.name
    }

    /// Compute capability as `major·10 + minor` (90 for Hopper).
    pub fn compute_capability(&self) -> u32 {
        self.dev.cc
    }

    /// Waits for all queued work and reports any id a kernel found out of range, or any integer
    /// division by zero.
    pub fn synchronize(&self) -> Result<()> {
        self.dev.sync_and_check()
    }

    /// The pool's high-water mark of bytes in use since [`CudaBackend::reset_pool_peak`]:
    /// metered buffers plus unmetered scratch and the cuBLAS workspace
    /// ([`crate::CUBLAS_WORKSPACE`]).
    pub fn pool_peak(&self) -> Result<u64> {
        self.dev.pool_used_high()
    }

    /// Resets [`CudaBackend::pool_peak`].
    pub fn reset_pool_peak(&self) -> Result<()> {
        self.dev.reset_pool_high()
    }

    /// Bytes of pinned host memory allocated for offloads now: host copies, blocks a copy is
    /// still using, and idle blocks cached for reuse (at most the most ever in use at once).
    /// [`Backend::host_memory`] counts only the live host copies, as the plan does.
    pub fn pinned_host_bytes(&self) -> usize {
        self.dev.pinned_bytes()
    }

    /// Frees the idle pinned blocks cached for later offloads (blocks a copy still uses stay).
    pub fn release_pinned_cache(&self) -> Result<()> {
        self.dev.release_pinned_cache()
    }

    /// The device, for work that is not a graph's op but runs on its compute stream (NCCL's
    /// gradient buckets).
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn device(&self) -> &Rc<Device> {
        &self.dev
    }

    /// A buffer of `shape` and `dtype` with uninitialised contents (metered).
    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<CudaBuffer> {
        let bytes = shape.iter().product::<usize>() * dtype.size();
        let ptr = self.dev.alloc_raw(bytes)?;
        let m = &self.dev.meter;
        let live = m.live.get() + bytes;
        m.live.set(live);
        m.peak.set(m.peak.get().max(live));
        Ok(CudaBuffer {
            ptr,
            shape: shape.to_vec(),
            dtype,
            dev: self.dev.clone(),
            ready: RefCell::new(None),
            offloaded: Cell::new(false),
        })
    }

    /// Readies `buffer` for a kernel that is not an op of a graph (the optimizer's): it must live
    /// on this backend's device, and a fetched one must have arrived. `what` names it in errors.
    pub(crate) fn ready(&self, buffer: &CudaBuffer, what: &dyn Fn() -> String) -> Result<()> {
        if !Rc::ptr_eq(&buffer.dev, &self.dev) {
            return Err(self.dev.err(format!("{} lives on another CUDA backend", what())));
        }
        self.dev.wait_ready(&buffer.ready)
    }

    /// [`CudaBackend::ready`] for a buffer a kernel overwrites in place: once offloaded, its copy
    /// out may still be reading it on the device-to-host stream, so the compute stream waits for
    /// everything queued there (a device-side wait). Every other kernel writes a fresh buffer.
    pub(crate) fn ready_to_overwrite(&self, buffer: &CudaBuffer, what: &dyn Fn() -> String) -> Result<()> {
        self.ready(buffer, what)?;
        if buffer.offloaded.get() {
            let copied = self.dev.d2h.record_event(None).map_err(|e| self.dev.fail("recording an event", e))?;
            self.dev.stream.wait(&copied).map_err(|e| self.dev.fail("ordering after an offload", e))?;
        }
        Ok(())
    }

    /// Checks buffers against metas and metas against the shape rule (as the CPU backend does).
    fn check(&self, call: &KernelCall<'_>, inputs: &[&CudaBuffer]) -> Result<()> {
        let node_err = |message: String| Error::Node { node: call.node, op: call.op.name(), message };
        if inputs.len() != call.inputs.len() {
            return Err(node_err(format!("got {} input tensors for {} input metas", inputs.len(), call.inputs.len())));
        }
        for (i, (b, m)) in inputs.iter().zip(call.inputs).enumerate() {
            if b.shape != m.0 || b.dtype != m.1 {
                return Err(node_err(format!(
                    "input {i} is {} {} but the call declares {} {}",
                    fmt_shape(&b.shape),
                    b.dtype,
                    fmt_shape(m.0),
                    m.1
                )));
            }
            if !Rc::ptr_eq(&b.dev, &self.dev) {
                return Err(node_err(format!("input {i} lives on another CUDA backend")));
            }
        }
        call.check_rule()
    }
}

/// Names the node in a backend or out-of-memory error raised while running `call`.
fn at_node(e: Error, call: &KernelCall<'_>) -> Error {
    match e {
        Error::Backend { backend, message, source } => {
            Error::Backend { backend, message: format!("node {} ({}): {message}", call.node, call.op.name()), source }
        }
        other => other.at_node(call.node, call.op.name()),
    }
}

/// Gradient ops whose float inputs may differ in dtype from their result; kernels are
/// instantiated for one dtype, so such calls run in the compute dtype through scratch.
fn mixed(call: &KernelCall<'_>) -> bool {
    let uniform_family = matches!(
        call.op,
        Op::ClampGrad { .. }
            | Op::UnaryGrad(_)
            | Op::SoftmaxGrad
            | Op::LogSoftmaxGrad
            | Op::LayerNormGrad { .. }
            | Op::RmsNormGrad { .. }
            | Op::IndexSelectGrad { .. }
            | Op::GatherGrad { .. }
            | Op::AmaxGrad { .. }
            | Op::CrossEntropyGrad
    );
    uniform_family && call.inputs.iter().any(|m| !m.1.is_int() && m.1 != call.out_dtype)
}

/// Runs one op from input views into `out`.
fn run(dev: &Device, call: &KernelCall<'_>, x: &[View<'_>], out: View<'_>) -> Result<()> {
    let at = Origin::of(call);
    match call.op {
        Op::Input | Op::Param { .. } => Err(Error::Node {
            node: call.node,
            op: call.op.name(),
            message: "leaf values are fed to a run, not computed by a kernel".into(),
        }),
        Op::Constant { value } => ew::constant(dev, *value, out),
        Op::ConstantData { value } => ew::upload_into(dev, value, out),
        Op::Arange { start, step } => index::arange(dev, *start, *step, out),
        Op::Binary(b) if out.dtype.is_int() => integer::binary(dev, at, *b, x[0], x[1], out),
        Op::Binary(b) => ew::binary(dev, *b, x[0], x[1], out),
        Op::Logic(l) => integer::logic(dev, l.kind(), x[0], x[1], out),
        Op::LogicalNot => integer::logical_not(dev, x[0], out),
        Op::Compare(c) => index::compare(dev, *c, x[0], x[1], out),
        Op::Where => index::select_where(dev, x[0], x[1], x[2], out),
        Op::Unary(u) => ew::unary(dev, ew::UnaryCode::op(*u), x[0], out),
        Op::Clamp { min, max } => ew::unary(dev, ew::UnaryCode::clamp(*min, *max), x[0], out),
        Op::Pow { exponent } => ew::unary(dev, ew::UnaryCode::pow(*exponent), x[0], out),
        Op::UnaryGrad(k) => ew::pointwise_grad(dev, ew::PointwiseGrad::Op(*k), x[0], x[1], out),
        Op::ClampGrad { min, max } => {
            ew::pointwise_grad(dev, ew::PointwiseGrad::Clamp { min: *min, max: *max }, x[0], x[1], out)
        }
        Op::Dropout { p, seed, key } => ew::dropout(dev, x[0], out, *p, *seed, *key, call.run_seed),
        Op::Cast { .. } => ew::cast(dev, x[0], out),
        Op::Reduce { op, axes, .. } => {
            let mode = match op {
                ReduceOp::Sum => reduce::Mode::Sum,
                ReduceOp::Mean => reduce::Mode::Mean,
                ReduceOp::Amax => reduce::Mode::Max,
            };
            reduce::reduce(dev, x[0], axes, mode, out)
        }
        Op::AmaxGrad { axes, .. } => reduce::amax_grad(dev, x[0], x[1], x[2], axes, out),
        Op::Matmul => gemm::matmul(dev, x[0], x[1], out, false, false),
        Op::MatmulT { ta, tb, fold: false } => gemm::matmul(dev, x[0], x[1], out, *ta, *tb),
        Op::MatmulT { fold: true, .. } => gemm::folded(dev, x[0], x[1], out),
        Op::ScaledMatmul => fp8::scaled_matmul(dev, x[0], x[1], x[2], x[3], out),
        Op::Reshape { .. } => layout::reshape(dev, x[0], out),
        Op::Transpose { perm } => layout::transpose(dev, x[0], perm, out),
        Op::Expand { .. } => layout::expand(dev, x[0], out),
        Op::Concat { axis } => layout::concat(dev, x, *axis, out),
        Op::Slice { axis, start, .. } => layout::slice(dev, x[0], *axis, *start, out),
        Op::SliceGrad { axis, start, .. } => layout::slice_grad(dev, x[0], *axis, *start, out),
        Op::IndexSelect { axis } => index::index_select(dev, at, x[0], x[1], *axis, out),
        Op::IndexSelectGrad { axis, .. } => index::index_select_grad(dev, x[0], x[1], *axis, out),
        Op::Gather { axis } => index::gather(dev, at, x[0], x[1], *axis, out),
        Op::GatherGrad { axis, .. } => index::gather_grad(dev, x[0], x[1], *axis, out),
        Op::RmsNorm { eps } => nn::rms_norm(dev, x[0], out, *eps),
        Op::RmsNormGrad { eps } => nn::rms_norm_grad(dev, x[0], x[1], out, *eps),
        Op::Sdpa { causal, scale, layout } => attention::sdpa(dev, (x[0], x[1], x[2]), (*causal, *scale, *layout), out),
        Op::SdpaGrad { causal, scale, layout } => attention::sdpa_grad(dev, x, (*causal, *scale, *layout), out),
        Op::Softmax => nn::softmax(dev, x[0], out, false),
        Op::LogSoftmax => nn::softmax(dev, x[0], out, true),
        Op::SoftmaxGrad => nn::softmax_grad(dev, x[0], x[1], out, false),
        Op::LogSoftmaxGrad => nn::softmax_grad(dev, x[0], x[1], out, true),
        Op::LayerNorm { eps } => nn::layer_norm(dev, x[0], out, *eps),
        Op::LayerNormGrad { eps } => nn::layer_norm_grad(dev, x[0], x[1], out, *eps),
        Op::CrossEntropy => nn::cross_entropy(dev, at, x[0], x[1], out),
        Op::CrossEntropyGrad => nn::cross_entropy_grad(dev, at, x[0], x[1], x[2], out),
        Op::Embedding => nn::embedding(dev, at, x[0], x[1], out),
        Op::EmbeddingGrad { .. } => nn::embedding_grad(dev, at, x[0], x[1], out),
        Op::ArgReduce { op, axis, .. } => select::arg_reduce(dev, x[0], *axis, op.kind() == OpKind::Argmax, out),
        Op::Topk { k, axis, largest } => select::sorted(dev, x[0], *axis, *k, *largest, out),
        Op::Argsort { axis, descending } => select::sorted(dev, x[0], *axis, x[0].shape[*axis], *descending, out),
        Op::Bincount { .. } => select::bincount(dev, at, x[0], out),
        Op::OneHot { classes, .. } => select::one_hot(dev, at, x[0], *classes, out),
        Op::Cumsum { axis, reverse } => accumulate::cumsum(dev, x[0], *axis, *reverse, out),
        Op::IndexAdd { axis } => accumulate::index_add(dev, at, (x[0], x[1], x[2]), *axis, out),
        Op::ScatterAdd { axis } => accumulate::scatter_add(dev, at, (x[0], x[1], x[2]), *axis, out),
    }
}

/// [`run`] with every float input and the result in the compute dtype, through scratch.
fn run_promoted(dev: &Device, call: &KernelCall<'_>, x: &[View<'_>], out: View<'_>) -> Result<()> {
    let c = compute_dtype(out.dtype);
    let mut scratch = Vec::new();
    let mut views = Vec::with_capacity(x.len());
    for v in x {
        if v.dtype.is_int() || v.dtype == DType::Bool || v.dtype == c {
            views.push(*v);
        } else {
            let s = Scratch::new(dev, v.numel() * c.size())?;
            let w = View { ptr: s.ptr, shape: v.shape, dtype: c };
            ew::cast(dev, *v, w)?;
            views.push(w);
            scratch.push(s);
        }
    }
    let tmp = Scratch::new(dev, out.numel() * c.size())?;
    let wide = View { ptr: tmp.ptr, shape: out.shape, dtype: c };
    run(dev, call, &views, wide)?;
    ew::cast(dev, wide, out)
}

impl Backend for CudaBackend {
    type Buffer = CudaBuffer;
    type Host = CudaHostBuffer;

    /// Starts copying `buffer` into pinned host memory on the device-to-host stream, after the
    /// kernel that produced it (an event on the compute stream), and returns at once. The host
    /// copy is complete when its event is; [`Backend::fetch`] waits for that on the device. The
    /// executor may drop `buffer` at any point afterwards: its memory is freed on the copy stream,
    /// after the copy (see [`CudaBackend`]).
    fn offload(&mut self, buffer: &CudaBuffer) -> Result<CudaHostBuffer> {
        let dev = &self.dev;
        let bytes = buffer.bytes();
        self.transfers.to_host_bytes += bytes as u64;
        // A fetched buffer offloaded again: its bytes must have arrived first.
        dev.wait_ready(&buffer.ready)?;
        let block = dev.pinned_alloc(bytes)?;
        let mut host = CudaHostBuffer {
            ptr: block.ptr,
            shape: buffer.shape.clone(),
            dtype: buffer.dtype,
            dev: dev.clone(),
            last: None,
        };
        let m = &dev.host_meter;
        m.live.set(m.live.get() + bytes);
        m.peak.set(m.peak.get().max(m.live.get()));
        if bytes > 0 {
            let produced = dev.stream.record_event(None).map_err(|e| dev.fail("offload: recording an event", e))?;
            dev.d2h.wait(&produced).map_err(|e| dev.fail("offload: ordering the copy stream", e))?;
            // From here the copy stream may read the buffer: its free must go there.
            buffer.offloaded.set(true);
            // SAFETY: `host.ptr` holds `bytes` bytes that nothing else touches until `host.last`
            // completes (the block is released only then).
            let dst = unsafe { std::slice::from_raw_parts_mut(host.ptr, bytes) };
            // SAFETY: `buffer` holds `bytes` bytes on this device; the copy stream waits above for
            // the kernel that wrote them, and the buffer's free is ordered after the copy.
            unsafe { result::memcpy_dtoh_async(dst, buffer.ptr, dev.d2h.cu_stream()) }
                .map_err(|e| dev.fail(format!("offload of {bytes} bytes"), e))?;
            match dev.d2h.record_event(None) {
                Ok(copied) => host.last = Some(Rc::new(copied)),
                Err(e) => {
                    // Without the event nothing tells when the block is written: wait here.
                    let _ = dev.d2h.synchronize();
                    return Err(dev.fail("offload: recording the copy's event", e));
                }
            }
        }
        Ok(host)
    }

    /// Allocates the device buffer and starts copying the host copy into it on the host-to-device
    /// stream, after the copy out finished and after the allocation's point on the compute
    /// stream; returns at once. The compute stream waits for the copy (a device-side wait, no host
    /// synchronisation) when a kernel first reads the buffer. The host copy leaves the host meter
    /// now, as on the CPU; its pinned block is reused once the copy back has completed.
    fn fetch(&mut self, mut host: CudaHostBuffer) -> Result<CudaBuffer> {
        let buf = self.alloc(&host.shape, host.dtype)?;
        self.transfers.to_device_bytes += host.bytes() as u64;
        let dev = &self.dev;
        let bytes = host.bytes();
        if bytes > 0 {
            let allocated = dev.stream.record_event(None).map_err(|e| dev.fail("fetch: recording an event", e))?;
            dev.h2d.wait(&allocated).map_err(|e| dev.fail("fetch: ordering the copy stream", e))?;
            if let Some(copied) = &host.last {
                dev.h2d.wait(copied).map_err(|e| dev.fail("fetch: waiting for the copy out", e))?;
            }
            // SAFETY: `host.ptr` holds `bytes` bytes written by the copy out, which the stream
            // waits for above; the block is released only after the copy back's event.
            let src = unsafe { std::slice::from_raw_parts(host.ptr as *const u8, bytes) };
            // SAFETY: `buf` holds exactly `bytes` bytes, allocated before the point the stream
            // waits for; the compute stream reads it only after `ready`.
            unsafe { result::memcpy_htod_async(buf.ptr, src, dev.h2d.cu_stream()) }
                .map_err(|e| dev.fail(format!("fetch of {bytes} bytes"), e))?;
            match dev.h2d.record_event(None) {
                Ok(fetched) => {
                    let fetched = Rc::new(fetched);
                    *buf.ready.borrow_mut() = Some(fetched.clone());
                    host.last = Some(fetched);
                }
                Err(e) => {
                    // Without the event nothing orders the copy before `buf`'s free or the
                    // block's reuse: wait here.
                    let _ = dev.h2d.synchronize();
                    return Err(dev.fail("fetch: recording the copy's event", e));
                }
            }
        }
        drop(host);
        dev.reclaim_pinned()?;
        Ok(buf)
    }

    fn host_memory(&self) -> MemoryStats {
        MemoryStats { live_bytes: self.dev.host_meter.live.get(), peak_bytes: self.dev.host_meter.peak.get() }
    }

    fn transfers(&self) -> TransferStats {
        self.transfers
    }

    fn name(&self) -> String {
        format!("cuda:{}", self.dev.ordinal)
    }

    fn upload(&mut self, tensor: &HostTensor) -> Result<CudaBuffer> {
        let buf = self.alloc(tensor.shape(), tensor.dtype())?;
        let bytes = host_bytes(tensor);
        self.transfers.to_device_bytes += bytes.len() as u64;
        if !bytes.is_empty() {
            // SAFETY: `buf` holds exactly `bytes.len()` bytes; the stream is synchronised below,
            // before `bytes` can be dropped or changed.
            unsafe { result::memcpy_htod_async(buf.ptr, bytes, self.dev.stream.cu_stream()) }
                .map_err(|e| self.dev.fail(format!("upload of {} bytes", bytes.len()), e))?;
            self.dev.stream.synchronize().map_err(|e| self.dev.fail("upload", e))?;
        }
        Ok(buf)
    }

    fn download(&mut self, buffer: &CudaBuffer) -> Result<HostTensor> {
        self.dev.wait_ready(&buffer.ready)?;
        let mut bytes = vec![0u8; buffer.bytes()];
        self.transfers.to_host_bytes += bytes.len() as u64;
        if !bytes.is_empty() {
            // SAFETY: `bytes` has room for the whole buffer; synchronised below.
            unsafe { result::memcpy_dtoh_async(&mut bytes[..], buffer.ptr, self.dev.stream.cu_stream()) }
                .map_err(|e| self.dev.fail(format!("download of {} bytes", bytes.len()), e))?;
        }
        self.dev.sync_and_check()?;
        host_from_bytes(&buffer.shape, buffer.dtype, &bytes).map_err(|e| self.dev.err(format!("download: {e}")))
    }

    fn execute(&mut self, call: &KernelCall<'_>, inputs: &[&CudaBuffer]) -> Result<CudaBuffer> {
        self.check(call, inputs)?;
        // Fetched inputs: the compute stream waits (on the device) for their copies back.
        for b in inputs {
            self.dev.wait_ready(&b.ready).map_err(|e| at_node(e, call))?;
        }
        let out = self.alloc(call.out_shape, call.out_dtype).map_err(|e| at_node(e, call))?;
        let views: Vec<View<'_>> = inputs.iter().map(|b| b.view()).collect();
        let result = if mixed(call) {
            run_promoted(&self.dev, call, &views, out.view())
        } else {
            run(&self.dev, call, &views, out.view())
        };
        result.map_err(|e| at_node(e, call))?;
        if let Op::ConstantData { value } = call.op {
            // The graph's host data, copied in as an upload is.
            self.transfers.to_device_bytes += value.bytes() as u64;
        }
        Ok(out)
    }

    /// The same device memory under the call's shape: a reshape of a contiguous buffer moves no
    /// element. The buffer keeps its pending-copy state (a fetch still in flight, an offload
    /// whose free must follow its copy), and the meter is unchanged (same bytes).
    fn reshape_owned(&mut self, call: &KernelCall<'_>, mut input: CudaBuffer) -> Result<CudaBuffer> {
        let elements: usize = call.out_shape.iter().product();
        if elements != input.shape.iter().product::<usize>() || call.out_dtype != input.dtype {
            let message = format!(
                "cannot reshape {} {} to {} {}",
                fmt_shape(&input.shape),
                input.dtype,
                fmt_shape(call.out_shape),
                call.out_dtype
            );
            return Err(at_node(self.dev.err(message), call));
        }
        input.shape = call.out_shape.to_vec();
        Ok(input)
    }

    fn memory(&self) -> MemoryStats {
        MemoryStats { live_bytes: self.dev.meter.live.get(), peak_bytes: self.dev.meter.peak.get() }
    }

    fn reset_peak(&mut self) {
        self.dev.meter.peak.set(self.dev.meter.live.get());
        self.dev.host_meter.peak.set(self.dev.host_meter.live.get());
    }

    /// On the device, in a fixed order (f64 partials per block, then one block folding them), so
    /// the same buffers always give the same bits; the order differs from the CPU's sequential
    /// sum, so the two agree to rounding. Allocates the 8-byte result (metered) and an
    /// unmetered scratch of at most 8 KiB (1024 partials, one per block), freed on return;
    /// moves nothing to or from the host.
    fn sum_squares(&mut self, tensors: &[&CudaBuffer]) -> Result<CudaBuffer> {
        for (k, b) in tensors.iter().enumerate() {
            if !b.dtype.is_float() {
                return Err(Error::config("gradients", format!("a sum of squares of a {} tensor", b.dtype)));
            }
            self.ready(b, &|| format!("tensor {k} of a sum of squares"))?;
        }
        let out = self.alloc(&[], DType::F64)?;
        let views: Vec<View<'_>> = tensors.iter().map(|b| b.view()).collect();
        optim::sum_squares(&self.dev, &views, out.view())?;
        Ok(out)
    }

    /// One fused kernel, in place: it allocates nothing (the meter does not move) and moves
    /// nothing to or from the host; the clip factor is computed on the device from
    /// `sum_squares`. Agrees with [`remat_core::host_update`] bit for bit. The state buffers of
    /// one parameter must share a dtype (an error otherwise).
    fn update(
        &mut self,
        call: &UpdateCall<'_>,
        param: &mut CudaBuffer,
        grad: &CudaBuffer,
        state: &mut [CudaBuffer],
        sum_squares: Option<&CudaBuffer>,
    ) -> Result<()> {
        let metas: Vec<(&[usize], DType)> = state.iter().map(|s| (s.shape(), s.dtype)).collect();
        call.check((param.shape(), param.dtype), (grad.shape(), grad.dtype), &metas, sum_squares.is_some())?;
        let name = call.name;
        if let Some(s) = sum_squares {
            if s.shape.iter().product::<usize>() != 1 || s.dtype != DType::F64 {
                let (shape, dtype) = (fmt_shape(&s.shape), s.dtype);
                return Err(Error::internal(format!(
                    "update of `{name}`: the sum of squares is {shape} {dtype}, not one f64"
                )));
            }
            self.ready(s, &|| format!("the sum of squares for `{name}`"))?;
        }
        self.ready(grad, &|| format!("the gradient of `{name}`"))?;
        self.ready_to_overwrite(param, &|| format!("parameter `{name}`"))?;
        for s in state.iter() {
            self.ready_to_overwrite(s, &|| format!("the optimizer state of `{name}`"))?;
        }
        let views: Vec<View<'_>> = state.iter().map(|s| s.view()).collect();
        optim::update(&self.dev, call, (param.view(), grad.view()), &views, sum_squares.map(CudaBuffer::view))
    }
}
