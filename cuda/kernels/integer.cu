// Integer and boolean elementwise kernels, broadcasting: i64 and i32 arithmetic exactly as the
// CPU's (wrapping; division floors and remainders take the divisor's sign, like Python's) and
// bool logic. `B_*` (binary) and `L_*` (logic) codes are generated from the op catalog
// (`cuda/src/kernels.rs`, `op_codes`); every operand is viewed over the (coalesced) output shape.

// Signed overflow is undefined in C++; unsigned arithmetic wraps, as the CPU's `wrapping_*` do.
template <typename T> struct Unsigned;
template <> struct Unsigned<i64> { typedef u64 type; };
template <> struct Unsigned<i32> { typedef u32 type; };
template <typename T> __device__ __forceinline__ T wrap_add(T a, T b) {
    typedef typename Unsigned<T>::type U;
    return (T)((U)a + (U)b);
}
template <typename T> __device__ __forceinline__ T wrap_sub(T a, T b) {
    typedef typename Unsigned<T>::type U;
    return (T)((U)a - (U)b);
}
template <typename T> __device__ __forceinline__ T wrap_mul(T a, T b) {
    typedef typename Unsigned<T>::type U;
    return (T)((U)a * (U)b);
}

// `a ⌊/⌋ b` for `b != 0`. A divisor of -1 negates (wrapping: MIN stays MIN) without dividing,
// which keeps the hardware division away from its one overflowing case.
template <typename T> __device__ __forceinline__ T floor_div(T a, T b) {
    if (b == -1) return wrap_sub((T)0, a);
    T q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// `a mod b` with the sign of `b`, for `b != 0` (every remainder by -1 is 0, MIN's too).
template <typename T> __device__ __forceinline__ T floor_rem(T a, T b) {
    if (b == -1) return 0;
    T r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// A zero divisor is reported (naming the output element) and gives 0.
template <typename T>
__device__ void binary_int(const T* a, const T* b, T* y, u64 n, int op, Dims da, Dims db, u64* flag, u64 node) {
    GRID_STRIDE(i, n) {
        T p = a[offset_of(da, i)], q = b[offset_of(db, i)], r = 0;
        switch (op) {
            case B_ADD: r = wrap_add(p, q); break;
            case B_SUB: r = wrap_sub(p, q); break;
            case B_MUL: r = wrap_mul(p, q); break;
            case B_MAXIMUM: r = p >= q ? p : q; break;
            case B_MINIMUM: r = p <= q ? p : q; break;
            case B_DIV:
            case B_REM:
                if (q == 0) report_div_zero(flag, node, i);
                else r = op == B_DIV ? floor_div(p, q) : floor_rem(p, q);
                break;
            default: break;  // maximum_mask is a float gradient mask: the shape rule refuses integers
        }
        y[i] = r;
    }
}

#define INST(T, s)                                                                                             \
    extern "C" __global__ void binary_##s(const T* a, const T* b, T* y, u64 n, int op, Dims da, Dims db,      \
                                          u64* flag, u64 node) {                                              \
        binary_int<T>(a, b, y, n, op, da, db, flag, node);                                                    \
    }
FOR_INTS(INST)
#undef INST

// Bools are bytes 0 or 1 (as on the CPU); any nonzero byte reads as true.
extern "C" __global__ void logic(const u8* a, const u8* b, u8* y, u64 n, int op, Dims da, Dims db) {
    GRID_STRIDE(i, n) {
        bool p = a[offset_of(da, i)] != 0, q = b[offset_of(db, i)] != 0;
        switch (op) {
            case L_LOGICAL_AND: y[i] = p && q; break;
            case L_LOGICAL_OR: y[i] = p || q; break;
            case L_LOGICAL_XOR: y[i] = p != q; break;
            default: y[i] = 0; break;
        }
    }
}

extern "C" __global__ void logical_not(const u8* x, u8* y, u64 n) {
    GRID_STRIDE(i, n) { y[i] = x[i] == 0; }
}
