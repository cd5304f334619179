// The optimizer kernels: one fused step of AdamW or SGD on one parameter in place, and the sum
// of squares of the gradients that global-norm clipping reads.
//
// The update follows `remat_core::Coefficients::{adamw, sgd}` bit for bit: every element is
// widened exactly to f64, the arithmetic is spelt with round-to-nearest intrinsics in the Rust
// order (NVRTC runs with `--fmad=true`, and a contracted `a * b + c` would round once where the
// CPU rounds twice), and each stored value goes from f64 to its buffer's dtype exactly as the
// CPU's `as f32` and `half`/`float8` conversions take it (see `put`: not always one correct
// rounding, but always the CPU's bits).

// fp8 parameters, stored as their raw byte.
struct f8e4m3 { u8 bits; };
struct f8e5m2 { u8 bits; };

// ---- exact widening to f64 ------------------------------------------------------------------------
__device__ __forceinline__ double wide(float x) { return (double)x; }
__device__ __forceinline__ double wide(double x) { return x; }
__device__ __forceinline__ double wide(bf16 x) { return (double)bf16_to_float(x.bits); }
__device__ __forceinline__ double wide(f16 x) { return (double)half_to_float(x.bits); }
__device__ __forceinline__ double wide(f8e4m3 x) { return (double)e4m3_to_float(x.bits); }
__device__ __forceinline__ double wide(f8e5m2 x) { return (double)e5m2_to_float(x.bits); }

// The gradient in any float dtype (a model computing in bf16 hands bf16 gradients to f32 master
// weights); `dt` is its dtype code (`kernels.rs`), one per launch, so the branch is uniform.
__device__ __forceinline__ double wide_any(const void* p, int dt, u64 i) {
    switch (dt) {
        case 0: return wide(((const float*)p)[i]);
        case 1: return wide(((const double*)p)[i]);
        case 2: return wide(((const bf16*)p)[i]);
        case 3: return wide(((const f16*)p)[i]);
        case 4: return wide(((const f8e4m3*)p)[i]);
        default: return wide(((const f8e5m2*)p)[i]);
    }
}

// ---- one rounding from f64, as the host rounds ----------------------------------------------------
// `half::f16::from_f64` rounds differently by host CPU (the launch site probes which):
// F16_UPPER_WORD is its software path (the upper 32 bits of the f64, `f64_to_f16` in the
// prelude), F16_VIA_F32 its x86 F16C path (`as f32`, then to f16: two roundings), F16_DIRECT
// its aarch64 FP16 path (one correct rounding).
#define F16_UPPER_WORD 0
#define F16_VIA_F32 1
#define F16_DIRECT 2

__device__ __forceinline__ u16 f64_to_f16_rn(double v) {
    u16 h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(v));
    return h;
}
__device__ __forceinline__ u16 f64_to_f16_as_host(double v, int mode) {
    switch (mode) {
        case F16_VIA_F32: return float_to_half(__double2float_rn(v));
        case F16_DIRECT: return f64_to_f16_rn(v);
        default: return f64_to_f16(v);
    }
}

__device__ __forceinline__ void put(float* p, double v, int) { *p = __double2float_rn(v); }
__device__ __forceinline__ void put(double* p, double v, int) { *p = v; }
// `half::bf16::from_f64` has no hardware path: always the prelude's upper-word rounding.
__device__ __forceinline__ void put(bf16* p, double v, int) { p->bits = f64_to_bf16(v); }
__device__ __forceinline__ void put(f16* p, double v, int f16_mode) { p->bits = f64_to_f16_as_host(v, f16_mode); }
// `remat_core::dtype::f64_to_e4m3` / `f64_to_e5m2`: saturating, one rounding.
__device__ __forceinline__ void put(f8e4m3* p, double v, int) { p->bits = double_to_e4m3(v); }
__device__ __forceinline__ void put(f8e5m2* p, double v, int) { p->bits = double_to_e5m2(v); }

// ---- the update -------------------------------------------------------------------------------------
#define RULE_SGD 0
#define RULE_SGD_MOMENTUM 1
#define RULE_ADAMW 2

// `remat_core::clip_factor`: `min(1, max_norm / (sqrt(ss) + 1e-6))`, a NaN quotient (a NaN
// gradient) staying NaN, as `torch.clamp` keeps it.
__device__ __forceinline__ double clip_factor(double max_norm, double sum_squares) {
    double f = __ddiv_rn(max_norm, __dadd_rn(__dsqrt_rn(sum_squares), 1e-6));
    return f >= 1.0 ? 1.0 : f;
}

// One step of `rule` on `n` elements of `w` from `g` (dtype code `g_dtype`); `s0`, `s1` are the
// state buffers the rule keeps (velocity; or m, v), null otherwise; `sum_squares` (one f64 on
// the device) is null without clipping. The clip factor is computed per thread from the device scalar rather than
// on the host, which would need a download.
template <typename T, typename S>
__device__ void update(T* w, const void* g, int g_dtype, S* s0, S* s1, const double* sum_squares, u64 n, int rule,
                       double lr, double beta1, double beta2, double eps, double wd, double bias1, double bias2,
                       double max_norm, int f16_mode) {
    double scale = sum_squares ? clip_factor(max_norm, *sum_squares) : 1.0;
    GRID_STRIDE(i, n) {
        double wi = wide(w[i]);
        double gi = __dmul_rn(wide_any(g, g_dtype, i), scale);
        double step = gi;
        if (rule == RULE_ADAMW) {
            double m = __dadd_rn(__dmul_rn(beta1, wide(s0[i])), __dmul_rn(__dsub_rn(1.0, beta1), gi));
            double v = __dadd_rn(__dmul_rn(beta2, wide(s1[i])), __dmul_rn(__dmul_rn(__dsub_rn(1.0, beta2), gi), gi));
            // The step reads the f64 moments; only the stored ones are rounded.
            step = __ddiv_rn(__ddiv_rn(m, bias1), __dadd_rn(__dsqrt_rn(__ddiv_rn(v, bias2)), eps));
            put(&s0[i], m, f16_mode);
            put(&s1[i], v, f16_mode);
        } else if (rule == RULE_SGD_MOMENTUM) {
            step = __dadd_rn(__dmul_rn(beta1, wide(s0[i])), gi);
            put(&s0[i], step, f16_mode);
        }
        put(&w[i], __dsub_rn(wi, __dmul_rn(lr, __dadd_rn(step, __dmul_rn(wd, wi)))), f16_mode);
    }
}

#define UPDATE(T, ts, S, ss)                                                                                    \
    extern "C" __global__ void update_##ts##_##ss(T* w, const void* g, int g_dtype, S* s0, S* s1,              \
                                                  const double* sum_squares, u64 n, int rule, double lr,       \
                                                  double beta1, double beta2, double eps, double wd,           \
                                                  double bias1, double bias2, double max_norm, int f16_mode) { \
        update<T, S>(w, g, g_dtype, s0, s1, sum_squares, n, rule, lr, beta1, beta2, eps, wd, bias1, bias2,     \
                     max_norm, f16_mode);                                                                      \
    }
#define UPDATE_STATES(T, ts) UPDATE(T, ts, float, f32) UPDATE(T, ts, double, f64)
#define FOR_PARAMS(INST) FOR_FLOATS(INST) INST(f8e4m3, f8e4m3) INST(f8e5m2, f8e5m2)
FOR_PARAMS(UPDATE_STATES)
#undef UPDATE_STATES
#undef UPDATE

// ---- the sum of squares -------------------------------------------------------------------------------
// Deterministic: the launch site zeroes `partial` (one f64 per block of the largest grid), then
// runs `sum_squares_part` once per tensor, in order, on a grid fixed by the tensor's size; block
// `b` adds its fixed-order tree sum to `partial[b]`, and launches on the one stream never overlap.
// `sum_squares_finish` (one block) folds the partials in a fixed order too. The same buffers
// give the same bits on every run and every GPU.

template <typename T>
__device__ void sum_squares_part(const T* x, u64 n, double* partial) {
    __shared__ double smem[32];
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        double v = wide(x[i]);
        acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
    acc = block_reduce(acc, SumOp(), 0.0, smem);
    if (threadIdx.x == 0) partial[blockIdx.x] = __dadd_rn(partial[blockIdx.x], acc);
}

extern "C" __global__ void sum_squares_finish(const double* partial, u64 count, double* out) {
    __shared__ double smem[32];
    double acc = 0.0;
    for (u64 i = threadIdx.x; i < count; i += blockDim.x) acc = __dadd_rn(acc, partial[i]);
    acc = block_reduce(acc, SumOp(), 0.0, smem);
    if (threadIdx.x == 0) *out = acc;
}

#define PART(T, s)                                                                                           \
    extern "C" __global__ void sum_squares_part_##s(const T* x, u64 n, double* partial) {                   \
        sum_squares_part<T>(x, n, partial);                                                                 \
    }
FOR_PARAMS(PART)
#undef PART
#undef FOR_PARAMS
