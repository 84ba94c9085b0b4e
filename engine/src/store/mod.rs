//! The on-disk chunk store: layout, ownership marker, permissions, the writer lock, the chunk
//! writer and the store-wide reader.
//!
//! ```text
//! <root>/                      0700
//!   .annal-store-v1            0600  ownership marker of a store annal created
//!   .cua-history-root-v1             (the reference's marker; recognised, never written)
//!   writer.lock                0600  exclusive flock held for a writer's whole life
//!   chunks/                    0700
//!     <chunk_id>.cborseq       0600  one chunk per writer generation (and per rotation)
//!     .<chunk_id>.cborseq.tmp        a chunk being created (header written, not yet renamed)
//! ```
//!
//! annal's own files (later: seals, index, journal) live beside `chunks/`, never inside a chunk,
//! so a reference reader still reads every chunk. Every file is opened with `O_NOFOLLOW` and a
//! symlinked root or managed entry is refused.
//!
//! # Layout
//!
//! - [`fsutil`]: the few filesystem primitives (no-follow opens, directory fsync).
//! - [`read`]: [`StoreReader`] (read-only; takes no lock) and the merged [`StoreReport`].
//! - [`write`](mod@write): [`create_store`] and [`StoreWriter`].
//! - [`delete`]: [`delete_store_files`], which removes a store only with proof that its keys
//!   were destroyed.

pub mod delete;
pub mod fsutil;
pub mod read;
pub mod write;

use std::path::{Path, PathBuf};

pub use delete::{DeleteStoreError, DeletedStore, delete_store_files};
pub use read::{ChunkReport, ReadStoreError, SequenceConflict, StoreReader, StoreReport};
pub use write::{
    AppendError, AppendReceipt, CreateStoreError, OpenWriterError, StoreWriter, WriterConfig,
    create_store,
};

/// File name of the ownership marker of a store annal created.
pub const ANNAL_MARKER_FILE_NAME: &str = ".annal-store-v1";

/// Contents of annal's ownership marker.
pub const ANNAL_MARKER_CONTENTS: &[u8] = b"annal-store-v1\n";

/// File name of the reference implementation's store marker (recognised, never written).
pub const REFERENCE_MARKER_FILE_NAME: &str = ".cua-history-root-v1";

/// The directory holding the chunk files.
pub const CHUNKS_DIR_NAME: &str = "chunks";

/// The lock file a writer holds an exclusive `flock` on.
pub const WRITER_LOCK_FILE_NAME: &str = "writer.lock";

/// Extension of a chunk file.
pub const CHUNK_FILE_EXTENSION: &str = ".cborseq";

/// Size at which the writer rotates to a new chunk, in bytes. Small enough that reading or
/// sealing one chunk is cheap, large enough that a 100 MiB store has few files.
pub const CHUNK_SIZE_LIMIT_BYTES: u64 = 4 * 1024 * 1024;

/// Largest chunk file the reader loads, in bytes. Larger than our own rotation size so chunks
/// written by other implementations with bigger limits still read; bounded so a hostile file
/// cannot exhaust memory.
pub const MAX_CHUNK_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Mode of every directory annal creates.
pub const DIR_MODE: u32 = 0o700;

/// Mode of every file annal creates.
pub const FILE_MODE: u32 = 0o600;

/// Which implementation's marker a store root carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// A store annal created (`.annal-store-v1`).
    Annal,
    /// A store the reference implementation created (`.cua-history-root-v1`).
    Reference,
}

/// The store root could not be opened as a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenStoreError {
    /// The root, a marker or a managed entry is a symbolic link.
    #[error("{} is a symbolic link; refusing to follow it", path.display())]
    Symlink {
        /// The offending path.
        path: PathBuf,
    },
    /// The root is not a directory.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The root.
        path: PathBuf,
    },
    /// The root carries neither annal's nor the reference's marker.
    #[error("{} is not a history store (no ownership marker)", path.display())]
    NoMarker {
        /// The root.
        path: PathBuf,
    },
    /// A filesystem call failed.
    #[error("{operation} {}: {source}", path.display())]
    Io {
        /// What was being done.
        operation: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Checks that `root` is a real directory (not a symlink) carrying a store marker.
pub fn check_store_root(root: &Path) -> Result<StoreKind, OpenStoreError> {
    let meta = fsutil::lstat(root).map_err(|source| OpenStoreError::Io {
        operation: "stat",
        path: root.to_owned(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(OpenStoreError::Symlink {
            path: root.to_owned(),
        });
    }
    if !meta.is_dir() {
        return Err(OpenStoreError::NotADirectory {
            path: root.to_owned(),
        });
    }
    for (name, kind) in [
        (ANNAL_MARKER_FILE_NAME, StoreKind::Annal),
        (REFERENCE_MARKER_FILE_NAME, StoreKind::Reference),
    ] {
        let path = root.join(name);
        match fsutil::lstat(&path) {
            Ok(m) if m.file_type().is_symlink() => return Err(OpenStoreError::Symlink { path }),
            Ok(m) if m.is_file() => return Ok(kind),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(OpenStoreError::Io {
                    operation: "stat",
                    path,
                    source,
                });
            }
        }
    }
    Err(OpenStoreError::NoMarker {
        path: root.to_owned(),
    })
}
