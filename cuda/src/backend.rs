//! [`CudaBackend`]: the `Backend` trait on one GPU.

use crate::device::{backend_err, Device};
use crate::kernels::compute_dtype;
use crate::ops::{attention, elementwise as ew, index, layout, nn, reduce, Scratch, View};
use crate::{fp8, gemm};
use cudarc::driver::result;
use remat_core::shape::fmt_shape;
use remat_core::{Backend, DType, Error, HostData, HostTensor, KernelCall, MemoryStats, Op, ReduceOp, Result};
use std::rc::Rc;

/// The CUDA backend: one device, one stream, a metered memory pool.
///
/// Kernels run asynchronously on one stream; [`Backend::download`] waits for them. Ids found out
/// of range on the device (embedding, cross-entropy) are reported at the next download or
/// [`CudaBackend::synchronize`], naming the node, since checking at launch would need a host
/// round trip per op.
#[derive(Debug)]
pub struct CudaBackend {
    dev: Rc<Device>,
}

/// A tensor in device memory; its bytes count as live until it is dropped.
#[derive(Debug)]
pub struct CudaBuffer {
    ptr: u64,
    shape: Vec<usize>,
    dtype: DType,
    dev: Rc<Device>,
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

    fn view(&self) -> View<'_> {
        View { ptr: self.ptr, shape: &self.shape, dtype: self.dtype }
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        let m = &self.dev.meter;
        m.live.set(m.live.get() - self.bytes());
        self.dev.free_raw(self.ptr);
    }
}

/// An offloaded value in pinned (page-locked) host memory; its bytes count in the host meter
/// until it is dropped.
#[derive(Debug)]
pub struct CudaHostBuffer {
    ptr: *mut u8,
    shape: Vec<usize>,
    dtype: DType,
    dev: Rc<Device>,
}

impl CudaHostBuffer {
    /// Bytes of pinned host memory held.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

impl Drop for CudaHostBuffer {
    fn drop(&mut self) {
        let m = &self.dev.host_meter;
        m.live.set(m.live.get() - self.bytes());
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from `malloc_host` and every copy into or out of it was
            // synchronised before this buffer could be dropped (`offload` and `fetch` wait).
            let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
        }
    }
}

/// The raw little-endian bytes of a host tensor's elements.
pub(crate) fn host_bytes(t: &HostTensor) -> &[u8] {
    fn raw<T>(v: &[T]) -> &[u8] {
        // SAFETY: f32/f64/i64/u8/bf16/f16 are plain old data without padding; the byte slice
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
        HostData::Bool(v) => raw(v),
    }
}

fn host_from_bytes(shape: &[usize], dtype: DType, bytes: &[u8]) -> Result<HostTensor> {
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
        DType::Bool => HostData::Bool(bytes.iter().map(|&b| b != 0).collect()),
    };
    HostTensor::new(shape.to_vec(), data)
}

impl CudaBackend {
    /// Opens device `ordinal`. On a machine without a usable GPU this is an error saying what is
    /// missing (the driver library, a device, NVRTC or cuBLAS) — never a panic.
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        Ok(CudaBackend { dev: Rc::new(Device::open(ordinal)?) })
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

    /// Waits for all queued work and reports any id a kernel found out of range.
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

    /// A buffer of `shape` and `dtype` with uninitialised contents (metered).
    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<CudaBuffer> {
        let bytes = shape.iter().product::<usize>() * dtype.size();
        let ptr = self.dev.alloc_raw(bytes)?;
        let m = &self.dev.meter;
        let live = m.live.get() + bytes;
        m.live.set(live);
        m.peak.set(m.peak.get().max(live));
        Ok(CudaBuffer { ptr, shape: shape.to_vec(), dtype, dev: self.dev.clone() })
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
        if call.op.info().leaf {
            return Ok(());
        }
        let (shape, dtype) = call.op.infer(call.inputs).map_err(node_err)?;
        if shape != call.out_shape || dtype != call.out_dtype {
            return Err(node_err(format!(
                "the call asks for {} {} but the op produces {} {}",
                fmt_shape(call.out_shape),
                call.out_dtype,
                fmt_shape(&shape),
                dtype
            )));
        }
        Ok(())
    }
}

/// Names the node in a backend or out-of-memory error raised while running `call`.
fn at_node(e: Error, call: &KernelCall<'_>) -> Error {
    match e {
        Error::Backend { backend, message } => {
            Error::Backend { backend, message: format!("node {} ({}): {message}", call.node, call.op.name()) }
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
            | Op::ReluGrad
            | Op::GeluGrad
            | Op::SiluGrad
            | Op::SoftmaxGrad
            | Op::LogSoftmaxGrad
            | Op::LayerNormGrad { .. }
            | Op::RmsNormGrad { .. }
            | Op::IndexSelectGrad { .. }
            | Op::GatherGrad { .. }
            | Op::AmaxGrad { .. }
            | Op::CrossEntropyGrad
    );
    uniform_family && call.inputs.iter().any(|m| m.1 != DType::I64 && m.1 != call.out_dtype)
}

/// Runs one op from input views into `out`.
fn run(dev: &Device, call: &KernelCall<'_>, x: &[View<'_>], out: View<'_>) -> Result<()> {
    match call.op {
        Op::Input | Op::Param { .. } => Err(Error::Node {
            node: call.node,
            op: call.op.name(),
            message: "leaf values are fed to a run, not computed by a kernel".into(),
        }),
        Op::Constant { value } => ew::constant(dev, *value, out),
        Op::ConstantData { value } => ew::upload_into(dev, value, out),
        Op::Arange { start, step } => index::arange(dev, *start, *step, out),
        Op::Binary(_) => ew::binary(dev, call.op, x[0], x[1], out),
        Op::Compare(c) => index::compare(dev, *c, x[0], x[1], out),
        Op::Where => index::select_where(dev, x[0], x[1], x[2], out),
        Op::Unary(_) | Op::Clamp { .. } | Op::Pow { .. } => ew::unary(dev, call.op, x[0], out),
        Op::ClampGrad { .. } | Op::ReluGrad | Op::GeluGrad | Op::SiluGrad => {
            ew::pointwise_grad(dev, call.op, x[0], x[1], out)
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
        Op::IndexSelect { axis } => index::index_select(dev, call.node, x[0], x[1], *axis, out),
        Op::IndexSelectGrad { axis, .. } => index::index_select_grad(dev, x[0], x[1], *axis, out),
        Op::Gather { axis } => index::gather(dev, call.node, x[0], x[1], *axis, out),
        Op::GatherGrad { axis, .. } => index::gather_grad(dev, x[0], x[1], *axis, out),
        Op::RmsNorm { eps } => nn::rms_norm(dev, x[0], out, *eps),
        Op::RmsNormGrad { eps } => nn::rms_norm_grad(dev, x[0], x[1], out, *eps),
        Op::Sdpa { causal, scale } => attention::sdpa(dev, x[0], x[1], x[2], *causal, *scale, out),
        Op::SdpaGrad { causal, scale } => attention::sdpa_grad(dev, x, *causal, *scale, out),
        Op::Softmax => nn::softmax(dev, x[0], out, false),
        Op::LogSoftmax => nn::softmax(dev, x[0], out, true),
        Op::SoftmaxGrad => nn::softmax_grad(dev, x[0], x[1], out, false),
        Op::LogSoftmaxGrad => nn::softmax_grad(dev, x[0], x[1], out, true),
        Op::LayerNorm { eps } => nn::layer_norm(dev, x[0], out, *eps),
        Op::LayerNormGrad { eps } => nn::layer_norm_grad(dev, x[0], x[1], out, *eps),
        Op::CrossEntropy => nn::cross_entropy(dev, call.node, x[0], x[1], out),
        Op::CrossEntropyGrad => nn::cross_entropy_grad(dev, call.node, x[0], x[1], x[2], out),
        Op::Embedding => nn::embedding(dev, call.node, x[0], x[1], out),
        Op::EmbeddingGrad { .. } => nn::embedding_grad(dev, call.node, x[0], x[1], out),
    }
}

/// [`run`] with every float input and the result in the compute dtype, through scratch.
fn run_promoted(dev: &Device, call: &KernelCall<'_>, x: &[View<'_>], out: View<'_>) -> Result<()> {
    let c = compute_dtype(out.dtype);
    let mut scratch = Vec::new();
    let mut views = Vec::with_capacity(x.len());
    for v in x {
        if v.dtype == DType::I64 || v.dtype == DType::Bool || v.dtype == c {
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

    /// Copies `buffer` into pinned host memory. The copy is issued on the backend's stream
    /// (ordered after the kernel that produced the value) and waited for, so the device copy may
    /// be freed at once; a second copy stream with events, overlapping the copy with compute, is
    /// not built yet.
    fn offload(&mut self, buffer: &CudaBuffer) -> Result<CudaHostBuffer> {
        let bytes = buffer.bytes();
        let ptr = if bytes == 0 {
            std::ptr::null_mut()
        } else {
            // SAFETY: a fresh page-locked allocation of `bytes` bytes, freed by `CudaHostBuffer`.
            unsafe { result::malloc_host(bytes, 0) }
                .map_err(|e| self.dev.err(format!("pinned host allocation of {bytes} bytes: {e:?}")))?
                as *mut u8
        };
        let host = CudaHostBuffer { ptr, shape: buffer.shape.clone(), dtype: buffer.dtype, dev: self.dev.clone() };
        let m = &self.dev.host_meter;
        m.live.set(m.live.get() + bytes);
        m.peak.set(m.peak.get().max(m.live.get()));
        if bytes > 0 {
            // SAFETY: `ptr` holds `bytes` bytes and outlives the copy, which is synchronised below.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr, bytes) };
            // SAFETY: `buffer` holds `bytes` bytes on this device; the stream orders the copy
            // after the kernel that wrote it.
            unsafe { result::memcpy_dtoh_async(dst, buffer.ptr, self.dev.stream.cu_stream()) }
                .map_err(|e| self.dev.err(format!("offload of {bytes} bytes: {e:?}")))?;
            self.dev.stream.synchronize().map_err(|e| self.dev.err(format!("offload: {e:?}")))?;
        }
        Ok(host)
    }

    fn fetch(&mut self, host: CudaHostBuffer) -> Result<CudaBuffer> {
        let buf = self.alloc(&host.shape, host.dtype)?;
        let bytes = host.bytes();
        if bytes > 0 {
            // SAFETY: `host.ptr` holds `bytes` initialised bytes (written by `offload`).
            let src = unsafe { std::slice::from_raw_parts(host.ptr as *const u8, bytes) };
            // SAFETY: `buf` holds exactly `bytes` bytes; synchronised below, before `host` drops.
            unsafe { result::memcpy_htod_async(buf.ptr, src, self.dev.stream.cu_stream()) }
                .map_err(|e| self.dev.err(format!("fetch of {bytes} bytes: {e:?}")))?;
            self.dev.stream.synchronize().map_err(|e| self.dev.err(format!("fetch: {e:?}")))?;
        }
        Ok(buf)
    }

    fn host_memory(&self) -> MemoryStats {
        MemoryStats { live_bytes: self.dev.host_meter.live.get(), peak_bytes: self.dev.host_meter.peak.get() }
    }

    fn name(&self) -> String {
        format!("cuda:{}", self.dev.ordinal)
    }

    fn upload(&mut self, tensor: &HostTensor) -> Result<CudaBuffer> {
        let buf = self.alloc(tensor.shape(), tensor.dtype())?;
        let bytes = host_bytes(tensor);
        if !bytes.is_empty() {
            // SAFETY: `buf` holds exactly `bytes.len()` bytes; the stream is synchronised below,
            // before `bytes` can be dropped or changed.
            unsafe { result::memcpy_htod_async(buf.ptr, bytes, self.dev.stream.cu_stream()) }
                .map_err(|e| self.dev.err(format!("upload of {} bytes: {e:?}", bytes.len())))?;
            self.dev.stream.synchronize().map_err(|e| self.dev.err(format!("upload: {e:?}")))?;
        }
        Ok(buf)
    }

    fn download(&mut self, buffer: &CudaBuffer) -> Result<HostTensor> {
        let mut bytes = vec![0u8; buffer.bytes()];
        if !bytes.is_empty() {
            // SAFETY: `bytes` has room for the whole buffer; synchronised below.
            unsafe { result::memcpy_dtoh_async(&mut bytes[..], buffer.ptr, self.dev.stream.cu_stream()) }
                .map_err(|e| self.dev.err(format!("download of {} bytes: {e:?}", bytes.len())))?;
        }
        self.dev.sync_and_check()?;
        host_from_bytes(&buffer.shape, buffer.dtype, &bytes)
            .map_err(|e| backend_err(self.dev.ordinal, format!("download: {e}")))
    }

    fn execute(&mut self, call: &KernelCall<'_>, inputs: &[&CudaBuffer]) -> Result<CudaBuffer> {
        self.check(call, inputs)?;
        let out = self.alloc(call.out_shape, call.out_dtype).map_err(|e| at_node(e, call))?;
        let views: Vec<View<'_>> = inputs.iter().map(|b| b.view()).collect();
        let result = if mixed(call) {
            run_promoted(&self.dev, call, &views, out.view())
        } else {
            run(&self.dev, call, &views, out.view())
        };
        result.map_err(|e| at_node(e, call))?;
        Ok(out)
    }

    fn memory(&self) -> MemoryStats {
        MemoryStats { live_bytes: self.dev.meter.live.get(), peak_bytes: self.dev.meter.peak.get() }
    }

    fn reset_peak(&mut self) {
        self.dev.meter.peak.set(self.dev.meter.live.get());
        self.dev.host_meter.peak.set(self.dev.host_meter.live.get());
    }
}
