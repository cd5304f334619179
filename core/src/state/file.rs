//! Replacing a file's contents atomically: a temporary file beside the target, written and
//! synced, then renamed over it.
//!
//! The target is resolved first: a symlink is followed to the file it names (the link stays a
//! link, as `>` in a shell writes through it), and anything but a regular file or nothing at
//! all is refused — renaming over a FIFO or a device node would replace the node itself with a
//! regular file, silently.

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Links followed before giving up, as the kernel's own limit (`ELOOP` after 40).
const MAX_LINKS: usize = 40;

/// Temporary names taken by this process: with the pid, unique among concurrent writers.
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically; on any error nothing new is left on disk.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    replace_with(path, bytes, |from, to| std::fs::rename(from, to))
}

/// [`replace`] with the rename given, so that its failure can be tested.
pub(crate) fn replace_with(
    path: &Path,
    bytes: &[u8],
    rename: impl FnOnce(&Path, &Path) -> std::io::Result<()>,
) -> Result<()> {
    let target = resolve(path)?;
    let name = target_name(path, &target);
    let io = |what: &'static str| {
        let path = name.clone();
        move |source| Error::Io { path, what, source }
    };
    let (tmp, file) = create_temp(&target).map_err(io("cannot create a temporary file beside it"))?;
    let written = write_and_sync(file, bytes)
        .map_err(io("cannot write"))
        .and_then(|()| rename(&tmp, &target).map_err(io("cannot replace")));
    if let Err(e) = written {
        // The temporary file is ours alone (created new): removing it loses nothing.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(&target).map_err(io("cannot sync its directory"))
}

/// How messages name the file: the path given, and where a link led if it differs.
fn target_name(path: &Path, target: &Path) -> String {
    if path == target {
        path.display().to_string()
    } else {
        format!("{} (the link's target {})", path.display(), target.display())
    }
}

/// The regular file (existing or not) that `path` names once symlinks are followed; an error
/// for anything else there.
fn resolve(path: &Path) -> Result<PathBuf> {
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(meta) => meta,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(at),
            Err(source) => return Err(Error::Io { path: target_name(path, &at), what: "cannot inspect", source }),
        };
        let kind = meta.file_type();
        if kind.is_file() {
            return Ok(at);
        }
        if !kind.is_symlink() {
            return Err(Error::config(
                "path",
                format!(
                    "{}: is {}, not a regular file: a training state is written only to a regular file (or a new path)",
                    target_name(path, &at),
                    describe(&kind)
                ),
            ));
        }
        let link = std::fs::read_link(&at).map_err(|source| Error::Io {
            path: target_name(path, &at),
            what: "cannot read the link",
            source,
        })?;
        // A relative link is relative to the folder holding the link.
        at = match at.parent() {
            Some(dir) if link.is_relative() => dir.join(link),
            _ => link,
        };
    }
    Err(Error::config("path", format!("{}: more than {MAX_LINKS} symbolic links in a row (a loop?)", path.display())))
}

/// What a non-regular, non-link file is, for a message.
fn describe(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// A new file beside `target`, named after it (`.a.st.<pid>.<n>.tmp`), created exclusively so
/// that no other writer's temporary file is ever reused or truncated.
fn create_temp(target: &Path) -> std::io::Result<(PathBuf, File)> {
    let dir = parent_dir(target);
    let stem = target.file_name().map_or_else(|| "state".into(), |n| n.to_string_lossy().into_owned());
    loop {
        let n = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{stem}.{}.{n}.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            // Left by a process with our pid before us: take the next number.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn write_and_sync(mut file: File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes the rename itself durable: a crash right after it could otherwise lose the new name.
fn sync_dir(target: &Path) -> std::io::Result<()> {
    match File::open(parent_dir(target)).and_then(|dir| dir.sync_all()) {
        // Some file systems cannot sync a directory; the rename stands either way.
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => Ok(()),
        other => other,
    }
}

fn parent_dir(target: &Path) -> &Path {
    match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("remat-file-{name}-{}", std::process::id()));
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

    #[test]
    fn a_failed_rename_leaves_the_old_file_and_nothing_else() {
        let dir = scratch("rename");
        let target = dir.join("a.st");
        std::fs::write(&target, b"old").unwrap();
        let refused = |_: &Path, _: &Path| Err(std::io::Error::new(ErrorKind::PermissionDenied, "refused"));
        let err = replace_with(&target, b"new", refused).unwrap_err().to_string();
        assert!(err.contains("a.st: cannot replace: refused"), "{err}");
        assert_eq!(listing(&dir), ["a.st"]);
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_differ_for_targets_of_one_stem_and_for_each_save() {
        let dir = scratch("names");
        let (a, _fa) = create_temp(&dir.join("a.st")).unwrap();
        let (b, _fb) = create_temp(&dir.join("a.bin")).unwrap();
        let (a2, _fa2) = create_temp(&dir.join("a.st")).unwrap();
        assert!(a != b && a != a2 && b != a2, "{a:?} {b:?} {a2:?}");
        assert_eq!(listing(&dir).len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
