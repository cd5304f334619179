// Row-wise network ops over the last axis, one block per row (warp shuffles, then shared
// memory across warps): softmax, log-softmax, their gradients, layer norm and its gradient,
// cross-entropy and its gradient; and the embedding gather with its deterministic scatter-add.

// Row max (NaN-propagating) and `max + ln Σ exp(x − max)`; a row of −∞ gives −∞.
template <typename T, typename C>
__device__ __forceinline__ C row_lse(const T* x, u64 base, u64 d, C* smem, C* max_out) {
    C m = neg_inf((C)0);
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) m = MaxOp()(m, ld(x, base + j));
    m = block_reduce(m, MaxOp(), neg_inf((C)0), smem);
    *max_out = m;
    if (m == neg_inf((C)0)) return m;
    C s = 0;
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) s += m_exp(ld(x, base + j) - m);
    s = block_reduce(s, SumOp(), (C)0, smem);
    return m + m_log(s);
}

template <typename T>
__device__ void softmax(const T* x, T* y, u64 rows, u64 d, int log) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * d;
        if (log) {
            C m;
            C lse = row_lse(x, base, d, smem, &m);
            for (u64 j = threadIdx.x; j < d; j += blockDim.x) st(y, base + j, ld(x, base + j) - lse);
        } else {
            C m = neg_inf((C)0);
            for (u64 j = threadIdx.x; j < d; j += blockDim.x) m = MaxOp()(m, ld(x, base + j));
            m = block_reduce(m, MaxOp(), neg_inf((C)0), smem);
            C s = 0;
            for (u64 j = threadIdx.x; j < d; j += blockDim.x) s += m_exp(ld(x, base + j) - m);
            s = block_reduce(s, SumOp(), (C)0, smem);
            for (u64 j = threadIdx.x; j < d; j += blockDim.x) st(y, base + j, m_exp(ld(x, base + j) - m) / s);
        }
    }
}

// softmax: y·(g − Σ g·y); log-softmax: g − exp(y)·Σ g.
template <typename T>
__device__ void softmax_grad(const T* y, const T* g, T* dx, u64 rows, u64 d, int log) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * d;
        C s = 0;
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) s += log ? ld(g, base + j) : ld(y, base + j) * ld(g, base + j);
        s = block_reduce(s, SumOp(), (C)0, smem);
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
            C yv = ld(y, base + j), gv = ld(g, base + j);
            st(dx, base + j, log ? gv - m_exp(yv) * s : yv * (gv - s));
        }
    }
}

// Mean and 1/sqrt(var + eps) of a row (biased variance, two passes).
template <typename T, typename C>
__device__ __forceinline__ void moments(const T* x, u64 base, u64 d, C eps, C* smem, C* mean, C* rstd) {
    C s = 0;
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) s += ld(x, base + j);
    C mu = block_reduce(s, SumOp(), (C)0, smem) / (C)d;
    C v = 0;
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
        C t = ld(x, base + j) - mu;
        v += t * t;
    }
    C var = block_reduce(v, SumOp(), (C)0, smem) / (C)d;
    *mean = mu;
    *rstd = (C)1 / m_sqrt(var + eps);
}

template <typename T>
__device__ void layer_norm(const T* x, T* y, u64 rows, u64 d, double eps) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * d;
        C mean, rstd;
        moments(x, base, d, (C)eps, smem, &mean, &rstd);
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) st(y, base + j, (ld(x, base + j) - mean) * rstd);
    }
}

// rstd·(g − mean(g) − x̂·mean(g·x̂)).
template <typename T>
__device__ void layer_norm_grad(const T* x, const T* g, T* dx, u64 rows, u64 d, double eps) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * d;
        C mean, rstd;
        moments(x, base, d, (C)eps, smem, &mean, &rstd);
        C sg = 0, sgx = 0;
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
            C gv = ld(g, base + j);
            sg += gv;
            sgx += gv * (ld(x, base + j) - mean) * rstd;
        }
        C g_mean = block_reduce(sg, SumOp(), (C)0, smem) / (C)d;
        C gx_mean = block_reduce(sgx, SumOp(), (C)0, smem) / (C)d;
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
            C xv = ld(x, base + j), gv = ld(g, base + j);
            st(dx, base + j, rstd * (gv - g_mean - (xv - mean) * rstd * gx_mean));
        }
    }
}

// RMS normalisation: x·r with r = 1/sqrt(mean(x²) + eps), and its gradient r·(g − x̂·mean(g·x̂)).
template <typename T, typename C>
__device__ __forceinline__ C inv_rms(const T* x, u64 base, u64 d, C eps, C* smem) {
    C s = 0;
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
        C v = ld(x, base + j);
        s += v * v;
    }
    C ms = block_reduce(s, SumOp(), (C)0, smem) / (C)d;
    return (C)1 / m_sqrt(ms + eps);
}

template <typename T>
__device__ void rms_norm(const T* x, T* y, u64 rows, u64 d, double eps) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * d;
        C inv = inv_rms(x, base, d, (C)eps, smem);
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) st(y, base + j, ld(x, base + j) * inv);
    }
}

template <typename T>
__device__ void rms_norm_grad(const T* x, const T* g, T* dx, u64 rows, u64 d, double eps) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * d;
        C inv = inv_rms(x, base, d, (C)eps, smem);
        C sgx = 0;
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) sgx += ld(g, base + j) * ld(x, base + j) * inv;
        C gx = block_reduce(sgx, SumOp(), (C)0, smem) / (C)d;
        for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
            C xv = ld(x, base + j), gv = ld(g, base + j);
            st(dx, base + j, inv * (gv - xv * inv * gx));
        }
    }
}

// Per-row loss `lse − row[target]` into `partial` (f32/f64); a bad target is reported.
template <typename T>
__device__ void cross_entropy_rows(const T* logits, const i64* targets, typename Acc<T>::type* partial, u64 rows,
                                   u64 c, u64* flag, u64 node) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * c;
        C m;
        C lse = row_lse(logits, base, c, smem, &m);
        i64 t = targets[r];
        if (threadIdx.x == 0) {
            if (t < 0 || (u64)t >= c) {
                report_bad_id(flag, node, r, t);
                partial[r] = (C)f32_nan();
            } else {
                partial[r] = lse - ld(logits, base + (u64)t);
            }
        }
    }
}

// out[0] = Σ partial / rows, one block, fixed order.
template <typename T>
__device__ void mean_finish(const typename Acc<T>::type* partial, T* out, u64 rows) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    C s = 0;
    for (u64 j = threadIdx.x; j < rows; j += blockDim.x) s += partial[j];
    s = block_reduce(s, SumOp(), (C)0, smem);
    if (threadIdx.x == 0) st(out, 0, s / (C)rows);
}

// (softmax(row) − onehot(target))·g / rows.
template <typename T>
__device__ void cross_entropy_grad(const T* logits, const i64* targets, const T* g, T* dx, u64 rows, u64 c,
                                   u64* flag, u64 node) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    C scale = ld(g, 0) / (C)rows;
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        u64 base = r * c;
        C m;
        C lse = row_lse(logits, base, c, smem, &m);
        i64 t = targets[r];
        if (threadIdx.x == 0 && (t < 0 || (u64)t >= c)) report_bad_id(flag, node, r, t);
        for (u64 j = threadIdx.x; j < c; j += blockDim.x) {
            C v = m_exp(ld(logits, base + j) - lse) * scale;
            if ((i64)j == t) v = v - scale;
            st(dx, base + j, v);
        }
    }
}

// Gathers table rows by id, raw elements of 1, 2, 4 or 8 bytes.
#define GATHER(E, s)                                                                                           \
    extern "C" __global__ void embedding_##s(const E* table, const i64* ids, E* out, u64 n_ids, u64 d,       \
                                             u64 rows, u64* flag, u64 node) {                                 \
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n_ids * d;                               \
             i += (u64)gridDim.x * blockDim.x) {                                                              \
            u64 k = i / d, col = i % d;                                                                       \
            i64 id = ids[k];                                                                                  \
            if (id < 0 || (u64)id >= rows) {                                                                  \
                if (col == 0) report_bad_id(flag, node, k, id);                                               \
                out[i] = (E)0;                                                                                \
            } else {                                                                                          \
                out[i] = table[(u64)id * d + col];                                                            \
            }                                                                                                 \
        }                                                                                                     \
    }
GATHER(u8, 1) GATHER(u16, 2) GATHER(u32, 4) GATHER(u64, 8)

// Scatter-add of g's rows by id into acc [rows, d] (f32/f64), deterministically: block b owns
// output rows [b·per_block, (b+1)·per_block) and walks the ids in order.
template <typename T>
__device__ void embedding_grad(const i64* ids, const T* g, typename Acc<T>::type* acc, u64 n_ids, u64 d, u64 rows,
                               u64 per_block, u64* flag, u64 node) {
    typedef typename Acc<T>::type C;
    u64 r0 = (u64)blockIdx.x * per_block;
    u64 r1 = min(rows, r0 + per_block);
    for (u64 i = threadIdx.x; i < (r1 - r0) * d; i += blockDim.x) acc[r0 * d + i] = (C)0;
    __syncthreads();
    for (u64 k = 0; k < n_ids; ++k) {
        i64 id = ids[k];
        if (id < 0 || (u64)id >= rows) {
            if (blockIdx.x == 0 && threadIdx.x == 0) report_bad_id(flag, node, k, id);
            continue;
        }
        u64 r = (u64)id;
        if (r < r0 || r >= r1) continue;
        for (u64 col = threadIdx.x; col < d; col += blockDim.x) acc[r * d + col] += ld(g, k * d + col);
    }
}

#define INST(T, s)                                                                                             \
    extern "C" __global__ void softmax_##s(const T* x, T* y, u64 rows, u64 d, int log) {                     \
        softmax<T>(x, y, rows, d, log);                                                                       \
    }                                                                                                         \
    extern "C" __global__ void softmax_grad_##s(const T* y, const T* g, T* dx, u64 rows, u64 d, int log) {   \
        softmax_grad<T>(y, g, dx, rows, d, log);                                                              \
    }                                                                                                         \
    extern "C" __global__ void rms_norm_##s(const T* x, T* y, u64 rows, u64 d, double eps) {                 \
        rms_norm<T>(x, y, rows, d, eps);                                                                      \
    }                                                                                                         \
    extern "C" __global__ void rms_norm_grad_##s(const T* x, const T* g, T* dx, u64 rows, u64 d,             \
                                                 double eps) {                                                \
        rms_norm_grad<T>(x, g, dx, rows, d, eps);                                                             \
    }                                                                                                         \
    extern "C" __global__ void layer_norm_##s(const T* x, T* y, u64 rows, u64 d, double eps) {               \
        layer_norm<T>(x, y, rows, d, eps);                                                                    \
    }                                                                                                         \
    extern "C" __global__ void layer_norm_grad_##s(const T* x, const T* g, T* dx, u64 rows, u64 d,           \
                                                   double eps) {                                              \
        layer_norm_grad<T>(x, g, dx, rows, d, eps);                                                           \
    }                                                                                                         \
    extern "C" __global__ void cross_entropy_rows_##s(const T* logits, const i64* targets,                   \
                                                      Acc<T>::type* partial, u64 rows, u64 c, u64* flag,      \
                                                      u64 node) {                                             \
        cross_entropy_rows<T>(logits, targets, partial, rows, c, flag, node);                                 \
    }                                                                                                         \
    extern "C" __global__ void mean_finish_##s(const Acc<T>::type* partial, T* out, u64 rows) {              \
        mean_finish<T>(partial, out, rows);                                                                   \
    }                                                                                                         \
    extern "C" __global__ void cross_entropy_grad_##s(const T* logits, const i64* targets, const T* g, T* dx, \
                                                      u64 rows, u64 c, u64* flag, u64 node) {                 \
        cross_entropy_grad<T>(logits, targets, g, dx, rows, c, flag, node);                                   \
    }                                                                                                         \
    extern "C" __global__ void embedding_grad_##s(const i64* ids, const T* g, Acc<T>::type* acc, u64 n_ids,  \
                                                  u64 d, u64 rows, u64 per_block, u64* flag, u64 node) {      \
        embedding_grad<T>(ids, g, acc, n_ids, d, rows, per_block, flag, node);                                \
    }
FOR_FLOATS(INST)
#undef INST
