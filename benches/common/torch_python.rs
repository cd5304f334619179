//! The Python with PyTorch 2.15 that tests and benchmarks run: `REMAT_TORCH_PYTHON`, else
//! `.venv-torch/bin/python` at the workspace root (what `.ci/run` installs). A file included by
//! path (`#[path = ".../benches/common/torch_python.rs"] mod torch_python;`) where needed.

use std::path::{Path, PathBuf};
use std::process::Command;

/// That Python, checked to import `modules` (`"torch"`, `"torch, pytest"`); why not otherwise.
/// `root` is the workspace root.
pub fn torch_python(root: &Path, modules: &str) -> Result<PathBuf, String> {
    let python = std::env::var_os("REMAT_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv-torch/bin/python"));
    let probe = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !probe.status.success() {
        return Err(format!("{} cannot import {modules}", python.display()));
    }
    Ok(python)
}
