//! Keeping freed tensor memory in the process's heap instead of handing it back to the kernel.
//!
//! A training step frees and allocates the same tensor sizes every step. glibc's `malloc` hands
//! large freed blocks back to the kernel: blocks above its mmap threshold are unmapped, and a heap
//! whose free top grows past the trim threshold is shrunk. Both thresholds adapt to the sizes
//! freed, but not to a step's pattern. So each step's tensors fault their pages in again, and the
//! kernel zeroes every page first. The 4-layer d256 GPT step took about 5,000 page faults
//! (20 MiB of zeroing) per step that way, against under 50 with the thresholds fixed.
//!
//! The first [`super::CpuBackend`] of the process therefore fixes both thresholds (`mallopt`):
//! - blocks up to 32 MiB, glibc's largest mmap threshold, come from the heap;
//! - freed heap memory stays in the process for the next step.
//!
//! Nothing is changed when the user has already configured glibc's allocator
//! (`GLIBC_TUNABLES` naming `glibc.malloc`, or `MALLOC_MMAP_THRESHOLD_` / `MALLOC_TRIM_THRESHOLD_`
//! set), when `REMAT_KEEP_FREED_MEMORY=0`, or on other platforms and allocators (a
//! `#[global_allocator]` such as jemalloc or mimalloc does not use glibc's heap, and `mallopt`
//! does not touch it). [`release_freed_memory`] gives the kept memory back on demand, and
//! [`keeps_freed_memory`] says whether the thresholds were set.

/// The environment variable that, set to `0`, leaves glibc's thresholds alone.
pub const KEEP_FREED_MEMORY_VAR: &str = "REMAT_KEEP_FREED_MEMORY";

/// Whether remat should set glibc's thresholds, given the environment (`var` reads a variable).
fn wanted(var: impl Fn(&str) -> Option<String>) -> bool {
    let opted_out = var(KEEP_FREED_MEMORY_VAR).is_some_and(|v| v.trim() == "0");
    let tuned_by_user = var("GLIBC_TUNABLES").is_some_and(|v| v.contains("glibc.malloc"))
        || var("MALLOC_MMAP_THRESHOLD_").is_some()
        || var("MALLOC_TRIM_THRESHOLD_").is_some();
    !opted_out && !tuned_by_user
}

/// Whether this process's CPU backends keep freed tensor memory for the next step: the first
/// call (made by the first [`super::CpuBackend`]) sets glibc's thresholds unless the environment
/// says not to (see the module docs); every call returns whether they are set.
pub fn keeps_freed_memory() -> bool {
    static SET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SET.get_or_init(|| wanted(|name| std::env::var(name).ok()) && imp::set_thresholds())
}

/// Gives the freed memory the heap keeps back to the kernel (glibc's `malloc_trim`), e.g. after
/// training and before a long phase that needs little memory. Returns whether any was released;
/// always `false` where the heap is not glibc's.
pub fn release_freed_memory() -> bool {
    imp::trim()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    /// glibc refuses mmap thresholds above half its 64 MiB heap size.
    const MMAP_THRESHOLD: libc::c_int = 32 << 20;

    pub(super) fn set_thresholds() -> bool {
        // SAFETY: `mallopt` only changes allocator parameters; glibc takes its own lock.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) == 1
        }
    }

    pub(super) fn trim() -> bool {
        // SAFETY: `malloc_trim` only returns free pages of glibc's heaps to the kernel.
        unsafe { libc::malloc_trim(0) == 1 }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub(super) fn set_thresholds() -> bool {
        false
    }

    pub(super) fn trim() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_user_s_own_allocator_settings_and_the_opt_out_win() {
        assert!(wanted(env(&[])));
        assert!(wanted(env(&[(KEEP_FREED_MEMORY_VAR, "1")])));
        assert!(wanted(env(&[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")])));
        assert!(!wanted(env(&[(KEEP_FREED_MEMORY_VAR, "0")])));
        assert!(!wanted(env(&[("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")])));
        assert!(!wanted(env(&[("MALLOC_MMAP_THRESHOLD_", "65536")])));
        assert!(!wanted(env(&[("MALLOC_TRIM_THRESHOLD_", "0")])));
    }
}
