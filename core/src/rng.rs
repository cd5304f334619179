//! The counter-based generator behind random ops: Philox4x32-10.
//!
//! A dropout mask element is a pure function of (stream seed, op key, element index), so the same
//! node evaluated twice — in the forward pass and again in a recompute, on the CPU or a GPU —
//! draws the same mask. The CUDA kernels implement the same function bit for bit.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32 with 10 rounds: four random words for a 128-bit counter and a 64-bit key.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for _ in 0..10 {
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        c = [((p1 >> 32) as u32) ^ c[1] ^ k[0], p1 as u32, ((p0 >> 32) as u32) ^ c[3] ^ k[1], p0 as u32];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

/// How many Philox blocks [`philox_lanes`] computes at once: two AVX-512 registers of 32-bit
/// lanes (four AVX2 ones), whose rounds interleave to hide the multiplies' latency.
pub const LANES: usize = 32;

/// [`philox4x32_10`] of the [`LANES`] consecutive blocks `first..first + LANES` (counter words
/// 0-1 the block index, 2-3 `key`), word `w` of block `first + l` at `out[w][l]`. Laid out
/// lane by lane so the rounds run on whole vectors; equal to calling the scalar function per
/// block (a test checks every path).
#[inline(always)]
pub fn philox_lanes(first: u64, key: u64, seed: [u32; 2]) -> [[u32; LANES]; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu_features::avx512() {
            // SAFETY: the CPU has AVX-512 F (checked just above).
            return unsafe { philox_lanes_avx512(first, key, seed) };
        }
        if crate::cpu_features::avx2() {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { philox_lanes_avx2(first, key, seed) };
        }
    }
    philox_lanes_portable(first, key, seed)
}

/// The counter words 0 and 1 (low and high halves of the block index) of `LANES` blocks.
#[inline(always)]
fn block_words(first: u64) -> ([u32; LANES], [u32; LANES]) {
    let (mut lo, mut hi) = ([0u32; LANES], [0u32; LANES]);
    for l in 0..LANES {
        let block = first + l as u64;
        (lo[l], hi[l]) = (block as u32, (block >> 32) as u32);
    }
    (lo, hi)
}

/// [`philox_lanes`] in plain Rust (what the compiler vectorises itself, with many shuffles for
/// the 32×32→64-bit products).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn philox_lanes_portable(first: u64, key: u64, seed: [u32; 2]) -> [[u32; LANES]; 4] {
    let (lo, hi) = block_words(first);
    let mut c = [lo, hi, [key as u32; LANES], [(key >> 32) as u32; LANES]];
    let mut k = seed;
    for _ in 0..10 {
        let mut next = [[0u32; LANES]; 4];
        for l in 0..LANES {
            let p0 = (M0 as u64) * (c[0][l] as u64);
            let p1 = (M1 as u64) * (c[2][l] as u64);
            next[0][l] = ((p1 >> 32) as u32) ^ c[1][l] ^ k[0];
            next[1][l] = p1 as u32;
            next[2][l] = ((p0 >> 32) as u32) ^ c[3][l] ^ k[1];
            next[3][l] = p0 as u32;
        }
        c = next;
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

/// [`philox_lanes`] with AVX2: [`LANES`] / 8 registers of eight lanes per counter word, their
/// rounds interleaved so that the multiplies' latency overlaps. Each round's high and low
/// product words come from two `vpmuludq` (even and odd lanes) and one `vpmulld`, without
/// moving lanes around.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn philox_lanes_avx2(first: u64, key: u64, seed: [u32; 2]) -> [[u32; LANES]; 4] {
    use std::arch::x86_64::*;
    const W: usize = 8;
    const R: usize = LANES / W;
    let (lo, hi) = block_words(first);
    // SAFETY (every intrinsic below): AVX2 is enabled for this function; loads and stores go
    // through 8-element `u32` slices of exactly 32 bytes.
    let load = |a: &[u32], r: usize| unsafe { _mm256_loadu_si256(a[r * W..(r + 1) * W].as_ptr().cast()) };
    let (m0, m1) = (_mm256_set1_epi32(M0 as i32), _mm256_set1_epi32(M1 as i32));
    // The high words of `m · x` per 32-bit lane: even lanes from the 64-bit products of the
    // even lanes, odd lanes from those of the odd lanes shifted down.
    let mulhi = |m: __m256i, x: __m256i| {
        let even = _mm256_srli_epi64::<32>(_mm256_mul_epu32(m, x));
        let odd = _mm256_mul_epu32(m, _mm256_srli_epi64::<32>(x));
        _mm256_blend_epi32::<0b1010_1010>(even, odd)
    };
    let mut c0: [__m256i; R] = std::array::from_fn(|r| load(&lo, r));
    let mut c1: [__m256i; R] = std::array::from_fn(|r| load(&hi, r));
    let mut c2 = [_mm256_set1_epi32(key as u32 as i32); R];
    let mut c3 = [_mm256_set1_epi32((key >> 32) as u32 as i32); R];
    let mut k = seed;
    for _ in 0..10 {
        let (k0, k1) = (_mm256_set1_epi32(k[0] as i32), _mm256_set1_epi32(k[1] as i32));
        for r in 0..R {
            let next0 = _mm256_xor_si256(_mm256_xor_si256(mulhi(m1, c2[r]), c1[r]), k0);
            let next1 = _mm256_mullo_epi32(m1, c2[r]);
            let next2 = _mm256_xor_si256(_mm256_xor_si256(mulhi(m0, c0[r]), c3[r]), k1);
            let next3 = _mm256_mullo_epi32(m0, c0[r]);
            (c0[r], c1[r], c2[r], c3[r]) = (next0, next1, next2, next3);
        }
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    let mut out = [[0u32; LANES]; 4];
    for (o, v) in out.iter_mut().zip([c0, c1, c2, c3]) {
        for (r, v) in v.into_iter().enumerate() {
            // SAFETY: `o[r * W..]` has 8 writable `u32`s.
            unsafe { _mm256_storeu_si256(o[r * W..].as_mut_ptr().cast(), v) };
        }
    }
    out
}

/// [`philox_lanes`] with AVX-512: [`LANES`] / 16 registers of sixteen lanes per counter word,
/// their rounds interleaved; the high product words from two `vpmuludq` merged under a mask,
/// the low ones from `vpmulld`.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn philox_lanes_avx512(first: u64, key: u64, seed: [u32; 2]) -> [[u32; LANES]; 4] {
    use std::arch::x86_64::*;
    const W: usize = 16;
    const R: usize = LANES / W;
    let (lo, hi) = block_words(first);
    // SAFETY (every intrinsic below): AVX-512 F is enabled for this function; loads and stores
    // go through 16-element `u32` slices of exactly 64 bytes.
    let load = |a: &[u32], r: usize| unsafe { _mm512_loadu_si512(a[r * W..(r + 1) * W].as_ptr().cast()) };
    let (m0, m1) = (_mm512_set1_epi32(M0 as i32), _mm512_set1_epi32(M1 as i32));
    let mulhi = |m: __m512i, x: __m512i| {
        let even = _mm512_srli_epi64::<32>(_mm512_mul_epu32(m, x));
        let odd = _mm512_mul_epu32(m, _mm512_srli_epi64::<32>(x));
        _mm512_mask_blend_epi32(0b1010_1010_1010_1010, even, odd)
    };
    let mut c0: [__m512i; R] = std::array::from_fn(|r| load(&lo, r));
    let mut c1: [__m512i; R] = std::array::from_fn(|r| load(&hi, r));
    let mut c2 = [_mm512_set1_epi32(key as u32 as i32); R];
    let mut c3 = [_mm512_set1_epi32((key >> 32) as u32 as i32); R];
    let mut k = seed;
    for _ in 0..10 {
        let (k0, k1) = (_mm512_set1_epi32(k[0] as i32), _mm512_set1_epi32(k[1] as i32));
        for r in 0..R {
            let next0 = _mm512_xor_si512(_mm512_xor_si512(mulhi(m1, c2[r]), c1[r]), k0);
            let next1 = _mm512_mullo_epi32(m1, c2[r]);
            let next2 = _mm512_xor_si512(_mm512_xor_si512(mulhi(m0, c0[r]), c3[r]), k1);
            let next3 = _mm512_mullo_epi32(m0, c0[r]);
            (c0[r], c1[r], c2[r], c3[r]) = (next0, next1, next2, next3);
        }
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    let mut out = [[0u32; LANES]; 4];
    for (o, v) in out.iter_mut().zip([c0, c1, c2, c3]) {
        for (r, v) in v.into_iter().enumerate() {
            // SAFETY: `o[r * W..]` has 16 writable `u32`s.
            unsafe { _mm512_storeu_si512(o[r * W..].as_mut_ptr().cast(), v) };
        }
    }
    out
}

/// The generator seed of one random op in one run: the op's own seed mixed with the run's seed,
/// so each training step draws fresh masks while a step's recomputes replay them.
pub fn stream_seed(op_seed: u64, run_seed: u64) -> u64 {
    op_seed ^ run_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The uniform 32-bit word for element `index` of the op with key `key` under `seed`.
pub fn uniform_u32(seed: u64, key: u64, index: u64) -> u32 {
    let block = index / 4;
    let words = philox4x32_10(
        [block as u32, (block >> 32) as u32, key as u32, (key >> 32) as u32],
        [seed as u32, (seed >> 32) as u32],
    );
    words[(index % 4) as usize]
}

/// The integer threshold below which a uniform word drops its element, for drop probability `p`.
pub fn drop_threshold(p: f64) -> u64 {
    (p * 4_294_967_296.0) as u64
}

/// Whether dropout with probability `p` keeps element `index` of the op with key `key` (the
/// kernels compare with [`drop_threshold`] themselves; the tests hold them to this).
#[cfg(test)]
pub fn dropout_keeps(seed: u64, key: u64, index: u64, p: f64) -> bool {
    uniform_u32(seed, key, index) as u64 >= drop_threshold(p)
}

/// A uniform f64 in [0, 1) from the same generator (for parameter initialisation).
pub fn uniform_f64(seed: u64, key: u64, index: u64) -> f64 {
    let hi = uniform_u32(seed, key, 2 * index) as u64;
    let lo = uniform_u32(seed, key, 2 * index + 1) as u64;
    (((hi << 32) | lo) >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal f64 (Box–Muller over two uniforms), for parameter initialisation.
pub fn normal_f64(seed: u64, key: u64, index: u64) -> f64 {
    let u1 = uniform_f64(seed, key, 2 * index).max(f64::MIN_POSITIVE);
    let u2 = uniform_f64(seed, key, 2 * index + 1);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_the_reference_vectors() {
        // Known-answer tests from Random123 (kat_vectors, philox4x32_10).
        assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
        assert_eq!(philox4x32_10([u32::MAX; 4], [u32::MAX; 2]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
        assert_eq!(
            philox4x32_10([0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344], [0xa409_3822, 0x299f_31d0]),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn dropout_is_a_pure_function_with_the_right_rate() {
        let kept = (0..100_000).filter(|&i| dropout_keeps(7, 3, i, 0.25)).count();
        assert!((74_000..76_000).contains(&kept), "kept {kept}");
        let a: Vec<bool> = (0..1000).map(|i| dropout_keeps(7, 3, i, 0.5)).collect();
        let b: Vec<bool> = (0..1000).map(|i| dropout_keeps(7, 3, i, 0.5)).collect();
        let other: Vec<bool> = (0..1000).map(|i| dropout_keeps(7, 4, i, 0.5)).collect();
        assert_eq!(a, b);
        assert_ne!(a, other);
    }

    #[test]
    #[allow(clippy::needless_range_loop)]
    fn lanes_equal_the_scalar_generator() {
        for (first, key, seed) in
            [(0u64, 0u64, [0u32, 0u32]), (u32::MAX as u64 - 3, 77, [5, 9]), (1 << 40, u64::MAX, [u32::MAX; 2])]
        {
            let lanes = philox_lanes_portable(first, key, seed);
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2.
                    assert_eq!(unsafe { philox_lanes_avx2(first, key, seed) }, lanes, "AVX2 rounds");
                }
                // Detected directly, not through `crate::cpu_features::avx512()`, so that a test lowering the
                // kernels' width cap meanwhile cannot skip this path.
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512 F.
                    assert_eq!(unsafe { philox_lanes_avx512(first, key, seed) }, lanes, "AVX-512 rounds");
                }
            }
            assert_eq!(philox_lanes(first, key, seed), lanes, "the dispatching entry point");
            for l in 0..LANES {
                let b = first + l as u64;
                let want = philox4x32_10([b as u32, (b >> 32) as u32, key as u32, (key >> 32) as u32], seed);
                assert_eq!([lanes[0][l], lanes[1][l], lanes[2][l], lanes[3][l]], want, "lane {l}");
            }
        }
    }
}
