//! Training state saves to safetensors and resumes bit-exactly; bad files are errors.

use remat_core::{load_state, save_state, AdamW, CpuBackend, DType, Error, Model, Optimizer, Params, Progress};
use remat_zoo::{self as zoo, GptConfig};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

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
    let err = load_state(&path, &mut other_params, &mut target_opt).unwrap_err();
    assert!(matches!(err, Error::OptimizerState { .. }), "a state of another model: {err:?}");
    assert!(err.to_string().contains("the model expects [11, 8] f32"), "{err}");

    let garbage = temp("garbage.safetensors");
    std::fs::write(&garbage, b"not a checkpoint").unwrap();
    let err = load_state(&garbage, &mut target, &mut target_opt).unwrap_err().to_string();
    assert!(err.contains("not a safetensors file"), "{err}");
}

/// A fresh, empty folder for one test.
fn folder(name: &str) -> PathBuf {
    let dir = temp(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn small() -> (Model, Params, AdamW) {
    let model = Model::new(zoo::gpt(&cfg()).unwrap()).unwrap();
    let params = model.init_params(1).unwrap();
    (model, params, AdamW::new(1e-3))
}

/// The progress a file holds, read back by `load_state`.
fn progress_in(model: &Model, path: &Path) -> Progress {
    let (mut params, mut opt) = (model.init_params(9).unwrap(), AdamW::new(1e-3));
    load_state(path, &mut params, &mut opt).unwrap()
}

/// A save that must be refused: the error names the path and what is there, and the folder is
/// left as it was.
fn refused(dir: &Path, path: &Path, what: &str) {
    let (_, params, opt) = small();
    let before = listing(dir);
    let err = save_state(path, &params, &opt, Progress { step: 1, seed: 1 }).unwrap_err();
    assert!(matches!(&err, Error::Config { setting, .. } if setting == "path"), "{err:?}");
    let err = err.to_string();
    assert!(err.contains(&path.display().to_string()) && err.contains(what), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
    assert_eq!(listing(dir), before, "nothing created or removed");
}

#[test]
fn a_symlink_is_written_through_and_stays_a_link() {
    let (model, params, opt) = small();
    let dir = folder("symlink");
    let target = dir.join("target.st");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.join("link.st");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    save_state(&link, &params, &opt, Progress { step: 7, seed: 2 }).unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link is still a link");
    assert_eq!(progress_in(&model, &target), Progress { step: 7, seed: 2 }, "its target holds the state");
    assert_eq!(listing(&dir), ["link.st", "target.st"]);

    // A relative link resolves from the link's folder, not the process's.
    let relative = dir.join("relative.st");
    std::os::unix::fs::symlink("target.st", &relative).unwrap();
    save_state(&relative, &params, &opt, Progress { step: 8, seed: 2 }).unwrap();
    assert_eq!(progress_in(&model, &target), Progress { step: 8, seed: 2 });
    assert_eq!(listing(&dir), ["link.st", "relative.st", "target.st"]);
}

#[test]
fn a_dangling_symlink_creates_its_target() {
    let (model, params, opt) = small();
    let dir = folder("dangling");
    let link = dir.join("link.st");
    std::os::unix::fs::symlink(dir.join("new.st"), &link).unwrap();
    save_state(&link, &params, &opt, Progress { step: 3, seed: 4 }).unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(progress_in(&model, &dir.join("new.st")), Progress { step: 3, seed: 4 });
    assert_eq!(listing(&dir), ["link.st", "new.st"]);
}

#[test]
fn a_link_loop_is_refused() {
    let dir = folder("loop");
    let (a, b) = (dir.join("a.st"), dir.join("b.st"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    refused(&dir, &a, "symbolic links in a row");
}

#[test]
fn a_fifo_is_refused_and_stays_a_fifo() {
    let dir = folder("fifo");
    let fifo = dir.join("fifo.st");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("the mkfifo command runs");
    assert!(made.success());
    refused(&dir, &fifo, "is a FIFO (named pipe), not a regular file");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());

    // Through a link, the message names both.
    let link = dir.join("link.st");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    refused(&dir, &link, "(the link's target");
}

#[test]
fn a_device_is_refused_and_left_alone() {
    let null = Path::new("/dev/null");
    assert!(std::fs::symlink_metadata(null).unwrap().file_type().is_char_device());
    refused(Path::new("/dev"), null, "/dev/null: is a character device, not a regular file");
    assert!(std::fs::symlink_metadata(null).unwrap().file_type().is_char_device(), "/dev/null is still a device");
    let dir = folder("device");
    let link = dir.join("null.st");
    std::os::unix::fs::symlink(null, &link).unwrap();
    refused(&dir, &link, "(the link's target /dev/null): is a character device");
}

#[test]
fn a_directory_is_refused_and_nothing_is_left_behind() {
    let dir = folder("directory");
    let sub = dir.join("sub.st");
    std::fs::create_dir_all(sub.join("x")).unwrap();
    refused(&dir, &sub, "is a directory, not a regular file");
    assert_eq!(listing(&sub), ["x"]);
}

#[test]
fn an_unwritable_folder_is_an_error_naming_the_file() {
    let (_, params, opt) = small();
    let dir = folder("unwritable");
    let locked = dir.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root writes through permission bits: /proc takes no new files from anyone.
    let can_write = std::fs::write(locked.join("probe"), b"").is_ok();
    let (parent, path) = if can_write {
        std::fs::remove_file(locked.join("probe")).unwrap();
        (PathBuf::from("/proc/self"), PathBuf::from("/proc/self/remat.st"))
    } else {
        (locked.clone(), locked.join("s.st"))
    };
    let before = listing(&parent);
    let err = save_state(&path, &params, &opt, Progress { step: 1, seed: 1 }).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with(&format!("{}: cannot create", path.display())), "{text}");
    // The operating system's error is kept as the source, not only as text.
    let source = std::error::Error::source(&err).expect("the io error is the source");
    assert!(source.downcast_ref::<std::io::Error>().is_some(), "{source:?}");
    assert_eq!(listing(&parent), before);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();

    let missing = dir.join("no/such/folder/s.st");
    let err = save_state(&missing, &params, &opt, Progress { step: 1, seed: 1 }).unwrap_err().to_string();
    assert!(err.contains("no/such/folder/s.st: cannot create"), "{err}");
    assert_eq!(listing(&dir), ["locked"]);
}

#[test]
fn two_targets_of_one_stem_saved_at_once_keep_their_own_contents() {
    let (model, params, opt) = small();
    let dir = folder("stem");
    let (st, bin) = (dir.join("a.st"), dir.join("a.bin"));
    // The old temporary name was the target's with its extension replaced: `a.st` and `a.bin`
    // shared it, so two saves at once could rename each other's file into place.
    std::thread::scope(|s| {
        for (path, seed) in [(&st, 1), (&bin, 2)] {
            let (params, opt) = (&params, &opt);
            s.spawn(move || {
                for step in 0..20 {
                    save_state(path, params, opt, Progress { step, seed }).unwrap();
                }
            });
        }
    });
    assert_eq!(progress_in(&model, &st), Progress { step: 19, seed: 1 });
    assert_eq!(progress_in(&model, &bin), Progress { step: 19, seed: 2 });
    assert_eq!(listing(&dir), ["a.bin", "a.st"]);
}

#[test]
fn a_save_replaces_a_regular_file_and_leaves_nothing_else() {
    let (model, params, opt) = small();
    let dir = folder("replace");
    let path = dir.join("s.st");
    std::fs::write(&path, b"old").unwrap();
    save_state(&path, &params, &opt, Progress { step: 5, seed: 1 }).unwrap();
    save_state(&path, &params, &opt, Progress { step: 6, seed: 1 }).unwrap();
    assert_eq!(progress_in(&model, &path), Progress { step: 6, seed: 1 });
    assert_eq!(listing(&dir), ["s.st"]);
}
