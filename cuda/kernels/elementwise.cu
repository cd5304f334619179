// Elementwise kernels: unary ops, binary ops (contiguous and broadcasting), pointwise gradients,
// dropout, fills and scaling. Contiguous loops move 16-byte packs in grid-stride loops.

// Unary (`U_*`, one per `UnaryOp` in catalog order, then `U_CLAMP` and `U_POW`), binary (`B_*`,
// one per `BinaryOp`) and pointwise-gradient (`G_*`, one per `UnaryGradOp`, then `G_CLAMP_GRAD`)
// op codes are generated from the op catalog and defined in front of this source
// (`cuda/src/kernels.rs`, `op_codes`): a case label naming an op the catalog lacks does not
// compile, and a test finds every generated code's case.

// max(x, 0); NaN passes through (the comparison is false for it).
template <typename C> __device__ __forceinline__ C relu(C x) { return x <= (C)0 ? (C)0 : x; }

template <typename C> __device__ __forceinline__ C gelu(C x) {
    const C c = (C)0.7978845608028654, a = (C)0.044715, h = (C)0.5;
    return h * x * ((C)1 + m_tanh(c * (x + a * x * x * x)));
}
template <typename C> __device__ __forceinline__ C gelu_grad(C x) {
    const C c = (C)0.7978845608028654, a = (C)0.044715, h = (C)0.5;
    C t = m_tanh(c * (x + a * x * x * x));
    return h * ((C)1 + t) + h * x * ((C)1 - t * t) * c * ((C)1 + (C)3 * a * x * x);
}

// x^p: small integer powers by products (as the CPU), else exp(p·ln x).
template <typename C> __device__ __forceinline__ C pow_const(C x, C p) {
    if (p == (C)0) return (C)1;
    C a = p < (C)0 ? -p : p;
    if (a <= (C)16 && a == (C)(int)a) {
        C r = 1;
        for (int i = 0; i < (int)a; ++i) r = r * x;
        return p < (C)0 ? (C)1 / r : r;
    }
    if (x == (C)0) return p > (C)0 ? (C)0 : (C)1 / x;
    return m_exp(p * m_log(x));
}

template <typename C> __device__ __forceinline__ C unary_op(int op, C v, C lo, C hi) {
    switch (op) {
        case U_NEG: return -v;
        case U_EXP: return m_exp(v);
        case U_LOG: return m_log(v);
        case U_SIN: return m_sin(v);
        case U_COS: return m_cos(v);
        case U_TANH: return m_tanh(v);
        case U_SIGMOID: return (C)1 / ((C)1 + m_exp(-v));
        case U_RELU: return relu(v);
        case U_GELU: return gelu(v);
        case U_ABS: return m_abs(v);
        case U_SQRT: return m_sqrt(v);
        case U_RSQRT: return (C)1 / m_sqrt(v);
        case U_RECIPROCAL: return (C)1 / v;
        case U_SQUARE: return v * v;
        case U_SOFTPLUS: return relu(v) + m_log((C)1 + m_exp(-m_abs(v)));
        case U_CLAMP: return v < lo ? lo : (v > hi ? hi : v);
        case U_SILU: return v / ((C)1 + m_exp(-v));
        case U_POW: return pow_const(v, lo);
        default: return v;
    }
}

template <typename C> __device__ __forceinline__ C binary_op(int op, C p, C q) {
    switch (op) {
        case B_ADD: return p + q;
        case B_SUB: return p - q;
        case B_MUL: return p * q;
        case B_DIV: return p / q;
        case B_MAXIMUM: return (p >= q || p != p) ? p : q;
        case B_MINIMUM: return (p <= q || p != p) ? p : q;
        // Floored remainder, for completeness: the shape rule keeps `rem` to i64 (integer.cu).
        case B_REM: return p - q * m_floor(p / q);
        case B_MAXIMUM_MASK: return p > q ? (C)1 : (p == q ? (C)0.5 : (C)0);
        default: return p;
    }
}

template <typename C> __device__ __forceinline__ C grad_op(int op, C v, C g, C lo, C hi) {
    switch (op) {
        case G_CLAMP_GRAD: return (lo <= v && v <= hi) ? g : (C)0;
        case G_RELU_GRAD: return v > (C)0 ? g : (C)0;
        case G_GELU_GRAD: return g * gelu_grad(v);
        case G_SILU_GRAD: {
            C s = (C)1 / ((C)1 + m_exp(-v));
            return g * (s * ((C)1 + v * ((C)1 - s)));
        }
        case G_ABS_GRAD: return g * (v > (C)0 ? (C)1 : (v < (C)0 ? (C)-1 : v * (C)0));
        default: return g;
    }
}

template <typename T>
__device__ void unary(const T* x, T* y, u64 n, int op, double lo_, double hi_) {
    typedef typename Acc<T>::type C;
    const int N = 16 / sizeof(T);
    C lo = (C)lo_, hi = (C)hi_;
    u64 packs = n / N;
    const Pack<T>* xp = (const Pack<T>*)x;
    Pack<T>* yp = (Pack<T>*)y;
    GRID_STRIDE(p, packs) {
        Pack<T> a = xp[p], r;
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = mk<T>(unary_op<C>(op, cv(a.v[j]), lo, hi));
        yp[p] = r;
    }
    GRID_STRIDE(i, n - packs * N) {
        u64 k = packs * N + i;
        st(y, k, unary_op<C>(op, ld(x, k), lo, hi));
    }
}

template <typename T>
__device__ void binary(const T* a, const T* b, T* y, u64 n, int op) {
    typedef typename Acc<T>::type C;
    const int N = 16 / sizeof(T);
    u64 packs = n / N;
    const Pack<T>* ap = (const Pack<T>*)a;
    const Pack<T>* bp = (const Pack<T>*)b;
    Pack<T>* yp = (Pack<T>*)y;
    GRID_STRIDE(p, packs) {
        Pack<T> u = ap[p], v = bp[p], r;
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = mk<T>(binary_op<C>(op, cv(u.v[j]), cv(v.v[j])));
        yp[p] = r;
    }
    GRID_STRIDE(i, n - packs * N) {
        u64 k = packs * N + i;
        st(y, k, binary_op<C>(op, ld(a, k), ld(b, k)));
    }
}

// Broadcasting binary op: `da`/`db` view each operand over the (coalesced) output shape.
template <typename T>
__device__ void binary_bcast(const T* a, const T* b, T* y, u64 n, int op, Dims da, Dims db) {
    typedef typename Acc<T>::type C;
    GRID_STRIDE(i, n) { st(y, i, binary_op<C>(op, ld(a, offset_of(da, i)), ld(b, offset_of(db, i)))); }
}

template <typename T>
__device__ void pointwise_grad(const T* x, const T* g, T* y, u64 n, int op, double lo_, double hi_) {
    typedef typename Acc<T>::type C;
    const int N = 16 / sizeof(T);
    C lo = (C)lo_, hi = (C)hi_;
    u64 packs = n / N;
    const Pack<T>* xp = (const Pack<T>*)x;
    const Pack<T>* gp = (const Pack<T>*)g;
    Pack<T>* yp = (Pack<T>*)y;
    GRID_STRIDE(p, packs) {
        Pack<T> u = xp[p], v = gp[p], r;
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = mk<T>(grad_op<C>(op, cv(u.v[j]), cv(v.v[j]), lo, hi));
        yp[p] = r;
    }
    GRID_STRIDE(i, n - packs * N) {
        u64 k = packs * N + i;
        st(y, k, grad_op<C>(op, ld(x, k), ld(g, k), lo, hi));
    }
}

// Inverted dropout: element i is kept iff Philox word (i % 4) of block i / 4 (counter
// [block, key], key [seed]) is >= threshold. One thread per block of four elements.
template <typename T>
__device__ void dropout(const T* x, T* y, u64 n, u64 seed, u64 key, u64 threshold, double keep_) {
    typedef typename Acc<T>::type C;
    C keep = (C)keep_;
    GRID_STRIDE(blk, (n + 3) / 4) {
        u32 c[4] = {(u32)blk, (u32)(blk >> 32), (u32)key, (u32)(key >> 32)};
        philox4x32_10(c, (u32)seed, (u32)(seed >> 32));
        for (int j = 0; j < 4; ++j) {
            u64 k = blk * 4 + j;
            if (k < n) st(y, k, (u64)c[j] >= threshold ? ld(x, k) / keep : (C)0);
        }
    }
}

// Fills with a raw element pattern of 1, 2, 4 or 8 bytes.
#define FILL(E, suffix) \
    extern "C" __global__ void fill_##suffix(E* y, u64 n, E v) { GRID_STRIDE(i, n) { y[i] = v; } }
FILL(u8, 1) FILL(u16, 2) FILL(u32, 4) FILL(u64, 8)

#define INST(T, s)                                                                                             \
    extern "C" __global__ void unary_##s(const T* x, T* y, u64 n, int op, double lo, double hi) {           \
        unary<T>(x, y, n, op, lo, hi);                                                                        \
    }                                                                                                         \
    extern "C" __global__ void binary_##s(const T* a, const T* b, T* y, u64 n, int op) {                    \
        binary<T>(a, b, y, n, op);                                                                            \
    }                                                                                                         \
    extern "C" __global__ void binary_bcast_##s(const T* a, const T* b, T* y, u64 n, int op, Dims da,       \
                                                Dims db) {                                                    \
        binary_bcast<T>(a, b, y, n, op, da, db);                                                              \
    }                                                                                                         \
    extern "C" __global__ void pointwise_grad_##s(const T* x, const T* g, T* y, u64 n, int op, double lo,   \
                                                  double hi) {                                                \
        pointwise_grad<T>(x, g, y, n, op, lo, hi);                                                            \
    }                                                                                                         \
    extern "C" __global__ void dropout_##s(const T* x, T* y, u64 n, u64 seed, u64 key, u64 threshold,       \
                                           double keep) {                                                     \
        dropout<T>(x, y, n, seed, key, threshold, keep);                                                      \
    }
FOR_FLOATS(INST)
#undef INST
