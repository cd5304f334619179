// Reductions over any set of axes (sum, mean, amax) and the gradient of amax.
//
// The host splits the input's axes into `kept` (output order) and `red` (the reduction group),
// each a strided view of the input. When the group is contiguous, one block reduces one output
// with warp shuffles (`reduce_rows`); otherwise one thread folds a slice of the group for one
// output (`reduce_cols`, coalesced over neighbouring outputs) into f32/f64 partials that
// `reduce_finish` folds in a fixed order. Every result is deterministic.

#define R_SUM 0
#define R_MEAN 1
#define R_MAX 2

template <typename T>
__device__ void reduce_rows(const T* x, T* out, Dims kept, Dims red, u64 n_out, u64 group, int mode) {
    typedef typename Acc<T>::type C;
    __shared__ C smem[32];
    bool is_max = mode == R_MAX;
    C identity = is_max ? neg_inf((C)0) : (C)0;
    for (u64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        u64 base = offset_of(kept, o);
        C acc = identity;
        bool contiguous = red.rank == 1 && red.stride[0] == 1;
        for (u64 j = threadIdx.x; j < group; j += blockDim.x) {
            C v = ld(x, base + (contiguous ? j : offset_of(red, j)));
            acc = is_max ? MaxOp()(acc, v) : acc + v;
        }
        acc = is_max ? block_reduce(acc, MaxOp(), identity, smem) : block_reduce(acc, SumOp(), identity, smem);
        if (mode == R_MEAN) acc = acc / (C)group;
        if (threadIdx.x == 0) st(out, o, acc);
    }
}

// Partial folds: output o, slice s = blockIdx.y of `chunk` group elements -> partial[s * n_out + o].
template <typename T>
__device__ void reduce_cols(const T* x, typename Acc<T>::type* partial, Dims kept, Dims red, u64 n_out,
                            u64 group, u64 chunk, int mode) {
    typedef typename Acc<T>::type C;
    bool is_max = mode == R_MAX;
    u64 j0 = (u64)blockIdx.y * chunk;
    u64 j1 = min(group, j0 + chunk);
    for (u64 o = (u64)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += (u64)gridDim.x * blockDim.x) {
        u64 base = offset_of(kept, o);
        C acc = is_max ? neg_inf((C)0) : (C)0;
        for (u64 j = j0; j < j1; ++j) {
            C v = ld(x, base + offset_of(red, j));
            acc = is_max ? MaxOp()(acc, v) : acc + v;
        }
        partial[(u64)blockIdx.y * n_out + o] = acc;
    }
}

template <typename T>
__device__ void reduce_finish(const typename Acc<T>::type* partial, T* out, u64 n_out, u64 splits, u64 group,
                              int mode) {
    typedef typename Acc<T>::type C;
    bool is_max = mode == R_MAX;
    for (u64 o = (u64)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += (u64)gridDim.x * blockDim.x) {
        C acc = is_max ? neg_inf((C)0) : (C)0;
        for (u64 s = 0; s < splits; ++s) {
            C v = partial[s * n_out + o];
            acc = is_max ? MaxOp()(acc, v) : acc + v;
        }
        if (mode == R_MEAN) acc = acc / (C)group;
        st(out, o, acc);
    }
}

// Ties per group: count[o] = #{j : x[group j of o] == y[o]}.
template <typename T>
__device__ void amax_count(const T* x, const T* y, typename Acc<T>::type* count, Dims kept, Dims red, u64 n_out,
                           u64 group) {
    typedef typename Acc<T>::type C;
    for (u64 o = (u64)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += (u64)gridDim.x * blockDim.x) {
        u64 base = offset_of(kept, o);
        C m = ld(y, o);
        u64 c = 0;
        for (u64 j = 0; j < group; ++j) c += ld(x, base + offset_of(red, j)) == m ? 1 : 0;
        count[o] = (C)c;
    }
}

// dx[i] = g[o] / count[o] where x[i] == y[o] (o = the group of i, through `to_out`), else 0.
template <typename T>
__device__ void amax_grad(const T* x, const T* y, const T* g, const typename Acc<T>::type* count, T* dx, u64 n,
                          Dims to_out) {
    typedef typename Acc<T>::type C;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 o = offset_of(to_out, i);
        st(dx, i, ld(x, i) == ld(y, o) ? ld(g, o) / count[o] : (C)0);
    }
}

#define INST(T, s)                                                                                             \
    extern "C" __global__ void reduce_rows_##s(const T* x, T* out, Dims kept, Dims red, u64 n_out, u64 group, \
                                               int mode) {                                                    \
        reduce_rows<T>(x, out, kept, red, n_out, group, mode);                                                \
    }                                                                                                         \
    extern "C" __global__ void reduce_cols_##s(const T* x, Acc<T>::type* partial, Dims kept, Dims red,       \
                                               u64 n_out, u64 group, u64 chunk, int mode) {                   \
        reduce_cols<T>(x, partial, kept, red, n_out, group, chunk, mode);                                     \
    }                                                                                                         \
    extern "C" __global__ void reduce_finish_##s(const Acc<T>::type* partial, T* out, u64 n_out, u64 splits, \
                                                 u64 group, int mode) {                                       \
        reduce_finish<T>(partial, out, n_out, splits, group, mode);                                           \
    }                                                                                                         \
    extern "C" __global__ void amax_count_##s(const T* x, const T* y, Acc<T>::type* count, Dims kept,        \
                                              Dims red, u64 n_out, u64 group) {                               \
        amax_count<T>(x, y, count, kept, red, n_out, group);                                                  \
    }                                                                                                         \
    extern "C" __global__ void amax_grad_##s(const T* x, const T* y, const T* g, const Acc<T>::type* count,  \
                                             T* dx, u64 n, Dims to_out) {                                     \
        amax_grad<T>(x, y, g, count, dx, n, to_out);                                                          \
    }
FOR_FLOATS(INST)
#undef INST
