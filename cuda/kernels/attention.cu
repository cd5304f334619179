// Fused scaled dot-product attention (the flash-attention scheme): one warp per query row
// streams over the keys with an online softmax, so the scores are never stored; the output row
// is followed by the row's log-sum-exp. The backward recomputes probabilities from it:
// `sdpa_dq` (a warp per query row) and `sdpa_dkv` (a warp per key row) write disjoint outputs,
// so no atomics are needed and results are deterministic.

// Most head dims a warp keeps in registers: 32 lanes × 8.
#define ATT_MAXD 256
#define ATT_PER_LANE (ATT_MAXD / 32)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Where row i of attention b (of batch = outer · heads) starts in an operand of t rows of w per
// attention: [B, t, w] when heads is 1 (head-major: heads are a batch axis), else
// [outer, t, heads, w] (token-major).
__device__ __forceinline__ u64 att_row(u64 b, u64 t, u64 i, u64 heads, u64 w) {
    return ((b / heads * t + i) * heads + b % heads) * w;
}

// Lane-strided dot product of two rows of length d (every lane gets the sum).
template <typename T, typename C>
__device__ __forceinline__ C row_dot(const T* a, u64 ia, const T* b, u64 ib, u64 d) {
    C s = 0;
    for (u64 c = threadIdx.x & 31; c < d; c += 32) s += (C)ld(a, ia + c) * (C)ld(b, ib + c);
    return warp_sum(s);
}

// q [B, tq, d], k [B, tk, d], v [B, tk, dv] -> y [B, tq, dv + 1] (rows placed by att_row).
template <typename T>
__device__ void sdpa_fwd(const T* q, const T* k, const T* v, T* y, u64 batch, u64 heads, u64 tq, u64 tk, u64 d,
                         u64 dv, int causal, double scale_) {
    typedef typename Acc<T>::type C;
    C scale = (C)scale_;
    int lane = threadIdx.x & 31;
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < batch * tq; row += warps) {
        u64 b = row / tq, i = row % tq;
        u64 n = causal ? (i + 1 < tk ? i + 1 : tk) : tk;
        C acc[ATT_PER_LANE];
        for (int c = 0; c < ATT_PER_LANE; ++c) acc[c] = 0;
        C m = neg_inf((C)0), l = 0;
        for (u64 j = 0; j < n; ++j) {
            C s = row_dot<T, C>(q, att_row(b, tq, i, heads, d), k, att_row(b, tk, j, heads, d), d) * scale;
            C m_new = s > m ? s : m;
            C corr = m_exp(m - m_new);
            C p = m_exp(s - m_new);
            l = l * corr + p;
            for (int c = 0; c < ATT_PER_LANE; ++c) {
                u64 col = (u64)lane + 32 * c;
                C vj = col < dv ? (C)ld(v, att_row(b, tk, j, heads, dv) + col) : (C)0;
                acc[c] = acc[c] * corr + p * vj;
            }
            m = m_new;
        }
        u64 base = att_row(b, tq, i, heads, dv + 1);
        for (int c = 0; c < ATT_PER_LANE; ++c) {
            u64 col = (u64)lane + 32 * c;
            if (col < dv) st(y, base + col, n ? acc[c] / l : (C)0);
        }
        if (lane == 0) st(y, base + dv, n ? m + m_log(l) : neg_inf((C)0));
    }
}

// delta[row] = dout·out − dlse, from the saved [out | lse] and its gradient.
template <typename T>
__device__ void sdpa_delta(const T* o, const T* g, typename Acc<T>::type* delta, u64 rows, u64 heads, u64 tq,
                           u64 dv) {
    typedef typename Acc<T>::type C;
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < rows; row += warps) {
        u64 at = att_row(row / tq, tq, row % tq, heads, dv + 1);
        C s = row_dot<T, C>(o, at, g, at, dv);
        if ((threadIdx.x & 31) == 0) delta[row] = s - (C)ld(g, at + dv);
    }
}

// dq rows: dq_i = scale · Σ_j p_ij (dp_ij − delta_i) k_j. The output holds, per outer index,
// dq [tq, heads, d], dk [tk, heads, d] and dv [tk, heads, dv] (heads 1: per attention).
template <typename T>
__device__ void sdpa_dq(const T* q, const T* k, const T* v, const T* o, const T* g,
                        const typename Acc<T>::type* delta, T* out, u64 batch, u64 heads, u64 tq, u64 tk, u64 d,
                        u64 dv, int causal, double scale_) {
    typedef typename Acc<T>::type C;
    C scale = (C)scale_;
    int lane = threadIdx.x & 31;
    u64 per = heads * (tq * d + tk * d + tk * dv);
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < batch * tq; row += warps) {
        u64 b = row / tq, i = row % tq;
        u64 n = causal ? (i + 1 < tk ? i + 1 : tk) : tk;
        u64 qo = att_row(b, tq, i, heads, dv + 1);
        C lse = (C)ld(o, qo + dv);
        C acc[ATT_PER_LANE];
        for (int c = 0; c < ATT_PER_LANE; ++c) acc[c] = 0;
        for (u64 j = 0; j < n; ++j) {
            u64 kr = att_row(b, tk, j, heads, d);
            C p = m_exp(row_dot<T, C>(q, att_row(b, tq, i, heads, d), k, kr, d) * scale - lse);
            C dp = row_dot<T, C>(g, qo, v, att_row(b, tk, j, heads, dv), dv);
            C ds = p * (dp - delta[row]) * scale;
            for (int c = 0; c < ATT_PER_LANE; ++c) {
                u64 col = (u64)lane + 32 * c;
                if (col < d) acc[c] += ds * (C)ld(k, kr + col);
            }
        }
        u64 at = b / heads * per + att_row(b % heads, tq, i, heads, d);
        for (int c = 0; c < ATT_PER_LANE; ++c) {
            u64 col = (u64)lane + 32 * c;
            if (col < d) st(out, at + col, acc[c]);
        }
    }
}

// dk and dv rows: dk_j = scale · Σ_i ds_ij q_i, dv_j = Σ_i p_ij dout_i.
template <typename T>
__device__ void sdpa_dkv(const T* q, const T* k, const T* v, const T* o, const T* g,
                         const typename Acc<T>::type* delta, T* out, u64 batch, u64 heads, u64 tq, u64 tk, u64 d,
                         u64 dv, int causal, double scale_) {
    typedef typename Acc<T>::type C;
    C scale = (C)scale_;
    int lane = threadIdx.x & 31;
    u64 per = heads * (tq * d + tk * d + tk * dv);
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < batch * tk; row += warps) {
        u64 b = row / tk, j = row % tk;
        C dk[ATT_PER_LANE], dvv[ATT_PER_LANE];
        for (int c = 0; c < ATT_PER_LANE; ++c) dk[c] = dvv[c] = 0;
        u64 kr = att_row(b, tk, j, heads, d), vr = att_row(b, tk, j, heads, dv);
        for (u64 i = causal ? j : 0; i < tq; ++i) {
            u64 qr = att_row(b, tq, i, heads, d), gr = att_row(b, tq, i, heads, dv + 1);
            C lse = (C)ld(o, gr + dv);
            C p = m_exp(row_dot<T, C>(q, qr, k, kr, d) * scale - lse);
            C dp = row_dot<T, C>(g, gr, v, vr, dv);
            C ds = p * (dp - delta[b * tq + i]) * scale;
            for (int c = 0; c < ATT_PER_LANE; ++c) {
                u64 col = (u64)lane + 32 * c;
                if (col < d) dk[c] += ds * (C)ld(q, qr + col);
                if (col < dv) dvv[c] += p * (C)ld(g, gr + col);
            }
        }
        u64 base = b / heads * per, h = b % heads;
        u64 at_k = base + heads * tq * d + att_row(h, tk, j, heads, d);
        u64 at_v = base + heads * (tq * d + tk * d) + att_row(h, tk, j, heads, dv);
        for (int c = 0; c < ATT_PER_LANE; ++c) {
            u64 col = (u64)lane + 32 * c;
            if (col < d) st(out, at_k + col, dk[c]);
            if (col < dv) st(out, at_v + col, dvv[c]);
        }
    }
}

#define INST(T, s)                                                                                             \
    extern "C" __global__ void sdpa_fwd_##s(const T* q, const T* k, const T* v, T* y, u64 batch, u64 heads,   \
                                            u64 tq, u64 tk, u64 d, u64 dv, int causal, double scale) {        \
        sdpa_fwd<T>(q, k, v, y, batch, heads, tq, tk, d, dv, causal, scale);                                  \
    }                                                                                                         \
    extern "C" __global__ void sdpa_delta_##s(const T* o, const T* g, Acc<T>::type* delta, u64 rows,          \
                                              u64 heads, u64 tq, u64 dv) {                                    \
        sdpa_delta<T>(o, g, delta, rows, heads, tq, dv);                                                      \
    }                                                                                                         \
    extern "C" __global__ void sdpa_dq_##s(const T* q, const T* k, const T* v, const T* o, const T* g,         \
                                           const Acc<T>::type* delta, T* out, u64 batch, u64 heads, u64 tq,   \
                                           u64 tk, u64 d, u64 dv, int causal, double scale) {                 \
        sdpa_dq<T>(q, k, v, o, g, delta, out, batch, heads, tq, tk, d, dv, causal, scale);                    \
    }                                                                                                         \
    extern "C" __global__ void sdpa_dkv_##s(const T* q, const T* k, const T* v, const T* o, const T* g,        \
                                            const Acc<T>::type* delta, T* out, u64 batch, u64 heads, u64 tq,  \
                                            u64 tk, u64 d, u64 dv, int causal, double scale) {                \
        sdpa_dkv<T>(q, k, v, o, g, delta, out, batch, heads, tq, tk, d, dv, causal, scale);                   \
    }
FOR_FLOATS(INST)
#undef INST
