// remat-cuda kernel prelude: prepended to every kernel source before NVRTC compiles it.
//
// No system headers (NVRTC has none): fixed-width types, storage types and their exact
// conversions, strided index arithmetic, warp/block reductions and the Philox generator.
// Dtype codes (must match `kernels.rs`): 0 f32, 1 f64, 2 bf16, 3 f16, 4 f8e4m3, 5 f8e5m2, 6 i64,
// 7 bool, 8 i32.

typedef unsigned long long u64;
typedef long long i64;
typedef int i32;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define MAXD 8

// bf16 and f16 are stored as their 16 raw bits; compute happens in f32.
struct bf16 { u16 bits; };
struct f16 { u16 bits; };

// The compute type of a storage type: f64 for f64, f32 otherwise (as on the CPU); i64 for i64
// and i32 for i32 (the kernels instantiated for numbers, floats and integers alike).
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };
template <> struct Acc<i64> { typedef i64 type; };
template <> struct Acc<i32> { typedef i32 type; };

// Rust's `as i64` / `as i32` from f64: truncated toward zero, saturating at the range, NaN to 0.
__device__ __forceinline__ i64 f64_to_i64_sat(double v) {
    return v != v ? 0
           : v >= 9223372036854775807.0 ? (i64)9223372036854775807LL
           : v <= -9223372036854775808.0 ? (i64)(-9223372036854775807LL - 1)
           : (i64)v;
}
__device__ __forceinline__ i32 f64_to_i32_sat(double v) {
    return v != v ? 0 : v >= 2147483647.0 ? 2147483647 : v <= -2147483648.0 ? (i32)(-2147483647 - 1) : (i32)v;
}

__device__ __forceinline__ float f32_nan() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ float f32_inf() { return __int_as_float(0x7f800000); }

// ---- math wrappers, one name per compute type ---------------------------------------------------
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sin(float x) { return sinf(x); }
__device__ __forceinline__ double m_sin(double x) { return sin(x); }
__device__ __forceinline__ float m_cos(float x) { return cosf(x); }
__device__ __forceinline__ double m_cos(double x) { return cos(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
__device__ __forceinline__ float m_floor(float x) { return floorf(x); }
__device__ __forceinline__ double m_floor(double x) { return floor(x); }
__device__ __forceinline__ float neg_inf(float) { return -f32_inf(); }
__device__ __forceinline__ double neg_inf(double) { return -(double)f32_inf(); }

// ---- f16 / bf16 conversions ----------------------------------------------------------------------
__device__ __forceinline__ float half_to_float(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 float_to_half(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float bf16_to_float(u16 b) { return __uint_as_float(((u32)b) << 16); }
// Round to nearest even; NaN stays NaN (quiet bit set, sign kept), as `half::bf16::from_f32`.
__device__ __forceinline__ u16 float_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

// f64 -> bf16 / f16 exactly as the `half` crate does it (it rounds from the upper 32 bits of the
// f64), so casts from f64 agree with the CPU backend bit for bit.
__device__ u16 f64_to_small(double value, int man_bits, int exp_bias, u32 exp_max) {
    u64 val = (u64)__double_as_longlong(value);
    u32 x = (u32)(val >> 32);
    u32 sign = x & 0x80000000u, exp = x & 0x7FF00000u, man = x & 0x000FFFFFu;
    u32 half_sign = sign >> 16;
    int shift = 20 - man_bits;  // bits of the f64 upper-word mantissa dropped
    u32 inf = exp_max << man_bits;
    if (exp == 0x7FF00000u) {
        u32 nan_bit = (man == 0 && (u32)val == 0) ? 0u : (1u << (man_bits - 1));
        return (u16)(half_sign | inf | nan_bit | (man >> shift));
    }
    i64 half_exp = (i64)(exp >> 20) - 1023 + exp_bias;
    if (half_exp >= (i64)exp_max) return (u16)(half_sign | inf);
    if (half_exp <= 0) {
        if (man_bits - half_exp > 21) return (u16)half_sign;
        u32 m = man | 0x00100000u;
        u32 half_man = m >> (shift + 1 - half_exp);
        u32 round_bit = 1u << (shift - half_exp);
        if ((m & round_bit) != 0 && (m & (3 * round_bit - 1)) != 0) half_man += 1;
        return (u16)(half_sign | half_man);
    }
    u32 he = ((u32)half_exp) << man_bits;
    u32 half_man = man >> shift;
    u32 round_bit = 1u << (shift - 1);
    if ((man & round_bit) != 0 && (man & (3 * round_bit - 1)) != 0) return (u16)((half_sign | he | half_man) + 1);
    return (u16)(half_sign | he | half_man);
}
__device__ __forceinline__ u16 f64_to_bf16(double v) { return f64_to_small(v, 7, 127, 0xFF); }
__device__ __forceinline__ u16 f64_to_f16(double v) { return f64_to_small(v, 10, 15, 0x1F); }

// ---- fp8 -------------------------------------------------------------------------------------------
__device__ float e4m3_to_float(u8 b) {
    u32 e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 15u && m == 7u) v = f32_nan();
    else if (e == 0u) v = ldexpf((float)m, -9);
    else v = ldexpf((float)(8u + m), (int)e - 10);
    return (b & 0x80u) ? -v : v;
}
__device__ float e5m2_to_float(u8 b) {
    u32 e = (b >> 2) & 31u, m = b & 3u;
    float v;
    if (e == 31u) v = m == 0u ? f32_inf() : f32_nan();
    else if (e == 0u) v = ldexpf((float)m, -16);
    else v = ldexpf((float)(4u + m), (int)e - 17);
    return (b & 0x80u) ? -v : v;
}
// Round to nearest even after saturating at the format's largest finite value. NaN keeps its
// sign and becomes the `float8` crate's NaN: e4m3 0x7F; e5m2 0x7E | the top two mantissa bits.
__device__ u8 double_to_fp8(double x, int man_bits, int emin, int bias, double maxv) {
    u32 s = (__double_as_longlong(x) < 0) ? 0x80u : 0u;
    if (x != x) {
        if (man_bits == 3) return (u8)(s | 0x7Fu);
        return (u8)(s | 0x7Eu | (u32)(((u64)__double_as_longlong(x) >> 50) & 3u));
    }
    double a = fabs(x);
    if (a > maxv) a = maxv;
    if (a == 0.0) return (u8)s;
    int e;
    frexp(a, &e);
    int E = max(e - 1, emin);
    double q = ldexp(1.0, E - man_bits);
    double r = rint(a / q) * q;  // exact: power-of-two scaling, integer rounding ties to even
    if (r == 0.0) return (u8)s;
    frexp(r, &e);
    E = e - 1;
    if (E < emin) return (u8)(s | (u32)(r / ldexp(1.0, emin - man_bits)));
    u32 mant = (u32)(r / ldexp(1.0, E - man_bits)) - (1u << man_bits);
    return (u8)(s | ((u32)(E + bias) << man_bits) | mant);
}
__device__ __forceinline__ u8 double_to_e4m3(double x) { return double_to_fp8(x, 3, -6, 7, 448.0); }
__device__ __forceinline__ u8 double_to_e5m2(double x) { return double_to_fp8(x, 2, -14, 15, 57344.0); }

// ---- typed loads and stores (compute type in, storage type out) -----------------------------------
__device__ __forceinline__ float ld(const float* p, u64 i) { return p[i]; }
__device__ __forceinline__ double ld(const double* p, u64 i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16* p, u64 i) { return bf16_to_float(p[i].bits); }
__device__ __forceinline__ float ld(const f16* p, u64 i) { return half_to_float(p[i].bits); }
__device__ __forceinline__ i64 ld(const i64* p, u64 i) { return p[i]; }
__device__ __forceinline__ i32 ld(const i32* p, u64 i) { return p[i]; }
__device__ __forceinline__ float cv(float v) { return v; }
__device__ __forceinline__ double cv(double v) { return v; }
__device__ __forceinline__ float cv(bf16 v) { return bf16_to_float(v.bits); }
__device__ __forceinline__ float cv(f16 v) { return half_to_float(v.bits); }
__device__ __forceinline__ void st(float* p, u64 i, float v) { p[i] = v; }
__device__ __forceinline__ void st(double* p, u64 i, double v) { p[i] = v; }
__device__ __forceinline__ void st(bf16* p, u64 i, float v) { p[i].bits = float_to_bf16(v); }
__device__ __forceinline__ void st(f16* p, u64 i, float v) { p[i].bits = float_to_half(v); }
__device__ __forceinline__ void st(i64* p, u64 i, i64 v) { p[i] = v; }
__device__ __forceinline__ void st(i32* p, u64 i, i32 v) { p[i] = v; }
template <typename T> __device__ __forceinline__ T mk(typename Acc<T>::type v);
template <> __device__ __forceinline__ float mk<float>(float v) { return v; }
template <> __device__ __forceinline__ double mk<double>(double v) { return v; }
template <> __device__ __forceinline__ bf16 mk<bf16>(float v) { bf16 r; r.bits = float_to_bf16(v); return r; }
template <> __device__ __forceinline__ f16 mk<f16>(float v) { f16 r; r.bits = float_to_half(v); return r; }

// 16-byte packs for vectorised contiguous loops (allocations are at least 256-byte aligned).
template <typename T> struct alignas(16) Pack { T v[16 / sizeof(T)]; };

// ---- strided index arithmetic -------------------------------------------------------------------
// `i` runs over `0..n` across the whole grid (any grid size).
#define GRID_STRIDE(i, n) for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// A view: `rank` axes of `shape`, stepping `stride` elements per axis (row-major enumeration).
struct Dims { u64 rank; u64 shape[MAXD]; u64 stride[MAXD]; };

// The buffer offset of the `idx`-th element of the view (32-bit division when it fits).
__device__ __forceinline__ u64 offset_of(const Dims& d, u64 idx) {
    u64 off = 0;
    if (idx < 0xffffffffull) {
        u32 i = (u32)idx;
        for (int a = (int)d.rank - 1; a >= 0; --a) {
            // An extent beyond 32 bits cannot divide an index below 2^32 - 1: clamping it
            // keeps i % s == i and i / s == 0, as the exact arithmetic gives.
            u32 s = d.shape[a] >= 0xffffffffull ? 0xffffffffu : (u32)d.shape[a];
            off += (u64)(i % s) * d.stride[a];
            i /= s;
        }
    } else {
        for (int a = (int)d.rank - 1; a >= 0; --a) {
            u64 s = d.shape[a];
            off += (idx % s) * d.stride[a];
            idx /= s;
        }
    }
    return off;
}

// ---- reductions -------------------------------------------------------------------------------------
struct SumOp { template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return a + b; } };
// NaN-propagating maximum, like the CPU's `max`.
struct MaxOp {
    template <typename C> __device__ __forceinline__ C operator()(C a, C v) const {
        return (v > a || v != v) ? v : a;
    }
};

// Reduces `v` over the block (any blockDim that is a multiple of 32, up to 1024); every thread
// gets the result. `smem` holds 32 values.
template <typename C, typename F>
__device__ __forceinline__ C block_reduce(C v, F f, C identity, C* smem) {
    for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    v = lane < warps ? smem[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---- errors found on the device (bad ids, zero divisors): first one wins -------------------------
// flag[0] = what was found (0 nothing; codes must match `device.rs`), flag[1] = the reporting
// node (its id and op kind, packed by the host), flag[2] = position, flag[3] = the bad value.
#define REPORT_BAD_ID 1
#define REPORT_DIV_ZERO 2
__device__ __forceinline__ void report(u64* flag, u64 what, u64 node, u64 pos, i64 value) {
    if (atomicCAS(flag, 0ull, what) == 0ull) {
        flag[1] = node;
        flag[2] = pos;
        flag[3] = (u64)value;
        __threadfence();
    }
}
__device__ __forceinline__ void report_bad_id(u64* flag, u64 node, u64 pos, i64 value) {
    report(flag, REPORT_BAD_ID, node, pos, value);
}
// An integer division (or remainder) by zero at output element `pos`.
__device__ __forceinline__ void report_div_zero(u64* flag, u64 node, u64 pos) {
    report(flag, REPORT_DIV_ZERO, node, pos, 0);
}

// ---- Philox4x32-10 (bit-identical to remat_core::rng) --------------------------------------------
__device__ __forceinline__ void philox4x32_10(u32 c[4], u32 k0, u32 k1) {
    for (int r = 0; r < 10; ++r) {
        u32 hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        u32 hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        u32 n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

// Instantiates `NAME_<suffix>` for every float storage type from a template `NAME<T>` wrapper
// macro `INST(T, suffix)`.
#define FOR_FLOATS(INST) INST(float, f32) INST(double, f64) INST(bf16, bf16) INST(f16, f16)
// The integer storage types (`NAME_i64`, `NAME_i32`).
#define FOR_INTS(INST) INST(i64, i64) INST(i32, i32)
// The same for every number type: the floats, then the integers.
#define FOR_NUMBERS(INST) FOR_FLOATS(INST) FOR_INTS(INST)
