//! Keeping freed tensor memory in the process's heap instead of handing it back to the kernel,
//! where the user asks for it.
//!
//! A training step frees and allocates the same tensor sizes every step. glibc's `malloc` hands
//! large freed blocks back to the kernel: blocks above its mmap threshold are unmapped, and a heap
//! whose free top grows past the trim threshold is shrunk. Both thresholds adapt to the sizes
//! freed, but not to a step's pattern. So each step's tensors fault their pages in again, and the
//! kernel zeroes every page first (docs/performance.md, "Page faults of a training step").
//!
//! [`keep_freed_memory`] fixes both thresholds (`mallopt`):
//! - blocks up to 32 MiB, glibc's largest mmap threshold, come from the heap;
//! - freed heap memory stays in the process for the next step.
//!
//! It is the host process's allocator, not remat's, so remat changes it only when asked: by a
//! call, or by `REMAT_KEEP_FREED_MEMORY=1` ([`KEEP_FREED_MEMORY_VAR`]), which the first
//! [`super::CpuBackend`] reads. Even then nothing changes when the user has configured glibc's
//! allocator (`GLIBC_TUNABLES` naming `glibc.malloc`, or `MALLOC_MMAP_THRESHOLD_` /
//! `MALLOC_TRIM_THRESHOLD_` set), or on other platforms and allocators (a `#[global_allocator]`
//! such as jemalloc or mimalloc does not use glibc's heap, and `mallopt` does not touch it).
//! [`release_freed_memory`] gives the kept memory back on demand.

/// The environment variable that, set to `1`, has the first CPU backend call
/// [`keep_freed_memory`].
pub(crate) const KEEP_FREED_MEMORY_VAR: &str = "REMAT_KEEP_FREED_MEMORY";

/// Whether the environment (`var` reads a variable) asks for [`keep_freed_memory`].
fn asked(var: impl Fn(&str) -> Option<String>) -> bool {
    var(KEEP_FREED_MEMORY_VAR).is_some_and(|v| v.trim() == "1")
}

/// Whether the user's own glibc malloc settings, which win, are in the environment.
fn tuned_by_user(var: impl Fn(&str) -> Option<String>) -> bool {
    var("GLIBC_TUNABLES").is_some_and(|v| v.contains("glibc.malloc"))
        || var("MALLOC_MMAP_THRESHOLD_").is_some()
        || var("MALLOC_TRIM_THRESHOLD_").is_some()
}

/// Has glibc's `malloc` keep freed memory for the next training step instead of giving it back
/// to the kernel (see the module docs): a step's tensors then reuse the last step's pages
/// instead of faulting in freshly zeroed ones. The first call sets glibc's thresholds unless
/// the user's own malloc settings are in the environment; every call returns whether they are
/// set (always `false` where the allocator is not glibc's).
pub fn keep_freed_memory() -> bool {
    static SET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SET.get_or_init(|| !tuned_by_user(|name| std::env::var(name).ok()) && imp::set_thresholds())
}

/// Called by every new CPU backend: [`keep_freed_memory`] where [`KEEP_FREED_MEMORY_VAR`] asks.
pub(super) fn from_environment() {
    if asked(|name| std::env::var(name).ok()) {
        keep_freed_memory();
    }
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
    fn only_the_variable_set_to_one_asks() {
        assert!(!asked(env(&[])));
        assert!(!asked(env(&[(KEEP_FREED_MEMORY_VAR, "0")])));
        assert!(!asked(env(&[(KEEP_FREED_MEMORY_VAR, "yes")])));
        assert!(asked(env(&[(KEEP_FREED_MEMORY_VAR, " 1 ")])));
    }

    #[test]
    fn the_user_s_own_allocator_settings_win() {
        assert!(!tuned_by_user(env(&[])));
        assert!(!tuned_by_user(env(&[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")])));
        assert!(tuned_by_user(env(&[("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")])));
        assert!(tuned_by_user(env(&[("MALLOC_MMAP_THRESHOLD_", "65536")])));
        assert!(tuned_by_user(env(&[("MALLOC_TRIM_THRESHOLD_", "0")])));
    }
}
