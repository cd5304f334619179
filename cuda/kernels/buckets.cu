// The gradient buckets of a data-parallel step reduced on the device (`remat_cuda::NcclGradients`):
// each gradient packed into an f32 bucket, the mean of the buckets NCCL gathered from every rank,
// and each parameter's mean written back in its gradient's dtype.
//
// The bits are the host path's (`remat_dist`'s bucket reduction, then `HostData::from_f32`): the
// f32 sum in rank order (rank 0's value, plus rank 1's, ...), one f32 division by the world size,
// then one rounding to nearest even to the gradient's dtype. The intrinsics spell out each rounding:
// `--fmad=true` may not contract adds and a division into anything else.

// Gradient dtypes the host path reduces (dtype codes of `kernels.rs`); f32 holds all of them exactly.
#define GRAD_F32 0
#define GRAD_BF16 2
#define GRAD_F16 3

// `bucket[i] = g[i]` widened to f32, for `n` elements of dtype code `dt` (one per launch, so the
// branch is uniform).
extern "C" __global__ void bucket_pack(const void* g, int dt, float* bucket, u64 n) {
    GRID_STRIDE(i, n) {
        switch (dt) {
            case GRAD_BF16: bucket[i] = bf16_to_float(((const u16*)g)[i]); break;
            case GRAD_F16: bucket[i] = half_to_float(((const u16*)g)[i]); break;
            default: bucket[i] = ((const float*)g)[i]; break;
        }
    }
}

// `mean[i] = (gathered[0][i] + gathered[1][i] + ... + gathered[world-1][i]) / world`: `gathered`
// holds `world` rows of `len` values, rank 0's first (NCCL's all-gather order). The sum starts
// from rank 0's value, as the host's does: from +0 a sum of negative zeros would come out positive.
// A NaN stays a NaN (the GPU's canonical one, where the CPU may keep the payload).
extern "C" __global__ void bucket_mean(const float* gathered, u64 len, u64 world, float* mean) {
    // Rust's `world as f32`: round to nearest, exact below 2^24.
    float w = __ull2float_rn(world);
    GRID_STRIDE(i, len) {
        float s = gathered[i];
        for (u64 r = 1; r < world; ++r) s = __fadd_rn(s, gathered[r * len + i]);
        mean[i] = __fdiv_rn(s, w);
    }
}

// `g[i] = mean[i]` rounded to dtype code `dt` as `HostData::from_f32` rounds (`half`'s
// `from_f32`: to nearest even), in place of the gradient.
extern "C" __global__ void bucket_unpack(const float* mean, void* g, int dt, u64 n) {
    GRID_STRIDE(i, n) {
        float v = mean[i];
        switch (dt) {
            case GRAD_BF16: ((u16*)g)[i] = float_to_bf16(v); break;
            case GRAD_F16: ((u16*)g)[i] = float_to_half(v); break;
            default: ((float*)g)[i] = v; break;
        }
    }
}
