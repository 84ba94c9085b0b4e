//! Cryptographic delete, step two: removing a store's files once its keys are verifiably gone.
//!
//! Step one is [`destroy_namespace`](crate::keys::destroy_namespace), which destroys every key
//! of a namespace, verifies each is absent, and only then returns a
//! [`NamespaceKeysDestroyed`] proof. [`delete_store_files`] requires that proof, so files are
//! never removed while a key that decrypts them may still exist. It also refuses to remove a
//! store that holds a chunk of another namespace: a store is bound to its namespace by the key
//! reference in every chunk header, and delete touches only its own namespace.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::read::{ReadStoreError, list_chunk_files};
use super::{CHUNKS_DIR_NAME, OpenStoreError, WRITER_LOCK_FILE_NAME, check_store_root, fsutil};
use crate::keys::NamespaceKeysDestroyed;
use crate::profile::read_header;

/// Most bytes read from the front of a chunk to learn its header. A header is seven short
/// fields (at most a few hundred bytes); 4 KiB leaves room for any conforming header.
pub const HEADER_READ_LIMIT_BYTES: u64 = 4096;

/// What [`delete_store_files`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedStore {
    /// The store root that no longer exists.
    pub root: PathBuf,
    /// How many chunk files were removed with it.
    pub chunks_removed: usize,
}

/// The store's files could not be removed. Nothing was removed unless the variant says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeleteStoreError {
    /// The root is not a store (or is a symlink).
    #[error(transparent)]
    Store(#[from] OpenStoreError),
    /// The chunk directory could not be listed (or holds a symlinked entry). Nothing was removed.
    #[error(transparent)]
    List(#[from] ReadStoreError),
    /// A writer holds the store's writer lock; delete would pull files from under it.
    #[error("a writer holds the store's writer lock; stop it before deleting")]
    WriterActive,
    /// A chunk belongs to a key reference the proof does not cover (another namespace, or a key
    /// that was not destroyed). Nothing was removed.
    #[error("chunk {file} belongs to a key that was not destroyed; nothing was removed")]
    ForeignChunk {
        /// The chunk file name.
        file: String,
    },
    /// A chunk header cannot be read, so its namespace is unknown. Nothing was removed.
    #[error("chunk {file} has an unreadable header; nothing was removed")]
    UnreadableHeader {
        /// The chunk file name.
        file: String,
    },
    /// A filesystem call failed. Files may have been partly removed only when `operation` is
    /// `remove`; the keys are already gone, so what is left cannot be decrypted.
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

fn io(operation: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DeleteStoreError {
    let path = path.to_owned();
    move |source| DeleteStoreError::Io {
        operation,
        path,
        source,
    }
}

/// Removes the store at `root` after its namespace's keys were destroyed and verified absent.
///
/// Checks first, removes second: every chunk header must name a key reference the proof covers,
/// and no writer may hold the lock. Only then is the whole root removed (without following
/// symlinks) and the parent directory synced.
pub fn delete_store_files(
    root: &Path,
    proof: &NamespaceKeysDestroyed,
) -> Result<DeletedStore, DeleteStoreError> {
    check_store_root(root)?;
    // Hold the writer lock while checking and removing, so no writer starts in between.
    let lock_path = root.join(WRITER_LOCK_FILE_NAME);
    let lock = match fsutil::try_lock_exclusive(&lock_path) {
        Ok(Some(lock)) => lock,
        Ok(None) => return Err(DeleteStoreError::WriterActive),
        Err(e) if fsutil::is_symlink_refusal(&e) => {
            return Err(OpenStoreError::Symlink { path: lock_path }.into());
        }
        Err(e) => return Err(io("lock", &lock_path)(e)),
    };

    // The same chunk files a reader would read (temp files of a crashed chunk creation are
    // never read, so they carry no data a reader returns); a symlinked entry is refused.
    let chunks_dir = root.join(CHUNKS_DIR_NAME);
    let names = list_chunk_files(&chunks_dir)?;
    for name in &names {
        let reference = chunk_key_reference(&chunks_dir.join(name))
            .ok_or_else(|| DeleteStoreError::UnreadableHeader { file: name.clone() })?;
        if !proof.destroyed().iter().any(|r| r.as_str() == reference) {
            return Err(DeleteStoreError::ForeignChunk { file: name.clone() });
        }
    }

    std::fs::remove_dir_all(root).map_err(io("remove", root))?;
    drop(lock);
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        fsutil::fsync_dir(parent).map_err(io("sync directory", parent))?;
    }
    Ok(DeletedStore {
        root: root.to_owned(),
        chunks_removed: names.len(),
    })
}

/// The key reference named by a chunk's header, or `None` if the header cannot be read.
fn chunk_key_reference(path: &Path) -> Option<String> {
    let file = fsutil::open_read(path).ok()?;
    let mut front = Vec::new();
    file.take(HEADER_READ_LIMIT_BYTES)
        .read_to_end(&mut front)
        .ok()?;
    let (parsed, _) = read_header(&front).ok()?;
    Some(parsed.header.key_reference().to_owned())
}
