//! Filesystem primitives: no-follow opens, exclusive creation with fixed modes, directory fsync.
//! All safe code: `O_NOFOLLOW` is passed through `OpenOptionsExt::custom_flags`.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::FILE_MODE;

fn nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// `lstat`: metadata of the entry itself, never of a symlink's target.
pub fn lstat(path: &Path) -> std::io::Result<Metadata> {
    std::fs::symlink_metadata(path)
}

/// Opens an existing file read-only without following a final symlink (`ELOOP` if it is one).
pub fn open_read(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nofollow())
        .open(path)
}

/// Opens a directory read-only (for fsync or as a base for `*at` calls), without following a
/// final symlink.
pub fn open_dir(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nofollow() | rustix::fs::OFlags::DIRECTORY.bits() as i32)
        .open(path)
}

/// Creates a new file (failing if anything exists at `path`) with mode 0600, for writing.
pub fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(nofollow())
        .open(path)
}

/// Opens or creates a file with mode 0600 for writing, without following a symlink.
pub fn open_or_create(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .custom_flags(nofollow())
        .open(path)
}

/// Makes a directory entry change (create, rename) durable.
pub fn fsync_dir(path: &Path) -> std::io::Result<()> {
    open_dir(path)?.sync_all()
}

/// Reads a whole file opened with [`open_read`], refusing files longer than `limit_bytes`.
pub fn read_bounded(path: &Path, limit_bytes: u64) -> std::io::Result<Result<Vec<u8>, u64>> {
    let file = open_read(path)?;
    let len = file.metadata()?.len();
    if len > limit_bytes {
        return Ok(Err(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // `take` guards against the file growing between the stat and the read.
    file.take(limit_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit_bytes {
        return Ok(Err(bytes.len() as u64));
    }
    Ok(Ok(bytes))
}

/// Whether an open failed because the final component is a symlink (`ELOOP` from `O_NOFOLLOW`).
pub fn is_symlink_refusal(error: &std::io::Error) -> bool {
    error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// Opens (creating it 0600 if needed, never following a symlink) the lock file at `path` and
/// takes an exclusive, non-blocking `flock` on it. `Ok(None)` when another holder has it. The
/// lock lasts as long as the returned file stays open.
pub fn try_lock_exclusive(path: &Path) -> std::io::Result<Option<File>> {
    let file = open_or_create(path)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
