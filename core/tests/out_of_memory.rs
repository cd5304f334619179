//! Running out of memory is an error naming the node, the request, the free bytes and the plan's
//! predicted peak — and the predicted peak is exactly the memory a step needs.

use remat_core::{
    Backend, Budget, CpuBackend, CpuBuffer, DType, Error, HostTensor, KernelCall, MemoryStats, Model, Result, Strategy,
};
use remat_zoo::{self as zoo, GptConfig};

/// The CPU backend with a hard memory limit, failing as a device does when its memory is full.
struct Limited {
    inner: CpuBackend,
    limit: usize,
}

impl Limited {
    fn reserve(&self, bytes: usize) -> Result<()> {
        let live = self.inner.memory().live_bytes;
        if live + bytes <= self.limit {
            return Ok(());
        }
        Err(Error::OutOfMemory {
            backend: self.name(),
            node: None,
            requested: bytes as u64,
            free: (self.limit - live) as u64,
            total: self.limit as u64,
            live: live as u64,
            predicted_peak: None,
        })
    }
}

impl Backend for Limited {
    type Buffer = CpuBuffer;
    type Host = <CpuBackend as Backend>::Host;

    fn offload(&mut self, buffer: &CpuBuffer) -> Result<Self::Host> {
        self.inner.offload(buffer)
    }

    fn fetch(&mut self, host: Self::Host) -> Result<CpuBuffer> {
        self.inner.fetch(host)
    }

    fn host_memory(&self) -> MemoryStats {
        self.inner.host_memory()
    }

    fn transfers(&self) -> remat_core::TransferStats {
        self.inner.transfers()
    }

    fn name(&self) -> String {
        format!("cpu (limited to {} bytes)", self.limit)
    }

    fn upload(&mut self, tensor: &HostTensor) -> Result<CpuBuffer> {
        self.reserve(tensor.numel() * tensor.dtype().size())?;
        self.inner.upload(tensor)
    }

    fn download(&mut self, buffer: &CpuBuffer) -> Result<HostTensor> {
        self.inner.download(buffer)
    }

    fn execute(&mut self, call: &KernelCall<'_>, inputs: &[&CpuBuffer]) -> Result<CpuBuffer> {
        self.reserve(call.out_shape.iter().product::<usize>() * call.out_dtype.size())?;
        self.inner.execute(call, inputs)
    }

    /// A reshape that takes over its input allocates nothing.
    fn reshape_owned(&mut self, call: &KernelCall<'_>, input: CpuBuffer) -> Result<CpuBuffer> {
        self.inner.reshape_owned(call, input)
    }

    fn memory(&self) -> MemoryStats {
        self.inner.memory()
    }

    fn reset_peak(&mut self) {
        self.inner.reset_peak()
    }
}

fn gpt() -> GptConfig {
    GptConfig { batch: 2, seq: 8, d_model: 16, heads: 2, layers: 2, vocab: 32, dropout: 0.0, dtype: DType::F32 }
}

#[test]
fn a_step_fits_in_exactly_its_predicted_peak_and_no_less() {
    let cfg = gpt();
    for strategy in [Strategy::Respect, Strategy::MinCut, Strategy::Budget(Budget::Fraction(0.3))] {
        let model = Model::with_strategy(zoo::gpt(&cfg).unwrap(), strategy).unwrap();
        let (params, feeds) = (model.init_params(0).unwrap(), zoo::synthetic_tokens(&cfg, 0).unwrap());
        let predicted = model.plan().predicted_peak();

        let mut enough = Limited { inner: CpuBackend::new(), limit: predicted };
        let out = model.step(&mut enough, &params, &feeds).unwrap();
        assert_eq!(out.measured_peak, predicted, "{strategy}");

        let mut short = Limited { inner: CpuBackend::new(), limit: predicted - 1 };
        let err = model.step(&mut short, &params, &feeds).unwrap_err();
        let Error::OutOfMemory { node, predicted_peak, requested, free, .. } = &err else {
            panic!("{strategy}: expected out of memory, got {err}");
        };
        assert_eq!(*predicted_peak, Some(predicted as u64), "{strategy}");
        assert!(requested > free, "{strategy}: {err}");
        let text = err.to_string();
        assert!(node.is_some() && text.contains(" at node "), "{strategy}: the node is named: {text}");
        assert!(text.contains("predicted peak") && text.contains("Strategy::Budget"), "{text}");
        assert_eq!(short.memory().live_bytes, 0, "{strategy}: a failed step frees what it held");
    }
}

#[test]
fn min_cut_makes_a_step_fit_where_saving_everything_does_not() {
    let cfg = gpt();
    let everything = Model::new(zoo::gpt(&cfg).unwrap()).unwrap();
    let min_cut = Model::with_strategy(zoo::gpt(&cfg).unwrap(), Strategy::MinCut).unwrap();
    let (params, feeds) = (everything.init_params(0).unwrap(), zoo::synthetic_tokens(&cfg, 0).unwrap());
    let limit = min_cut.plan().predicted_peak();
    assert!(limit < everything.plan().predicted_peak());
    let mut device = Limited { inner: CpuBackend::new(), limit };
    let err = everything.step(&mut device, &params, &feeds).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    let out = min_cut.step(&mut device, &params, &feeds).unwrap();
    assert!(out.loss.is_finite());
    assert_eq!(out.measured_peak, limit);
}
