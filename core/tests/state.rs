//! Training state saves to safetensors and resumes bit-exactly; bad files are errors.

use remat_core::zoo::{self, GptConfig};
use remat_core::{load_state, save_state, AdamW, CpuBackend, DType, Model, Optimizer, Params, Progress};
use std::path::PathBuf;

fn cfg() -> GptConfig {
    GptConfig { batch: 2, seq: 8, d_model: 16, heads: 2, layers: 1, vocab: 11, dropout: 0.1, dtype: DType::F32 }
}

fn train(model: &Model, params: &mut Params, opt: &mut AdamW, steps: std::ops::Range<u64>) {
    let mut cpu = CpuBackend::new();
    for step in steps {
        let out = model.step_seeded(&mut cpu, params, &zoo::synthetic_tokens(&cfg(), step).unwrap(), step).unwrap();
        opt.step(params, &out.grads).unwrap();
    }
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("remat-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn bits(p: &Params) -> Vec<Vec<u32>> {
    p.values().iter().map(|v| v.to_f32_vec().iter().map(|x| x.to_bits()).collect()).collect()
}

#[test]
fn resuming_from_a_file_is_bit_exact() {
    let model = Model::new(zoo::gpt(&cfg()).unwrap()).unwrap();
    let mut straight = model.init_params(3).unwrap();
    let mut opt_straight = AdamW::new(1e-2);
    train(&model, &mut straight, &mut opt_straight, 0..20);

    let mut first = model.init_params(3).unwrap();
    let mut opt_first = AdamW::new(1e-2);
    train(&model, &mut first, &mut opt_first, 0..10);
    let path = temp("resume.safetensors");
    save_state(&path, &first, &opt_first, Progress { step: 10, seed: 3 }).unwrap();

    let mut resumed = model.init_params(99).unwrap();
    let mut opt_resumed = AdamW::new(0.5);
    let progress = load_state(&path, &mut resumed, &mut opt_resumed).unwrap();
    assert_eq!(progress, Progress { step: 10, seed: 3 });
    assert_eq!(bits(&resumed), bits(&first));
    train(&model, &mut resumed, &mut opt_resumed, progress.step..20);
    assert_eq!(bits(&resumed), bits(&straight), "10 + save + load + 10 steps equal 20 straight, bit for bit");
    assert_eq!(opt_resumed.t(), opt_straight.t());
}

#[test]
fn truncated_and_mismatched_files_are_errors_that_change_nothing() {
    let model = Model::new(zoo::gpt(&cfg()).unwrap()).unwrap();
    let params = model.init_params(1).unwrap();
    let opt = AdamW::new(1e-3);
    let path = temp("bad.safetensors");
    save_state(&path, &params, &opt, Progress { step: 1, seed: 1 }).unwrap();
    let bytes = std::fs::read(&path).unwrap();

    let truncated = temp("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();
    let mut target = model.init_params(2).unwrap();
    let before = bits(&target);
    let mut target_opt = AdamW::new(1e-3);
    let err = load_state(&truncated, &mut target, &mut target_opt).unwrap_err().to_string();
    assert!(err.contains("truncated.safetensors"), "{err}");
    assert_eq!(bits(&target), before, "nothing changed");

    let other = Model::new(zoo::gpt(&GptConfig { d_model: 8, ..cfg() }).unwrap()).unwrap();
    let mut other_params = other.init_params(0).unwrap();
    let err = load_state(&path, &mut other_params, &mut target_opt).unwrap_err().to_string();
    assert!(err.contains("the model expects [11, 8] f32"), "{err}");

    let garbage = temp("garbage.safetensors");
    std::fs::write(&garbage, b"not a checkpoint").unwrap();
    let err = load_state(&garbage, &mut target, &mut target_opt).unwrap_err().to_string();
    assert!(err.contains("not a safetensors file"), "{err}");
}

#[test]
fn a_failed_save_leaves_the_previous_file_in_place() {
    let model = Model::new(zoo::gpt(&cfg()).unwrap()).unwrap();
    let params = model.init_params(1).unwrap();
    let opt = AdamW::new(1e-3);
    let path = temp("keep.safetensors");
    save_state(&path, &params, &opt, Progress { step: 5, seed: 1 }).unwrap();
    let before = std::fs::read(&path).unwrap();
    // Block the temporary file's name so the next save fails before touching the target.
    let blocker = path.with_extension("tmp-partial");
    std::fs::create_dir_all(&blocker).unwrap();
    let err = save_state(&path, &model.init_params(2).unwrap(), &opt, Progress { step: 6, seed: 1 }).unwrap_err();
    assert!(err.to_string().contains("cannot create"), "{err}");
    // The operating system's error is kept as the source, not only as text.
    let source = std::error::Error::source(&err).expect("the io error is the source");
    assert!(source.downcast_ref::<std::io::Error>().is_some(), "{source:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the previous file is intact");
    std::fs::remove_dir(&blocker).unwrap();
}
