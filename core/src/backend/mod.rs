//! The backend trait: what a device must do to run a plan.
//!
//! Backends know nothing of tags, regions or partitions: they allocate, compute one op at a
//! time, and count the bytes they hold. A buffer is freed by dropping it. Each backend also has
//! a host tier for offloaded values ([`Backend::Host`]), metered apart from device memory.

pub mod cpu;

use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::host::HostTensor;
use crate::op::{Meta, Op};
use crate::update::UpdateCall;

/// One op to compute: the op, the node it belongs to (for errors), the shapes and dtypes of its
/// inputs and output, and the run's seed for random ops.
///
/// Built by [`KernelCall::new`], or by [`KernelCall::for_node`] from a graph known to hold its
/// invariants: the op's shape rule was checked when that graph was made, so the call is not
/// checked again ([`KernelCall::check_rule`] returns at once) — a plan's shapes are static.
#[derive(Clone, Copy, Debug)]
pub struct KernelCall<'a> {
    /// The graph node being computed (named in errors).
    pub node: NodeId,
    /// The op with its attributes.
    pub op: &'a Op,
    /// Shape and dtype of each input, in order.
    pub inputs: &'a [Meta<'a>],
    /// Shape of the result.
    pub out_shape: &'a [usize],
    /// Dtype of the result.
    pub out_dtype: DType,
    /// The run's seed, mixed into random ops' own seeds ([`crate::rng::stream_seed`]).
    pub run_seed: u64,
    /// Whether the op's shape rule is known to give `out_shape` and `out_dtype` from `inputs`.
    checked: bool,
}

impl<'a> KernelCall<'a> {
    /// A call whose shapes nothing has checked yet: the backend checks the op's shape rule
    /// before running it.
    pub fn new(
        node: NodeId,
        op: &'a Op,
        inputs: &'a [Meta<'a>],
        out_shape: &'a [usize],
        out_dtype: DType,
        run_seed: u64,
    ) -> KernelCall<'a> {
        KernelCall { node, op, inputs, out_shape, out_dtype, run_seed, checked: false }
    }

    /// The call computing node `id` of `graph`, whose inputs' metas are `inputs`. Checked already
    /// where the graph is known to hold its invariants (a model's joint graph, a decoder's step:
    /// each node's shape is its op's rule applied to its inputs') and `inputs` are its inputs'.
    pub fn for_node(graph: &'a Graph, id: NodeId, inputs: &'a [Meta<'a>], run_seed: u64) -> KernelCall<'a> {
        let node = graph.node(id);
        let as_graph = inputs.len() == node.inputs.len()
            && node.inputs.iter().zip(inputs).all(|(&i, m)| graph.node(i).meta() == *m);
        let checked = as_graph && graph.is_known_valid();
        KernelCall { node: id, op: &node.op, inputs, out_shape: &node.shape, out_dtype: node.dtype, run_seed, checked }
    }

    /// This call with `op` in place of its own, an op of the same shape rule (a dropout run
    /// with `p = 0` in evaluation).
    pub(crate) fn with_op(self, op: &'a Op) -> KernelCall<'a> {
        debug_assert_eq!(op.infer(self.inputs).ok(), self.op.infer(self.inputs).ok(), "{op:?} has another shape rule");
        KernelCall { op, ..self }
    }

    /// The shape check every backend makes before a kernel runs: the op's shape rule applied to
    /// the inputs' metas gives the call's output shape and dtype (so kernels may index by the
    /// shapes). Free for a call made from a checked graph ([`KernelCall::for_node`]).
    pub fn check_rule(&self) -> Result<()> {
        if self.checked || self.op.info().leaf {
            return Ok(());
        }
        let error = |message: String| crate::Error::Node { node: self.node, op: self.op.name(), message };
        let (shape, dtype) = self.op.infer(self.inputs).map_err(error)?;
        if shape[..] != self.out_shape[..] || dtype != self.out_dtype {
            return Err(error(format!(
                "the call asks for {} {} but the op produces {} {}",
                crate::shape::fmt_shape(self.out_shape),
                self.out_dtype,
                crate::shape::fmt_shape(&shape),
                dtype
            )));
        }
        Ok(())
    }

    /// Whether [`KernelCall::check_rule`] is known to hold without running it.
    pub fn is_checked(&self) -> bool {
        self.checked
    }
}

/// Bytes a backend holds now and at most since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in live buffers now.
    pub live_bytes: usize,
    /// The most bytes live at once since the last [`Backend::reset_peak`].
    pub peak_bytes: usize,
}

/// Bytes a backend has copied across its boundary with host memory since it was made: what a
/// training step moves over PCIe on a GPU (parameters up, gradients down, ...). On the CPU the
/// same crossings are counted, as copies between the caller's tensors and the backend's buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Bytes copied to the device: uploads, fetches of offloaded values, constants the graph
    /// carries.
    pub to_device_bytes: u64,
    /// Bytes copied to host memory: downloads (results handed back) and offloads.
    pub to_host_bytes: u64,
}

impl TransferStats {
    /// The bytes moved since `earlier` (a reading of the same backend).
    pub fn since(self, earlier: TransferStats) -> TransferStats {
        TransferStats {
            to_device_bytes: self.to_device_bytes.saturating_sub(earlier.to_device_bytes),
            to_host_bytes: self.to_host_bytes.saturating_sub(earlier.to_host_bytes),
        }
    }
}

/// A device that can hold tensors and compute catalog ops.
pub trait Backend {
    /// A tensor's storage on this device; dropping it frees the memory.
    type Buffer;

    /// A tensor's copy in host memory (the offload tier); dropping it frees the host memory.
    type Host;

    /// A short name for reports and errors (`"cpu"`, `"cuda:0"`).
    fn name(&self) -> String;

    /// Copies a host tensor to the device.
    fn upload(&mut self, tensor: &HostTensor) -> Result<Self::Buffer>;

    /// Copies a buffer back to the host.
    fn download(&mut self, buffer: &Self::Buffer) -> Result<HostTensor>;

    /// Moves a buffer the caller is done with to the host: a download, which a backend whose
    /// buffers already live in host memory (the CPU's) does without copying.
    fn move_to_host(&mut self, buffer: Self::Buffer) -> Result<HostTensor> {
        self.download(&buffer)
    }

    /// Computes one op into a new buffer.
    fn execute(&mut self, call: &KernelCall<'_>, inputs: &[&Self::Buffer]) -> Result<Self::Buffer>;

    /// Computes a reshape (`call`) by taking over `input`, whose last use it is
    /// ([`crate::Step::Alias`]): the same elements under the call's shape, with no copy and no
    /// new memory. The default executes the reshape and drops `input` after it, which is correct
    /// but holds both buffers for a moment, so a backend that keeps it measures a peak above the
    /// plan's by the reshape's bytes wherever that moment is the peak; the CPU and CUDA backends
    /// reinterpret the buffer.
    fn reshape_owned(&mut self, call: &KernelCall<'_>, input: Self::Buffer) -> Result<Self::Buffer> {
        self.execute(call, &[&input])
    }

    /// Live and peak bytes of the buffers this backend holds.
    fn memory(&self) -> MemoryStats;

    /// Starts a new peak measurement from the bytes live now (device and host).
    fn reset_peak(&mut self);

    /// Starts copying `buffer` to host memory. The copy is complete, and the device buffer may
    /// be dropped, once this returns or — on an asynchronous backend — once the backend's own
    /// ordering says so (the device copy's memory is not reused before the transfer ends).
    fn offload(&mut self, buffer: &Self::Buffer) -> Result<Self::Host>;

    /// Copies an offloaded value back into a new device buffer, freeing the host copy.
    fn fetch(&mut self, host: Self::Host) -> Result<Self::Buffer>;

    /// Live and peak bytes of the host copies this backend holds.
    fn host_memory(&self) -> MemoryStats;

    /// Bytes copied to and from the device since the backend was made.
    fn transfers(&self) -> TransferStats;

    /// The buffer's elements where the backend keeps them in host memory (the CPU's buffers),
    /// read in place; `None` where reading them needs a copy ([`Backend::download`]). A
    /// collective reads gradients this way without moving them.
    fn host_view<'a>(&self, buffer: &'a Self::Buffer) -> Option<&'a HostTensor> {
        let _ = buffer;
        None
    }

    /// Overwrites `buffer` with `values` (its shape and dtype), in place where the backend can
    /// (the CPU and CUDA backends): a reduced gradient coming back from a collective. Counted as
    /// bytes to the device. The default uploads a new buffer and drops the old one after it, so
    /// both are held for a moment.
    fn write(&mut self, buffer: &mut Self::Buffer, values: &HostTensor) -> Result<()> {
        *buffer = self.upload(values)?;
        Ok(())
    }

    /// Σ x² over every element of the float buffers `tensors`, in f64, as a one-element f64
    /// buffer (shape `[]`) on the device: what global-norm clipping reads
    /// ([`UpdateCall::max_norm`]). The default sums downloaded copies on the host and uploads
    /// the sum (correct on any backend, but it moves every gradient: the CPU and CUDA backends
    /// compute it where the buffers are).
    fn sum_squares(&mut self, tensors: &[&Self::Buffer]) -> Result<Self::Buffer> {
        let host = tensors.iter().map(|&b| self.download(b)).collect::<Result<Vec<_>>>()?;
        let sum = crate::update::host_sum_squares(&host.iter().collect::<Vec<_>>())?;
        self.upload(&HostTensor::f64(Vec::new(), vec![sum])?)
    }

    /// One optimizer step of one parameter, in place: `param` updated from `grad` by the call's
    /// rule, its `state` buffers (f32 or f64, the parameter's shape) updated with it;
    /// `sum_squares` is [`Backend::sum_squares`] of every gradient when the call clips. Every
    /// element is computed in f64 and rounded once to its buffer's dtype
    /// ([`crate::host_update`] is the reference). The default runs that reference on
    /// downloaded copies and uploads the results (correct on any backend, but it moves the
    /// parameter and its state: the CPU and CUDA backends update in place).
    fn update(
        &mut self,
        call: &UpdateCall<'_>,
        param: &mut Self::Buffer,
        grad: &Self::Buffer,
        state: &mut [Self::Buffer],
        sum_squares: Option<&Self::Buffer>,
    ) -> Result<()> {
        let mut host_param = self.download(param)?;
        let host_grad = self.download(grad)?;
        let mut host_state = state.iter().map(|s| self.download(s)).collect::<Result<Vec<_>>>()?;
        let sum = sum_squares.map(|s| self.download(s)?.scalar()).transpose()?;
        crate::update::host_update(
            call,
            &mut host_param,
            &host_grad,
            &mut host_state.iter_mut().collect::<Vec<_>>(),
            sum,
        )?;
        *param = self.upload(&host_param)?;
        for (buffer, value) in state.iter_mut().zip(&host_state) {
            *buffer = self.upload(value)?;
        }
        Ok(())
    }
}
