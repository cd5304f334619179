// Sums that run along an axis or into positions: cumsum, index_add, scatter_add, on floats (in
// the compute type, rounded once at the store) and on i64 and i32 (wrapping). Each sums in the
// CPU's order — along the axis, then in index order — without atomics, so float results agree
// with the CPU bit for bit.
//
// Tensors are `outer × dim × inner` around the axis; the added ones `outer × count × inner`.

__device__ __forceinline__ float plus(float a, float b) { return a + b; }
__device__ __forceinline__ double plus(double a, double b) { return a + b; }
// Signed overflow is undefined in C++; unsigned arithmetic wraps, as the CPU's does.
__device__ __forceinline__ i64 plus(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ i32 plus(i32 a, i32 b) { return (i32)((u32)a + (u32)b); }

// One thread per row, in order from the first entry (the last for `reverse`). The running sum
// starts from that entry itself, not from 0 + it, which would turn a leading -0.0 into +0.0.
template <typename T>
__device__ void cumsum(const T* x, T* y, u64 outer, u64 dim, u64 inner, int reverse) {
    typedef typename Acc<T>::type C;
    if (dim == 0) return;
    GRID_STRIDE(row, outer * inner) {
        u64 o = row / inner, i = row % inner;
        u64 at = (o * dim + (reverse ? dim - 1 : 0)) * inner + i;
        C acc = ld(x, at);
        st(y, at, acc);
        for (u64 s = 1; s < dim; ++s) {
            at = (o * dim + (reverse ? dim - 1 - s : s)) * inner + i;
            acc = plus(acc, ld(x, at));
            st(y, at, acc);
        }
    }
}

// Each output element `(o, r, j)` is `x`'s plus, in `k` order, the `src` entries `(o, k, j)`
// whose index is `r` (the loop of index_select_grad). Bad indices, reported by `check_ids`, add
// nowhere.
template <typename T>
__device__ void index_add(const T* x, const i64* idx, const T* src, T* y, u64 outer, u64 count, u64 dim,
                          u64 inner) {
    typedef typename Acc<T>::type C;
    GRID_STRIDE(p, outer * dim * inner) {
        u64 j = p % inner, r = (p / inner) % dim, o = p / (inner * dim);
        C acc = ld(x, p);
        for (u64 k = 0; k < count; ++k) {
            if (idx[k] == (i64)r) acc = plus(acc, ld(src, (o * count + k) * inner + j));
        }
        st(y, p, acc);
    }
}

// Each output element `(o, r, i)` is `x`'s plus, in `j` order, the `src` entries `(o, j, i)`
// whose index (`idx` has `src`'s shape) is `r` (the loop of gather_grad). Bad indices, reported
// by `check_ids`, add nowhere.
template <typename T>
__device__ void scatter_add(const T* x, const i64* idx, const T* src, T* y, u64 outer, u64 count, u64 dim,
                            u64 inner) {
    typedef typename Acc<T>::type C;
    GRID_STRIDE(p, outer * dim * inner) {
        u64 i = p % inner, r = (p / inner) % dim, o = p / (inner * dim);
        C acc = ld(x, p);
        for (u64 j = 0; j < count; ++j) {
            u64 q = (o * count + j) * inner + i;
            if (idx[q] == (i64)r) acc = plus(acc, ld(src, q));
        }
        st(y, p, acc);
    }
}

#define INST(T, s)                                                                                             \
    extern "C" __global__ void cumsum_##s(const T* x, T* y, u64 outer, u64 dim, u64 inner, int reverse) {     \
        cumsum<T>(x, y, outer, dim, inner, reverse);                                                          \
    }                                                                                                         \
    extern "C" __global__ void index_add_##s(const T* x, const i64* idx, const T* src, T* y, u64 outer,       \
                                             u64 count, u64 dim, u64 inner) {                                 \
        index_add<T>(x, idx, src, y, outer, count, dim, inner);                                               \
    }                                                                                                         \
    extern "C" __global__ void scatter_add_##s(const T* x, const i64* idx, const T* src, T* y, u64 outer,     \
                                               u64 count, u64 dim, u64 inner) {                               \
        scatter_add<T>(x, idx, src, y, outer, count, dim, inner);                                             \
    }
FOR_NUMBERS(INST)
#undef INST
