//! Runs the Python package's tests (`python/tests/*.py`, pytest) against the extension module
//! this build made (`lib_remat.so`, the package's cdylib), so `cargo test --workspace` tests
//! the Python side too.
//!
//! The Python is `REMAT_TORCH_PYTHON`, else `.venv-torch/bin/python` at the workspace root
//! (what `.ci/run` installs: PyTorch 2.15 and pytest). Without one that imports torch and
//! pytest the test prints why and passes, unless `REMAT_REQUIRE` names `torch` (`.ci/run` sets
//! it), which makes that a failure.

#[path = "../../benches/common/require.rs"]
mod require;
#[path = "../../benches/common/torch_python.rs"]
mod torch_python;

use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("python/ is in the workspace");
    torch_python::torch_python(root, "torch, pytest")
}

/// The extension module cargo built beside this test's executable.
fn extension() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    for name in ["lib_remat.so", "lib_remat.dylib"] {
        for dir in [deps, deps.parent().unwrap_or(deps)] {
            if dir.join(name).exists() {
                return dir.join(name);
            }
        }
    }
    panic!("the extension module (lib_remat.so) is not beside {}", exe.display());
}

/// The `remat` command in the same target directory as `extension` (`target/<profile>/remat`).
fn command_beside(extension: &Path) -> Option<PathBuf> {
    let dir = extension.parent()?;
    [dir, dir.parent()?].iter().map(|d| d.join("remat")).find(|p| p.is_file())
}

#[test]
fn python_package_tests() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            return require::skip("torch", format!("{why} (set REMAT_TORCH_PYTHON, or run .ci/run's set-up)"));
        }
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let site = std::env::temp_dir().join(format!("remat-torch-{}", std::process::id()));
    let package = site.join("remat_torch");
    std::fs::create_dir_all(&package).unwrap();
    for entry in std::fs::read_dir(manifest.join("remat_torch")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&path, package.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(extension(), package.join("_remat.abi3.so")).unwrap();
    // Run from the copy, so the sources beside this file (without the module) are not imported.
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:logging"])
        .arg(manifest.join("tests"))
        .current_dir(&site)
        .env("PYTHONPATH", &site);
    // The `remat` command, where this build made it: the tests compare the module's reports with
    // what it prints.
    if let Some(cli) = command_beside(&extension()) {
        pytest.env("REMAT_CLI", cli);
    }
    let out = pytest.output().unwrap();
    let _ = std::fs::remove_dir_all(&site);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
}
