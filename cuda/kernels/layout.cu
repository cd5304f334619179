// Views materialised as copies (transpose, expand, slice), concatenation and zero-padded copies, moving raw
// elements of 1, 2, 4 or 8 bytes. `gather` writes contiguously; `transpose_tiled` handles views
// whose two inner axes are swapped through a shared-memory tile so both sides stay coalesced.

#define LAYOUT(E, s)                                                                                           \
    extern "C" __global__ void gather_##s(const E* x, E* y, u64 base, Dims view, u64 n) {                    \
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)     \
            y[i] = x[base + offset_of(view, i)];                                                              \
    }                                                                                                         \
    /* y[o][col_off + j] = x[o][j] for o < outer, j < cols; y rows are `ld` long. */                          \
    extern "C" __global__ void copy_rows_##s(const E* x, E* y, u64 outer, u64 cols, u64 ld, u64 col_off) {   \
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < outer * cols;                            \
             i += (u64)gridDim.x * blockDim.x)                                                                \
            y[(i / cols) * ld + col_off + i % cols] = x[i];                                                   \
    }                                                                                                         \
    /* out[b][i][j] = x[base + batch_off(b) + i + j * step] for an rows x cols block per batch b. */          \
    extern "C" __global__ void transpose_tiled_##s(const E* x, E* y, u64 base, Dims batch, u64 rows,         \
                                                   u64 cols, u64 step) {                                      \
        __shared__ E tile[32][33];                                                                            \
        u64 b = blockIdx.z;                                                                                   \
        u64 src = base + offset_of(batch, b);                                                                 \
        E* out = y + b * rows * cols;                                                                         \
        u64 i0 = (u64)blockIdx.y * 32, j0 = (u64)blockIdx.x * 32;                                             \
        /* read: consecutive threads walk i, which is contiguous in x */                                      \
        for (int k = threadIdx.y; k < 32; k += blockDim.y) {                                                  \
            u64 i = i0 + threadIdx.x, j = j0 + k;                                                             \
            if (i < rows && j < cols) tile[threadIdx.x][k] = x[src + i + j * step];                           \
        }                                                                                                     \
        __syncthreads();                                                                                      \
        /* write: consecutive threads walk j, contiguous in y */                                              \
        for (int k = threadIdx.y; k < 32; k += blockDim.y) {                                                  \
            u64 i = i0 + k, j = j0 + threadIdx.x;                                                             \
            if (i < rows && j < cols) out[i * cols + j] = tile[k][threadIdx.x];                               \
        }                                                                                                     \
    }                                                                                                         \
    /* y[i][j] = x[i * row_step + j * col_step] inside rows x cols, 0 in the rest of rows_p x cols_p:       \
       fp8 GEMM operands padded to aligned shapes, and results cut back out of them. */                     \
    extern "C" __global__ void pad_copy_##s(const E* x, E* y, u64 rows, u64 cols, u64 row_step, u64 col_step, \
                                            u64 rows_p, u64 cols_p) {                                         \
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < rows_p * cols_p;                         \
             i += (u64)gridDim.x * blockDim.x) {                                                              \
            u64 r = i / cols_p, c = i % cols_p;                                                               \
            y[i] = (r < rows && c < cols) ? x[r * row_step + c * col_step] : (E)0;                            \
        }                                                                                                     \
    }
LAYOUT(u8, 1) LAYOUT(u16, 2) LAYOUT(u32, 4) LAYOUT(u64, 8)
