// Routing kernels: the ops whose i64 results select data (argmax/argmin, topk and argsort,
// bincount), one_hot, and the id check of the ops that write at ids. Every order is the CPU's
// total, stable one — NaN above every number, NaNs equal, ties to the lower position — so a
// selection computed on either backend, or twice, picks the same entries.
//
// Inputs are rows of `dim` entries along one axis, `outer × dim × inner` (stride `inner`).

// -1, 0 or 1 as `a` ranks below, with or above `b`: NaN above every number.
template <typename C> __device__ __forceinline__ int rank_cmp(C a, C b) {
    bool an = a != a, bn = b != b;
    if (an || bn) return (int)an - (int)bn;
    return (int)(a > b) - (int)(a < b);
}

// Whether entry `(v, j)` wins over `(w, k)` for argmax (or argmin): NaN wins over every number
// for both (as in PyTorch, where NaN propagates through max and min), then the extreme, then the
// lower position. A total order, so the lanes' partial winners merge to the CPU's answer: the
// first NaN, else the first extreme.
template <typename C> __device__ __forceinline__ bool arg_beats(C v, u64 j, C w, u64 k, bool want_max) {
    bool vn = v != v, wn = w != w;
    if (vn || wn) return vn && (!wn || j < k);
    if (v == w) return j < k;
    return want_max ? v > w : v < w;
}

// One warp per row: the lanes take every 32nd entry, then merge their winners by shuffles.
template <typename T>
__device__ void arg_reduce(const T* x, i64* y, u64 outer, u64 dim, u64 inner, int want_max) {
    typedef typename Acc<T>::type C;
    u64 lane = threadIdx.x & 31;
    u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5, warps = ((u64)gridDim.x * blockDim.x) >> 5;
    // `row` is the same for the whole warp, so every lane takes part in every shuffle.
    for (u64 row = warp; row < outer * inner; row += warps) {
        u64 o = row / inner, i = row % inner;
        C best = 0;
        u64 at = dim;  // none yet
        for (u64 j = lane; j < dim; j += 32) {
            C v = ld(x, (o * dim + j) * inner + i);
            if (at == dim || arg_beats(v, j, best, at, want_max != 0)) {
                best = v;
                at = j;
            }
        }
        for (int s = 16; s > 0; s >>= 1) {
            C v = __shfl_xor_sync(0xffffffffu, best, s);
            u64 j = __shfl_xor_sync(0xffffffffu, at, s);
            if (j != dim && (at == dim || arg_beats(v, j, best, at, want_max != 0))) {
                best = v;
                at = j;
            }
        }
        if (lane == 0) y[row] = (i64)at;
    }
}

// The CPU's stable sort of each row, by ranks: entry `j` goes to place `rank(j)`, the number of
// entries ordered before it (by value, descending or ascending, then by position). Ranks are a
// permutation of the row, so places `0..k` are each written once: topk (`k ≤ dim`) or argsort
// (`k = dim`). Quadratic in the row (rows are short: experts, classes), but with a thread per
// entry, no shared memory and nothing to merge.
template <typename T>
__device__ void rank_sort(const T* x, i64* y, u64 outer, u64 dim, u64 inner, u64 k, int descending) {
    typedef typename Acc<T>::type C;
    GRID_STRIDE(p, outer * dim * inner) {
        u64 i = p % inner, j = (p / inner) % dim, o = p / (inner * dim);
        C v = ld(x, p);
        u64 rank = 0;
        for (u64 m = 0; m < dim; ++m) {
            int c = rank_cmp(ld(x, (o * dim + m) * inner + i), v);
            rank += (descending ? c > 0 : c < 0) || (c == 0 && m < j);
        }
        if (rank < k) y[(o * k + rank) * inner + i] = (i64)j;
    }
}

#define INST(T, s)                                                                                             \
    extern "C" __global__ void arg_reduce_##s(const T* x, i64* y, u64 outer, u64 dim, u64 inner,              \
                                              int want_max) {                                                 \
        arg_reduce<T>(x, y, outer, dim, inner, want_max);                                                     \
    }                                                                                                         \
    extern "C" __global__ void rank_sort_##s(const T* x, i64* y, u64 outer, u64 dim, u64 inner, u64 k,        \
                                             int descending) {                                                \
        rank_sort<T>(x, y, outer, dim, inner, k, descending);                                                 \
    }
FOR_NUMBERS(INST)
#undef INST

// Reports an id outside `0..bound`. The kernels that write at ids (one_hot, index_add,
// scatter_add) skip such an id; checking once here also covers `bound = 0`, where those kernels
// have no output element to notice it from.
extern "C" __global__ void check_ids(const i64* ids, u64 n, u64 bound, u64* flag, u64 node) {
    GRID_STRIDE(p, n) {
        i64 v = ids[p];
        if (v < 0 || (u64)v >= bound) report_bad_id(flag, node, p, v);
    }
}

// counts[v] += 1 for every id `v` (counts zeroed first); integer sums are exact in any order, so
// atomics keep the counts deterministic.
extern "C" __global__ void bincount(const i64* ids, u64* counts, u64 n, u64 bins, u64* flag, u64 node) {
    GRID_STRIDE(p, n) {
        i64 v = ids[p];
        if (v < 0 || (u64)v >= bins) {
            report_bad_id(flag, node, p, v);
            continue;
        }
        atomicAdd(&counts[v], 1ull);
    }
}

// `y[p, c] = one` where `ids[p] == c`, else 0: raw elements of N bytes, `one` the bits of 1 in
// the output dtype (all-zero bits are 0 in every dtype).
#define ONE_HOT(E, suffix)                                                                                     \
    extern "C" __global__ void one_hot_##suffix(const i64* ids, E* y, u64 n, u64 classes, E one) {            \
        GRID_STRIDE(p, n * classes) { y[p] = ids[p / classes] == (i64)(p % classes) ? one : (E)0; }           \
    }
ONE_HOT(u8, 1) ONE_HOT(u16, 2) ONE_HOT(u32, 4) ONE_HOT(u64, 8)
