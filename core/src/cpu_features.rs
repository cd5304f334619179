//! Which vector extensions the CPU has, checked once at run time, and [`wide_fn!`], which
//! compiles a loop for each and calls the widest the CPU runs. Used by the CPU kernels and by
//! the counter-based generator (`rng.rs`); results are bit-identical whichever copy runs.

use std::sync::OnceLock;

/// In tests, the widest copy [`wide_fn!`] may pick (0 baseline, 1 AVX2, 2 AVX-512), so that a
/// test can run every copy on a CPU that has them all and compare their bits.
#[cfg(test)]
pub(crate) static WIDTH_CAP: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);

#[cfg(test)]
fn width_allows(tier: u8) -> bool {
    WIDTH_CAP.load(std::sync::atomic::Ordering::Relaxed) >= tier
}

#[cfg(not(test))]
#[inline(always)]
fn width_allows(_tier: u8) -> bool {
    true
}

/// Whether the CPU has AVX-512 (F, BW, DQ, VL) besides AVX2 and FMA (checked once).
#[inline]
pub(crate) fn avx512() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    width_allows(2)
        && *HAS.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("fma")
                    && std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512dq")
                    && std::is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                false
            }
        })
}

/// Whether the CPU has AVX2 and FMA (checked once).
#[inline]
pub(crate) fn avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    width_allows(1)
        && *HAS.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                false
            }
        })
}

/// Defines `fn name<generics>(args) -> ret { body }` compiled three times: with AVX-512, with
/// AVX2 + FMA, and at baseline width; each call runs the widest the CPU has. The body is written once; the
/// generic names are repeated in brackets for the call:
///
/// ```ignore
/// wide_fn! {
///     fn double<[T: Float]>[T](x: &[T]) -> Vec<T> { x.iter().map(|&v| v + v).collect() }
/// }
/// ```
///
/// (A closure passed to a `#[target_feature]` function is not inlined into it, and would run at
/// baseline width: hence a macro that duplicates the body.)
macro_rules! wide_fn {
    ($(#[$meta:meta])* $vis:vis fn $name:ident<[$($gen:tt)*]>[$($g:ident),*]($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$meta])*
        #[inline]
        $vis fn $name<$($gen)*>($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[allow(clippy::too_many_arguments)]
                #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")]
                unsafe fn with_avx512<$($gen)*>($($arg: $ty),*) -> $ret $body
                #[allow(clippy::too_many_arguments)]
                #[target_feature(enable = "avx2,fma")]
                unsafe fn with_avx2<$($gen)*>($($arg: $ty),*) -> $ret $body
                if $crate::cpu_features::avx512() {
                    // SAFETY: the CPU supports AVX-512 F/BW/DQ/VL, AVX2 and FMA (checked at run
                    // time just above).
                    return unsafe { with_avx512::<$($g),*>($($arg),*) };
                }
                if $crate::cpu_features::avx2() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked at run time just above).
                    return unsafe { with_avx2::<$($g),*>($($arg),*) };
                }
            }
            $body
        }
    };
}
pub(crate) use wide_fn;
