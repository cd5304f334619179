//! CPU kernels (to be written).

use crate::backend::KernelCall;
use crate::error::{Error, Result};
use crate::host::HostTensor;

pub(crate) fn execute(call: &KernelCall<'_>, _inputs: &[&HostTensor]) -> Result<HostTensor> {
    Err(Error::Node { node: call.node, op: call.op.name(), message: "no CPU kernel yet".into() })
}
