//! The filesystem seam: every byte the store and the journal write or read goes through a
//! [`Storage`].
//!
//! A `Storage` works on a fixed set of managed directories ([`Area`]) that it holds open as
//! directory descriptors, and on plain file names inside them ([`FileName`]: no `/`, no `..`).
//! No path is ever resolved again after the store was opened, so a directory swapped for a
//! symlink after the checks cannot redirect a write, and every operation is one of a short list
//! that a test double can fail on purpose.
//!
//! # Layout
//!
//! - this module: the [`Storage`], [`WriteFile`] and [`ReadFile`] traits, [`Area`],
//!   [`FileName`], [`StorageError`].
//! - [`fs`]: [`FsStorage`], the real implementation over `openat`/`renameat2`/`fdatasync`.
//! - [`faulty`]: [`FaultyStorage`], a wrapper for tests that fails the Nth write, sync, rename
//!   or directory sync with `EIO` or `ENOSPC`, writes short, and simulates a crash that keeps
//!   only a prefix of the bytes that were never synced.

pub mod faulty;
pub mod fs;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

pub use faulty::{FaultKind, FaultOp, FaultyStorage, HeldRename, SyncFailure};
pub use fs::{Access, FsStorage, OpenStorageError};

/// Longest file name a [`FileName`] may hold, in bytes (the Linux `NAME_MAX`).
pub const FILE_NAME_MAX_LEN_BYTES: usize = 255;

/// A directory annal manages. Every file operation names one of these and a plain file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Area {
    /// The contract store root (`computer-history/`): the reference's marker, `writer.lock`,
    /// `state.json`. Nothing else of annal's is ever written here.
    HistoryRoot,
    /// `computer-history/chunks/`: the history stream, `*.cborseq` only.
    Chunks,
    /// The sidecar root (`engine/`): annal's own files.
    Sidecar,
    /// `engine/tmp/`: files being created before they are renamed into place.
    Tmp,
    /// `engine/journal/`: the engine journal's chunks.
    Journal,
    /// `engine/seals/`: one authenticated seal per closed chunk.
    Seals,
    /// `engine/index/`: one encrypted index file per sealed chunk.
    Index,
    /// `engine/quarantine/`: chunks the owner moved aside with `annal repair --quarantine`
    /// (kept, never read, never deleted by annal).
    Quarantine,
}

impl Area {
    /// Every area, parents before children.
    pub const ALL: [Area; 8] = [
        Area::HistoryRoot,
        Area::Chunks,
        Area::Sidecar,
        Area::Tmp,
        Area::Journal,
        Area::Seals,
        Area::Index,
        Area::Quarantine,
    ];

    /// The area this one lives in and its directory name there; `None` for the two roots,
    /// which are opened by path.
    pub const fn parent(self) -> Option<(Area, &'static str)> {
        match self {
            Area::HistoryRoot | Area::Sidecar => None,
            Area::Chunks => Some((Area::HistoryRoot, "chunks")),
            Area::Tmp => Some((Area::Sidecar, "tmp")),
            Area::Journal => Some((Area::Sidecar, "journal")),
            Area::Seals => Some((Area::Sidecar, "seals")),
            Area::Index => Some((Area::Sidecar, "index")),
            Area::Quarantine => Some((Area::Sidecar, "quarantine")),
        }
    }

    /// Whether this area lives in the sidecar (absent from a store the reference wrote).
    pub const fn in_sidecar(self) -> bool {
        matches!(
            self,
            Area::Sidecar
                | Area::Tmp
                | Area::Journal
                | Area::Seals
                | Area::Index
                | Area::Quarantine
        )
    }
}

/// Where a store lives: the contract store root the reference can open, and annal's sidecar
/// beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLayout {
    /// The contract store (`<namespace dir>/computer-history`).
    history_root: PathBuf,
    /// annal's sidecar (`<namespace dir>/engine`); `None` for a bare reference store that is only
    /// read.
    sidecar: Option<PathBuf>,
}

/// Directory name of the contract store inside a namespace directory.
pub const HISTORY_DIR_NAME: &str = "computer-history";

/// Directory name of annal's sidecar inside a namespace directory.
pub const SIDECAR_DIR_NAME: &str = "engine";

impl StoreLayout {
    /// The default layout of a namespace directory (`$XDG_STATE_HOME/annal/<namespace>/`):
    /// `computer-history/` and `engine/` inside it.
    pub fn in_namespace_dir(dir: &Path) -> Self {
        Self {
            history_root: dir.join(HISTORY_DIR_NAME),
            sidecar: Some(dir.join(SIDECAR_DIR_NAME)),
        }
    }

    /// A contract store at `history_root` with annal's sidecar at `sidecar` (which must be on
    /// the same filesystem, so files created there can be renamed into the store).
    pub fn with_sidecar(history_root: &Path, sidecar: &Path) -> Self {
        Self {
            history_root: history_root.to_owned(),
            sidecar: Some(sidecar.to_owned()),
        }
    }

    /// A bare contract store (such as one the reference wrote), read as it is, without a
    /// sidecar. It can be read but not written.
    pub fn contract_store_only(history_root: &Path) -> Self {
        Self {
            history_root: history_root.to_owned(),
            sidecar: None,
        }
    }

    /// The contract store root.
    pub fn history_root(&self) -> &Path {
        &self.history_root
    }

    /// The sidecar, when the layout has one.
    pub fn sidecar(&self) -> Option<&Path> {
        self.sidecar.as_deref()
    }
}

/// A file name inside an [`Area`]: 1..=255 bytes, no `/` or NUL, not `.` or `..`. It can only
/// name an entry of the held directory itself, never something elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileName(String);

/// A string that cannot be a [`FileName`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a plain file name (empty, too long, `.`/`..`, or holding `/` or NUL)")]
pub struct InvalidFileName;

impl FileName {
    /// Validates `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidFileName> {
        let name = name.into();
        let plain = !name.is_empty()
            && name.len() <= FILE_NAME_MAX_LEN_BYTES
            && name != "."
            && name != ".."
            && !name.bytes().any(|b| b == b'/' || b == 0);
        if plain {
            Ok(Self(name))
        } else {
            Err(InvalidFileName)
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A name built by annal from fixed parts (hex ids and constant extensions), which is plain
    /// by construction; checked in debug builds and by the unit tests of each builder.
    pub(crate) fn from_known(name: String) -> Self {
        debug_assert!(
            Self::new(name.as_str()).is_ok(),
            "{name:?} is not a plain name"
        );
        Self(name)
    }
}

impl fmt::Display for FileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What kind of entry a directory listing found (from `lstat`: a symlink is never followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (FIFO, socket, device).
    Other,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name, exactly as the directory holds it (possibly not UTF-8).
    pub name: OsString,
    /// What it is.
    pub kind: EntryKind,
}

impl DirEntry {
    /// The name as a [`FileName`], when it is valid UTF-8 (only such names are annal's).
    pub fn file_name(&self) -> Option<FileName> {
        self.name.to_str().and_then(|s| FileName::new(s).ok())
    }
}

/// Whether a rename may replace an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Fail with [`StorageError::AlreadyExists`] if the target exists (`RENAME_NOREPLACE`).
    Never,
    /// Atomically replace the target (for `state.json`).
    Allowed,
}

/// A storage operation failed. Carries no file contents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The entry is a symbolic link; it is never followed.
    #[error("refusing to follow a symbolic link")]
    Symlink,
    /// The entry exists but is not a regular file.
    #[error("not a regular file")]
    NotRegularFile,
    /// No such entry.
    #[error("no such file")]
    NotFound,
    /// The entry already exists.
    #[error("a file of that name already exists")]
    AlreadyExists,
    /// The filesystem is full (`ENOSPC`) or the quota is exhausted (`EDQUOT`).
    #[error("no space left on the device")]
    NoSpace,
    /// The storage was opened read-only.
    #[error("the store was opened read-only")]
    ReadOnly,
    /// The store has no such directory (a bare contract store has no sidecar).
    #[error("the store has no {0:?} directory")]
    MissingArea(Area),
    /// Any other OS error.
    #[error(transparent)]
    Io(std::io::Error),
}

impl From<std::io::Error> for StorageError {
    fn from(error: std::io::Error) -> Self {
        use rustix::io::Errno;
        match error.raw_os_error().map(Errno::from_raw_os_error) {
            Some(Errno::LOOP) => Self::Symlink,
            Some(Errno::NOENT) => Self::NotFound,
            Some(Errno::EXIST) => Self::AlreadyExists,
            Some(Errno::NOSPC) | Some(Errno::DQUOT) => Self::NoSpace,
            _ => Self::Io(error),
        }
    }
}

impl From<rustix::io::Errno> for StorageError {
    fn from(errno: rustix::io::Errno) -> Self {
        Self::from(std::io::Error::from(errno))
    }
}

/// File I/O over held directory descriptors. Implementations must never follow a symlink and
/// never resolve a path outside their areas.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Whether the store was opened for writing (then the storage holds the writer lock).
    fn writable(&self) -> bool;

    /// Whether the store has `area` (a bare contract store has no sidecar areas).
    fn has_area(&self, area: Area) -> bool;

    /// Creates a new file (mode 0600), failing if any entry of that name exists, opened for
    /// appending.
    fn create_new(&self, area: Area, name: &FileName) -> Result<Box<dyn WriteFile>, StorageError>;

    /// Opens an existing regular file for reading. A symlink, directory, FIFO or device is
    /// refused without blocking.
    fn open_read(&self, area: Area, name: &FileName) -> Result<Box<dyn ReadFile>, StorageError>;

    /// Renames `from_name` in `from` to `to_name` in `to` (same filesystem).
    fn rename(
        &self,
        from: Area,
        from_name: &FileName,
        to: Area,
        to_name: &FileName,
        replace: Replace,
    ) -> Result<(), StorageError>;

    /// Makes the entries of `area` durable (`fsync` of the directory).
    fn sync_dir(&self, area: Area) -> Result<(), StorageError>;

    /// Makes an existing regular file's data durable (`fdatasync`), whoever wrote it: what a
    /// crashed writer left in the page cache, before its successor relies on it. Only on a
    /// storage opened for writing.
    fn sync_file(&self, area: Area, name: &FileName) -> Result<(), StorageError>;

    /// Lists `area` (never following symlinks), sorted by name. A missing area lists empty.
    fn list(&self, area: Area) -> Result<Vec<DirEntry>, StorageError>;

    /// Removes the file `name` (not a directory).
    fn remove(&self, area: Area, name: &FileName) -> Result<(), StorageError>;
}

/// A file this storage created, open for appending.
pub trait WriteFile: Send + fmt::Debug {
    /// Appends all of `bytes`. On error an unknown prefix may have reached the file: the caller
    /// must never append to it again.
    fn append(&mut self, bytes: &[u8]) -> Result<(), StorageError>;

    /// Makes everything appended so far durable (`fdatasync`). On error nothing since the last
    /// successful sync may be assumed durable, and retrying does not change that.
    fn sync(&mut self) -> Result<(), StorageError>;
}

/// A regular file open for reading.
pub trait ReadFile: Send + Sync + fmt::Debug {
    /// The file's length in bytes when it was opened.
    fn len(&self) -> u64;

    /// The file's length now (it may have grown since it was opened: a chunk the writer is
    /// still appending to).
    fn current_len(&self) -> Result<u64, StorageError> {
        Ok(self.len())
    }

    /// Whether the file was empty when opened.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` from `offset`; a file shorter than `offset + buf.len()` is an error.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError>;
}

/// Reads a whole file, refusing one longer than `limit_bytes` (returns its length instead).
pub fn read_bounded(
    file: &dyn ReadFile,
    limit_bytes: u64,
) -> Result<Result<Vec<u8>, u64>, StorageError> {
    let len = file.len();
    if len > limit_bytes {
        return Ok(Err(len));
    }
    let mut bytes = vec![0u8; usize::try_from(len).map_err(|_| StorageError::NoSpace)?];
    file.read_exact_at(0, &mut bytes)?;
    Ok(Ok(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_plain() {
        for good in ["a", "0123.cborseq", ".hidden", &"x".repeat(255)] {
            assert!(FileName::new(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "/abs", "a\0b", &"x".repeat(256)] {
            assert_eq!(FileName::new(bad), Err(InvalidFileName), "{bad:?}");
        }
    }

    #[test]
    fn errno_maps_to_typed_errors() {
        use rustix::io::Errno;
        assert!(matches!(
            StorageError::from(Errno::NOSPC),
            StorageError::NoSpace
        ));
        assert!(matches!(
            StorageError::from(Errno::LOOP),
            StorageError::Symlink
        ));
        assert!(matches!(StorageError::from(Errno::IO), StorageError::Io(_)));
    }
}
