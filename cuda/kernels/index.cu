// Indexing and masks: comparisons (to bool bytes), `where`, `arange`, `index_select` and its
// deterministic scatter-add gradient.

// Comparison op codes (must match `ops/index.rs`).
#define C_EQ 0
#define C_NE 1
#define C_LT 2
#define C_LE 3
#define C_GT 4
#define C_GE 5

template <typename C> __device__ __forceinline__ u8 compare_op(int op, C p, C q) {
    switch (op) {
        case C_EQ: return p == q;
        case C_NE: return p != q;
        case C_LT: return p < q;
        case C_LE: return p <= q;
        case C_GT: return p > q;
        default: return p >= q;
    }
}

// `da`/`db` view each operand over the (coalesced) output shape.
template <typename T>
__device__ void compare(const T* a, const T* b, u8* y, u64 n, int op, Dims da, Dims db) {
    GRID_STRIDE(i, n) { y[i] = compare_op(op, ld(a, offset_of(da, i)), ld(b, offset_of(db, i))); }
}

// `start + i * step` in f64 as the CPU computes it: rounded after the product and after the sum
// (no fused multiply-add, which `--fmad=true` would otherwise allow).
__device__ __forceinline__ double arange_at(double start, double step, u64 i) {
    return __dadd_rn(start, __dmul_rn((double)i, step));
}

template <typename T> __device__ void arange(T* y, u64 n, double start, double step) {
    GRID_STRIDE(i, n) { st(y, i, (typename Acc<T>::type)arange_at(start, step, i)); }
}

// Integer values are rounded half away from zero, then saturated (NaN to 0): the CPU's
// `v.round() as i64` / `as i32`.
extern "C" __global__ void arange_i64(i64* y, u64 n, double start, double step) {
    GRID_STRIDE(i, n) { y[i] = f64_to_i64_sat(round(arange_at(start, step, i))); }
}
extern "C" __global__ void arange_i32(i32* y, u64 n, double start, double step) {
    GRID_STRIDE(i, n) { y[i] = f64_to_i32_sat(round(arange_at(start, step, i))); }
}

// Integers compare exactly as themselves (through f64, two i64 values could compare equal).
#define INST(T, s)                                                                                             \
    extern "C" __global__ void compare_##s(const T* a, const T* b, u8* y, u64 n, int op, Dims da, Dims db) {  \
        GRID_STRIDE(i, n) { y[i] = compare_op(op, a[offset_of(da, i)], b[offset_of(db, i)]); }                \
    }
FOR_INTS(INST)
#undef INST

// `cond ? a : b` on raw elements of N bytes, each operand viewed over the output shape.
#define WHERE(E, suffix)                                                                                       \
    extern "C" __global__ void where_##suffix(const u8* c, const E* a, const E* b, E* y, u64 n, Dims dc,      \
                                              Dims da, Dims db) {                                             \
        GRID_STRIDE(i, n) { y[i] = c[offset_of(dc, i)] ? a[offset_of(da, i)] : b[offset_of(db, i)]; }          \
    }
WHERE(u8, 1) WHERE(u16, 2) WHERE(u32, 4) WHERE(u64, 8)

// `y[o, k, j] = x[o, idx[k], j]` for `outer × count × inner` outputs; bad indices are reported.
#define INDEX_SELECT(E, suffix)                                                                                \
    extern "C" __global__ void index_select_##suffix(const E* x, const i64* idx, E* y, u64 outer, u64 count,  \
                                                     u64 dim, u64 inner, u64* flag, u64 node) {               \
        GRID_STRIDE(i, outer * count * inner) {                                                               \
            u64 j = i % inner, k = (i / inner) % count, o = i / (inner * count);                               \
            i64 r = idx[k];                                                                                   \
            if (r < 0 || (u64)r >= dim) {                                                                     \
                if (j == 0 && o == 0) report_bad_id(flag, node, k, r);                                        \
                continue;                                                                                     \
            }                                                                                                 \
            y[i] = x[(o * dim + (u64)r) * inner + j];                                                         \
        }                                                                                                     \
    }
INDEX_SELECT(u8, 1) INDEX_SELECT(u16, 2) INDEX_SELECT(u32, 4) INDEX_SELECT(u64, 8)

// `y[o, j, i] = x[o, idx[o, j, i], i]` for `outer × count × inner` outputs (raw elements).
#define GATHER(E, suffix)                                                                                      \
    extern "C" __global__ void gather_##suffix(const E* x, const i64* idx, E* y, u64 outer, u64 count,        \
                                               u64 dim, u64 inner, u64* flag, u64 node) {                     \
        GRID_STRIDE(p, outer * count * inner) {                                                               \
            u64 i = p % inner, o = p / (inner * count);                                                       \
            i64 r = idx[p];                                                                                   \
            if (r < 0 || (u64)r >= dim) {                                                                     \
                report_bad_id(flag, node, p, r);                                                              \
                continue;                                                                                     \
            }                                                                                                 \
            y[p] = x[(o * dim + (u64)r) * inner + i];                                                         \
        }                                                                                                     \
    }
GATHER(u8, 1) GATHER(u16, 2) GATHER(u32, 4) GATHER(u64, 8)

// Gradient of gather: each output element `(o, r, i)` sums, in `j` order, the gradient entries
// `(o, j, i)` whose index is `r` (deterministic: no atomics).
template <typename T>
__device__ void gather_grad(const i64* idx, const T* g, T* dx, u64 outer, u64 count, u64 dim, u64 inner) {
    typedef typename Acc<T>::type C;
    GRID_STRIDE(p, outer * dim * inner) {
        u64 i = p % inner, r = (p / inner) % dim, o = p / (inner * dim);
        C acc = 0;
        for (u64 j = 0; j < count; ++j) {
            u64 q = (o * count + j) * inner + i;
            if (idx[q] == (i64)r) acc += ld(g, q);
        }
        st(dx, p, acc);
    }
}

// Gradient of index_select: each output element `(o, r, j)` sums, in index order, the gradient
// entries whose index is `r` (deterministic: no atomics).
template <typename T>
__device__ void index_select_grad(const i64* idx, const T* g, T* dx, u64 outer, u64 count, u64 dim, u64 inner) {
    typedef typename Acc<T>::type C;
    GRID_STRIDE(i, outer * dim * inner) {
        u64 j = i % inner, r = (i / inner) % dim, o = i / (inner * dim);
        C acc = 0;
        for (u64 k = 0; k < count; ++k) {
            if (idx[k] == (i64)r) acc += ld(g, (o * count + k) * inner + j);
        }
        st(dx, i, acc);
    }
}

#define INST(T, s)                                                                                             \
    extern "C" __global__ void compare_##s(const T* a, const T* b, u8* y, u64 n, int op, Dims da, Dims db) {  \
        compare<T>(a, b, y, n, op, da, db);                                                                   \
    }                                                                                                         \
    extern "C" __global__ void arange_##s(T* y, u64 n, double start, double step) {                         \
        arange<T>(y, n, start, step);                                                                         \
    }                                                                                                         \
    extern "C" __global__ void index_select_grad_##s(const i64* idx, const T* g, T* dx, u64 outer, u64 count, \
                                                     u64 dim, u64 inner) {                                    \
        index_select_grad<T>(idx, g, dx, outer, count, dim, inner);                                           \
    }                                                                                                         \
    extern "C" __global__ void gather_grad_##s(const i64* idx, const T* g, T* dx, u64 outer, u64 count,       \
                                               u64 dim, u64 inner) {                                          \
        gather_grad<T>(idx, g, dx, outer, count, dim, inner);                                                 \
    }
FOR_FLOATS(INST)
#undef INST
