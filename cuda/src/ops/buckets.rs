//! Gradient buckets on the device (`buckets.cu`), for [`crate::NcclGradients`]: packing a
//! gradient into an f32 bucket, the rank-order mean of gathered buckets, and writing a mean back
//! in the gradient's dtype. Every launch is on the compute stream and returns at once.
#![cfg_attr(not(feature = "nccl"), allow(dead_code))]

use super::View;
use crate::device::Device;
use crate::kernels::{dtype_code, Arg, BUCKETS};
use remat_core::{DType, Result};

/// Every entry point of `buckets.cu` (the NVRTC test looks for each).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const KERNELS: [&str; 3] = ["bucket_pack", "bucket_mean", "bucket_unpack"];

/// Whether a gradient of `dtype` can be reduced: the dtypes the host path reduces (f32 holds
/// each exactly), so that both give the same bits or both refuse.
pub(crate) fn reducible(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
}

/// `bucket[0..n]` = `grad` widened to f32 (`n` its elements; `bucket` a device address with room
/// for them). `bucket_pack(const void* g, int dt, float* bucket, u64 n)`.
pub(crate) fn pack(dev: &Device, grad: View<'_>, bucket: u64) -> Result<()> {
    let n = grad.numel();
    let args = [grad.arg(), Arg::I32(dtype_code(grad.dtype)), Arg::U64(bucket), Arg::U64(n as u64)];
    dev.launch_1d(&BUCKETS, "bucket_pack", n, &args)
}

/// `mean[i]` = the rank-order f32 sum of `gathered`'s `world` rows of `len` values at `i`,
/// divided by `world` in f32. `mean` may be any `len` values apart from `gathered`.
/// `bucket_mean(const float* gathered, u64 len, u64 world, float* mean)`.
pub(crate) fn mean(dev: &Device, gathered: u64, len: usize, world: usize, mean: u64) -> Result<()> {
    let args = [Arg::U64(gathered), Arg::U64(len as u64), Arg::U64(world as u64), Arg::U64(mean)];
    dev.launch_1d(&BUCKETS, "bucket_mean", len, &args)
}

/// `grad` = `mean[0..n]` rounded to `grad`'s dtype, in place (`n` its elements).
/// `bucket_unpack(const float* mean, void* g, int dt, u64 n)`.
pub(crate) fn unpack(dev: &Device, mean: u64, grad: View<'_>) -> Result<()> {
    let n = grad.numel();
    let args = [Arg::U64(mean), grad.arg(), Arg::I32(dtype_code(grad.dtype)), Arg::U64(n as u64)];
    dev.launch_1d(&BUCKETS, "bucket_unpack", n, &args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvrtc_tests::require;
    use crate::CudaBackend;
    use remat_core::{normal_f64, Backend, HostData, HostTensor};

    /// `n` values of `dtype` for rank `rank`: signed zeros on every rank, values whose mean
    /// rounds at a tie or overflows f16, an f32 subnormal, then normal draws.
    fn row(n: usize, dtype: DType, rank: usize) -> HostTensor {
        let edges = [-0.0, 0.0, 1.0 + 2f64.powi(-8), 6.5e4, 1e-40, -3.0];
        let v: Vec<f64> = (0..n as u64)
            .map(|i| edges.get(i as usize).copied().unwrap_or_else(|| normal_f64(rank as u64, 7, i)))
            .collect();
        HostTensor::new(vec![n], HostData::from_f64(&v, dtype)).unwrap()
    }

    /// What the host path writes back: the rank-order f32 sum, divided by the world size in
    /// f32, rounded to the gradient's dtype.
    fn host_mean(rows: &[HostTensor]) -> HostTensor {
        let gathered: Vec<f32> = rows.iter().flat_map(HostTensor::to_f32_vec).collect();
        let world = rows.len() as f32;
        let mean: Vec<f32> = remat_dist::sum_in_rank_order(&gathered, rows.len()).iter().map(|s| s / world).collect();
        HostTensor::new(rows[0].shape().to_vec(), HostData::from_f32(&mean, rows[0].dtype())).unwrap()
    }

    /// `rows` packed into one gathered buffer, its mean taken and written into a gradient of
    /// their dtype, on the device.
    fn device_mean(g: &mut CudaBackend, rows: &[HostTensor]) -> HostTensor {
        let n = rows[0].numel();
        let gathered = g.upload(&HostTensor::f32([rows.len() * n], vec![0.0; rows.len() * n]).unwrap()).unwrap();
        let mean_buf = g.upload(&HostTensor::f32([n], vec![0.0; n]).unwrap()).unwrap();
        let grad = g.upload(&rows[0]).unwrap();
        let dev = g.device().clone();
        let uploaded: Vec<_> = rows.iter().map(|r| g.upload(r).unwrap()).collect();
        for (r, buf) in uploaded.iter().enumerate() {
            pack(&dev, buf.view(), gathered.view().ptr + (r * n * 4) as u64).unwrap();
        }
        mean(&dev, gathered.view().ptr, n, rows.len(), mean_buf.view().ptr).unwrap();
        unpack(&dev, mean_buf.view().ptr, grad.view()).unwrap();
        g.download(&grad).unwrap()
    }

    fn bits(t: &HostTensor) -> Vec<u64> {
        t.to_f64_vec().iter().map(|x| x.to_bits()).collect()
    }

    /// The device's pack, mean and write-back are the host path's bits for 1 to 4 ranks in
    /// every reducible dtype (NCCL's gather replaced by packing every rank's row here).
    #[test]
    fn the_mean_of_gathered_buckets_is_the_host_paths_bit_for_bit() {
        let mut g = match CudaBackend::new(0) {
            Ok(g) => g,
            Err(e) => return require::skip("cuda", format!("the GPU is unusable: {e}")),
        };
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for world in 1..=4 {
                let rows: Vec<HostTensor> = (0..world).map(|r| row(4099, dtype, r)).collect();
                let (want, got) = (host_mean(&rows), device_mean(&mut g, &rows));
                assert_eq!(bits(&got), bits(&want), "{dtype}, {world} rank(s)");
            }
        }
    }

    #[test]
    fn the_reducible_dtypes_are_the_host_paths() {
        let reducible: Vec<DType> = DType::ALL.into_iter().filter(|&d| reducible(d)).collect();
        assert_eq!(reducible, [DType::F32, DType::BF16, DType::F16]);
    }
}
