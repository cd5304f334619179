//! Handing the gradients to a reducer between the backward and the update (a data-parallel
//! run's all-reduce).

use crate::backend::Backend;
use crate::error::Result;

/// What a data-parallel run does with the gradients between the backward and the update
/// (`remat-dist` all-reduces them):
/// [`TrainState::step_reducing`](super::TrainState::step_reducing) hands it each gradient as
/// soon as the backward finishes it, then has it overwrite every gradient with its reduced value.
pub trait GradientReducer<B: Backend> {
    /// Parameter `param`'s gradient (its index in [`Params`](crate::Params) order) is final.
    /// Called once per gradient the backward computes, in
    /// [`Model::gradient_order`](crate::Model::gradient_order); a parameter whose gradient is
    /// another's (the same value) may not be called for: [`GradientReducer::finish`] sees
    /// every one.
    fn gradient(&mut self, backend: &mut B, param: usize, grad: &B::Buffer) -> Result<()>;

    /// The backward has ended: overwrite each gradient with its reduced value
    /// ([`Backend::write`]), before the update reads them.
    fn finish(&mut self, backend: &mut B, grads: &mut Gradients<'_, B>) -> Result<()>;
}

/// The gradient buffers of a step, by parameter, as [`GradientReducer::finish`] gets them.
/// Parameters with the same gradient share its buffer.
pub struct Gradients<'g, B: Backend> {
    pub(super) buffers: &'g mut [B::Buffer],
    pub(super) of_param: &'g [usize],
}

impl<B: Backend> Gradients<'_, B> {
    /// The number of parameters.
    pub fn len(&self) -> usize {
        self.of_param.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.of_param.is_empty()
    }

    /// Parameter `param`'s gradient.
    pub fn get(&self, param: usize) -> Option<&B::Buffer> {
        self.of_param.get(param).map(|&k| &self.buffers[k])
    }

    /// Parameter `param`'s gradient, to overwrite ([`Backend::write`]).
    pub fn get_mut(&mut self, param: usize) -> Option<&mut B::Buffer> {
        self.of_param.get(param).map(|&k| &mut self.buffers[k])
    }
}
