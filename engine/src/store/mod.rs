//! The on-disk store: the contract store the reference can open in place, annal's sidecar beside
//! it, the chunk writer and the store-wide reader. All file I/O goes through a
//! [`Storage`].
//!
//! ```text
//! <namespace dir>/                 0700
//!   computer-history/              0700  the contract store (exactly what the reference accepts)
//!     .cua-history-root-v1         0600  the reference's marker, "cua-history-root-v1\n"
//!     writer.lock                  0600  exclusive flock for a writer's whole life
//!     state.json                   0600  {"enabled":bool,"paused":bool}: a mirror, never authoritative
//!     chunks/                      0700
//!       <chunk_id>.cborseq         0600  one chunk per writer generation (and per rotation)
//!   engine/                        0700  annal's sidecar
//!     tmp/                         0700  chunks being created, renamed into chunks/ when complete
//!     journal/                     0700  the engine journal's chunks
//!     seals/                       0700  one authenticated seal per closed chunk
//!     index/                       0700  one encrypted index file per sealed chunk
//! ```
//!
//! # Layout
//!
//! - this module: the file names and limits of the layout, [`create_store`], [`adopt_store`],
//!   [`open_store`] (marker check), and the `state.json` mirror.
//! - [`stream`]: the [`Stream`] trait (which records a stream holds, with which keys, in which
//!   directory) and [`History`], the v0 history stream.
//! - [`read`]: [`StoreReader`] (read-only; takes no lock), the per-chunk verdicts and the
//!   merged [`StoreReport`]; record reads by location.
//! - [`write`](mod@write): [`StoreWriter`], which assigns sequences, seals, rotates and
//!   abandons chunks on any write error.
//! - [`delete`]: [`plan_store_delete`] and [`delete_store_files`], which remove a store only with
//!   proof that its keys were destroyed.
//! - [`prune`]: physical retention and `evict_oldest`: which sealed chunks may go ([`Pruner`],
//!   [`plan_prune`]) and their removal once the journal records them.

pub mod delete;
pub mod identity;
pub mod import;
pub mod prune;
pub mod quarantine;
pub mod read;
pub mod stream;
pub mod write;

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

pub use delete::{
    DeletePlan, DeleteStoreError, DeletedStore, delete_store_files, plan_store_delete,
};
pub use identity::{
    KEY_CHOICE_FILE_NAME, STORE_ID_FILE_NAME, StoreIdError, ensure_store_id, key_scope,
    read_store_id, record_own_key, recorded_key_choice,
};
pub use prune::{
    EVICTION_LOW_WATER_PERCENT, Eviction, PruneCandidate, PruneChoice, PruneError, PrunePlan,
    Pruner, QUOTA_CHUNKS_MIN, chunk_size_limit_for_quota, plan_prune, pruned_chunks,
};
pub use quarantine::{QuarantineError, Quarantined, quarantine_chunk};
pub use read::{
    ChunkHandle, ChunkReport, ReadAtError, ReadStoreError, SequenceConflict, StoreReader,
    StoreReport,
};
pub use stream::{History, RecordIdentity, Stream};
pub use write::{
    AppendError, AppendReceipt, CHUNK_MAX_AGE_SECS, ClosedChunk, ControlRead,
    EARLY_ROTATION_HEADROOM_FRACTION, OpenState, OpenWriterError, RecordLocation, SealedChunk,
    StoreWriter, TornTailFound, WriterConfig,
};

use crate::profile::ChunkId;
use crate::storage::fs::{FILE_MODE, ensure_dir_at, open_dir};
use crate::storage::{
    Access, Area, FileName, FsStorage, OpenStorageError, Replace, Storage, StorageError,
    StoreLayout,
};

/// File name of the reference implementation's store marker, which annal writes too: an annal
/// history root is a contract store the reference opens in place.
pub const MARKER_FILE_NAME: &str = ".cua-history-root-v1";

/// Exact contents of the marker.
pub const MARKER_CONTENTS: &[u8] = b"cua-history-root-v1\n";

/// The owner's enabled/paused state as the reference reads it; annal writes it as a mirror of
/// its journal and never trusts it over the journal.
pub const STATE_FILE_NAME: &str = "state.json";

/// The temporary name `state.json` is written under before it is renamed into place (the
/// reference accepts it in the root).
pub const STATE_TMP_FILE_NAME: &str = "state.json.tmp";

/// The reference's admission file (annal never writes it; listed because the reference accepts
/// it in the root).
pub const ADMISSION_FILE_NAME: &str = "admission.json";

/// The reference's temporary admission file (likewise never written by annal).
pub const ADMISSION_TMP_FILE_NAME: &str = "admission.json.tmp";

/// Every entry the reference accepts in a history root; it refuses a root holding anything
/// else, so annal never writes anything else there.
pub const HISTORY_ROOT_ENTRIES: [&str; 7] = [
    MARKER_FILE_NAME,
    "chunks",
    STATE_FILE_NAME,
    STATE_TMP_FILE_NAME,
    ADMISSION_FILE_NAME,
    ADMISSION_TMP_FILE_NAME,
    crate::storage::fs::WRITER_LOCK_FILE_NAME,
];

/// Extension of a chunk file (`<chunk_id>.cborseq`); the reference accepts only such files in
/// `chunks/`.
pub const CHUNK_FILE_EXTENSION: &str = ".cborseq";

/// Extension of a chunk being created in the sidecar's `tmp/`.
pub const TEMP_FILE_EXTENSION: &str = ".tmp";

/// Size at which the writer rotates to a new chunk, in bytes. Small enough that reading or
/// sealing one chunk is cheap, large enough that a 100 MiB store has few files.
pub const CHUNK_SIZE_LIMIT_BYTES: u64 = 4 * 1024 * 1024;

/// Largest chunk file the reader loads, in bytes. Larger than our own rotation size so chunks
/// written by other implementations with bigger limits still read; bounded so a hostile file
/// cannot exhaust memory (a larger file is `Unreadable`, not a failure of the whole store).
pub const MAX_CHUNK_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Most bytes read of a marker or `state.json`; both are a few dozen bytes.
pub const SMALL_FILE_READ_LIMIT_BYTES: u64 = 4096;

/// `<chunk_id>.cborseq`.
pub fn chunk_file_name(chunk_id: ChunkId) -> FileName {
    FileName::from_known(format!("{}{CHUNK_FILE_EXTENSION}", chunk_id.to_hex()))
}

/// The chunk id of a `<32 lower hex>.cborseq` name; `None` for anything else.
pub fn parse_chunk_file_name(name: &str) -> Option<ChunkId> {
    name.strip_suffix(CHUNK_FILE_EXTENSION)
        .and_then(ChunkId::from_hex)
}

/// The store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenStoreError {
    /// Its directories could not be opened (symlink, missing, locked, permissions, ...).
    #[error(transparent)]
    Storage(#[from] OpenStorageError),
    /// The root carries no marker (or a symlink, or a non-file, in its place).
    #[error("{} is not a history store (no `.cua-history-root-v1` marker)", root.display())]
    NoMarker {
        /// The root.
        root: PathBuf,
    },
    /// The marker exists but does not hold exactly `cua-history-root-v1\n`.
    #[error("{} has a marker with unexpected contents", root.display())]
    BadMarker {
        /// The root.
        root: PathBuf,
    },
    /// Reading the marker failed.
    #[error("reading the marker of {}: {source}", root.display())]
    Marker {
        /// The root.
        root: PathBuf,
        /// The storage error.
        source: StorageError,
    },
}

impl OpenStoreError {
    /// Whether there is simply no store of annal's here: no root, a root that is no store (no
    /// marker), or a contract store annal never adopted. Every other failure is a store that
    /// exists and cannot be opened (locked by another writer, permissions, a symlink, an I/O
    /// error, a bad marker): a storage failure to report, never "history is off".
    pub fn is_absent(&self) -> bool {
        matches!(
            self,
            Self::Storage(OpenStorageError::Missing { .. } | OpenStorageError::NotAdopted { .. })
                | Self::NoMarker { .. }
        )
    }
}

/// Opens the store of `layout`: its directories (as [`FsStorage::open`]) and a check of the
/// marker. [`Access::Write`] needs the sidecar ([`adopt_store`] makes one for a reference store).
pub fn open_store(layout: &StoreLayout, access: Access) -> Result<FsStorage, OpenStoreError> {
    let storage = FsStorage::open(layout, access)?;
    check_marker(&storage, layout.history_root())?;
    Ok(storage)
}

fn check_marker(storage: &dyn Storage, root: &Path) -> Result<(), OpenStoreError> {
    let name = FileName::new(MARKER_FILE_NAME).map_err(|_| OpenStoreError::NoMarker {
        root: root.to_owned(),
    })?;
    let file = match storage.open_read(Area::HistoryRoot, &name) {
        Ok(file) => file,
        Err(StorageError::NotFound | StorageError::Symlink | StorageError::NotRegularFile) => {
            return Err(OpenStoreError::NoMarker {
                root: root.to_owned(),
            });
        }
        Err(source) => {
            return Err(OpenStoreError::Marker {
                root: root.to_owned(),
                source,
            });
        }
    };
    match crate::storage::read_bounded(file.as_ref(), SMALL_FILE_READ_LIMIT_BYTES) {
        Ok(Ok(bytes)) if bytes == MARKER_CONTENTS => Ok(()),
        Ok(_) => Err(OpenStoreError::BadMarker {
            root: root.to_owned(),
        }),
        Err(source) => Err(OpenStoreError::Marker {
            root: root.to_owned(),
            source,
        }),
    }
}

/// Creating or adopting a store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateStoreError {
    /// The layout has no sidecar; annal only creates stores with one.
    #[error("a store needs a sidecar directory for annal's own files")]
    NoSidecar,
    /// The root already holds a store.
    #[error("{} already holds a history store", path.display())]
    AlreadyExists {
        /// The root.
        path: PathBuf,
    },
    /// The root (or the sidecar) exists, is not empty and is not what was expected: annal does
    /// not adopt foreign directories.
    #[error("{} exists and is not empty", path.display())]
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// [`adopt_store`] was pointed at a directory that is not a contract store.
    #[error(transparent)]
    NotAStore(OpenStoreError),
    /// A directory could not be opened (symlink, not a directory).
    #[error(transparent)]
    Storage(#[from] OpenStorageError),
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

fn create_io(
    operation: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> CreateStoreError {
    let path = path.to_owned();
    move |source| CreateStoreError::Io {
        operation,
        path,
        source,
    }
}

/// Makes `path` an empty directory of mode 0700 that annal may fill: creates it (and missing
/// parents, 0700) or adopts an existing empty directory, setting its mode to 0700. Returns its
/// descriptor. `is_ours` tells an existing store from a foreign directory.
fn prepare_empty_dir(
    path: &Path,
    already: impl Fn(&Path) -> bool,
) -> Result<std::os::fd::OwnedFd, CreateStoreError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::symlink_metadata(path) {
        Ok(_) => {
            let fd = open_dir(None, path, path)?;
            if already(path) {
                return Err(CreateStoreError::AlreadyExists {
                    path: path.to_owned(),
                });
            }
            let mut entries =
                rustix::fs::Dir::read_from(&fd).map_err(|e| create_io("list", path)(e.into()))?;
            let non_empty = entries.any(|entry| {
                entry.is_ok_and(|e| {
                    let name = e.file_name().to_bytes();
                    name != b"." && name != b".."
                })
            });
            if non_empty {
                return Err(CreateStoreError::NotEmpty {
                    path: path.to_owned(),
                });
            }
            rustix::fs::fchmod(
                &fd,
                rustix::fs::Mode::from_raw_mode(crate::storage::fs::DIR_MODE),
            )
            .map_err(|e| create_io("chmod", path)(e.into()))?;
            Ok(fd)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(crate::storage::fs::DIR_MODE)
                .create(path)
                .map_err(create_io("create directory", path))?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                let parent_fd = open_dir(None, parent, parent)?;
                rustix::fs::fsync(&parent_fd)
                    .map_err(|e| create_io("sync directory", parent)(e.into()))?;
            }
            Ok(open_dir(None, path, path)?)
        }
        Err(e) => Err(create_io("stat", path)(e)),
    }
}

/// Writes `contents` to a new file `name` (0600) in the directory `dir` and syncs it.
fn write_new_file_at(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &str,
    contents: &[u8],
    path: &Path,
) -> Result<(), CreateStoreError> {
    use std::io::Write;
    let fd = rustix::fs::openat(
        dir,
        name,
        rustix::fs::OFlags::WRONLY
            | rustix::fs::OFlags::CREATE
            | rustix::fs::OFlags::EXCL
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(FILE_MODE),
    )
    .map_err(|e| create_io("create", path)(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(create_io("write", path))
}

fn has_marker(root: &Path) -> bool {
    std::fs::symlink_metadata(root.join(MARKER_FILE_NAME)).is_ok()
}

/// Creates an empty store for `layout`: the contract store (marker, `chunks/`, a disabled
/// `state.json`) and the sidecar (`tmp/`, `journal/`). Either root may be an existing empty
/// directory (its mode is set to 0700); anything else existing is refused.
pub fn create_store(layout: &StoreLayout) -> Result<(), CreateStoreError> {
    let sidecar = layout.sidecar().ok_or(CreateStoreError::NoSidecar)?;
    let root = layout.history_root();
    if has_marker(root) {
        return Err(CreateStoreError::AlreadyExists {
            path: root.to_owned(),
        });
    }
    // The sidecar first: a crash in between leaves an empty sidecar, which a retry adopts.
    create_sidecar(sidecar)?;
    let root_fd = prepare_empty_dir(root, has_marker)?;
    ensure_dir_at(root_fd.as_fd(), "chunks", &root.join("chunks"))?;
    write_new_file_at(
        root_fd.as_fd(),
        STATE_FILE_NAME,
        &StateMirror::default().to_json(),
        &root.join(STATE_FILE_NAME),
    )?;
    // The marker last: a root without it is not a store, so a crash before this point leaves
    // nothing a reader would mistake for one.
    write_new_file_at(
        root_fd.as_fd(),
        MARKER_FILE_NAME,
        MARKER_CONTENTS,
        &root.join(MARKER_FILE_NAME),
    )?;
    rustix::fs::fsync(&root_fd).map_err(|e| create_io("sync directory", root)(e.into()))?;
    Ok(())
}

/// What the owner's `enable` does to the store directory: creates the store when there is none,
/// adopts a contract store that has no sidecar yet (one the reference created: [`adopt_store`]),
/// and leaves a store annal already writes to as it is.
pub fn create_or_adopt_store(layout: &StoreLayout) -> Result<(), CreateStoreError> {
    match create_store(layout) {
        Ok(()) => Ok(()),
        Err(CreateStoreError::AlreadyExists { .. }) => match layout.sidecar() {
            Some(sidecar) if sidecar.is_dir() => Ok(()),
            _ => adopt_store(layout),
        },
        Err(other) => Err(other),
    }
}

/// Adopts an existing contract store (for example one the reference wrote) so annal may write
/// to it: creates the sidecar beside it, touching nothing inside the contract store.
pub fn adopt_store(layout: &StoreLayout) -> Result<(), CreateStoreError> {
    let sidecar = layout.sidecar().ok_or(CreateStoreError::NoSidecar)?;
    open_store(
        &StoreLayout::contract_store_only(layout.history_root()),
        Access::Read,
    )
    .map_err(CreateStoreError::NotAStore)?;
    create_sidecar(sidecar)
}

fn create_sidecar(sidecar: &Path) -> Result<(), CreateStoreError> {
    let fd = prepare_empty_dir(sidecar, |_| false)?;
    for area in Area::ALL {
        if let Some((Area::Sidecar, name)) = area.parent() {
            ensure_dir_at(fd.as_fd(), name, &sidecar.join(name))?;
        }
    }
    // The store's identity (`identity`): its checkpoint and its own key are named by it.
    ensure_store_id(sidecar, &mut crate::entropy::OsEntropy).map_err(|e| match e {
        StoreIdError::Io { source, .. } => create_io("write the store id in", sidecar)(source),
        other => create_io("make the store id in", sidecar)(std::io::Error::other(other)),
    })?;
    Ok(())
}

/// The owner's state as `state.json` mirrors it for the reference: `{"enabled":..,"paused":..}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateMirror {
    /// The owner enabled capture.
    pub enabled: bool,
    /// The owner paused capture.
    pub paused: bool,
}

impl StateMirror {
    /// The exact bytes the reference writes: compact JSON, `enabled` then `paused`.
    pub fn to_json(self) -> Vec<u8> {
        format!(
            "{{\"enabled\":{},\"paused\":{}}}",
            self.enabled, self.paused
        )
        .into_bytes()
    }
}

/// Writes `state.json` atomically: a new `state.json.tmp` (a stale one from a crash is removed
/// first), synced, renamed over `state.json`, the root synced. Needs the writer lock (a
/// writable storage).
pub fn write_state_mirror(storage: &dyn Storage, state: StateMirror) -> Result<(), StorageError> {
    let tmp = FileName::new(STATE_TMP_FILE_NAME).map_err(|_| StorageError::NotFound)?;
    let target = FileName::new(STATE_FILE_NAME).map_err(|_| StorageError::NotFound)?;
    match storage.remove(Area::HistoryRoot, &tmp) {
        Ok(()) | Err(StorageError::NotFound) => {}
        Err(e) => return Err(e),
    }
    let mut file = storage.create_new(Area::HistoryRoot, &tmp)?;
    file.append(&state.to_json())?;
    file.sync()?;
    drop(file);
    storage.rename(
        Area::HistoryRoot,
        &tmp,
        Area::HistoryRoot,
        &target,
        Replace::Allowed,
    )?;
    storage.sync_dir(Area::HistoryRoot)
}

/// Reads `state.json`; `None` when it is missing or not the mirror's exact shape (it is never
/// authoritative, so a bad one is simply not used).
pub fn read_state_mirror(storage: &dyn Storage) -> Result<Option<StateMirror>, StorageError> {
    let name = FileName::new(STATE_FILE_NAME).map_err(|_| StorageError::NotFound)?;
    let file = match storage.open_read(Area::HistoryRoot, &name) {
        Ok(file) => file,
        Err(StorageError::NotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(
        match crate::storage::read_bounded(file.as_ref(), SMALL_FILE_READ_LIMIT_BYTES)? {
            Ok(bytes) => serde_json::from_slice(&bytes).ok(),
            Err(_) => None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch's event ids are the ids of its sequences one by one (a batch starting anywhere
    /// reads the same bytes), distinct across sequences and across generation keys.
    #[test]
    fn event_ids_are_per_sequence_distinct_and_keyed() {
        use crate::keys::material::RAW_ID_LEN_BYTES as EVENT_ID_LEN_BYTES;
        use write::event_ids;
        const SEQUENCES: usize = 10_000;
        let key = [7u8; write::EVENT_ID_KEY_LEN_BYTES];
        let mut batch = Vec::new();
        event_ids(&key, 1, SEQUENCES, &mut batch);
        assert_eq!(batch.len(), SEQUENCES * EVENT_ID_LEN_BYTES);
        let mut one = Vec::new();
        for sequence in [1u64, 2, 3, 4, 5, 63, 64, 65, 4_097, 9_999] {
            event_ids(&key, sequence, 1, &mut one);
            let at = (sequence as usize - 1) * EVENT_ID_LEN_BYTES;
            assert_eq!(
                one,
                batch[at..at + EVENT_ID_LEN_BYTES],
                "sequence {sequence}"
            );
        }
        let distinct: std::collections::HashSet<&[u8]> =
            batch.chunks_exact(EVENT_ID_LEN_BYTES).collect();
        assert_eq!(distinct.len(), SEQUENCES);
        let mut other = Vec::new();
        event_ids(
            &[8u8; write::EVENT_ID_KEY_LEN_BYTES],
            1,
            SEQUENCES,
            &mut other,
        );
        assert!(
            batch
                .chunks_exact(EVENT_ID_LEN_BYTES)
                .zip(other.chunks_exact(EVENT_ID_LEN_BYTES))
                .all(|(a, b)| a != b)
        );
        // Nothing is left of what the buffer held before.
        event_ids(&key, 1, 2, &mut batch);
        assert_eq!(batch.len(), 2 * EVENT_ID_LEN_BYTES);
    }

    #[test]
    fn chunk_file_names_round_trip() {
        let id = ChunkId([0xab; 16]);
        let name = chunk_file_name(id);
        assert_eq!(name.as_str(), format!("{}.cborseq", "ab".repeat(16)));
        assert_eq!(parse_chunk_file_name(name.as_str()), Some(id));
        assert_eq!(parse_chunk_file_name("notes.cborseq"), None);
        assert_eq!(parse_chunk_file_name(&"ab".repeat(16)), None);
    }

    #[test]
    fn state_mirror_matches_the_reference_bytes() {
        let fixture = br#"{"enabled":true,"paused":false}"#;
        let state = StateMirror {
            enabled: true,
            paused: false,
        };
        assert_eq!(state.to_json(), fixture);
        assert_eq!(
            serde_json::from_slice::<StateMirror>(fixture).unwrap(),
            state
        );
    }
}
