//! Every kernel source compiles with NVRTC for sm_80 and sm_90: PTX for both, and the cubin an
//! H200 loads (sm_90, through ptxas, which also checks registers and shared memory). No GPU needed.
//!
//! NVRTC comes from the `nvidia-cuda-nvrtc` pip package that `.ci/run` installs into `.nvrtc/`
//! and puts on `LD_LIBRARY_PATH`. Without it the tests fail when `CI=true` or `REMAT_REQUIRE`
//! names `nvrtc`, and skip (printing why) elsewhere.

#[path = "../../benches/common/require.rs"]
pub(crate) mod require;

use crate::compile::{compile, nvrtc_version, Target};

/// Whether NVRTC loads; where not, skipped (or failed, see above).
fn nvrtc() -> Option<(i32, i32)> {
    match nvrtc_version() {
        Ok(v) => Some(v),
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("NVRTC is required here (CI=true): {reason}")
        }
        Err(reason) => {
            require::skip("nvrtc", reason);
            None
        }
    }
}
use crate::kernels::{Source, ACCUMULATE, INTEGER, SELECT, SOURCES};

#[test]
fn every_kernel_source_compiles_for_sm80_and_sm90() {
    let Some(version) = nvrtc() else { return };
    println!("NVRTC {}.{}", version.0, version.1);
    let mut failures = Vec::new();
    for source in SOURCES {
        for cc in [80, 90] {
            match compile(&source, Target::Ptx(cc)) {
                Ok(ptx) => {
                    let text = String::from_utf8_lossy(&ptx);
                    assert!(text.contains(".entry"), "{} for compute_{cc}: no kernel entry in the PTX", source.name);
                }
                Err(e) => failures.push(e),
            }
        }
        match compile(&source, Target::Cubin(90)) {
            Ok(cubin) => assert_eq!(&cubin[..4], b"\x7fELF", "{}: a cubin is an ELF image", source.name),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn compile_errors_carry_the_nvrtc_log() {
    if nvrtc().is_none() {
        return;
    }
    let bad = Source { name: "bad.cu", text: "extern \"C\" __global__ void k() { undeclared_thing(); }" };
    let err = compile(&bad, Target::Ptx(80)).unwrap_err();
    assert!(err.contains("bad.cu") && err.contains("undeclared_thing"), "{err}");
}

#[test]
fn cubins_for_sm90_and_expected_entries() {
    if nvrtc().is_none() {
        return;
    }
    let ptx = compile(&SOURCES[0], Target::Ptx(90)).unwrap();
    let text = String::from_utf8_lossy(&ptx);
    for name in ["unary_bf16", "binary_bcast_f32", "dropout_f64", "fill_8"] {
        assert!(text.contains(&format!(".entry {name}(")), "{name} missing");
    }
    let layout = compile(&SOURCES[4], Target::Ptx(90)).unwrap();
    for name in ["pad_copy_1", "pad_copy_4", "transpose_tiled_1"] {
        assert!(String::from_utf8_lossy(&layout).contains(&format!(".entry {name}(")), "{name} missing");
    }
    let index = compile(&SOURCES[5], Target::Ptx(90)).unwrap();
    for name in [
        "compare_f32",
        "compare_i64",
        "compare_i32",
        "where_1",
        "where_8",
        "arange_i64",
        "arange_i32",
        "index_select_4",
        "index_select_grad_bf16",
        "gather_2",
        "gather_grad_f32",
    ] {
        assert!(String::from_utf8_lossy(&index).contains(&format!(".entry {name}(")), "{name} missing");
    }
    let attention = compile(&SOURCES[6], Target::Ptx(90)).unwrap();
    for name in ["sdpa_fwd_f32", "sdpa_delta_bf16", "sdpa_dq_f16", "sdpa_dkv_f64"] {
        assert!(String::from_utf8_lossy(&attention).contains(&format!(".entry {name}(")), "{name} missing");
    }
    let nn = compile(&SOURCES[3], Target::Ptx(90)).unwrap();
    for name in ["rms_norm_f32", "rms_norm_grad_bf16"] {
        assert!(String::from_utf8_lossy(&nn).contains(&format!(".entry {name}(")), "{name} missing");
    }
    let cubin = compile(&SOURCES[3], Target::Cubin(90)).unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
    let expected = [
        (INTEGER, &["binary_i64", "logic", "logical_not"][..]),
        (SELECT, &["arg_reduce_bf16", "arg_reduce_i64", "rank_sort_f32", "rank_sort_i64", "check_ids", "bincount"]),
        (SELECT, &["one_hot_1", "one_hot_2", "one_hot_8"]),
        (ACCUMULATE, &["cumsum_f16", "cumsum_i64", "index_add_f64", "index_add_i64", "scatter_add_bf16"]),
        (ACCUMULATE, &["scatter_add_i64"]),
    ];
    for (source, names) in expected {
        let ptx = compile(&source, Target::Ptx(90)).unwrap();
        for name in names {
            assert!(String::from_utf8_lossy(&ptx).contains(&format!(".entry {name}(")), "{name} missing");
        }
    }
}

#[test]
fn optim_has_an_update_for_every_parameter_and_state_dtype_and_a_sum_of_squares_for_every_float() {
    use crate::kernels::OPTIM;
    use crate::ops::optim::{sum_squares_kernel, update_kernel};
    use remat_core::DType;
    if nvrtc().is_none() {
        return;
    }
    let floats: Vec<DType> = DType::ALL.into_iter().filter(|d| d.is_float()).collect();
    assert_eq!(floats.len(), 6, "f32, f64, bf16, f16 and both fp8");
    let mut names = vec!["sum_squares_finish".to_string()];
    for &p in &floats {
        names.push(sum_squares_kernel(p).expect("every float dtype has a sum of squares"));
        for s in [DType::F32, DType::F64] {
            names.push(update_kernel(p, s).expect("every float parameter with f32 or f64 state"));
        }
    }
    for cc in [80, 90] {
        let ptx = compile(&OPTIM, Target::Ptx(cc)).unwrap();
        let text = String::from_utf8_lossy(&ptx);
        for name in &names {
            assert!(text.contains(&format!(".entry {name}(")), "{name} missing for compute_{cc}");
        }
    }
    let cubin = compile(&OPTIM, Target::Cubin(90)).unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
}

/// The update's f64 arithmetic must round every operation on its own, as the CPU does: with
/// `--fmad=true` a plain `a * b + c` may become one fused multiply-add, which the explicit
/// `__d*_rn` intrinsics forbid. No `fma.rn.f64` in the update kernels' PTX shows none crept in.
#[test]
fn the_update_kernels_fuse_no_f64_multiply_add() {
    use crate::kernels::OPTIM;
    if nvrtc().is_none() {
        return;
    }
    let ptx = compile(&OPTIM, Target::Ptx(90)).unwrap();
    let text = String::from_utf8_lossy(&ptx);
    for entry in text.split(".entry ").skip(1).filter(|e| e.starts_with("update_")) {
        let name = entry.split('(').next().unwrap_or_default();
        assert!(!entry.contains("fma.rn.f64"), "{name} contracts an f64 multiply-add");
    }
}

/// Every entry point of `buckets.cu` is there, and the mean rounds each f32 add and the division
/// on its own (IEEE `div.rn`, no approximate division, nothing fused), as the host path does.
#[test]
fn buckets_has_every_entry_point_and_a_mean_rounded_as_on_the_host() {
    use crate::kernels::BUCKETS;
    use crate::ops::buckets::KERNELS;
    if nvrtc().is_none() {
        return;
    }
    for cc in [80, 90] {
        let ptx = compile(&BUCKETS, Target::Ptx(cc)).unwrap();
        let text = String::from_utf8_lossy(&ptx);
        for name in KERNELS {
            assert!(text.contains(&format!(".entry {name}(")), "{name} missing for compute_{cc}");
        }
        let mean = text.split(".entry ").find(|e| e.starts_with("bucket_mean(")).expect("bucket_mean");
        assert!(mean.contains("add.rn.f32") && mean.contains("div.rn.f32"), "compute_{cc}: {mean}");
        for forbidden in ["fma.", "div.approx", "div.full", "rcp."] {
            assert!(!mean.contains(forbidden), "compute_{cc}: bucket_mean has `{forbidden}`");
        }
    }
    let cubin = compile(&BUCKETS, Target::Cubin(90)).unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
}
