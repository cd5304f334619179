//! The optimizer step of one parameter and the sum of squares global-norm clipping reads
//! (`optim.cu`), both on the device end to end: nothing is downloaded, not even the clipping
//! scalar, so a resident training step moves only its batch and its loss.

use super::elementwise::zero;
use super::{Scratch, View};
use crate::device::{Device, THREADS};
use crate::kernels::{dtype_code, float_suffix, Arg, OPTIM};
use remat_core::{host_update, Coefficients, DType, HostData, HostTensor, Result, RuleKind, UpdateCall};
use std::sync::OnceLock;

/// The most `sum_squares_part` blocks one tensor gets, so the most f64 partials [`sum_squares`]
/// keeps in scratch (8 KiB): enough blocks to stream a large gradient at full bandwidth, few
/// enough that the finishing block folds them at once.
pub(crate) const MAX_PARTIALS: usize = 1024;

/// `RULE_*` in `optim.cu`.
const RULE_SGD: i32 = 0;
const RULE_SGD_MOMENTUM: i32 = 1;
const RULE_ADAMW: i32 = 2;

/// `F16_*` in `optim.cu`: how `half::f16::from_f64` rounds on this host.
const F16_UPPER_WORD: i32 = 0;
const F16_VIA_F32: i32 = 1;
const F16_DIRECT: i32 = 2;

/// The suffix of a parameter's dtype (or a summed tensor's) in `optim.cu`'s kernel names: every
/// float dtype, fp8 included.
pub(crate) fn param_suffix(d: DType) -> Option<&'static str> {
    match d {
        DType::F8E4M3 => Some("f8e4m3"),
        DType::F8E5M2 => Some("f8e5m2"),
        _ => float_suffix(d),
    }
}

/// `update_<param>_<state>`, for a float parameter and f32 or f64 state (a rule without state
/// runs the f32 instantiation, which then reads no state).
pub(crate) fn update_kernel(param: DType, state: DType) -> Option<String> {
    let state = matches!(state, DType::F32 | DType::F64).then(|| float_suffix(state)).flatten()?;
    Some(format!("update_{}_{state}", param_suffix(param)?))
}

/// `sum_squares_part_<dtype>`, for a float dtype.
pub(crate) fn sum_squares_kernel(d: DType) -> Option<String> {
    param_suffix(d).map(|s| format!("sum_squares_part_{s}"))
}

/// Which of `half`'s three roundings the host reference ([`remat_core::host_update`]) stores f16
/// parameters with, so that the device rounds them alike: `f16::from_f64` rounds from the f64's
/// upper 32 bits in software, through f32 (two roundings) on x86 with F16C, and once on aarch64
/// with FP16. Two values halfway between 1 and the next f16, nudged up by a bit only the f64's
/// lower word holds (2^-22, which f32 keeps) or only the whole f64 holds (2^-40), tell them
/// apart. Probed once per process.
pub(crate) fn f16_rounding() -> i32 {
    static MODE: OnceLock<i32> = OnceLock::new();
    *MODE.get_or_init(|| {
        let tie = 1.0 + 2f64.powi(-11);
        let rounds_up = |nudge: f64| host_rounding(tie + nudge, DType::F16) == Some(1.0 + 2f64.powi(-10));
        if rounds_up(2f64.powi(-40)) {
            F16_DIRECT
        } else if rounds_up(2f64.powi(-22)) {
            F16_VIA_F32
        } else {
            F16_UPPER_WORD
        }
    })
}

/// The value [`remat_core::host_update`] stores for `x` in a `dtype` parameter (widened back to
/// f64): one SGD step from 0 with gradient −1 and learning rate `x` computes `x` exactly
/// (`0 − x·(−1 + 0·0)`), then rounds it as every update does.
pub(crate) fn host_rounding(x: f64, dtype: DType) -> Option<f64> {
    let coefficients = Coefficients {
        kind: RuleKind::Sgd,
        lr: x,
        beta1: 0.0,
        beta2: 0.0,
        eps: 0.0,
        weight_decay: 0.0,
        bias1: 1.0,
        bias2: 1.0,
    };
    let call = UpdateCall { name: "probe", coefficients, max_norm: None };
    let mut w = HostTensor::new(vec![1], HostData::from_f64(&[0.0], dtype)).ok()?;
    let g = HostTensor::new(vec![1], HostData::from_f64(&[-1.0], dtype)).ok()?;
    host_update(&call, &mut w, &g, &mut [], None).ok()?;
    w.to_f64_vec().first().copied()
}

/// One step of `call` on `param` in place from `grad`, updating `state` (checked by
/// [`UpdateCall::check`] first); `sum_squares` is the device scalar of every gradient when the
/// call clips. `grad` may be in any float dtype (a bf16 model's gradient of f32 master weights),
/// read through its dtype code rather than one instantiation per gradient dtype.
/// `update_<p>_<s>(T* w, const void* g, int g_dtype, S* s0, S* s1, const double* sum_squares,
/// u64 n, int rule, double lr, double beta1, double beta2, double eps, double wd, double bias1,
/// double bias2, double max_norm, int f16_mode)`: a thread per element.
pub(crate) fn update(
    dev: &Device,
    call: &UpdateCall<'_>,
    (param, grad): (View<'_>, View<'_>),
    state: &[View<'_>],
    sum_squares: Option<View<'_>>,
) -> Result<()> {
    let c = &call.coefficients;
    let rule = match (c.kind, state.len()) {
        (RuleKind::AdamW, 2) => RULE_ADAMW,
        (RuleKind::Sgd, 1) => RULE_SGD_MOMENTUM,
        (RuleKind::Sgd, 0) => RULE_SGD,
        (kind, k) => return Err(dev.err(format!("update of `{}`: {kind:?} with {k} state buffers", call.name))),
    };
    if param_suffix(grad.dtype).is_none() {
        return Err(dev.err(format!("update of `{}`: a {} gradient", call.name, grad.dtype)));
    }
    let state_dtype = state.first().map_or(DType::F32, |s| s.dtype);
    // One instantiation per (param, state) pair: both moments must share theirs.
    if state.iter().any(|s| s.dtype != state_dtype) {
        return Err(dev.err(format!(
            "update of `{}`: the CUDA backend keeps every state buffer of a parameter in one dtype",
            call.name
        )));
    }
    let name = update_kernel(param.dtype, state_dtype).ok_or_else(|| {
        dev.err(format!(
            "update of `{}`: no kernel for a {} parameter with {state_dtype} state",
            call.name, param.dtype
        ))
    })?;
    let state_ptr = |k: usize| Arg::U64(state.get(k).map_or(0, |s| s.ptr));
    let n = param.numel();
    let args = [
        param.arg(),
        grad.arg(),
        Arg::I32(dtype_code(grad.dtype)),
        state_ptr(0),
        state_ptr(1),
        Arg::U64(sum_squares.map_or(0, |s| s.ptr)),
        Arg::U64(n as u64),
        Arg::I32(rule),
        Arg::F64(c.lr),
        Arg::F64(c.beta1),
        Arg::F64(c.beta2),
        Arg::F64(c.eps),
        Arg::F64(c.weight_decay),
        Arg::F64(c.bias1),
        Arg::F64(c.bias2),
        Arg::F64(call.max_norm.unwrap_or(0.0)),
        Arg::I32(f16_rounding()),
    ];
    dev.launch_1d(&OPTIM, &name, n, &args)
}

/// `out` (one f64) = Σ x² over every element of `xs` (float dtypes, checked by the caller).
///
/// Scratch: one f64 partial per block of the largest grid (at most [`MAX_PARTIALS`], 8 KiB),
/// zeroed, then `sum_squares_part_T(const T* x, u64 n, double* partial)` per tensor in order
/// (block `b` adds into partial `b`), then `sum_squares_finish(const double* partial, u64
/// count, double* out)` on one block. The grids depend only on the sizes, so the sum is
/// deterministic; the scratch is freed stream-ordered on return.
pub(crate) fn sum_squares(dev: &Device, xs: &[View<'_>], out: View<'_>) -> Result<()> {
    let names = xs
        .iter()
        .map(|x| {
            sum_squares_kernel(x.dtype).ok_or_else(|| dev.err(format!("a sum of squares of a {} tensor", x.dtype)))
        })
        .collect::<Result<Vec<_>>>()?;
    let blocks = |x: &View<'_>| x.numel().div_ceil(THREADS as usize).min(MAX_PARTIALS);
    let count = xs.iter().map(blocks).max().unwrap_or(0).max(1);
    let scratch = Scratch::new(dev, count * DType::F64.size())?;
    zero(dev, View { ptr: scratch.ptr, shape: &[count], dtype: DType::F64 })?;
    for (x, name) in xs.iter().zip(&names) {
        let args = [x.arg(), Arg::U64(x.numel() as u64), Arg::U64(scratch.ptr)];
        dev.launch(&OPTIM, name, (blocks(x) as u32, 1, 1), (THREADS, 1, 1), &args)?;
    }
    let args = [Arg::U64(scratch.ptr), Arg::U64(count as u64), out.arg()];
    dev.launch(&OPTIM, "sum_squares_finish", (1, 1, 1), (THREADS, 1, 1), &args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// f64s of every exponent an f16 or bf16 rounds into, with random low bits (both words).
    fn samples() -> impl Iterator<Item = f64> {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        (0..50_000).map(move |_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let exponent = 1023 - 30 + (s >> 58) as i64 % 50;
            f64::from_bits((s & 0x800F_FFFF_FFFF_FFFF) | ((exponent as u64) << 52))
        })
    }

    /// The probe's verdict models the reference's f16 rounding on every sample (the single
    /// correct rounding of aarch64 is only probed: no software model of it here).
    #[test]
    fn the_probed_f16_rounding_is_the_one_host_update_uses_here() {
        let mode = f16_rounding();
        let model = |x: f64| match mode {
            F16_UPPER_WORD => Some(f16::from_f64_const(x)),
            F16_VIA_F32 => Some(f16::from_f32_const(x as f32)),
            _ => None,
        };
        for x in samples() {
            if let Some(want) = model(x) {
                assert_eq!(host_rounding(x, DType::F16), Some(want.to_f64()), "{x:e} (mode {mode})");
            }
        }
    }

    /// `optim.cu` stores bf16 with the prelude's upper-word rounding (`half`'s only path today):
    /// a reference that rounds otherwise must change the kernel too.
    #[test]
    fn host_update_rounds_f64_to_bf16_from_the_upper_word() {
        for x in samples() {
            assert_eq!(host_rounding(x, DType::BF16), Some(bf16::from_f64_const(x).to_f64()), "{x:e}");
        }
    }

    #[test]
    fn kernel_names_cover_every_float_parameter_and_state_dtype() {
        assert_eq!(update_kernel(DType::BF16, DType::F32).as_deref(), Some("update_bf16_f32"));
        assert_eq!(update_kernel(DType::F8E5M2, DType::F64).as_deref(), Some("update_f8e5m2_f64"));
        assert_eq!(update_kernel(DType::F32, DType::BF16), None);
        assert_eq!(update_kernel(DType::I64, DType::F32), None);
        assert_eq!(sum_squares_kernel(DType::F8E4M3).as_deref(), Some("sum_squares_part_f8e4m3"));
        assert_eq!(sum_squares_kernel(DType::Bool), None);
    }
}
