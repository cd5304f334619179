//! NVRTC: kernel sources to cubin (for the device's real `sm_XX`) or PTX, with the program log
//! in every error, cached per process.
//!
//! A cubin for the real architecture skips the driver's PTX JIT and its version gate (PTX from an
//! NVRTC newer than the driver is refused). PTX is used by the CI check, which has no device.

use crate::kernels::{Source, PRELUDE};
use crate::probe;
use cudarc::nvrtc::{result as nvrtc, sys};
use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// What to compile for: a real architecture (a cubin) or a virtual one (PTX).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A cubin for `sm_<major><minor>`.
    Cubin(u32),
    /// PTX for `compute_<major><minor>` (what the NVRTC test checks every source compiles to).
    #[cfg_attr(not(test), allow(dead_code))]
    Ptx(u32),
}

impl Target {
    fn arch_option(self) -> String {
        match self {
            Target::Cubin(cc) => format!("--gpu-architecture=sm_{cc}"),
            Target::Ptx(cc) => format!("--gpu-architecture=compute_{cc}"),
        }
    }
}

/// Compiled code: cubin bytes, or PTX text with a trailing NUL.
pub type Image = Arc<Vec<u8>>;

/// The NVRTC options every kernel is compiled with. No `--use_fast_math`: the kernels must agree
/// with the CPU reference to ~1e-5 in f32, and memory-bound kernels gain nothing from it.
pub const OPTIONS: &[&str] = &["--std=c++17", "--fmad=true", "--extra-device-vectorization"];

fn cache() -> &'static Mutex<HashMap<(&'static str, Target), Image>> {
    static CACHE: OnceLock<Mutex<HashMap<(&'static str, Target), Image>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles one kernel source (prelude prepended) for `target`, once per process.
pub fn compile(source: &Source, target: Target) -> Result<Image, String> {
    probe::nvrtc()?;
    let key = (source.name, target);
    if let Some(image) = cache().lock().map_err(|_| "NVRTC cache poisoned".to_string())?.get(&key) {
        return Ok(image.clone());
    }
    let image = Arc::new(compile_uncached(source, target)?);
    cache().lock().map_err(|_| "NVRTC cache poisoned".to_string())?.insert(key, image.clone());
    Ok(image)
}

fn compile_uncached(source: &Source, target: Target) -> Result<Vec<u8>, String> {
    let text = format!("{PRELUDE}\n{}\n#line 1 \"{}\"\n{}", crate::kernels::op_codes(), source.name, source.text);
    let src = CString::new(text).map_err(|_| format!("{}: source contains a NUL byte", source.name))?;
    let name = CString::new(source.name).map_err(|_| "kernel name contains a NUL byte".to_string())?;
    let prog = nvrtc::create_program(&src, Some(&name))
        .map_err(|e| format!("NVRTC could not create a program for {}: {e}", source.name))?;
    let mut options: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    options.push(target.arch_option());
    // SAFETY: `prog` is a live program created above; the options are valid C strings.
    let compiled = unsafe { nvrtc::compile_program(prog, &options) };
    // SAFETY: `prog` is live; the log is read before the program is destroyed.
    let log = unsafe { nvrtc::get_program_log(prog) }.map(|l| c_chars_to_string(&l)).unwrap_or_default();
    let result = match compiled {
        Err(e) => Err(format!(
            "NVRTC failed to compile {} for {target:?} ({e}); options {options:?}; log:\n{}",
            source.name,
            log.trim_end()
        )),
        Ok(()) => {
            if !log.trim().is_empty() {
                log::debug!("NVRTC log for {}: {}", source.name, log.trim_end());
            }
            match target {
                // SAFETY: `prog` compiled successfully and is live.
                Target::Ptx(_) => unsafe { nvrtc::get_ptx(prog) }
                    .map(|p| p.iter().map(|&c| c as u8).collect())
                    .map_err(|e| format!("NVRTC could not return the PTX of {}: {e}", source.name)),
                // SAFETY: as above.
                Target::Cubin(_) => unsafe { get_cubin(prog) }
                    .map_err(|e| format!("NVRTC could not return the cubin of {}: {e}", source.name)),
            }
        }
    };
    // SAFETY: `prog` is live and not used afterwards.
    unsafe { nvrtc::destroy_program(prog) }.map_err(|e| format!("NVRTC destroy failed: {e}"))?;
    result
}

/// The cubin of a compiled program.
///
/// # Safety
/// `prog` must be a live program compiled for a real architecture.
unsafe fn get_cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, nvrtc::NvrtcError> {
    let mut size = 0usize;
    // SAFETY: `prog` is live (caller); `size` is a valid out pointer.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }.result()?;
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` holds exactly the `size` bytes NVRTC reported.
    unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char) }.result()?;
    Ok(buf)
}

fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The NVRTC version as `(major, minor)` (the NVRTC test prints it).
#[cfg_attr(not(test), allow(dead_code))]
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    probe::nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (probed); both are valid out pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(|e| format!("nvrtcVersion: {e}"))?;
    Ok((major, minor))
}
