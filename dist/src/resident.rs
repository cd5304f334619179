//! Data parallelism on a training state whose parameters, optimizer state and gradients stay in
//! the backend's buffers ([`TrainState`]): the gradients reduced from those buffers, ZeRO-1 by
//! parameter owner, and the sharded moments gathered for a save.

use crate::collective::Collective;
use crate::data_parallel::{from_bytes, no_gradient, reducible, value_bytes, DataParallel, Reduction, StepComm};
use remat_core::{
    Backend, DType, Error, Feeds, GradientReducer, Gradients, HostData, HostTensor, Model, Result, TrainState,
    TrainStepOutput,
};
use std::time::Instant;

/// What one [`DataParallel::train_step`] returns.
#[derive(Debug)]
pub struct DpTrainStep {
    /// The loss averaged over the ranks (each rank's mean over its shard).
    pub loss: f64,
    /// This rank's own step: its loss, predicted and measured peaks, transfers.
    pub local: TrainStepOutput,
    /// The step's communication.
    pub comm: StepComm,
}

impl<C: Collective> DataParallel<C> {
    /// One step on a training state whose parameters, optimizer state and gradients stay in the
    /// backend's buffers ([`TrainState`]): forward and backward on this rank's `feeds`, each
    /// gradient read from its buffer the moment the backward finishes it (in place on the CPU,
    /// [`Backend::host_view`]; downloaded elsewhere) into a bucket sent at once, the averaged
    /// gradients written back into the buffers ([`Backend::write`]), then the state's own update.
    /// Every rank ends the step with the same parameters. Random ops draw as in
    /// [`DataParallel::step`].
    pub fn train_step<B: Backend>(
        &mut self,
        model: &Model,
        backend: &mut B,
        state: &mut TrainState<B>,
        feeds: &Feeds,
        seed: u64,
    ) -> Result<DpTrainStep> {
        let rank_seed = self.rank_seed(seed);
        let metas = state.metas().to_vec();
        let numels: Vec<usize> = metas.iter().map(|m| m.0.iter().product()).collect();
        self.agree_on_layout(self.layout_of(model, &numels))?;
        let sent_before = self.comm.bytes_sent();
        let names = state.names().to_vec();
        let mut reducer = BufferReducer {
            reduction: Some(Reduction::new(&mut self.comm, self.bucket_bytes, names.len())),
            names: &names,
            metas: &metas,
            comm: None,
        };
        let local = state.step_reducing(backend, model, feeds, rank_seed, &mut reducer)?;
        let mut comm = reducer.comm.ok_or_else(|| Error::internal("the gradients were never reduced"))?;
        if self.sharded_state {
            self.broadcast_updated(backend, state)?;
        }
        let loss = self.agree_on_step(local.loss, seed)?;
        comm.bytes_sent = self.comm.bytes_sent() - sent_before;
        Ok(DpTrainStep { loss, local, comm })
    }

    /// [`DataParallel::train_step`] with the gradients reduced by `reducer` instead of this
    /// collective's host buckets: a reducer on the device (NCCL on the GPU buffers,
    /// `remat::cuda::NcclGradients`) reduces where the gradients are. This collective still
    /// agrees on the step and averages the loss; the step's [`StepComm`] is the reducer's to
    /// report, so the one returned here counts only the loss's bytes.
    pub fn train_step_with<B: Backend>(
        &mut self,
        model: &Model,
        backend: &mut B,
        state: &mut TrainState<B>,
        feeds: &Feeds,
        seed: u64,
        reducer: &mut dyn GradientReducer<B>,
    ) -> Result<DpTrainStep> {
        if self.sharded_state {
            return Err(Error::config(
                "reducer",
                "a sharded training state (shard_state) reduces through the collective: use train_step",
            ));
        }
        let rank_seed = self.rank_seed(seed);
        let sent_before = self.comm.bytes_sent();
        let local = state.step_reducing(backend, model, feeds, rank_seed, reducer)?;
        let loss = self.agree_on_step(local.loss, seed)?;
        let comm = StepComm { bytes_sent: self.comm.bytes_sent() - sent_before, ..StepComm::default() };
        Ok(DpTrainStep { loss, local, comm })
    }

    /// ZeRO-1 on a training state: each parameter gets an owner (greedily, the rank with the
    /// fewest elements so far, in parameter order), and this rank's state keeps the optimizer
    /// state (and master weights) of its own parameters only ([`TrainState::keep_only`]). From
    /// then on each [`DataParallel::train_step`] updates a rank's own parameters and broadcasts
    /// them to the others: per-rank optimizer memory about `1 / world` of the whole, and every
    /// rank ends each step with the same parameters.
    pub fn shard_state<B: Backend>(&mut self, state: &mut TrainState<B>) -> Result<()> {
        let owners = self.owners(state);
        let rank = self.rank();
        state.keep_only(&owners.iter().map(|&o| o == rank).collect::<Vec<_>>())?;
        self.sharded_state = true;
        Ok(())
    }

    /// The rank that updates each parameter of `state` under [`DataParallel::shard_state`].
    pub fn owners<B: Backend>(&self, state: &TrainState<B>) -> Vec<usize> {
        let mut load = vec![0usize; self.world_size()];
        state
            .metas()
            .iter()
            .map(|(shape, _)| {
                let owner = (0..load.len()).min_by_key(|&r| (load[r], r)).unwrap_or(0);
                load[owner] += shape.iter().product::<usize>();
                owner
            })
            .collect()
    }

    /// Every parameter broadcast from its owner, which updated it.
    fn broadcast_updated<B: Backend>(&mut self, backend: &mut B, state: &mut TrainState<B>) -> Result<()> {
        let owners = self.owners(state);
        for (k, &owner) in owners.iter().enumerate() {
            let (shape, dtype) = state.metas()[k].clone();
            let n: usize = shape.iter().product();
            let bytes = if owner == self.rank() {
                let buffer = state.param_buffer(k).ok_or_else(|| Error::internal("a parameter without a buffer"))?;
                match backend.host_view(buffer) {
                    Some(t) => value_bytes(t),
                    None => value_bytes(&backend.download(buffer)?),
                }
            } else {
                vec![0; n * 8]
            };
            let bytes = self.comm.broadcast(bytes, owner)?;
            if owner != self.rank() {
                let value = HostTensor::new(shape, from_bytes(&bytes, dtype, n)?)?;
                state.write_param(backend, k, &value)?;
            }
        }
        Ok(())
    }

    /// The whole optimizer state of a training state sharded by [`DataParallel::shard_state`], as
    /// an unsharded AdamW on every rank (each parameter's moments broadcast from its owner), e.g.
    /// for rank 0 to save it with [`TrainState::params`]. A state not sharded gives its own.
    pub fn gather_adamw<B: Backend>(&mut self, backend: &mut B, state: &TrainState<B>) -> Result<remat_core::AdamW> {
        if !self.sharded_state {
            return state.adamw(backend);
        }
        let remat_core::UpdateRule::AdamW { lr, beta1, beta2, eps, weight_decay } = state.options().rule else {
            return Err(Error::config("rule", "this training state runs SGD, not AdamW"));
        };
        let owners = self.owners(state);
        let (mut m, mut v) = (Vec::with_capacity(owners.len()), Vec::with_capacity(owners.len()));
        for (k, &owner) in owners.iter().enumerate() {
            let n: usize = state.metas()[k].0.iter().product();
            let bytes = match state.state_values(backend, k)? {
                Some(values) => values.concat().iter().flat_map(|x| x.to_le_bytes()).collect(),
                None => vec![0; 2 * n * 8],
            };
            let bytes = self.comm.broadcast(bytes, owner)?;
            let HostData::F64(both) = from_bytes(&bytes, DType::F64, 2 * n)? else {
                return Err(Error::internal("moments broadcast as another dtype"));
            };
            m.push(both[..n].to_vec());
            v.push(both[n..].to_vec());
        }
        let params = state.params(backend)?;
        let mut adamw = remat_core::AdamW::new(lr);
        (adamw.beta1, adamw.beta2, adamw.eps, adamw.weight_decay) = (beta1, beta2, eps, weight_decay);
        adamw.with_state(&params, state.t(), m, v)
    }
}

fn ended() -> Error {
    Error::internal("gradients handed over after the reduction ended")
}

/// [`GradientReducer`] for [`DataParallel::train_step`]: reads each gradient buffer into the
/// reduction, and writes the averages back.
struct BufferReducer<'r, 'c, C: Collective> {
    /// Until [`GradientReducer::finish`] ends it.
    reduction: Option<Reduction<'c, C>>,
    names: &'r [String],
    /// Each parameter's shape and dtype.
    metas: &'r [(Vec<usize>, DType)],
    /// The step's communication, once [`GradientReducer::finish`] ran.
    comm: Option<StepComm>,
}

impl<C: Collective> BufferReducer<'_, '_, C> {
    /// A gradient buffer's values as f32, read in place where the backend allows.
    fn values<B: Backend>(&self, backend: &mut B, param: usize, grad: &B::Buffer) -> Result<Vec<f32>> {
        let name = self.names.get(param).map_or("?", String::as_str);
        match backend.host_view(grad) {
            Some(t) => reducible(t, name),
            None => reducible(&backend.download(grad)?, name),
        }
    }
}

impl<B: Backend, C: Collective> GradientReducer<B> for BufferReducer<'_, '_, C> {
    fn gradient(&mut self, backend: &mut B, param: usize, grad: &B::Buffer) -> Result<()> {
        let values = self.values(backend, param, grad)?;
        self.reduction.as_mut().ok_or_else(ended)?.add(param, values)
    }

    fn finish(&mut self, backend: &mut B, grads: &mut Gradients<'_, B>) -> Result<()> {
        // Gradients the backward did not hand over (one shared with another parameter) join last.
        let mut reduction = self.reduction.take().ok_or_else(ended)?;
        for param in 0..grads.len() {
            if !reduction.has(param) {
                let grad = grads.get(param).ok_or_else(|| Error::internal("a gradient vanished"))?;
                reduction.add(param, self.values(backend, param, grad)?)?;
            }
        }
        let (means, stats) = reduction.finish(Instant::now())?;
        for (param, mean) in means.into_iter().enumerate() {
            let mean = mean.ok_or_else(|| no_gradient(&self.names[param]))?;
            let (shape, dtype) = &self.metas[param];
            let grad = grads.get_mut(param).ok_or_else(|| Error::internal("a gradient vanished"))?;
            backend.write(grad, &HostTensor::new(shape.clone(), HostData::from_f32(&mean, *dtype))?)?;
        }
        self.comm = Some(stats);
        Ok(())
    }
}
