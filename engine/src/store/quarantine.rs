//! `annal repair --quarantine CHUNK`: moves one chunk aside so the rest of the store reads
//! again, and records a tombstone in the engine journal. Nothing is deleted.
//!
//! Order, and what a crash leaves (docs/design.md, "Repair"):
//! 1. `chunks/<id>.cborseq` is renamed into `engine/quarantine/` (atomic, never replacing a
//!    file there) and both directories are synced. A crash before the rename: nothing changed.
//! 2. Its derived index file is removed (it is rebuildable and must not describe a chunk that
//!    is no longer read).
//! 3. `chunk_quarantined` is appended to the journal and synced. A crash between 1 and 3 leaves
//!    the chunk aside without its tombstone; running the repair again finds it in quarantine and
//!    records the tombstone then (the repair is idempotent).
//!
//! The chunk's seal stays: `verify` reports the chunk as `quarantined` rather than `missing`.

use std::num::NonZeroU64;
use std::sync::Arc;

use crate::clock::Clock;
use crate::index::index_file_name;
use crate::journal::{CallerKind, Journal, JournalEntry, JournalEvent, State};
use crate::keys::{JournalKeys, KeyReference};
use crate::profile::ChunkId;
use crate::storage::{Area, Replace, Storage, StorageError};

use super::chunk_file_name;
use super::read::StoreReader;
use super::write::{StoreWriter, WriterConfig};

/// Why a quarantine did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuarantineError {
    /// The storage is read-only or has no sidecar (a bare reference store: adopt it first).
    #[error("the store must be opened for writing, with annal's sidecar")]
    NotWritable,
    /// No chunk of that id is in `chunks/` or in quarantine.
    #[error("no chunk {0} in this store")]
    NoSuchChunk(String),
    /// Moving the chunk failed (nothing was moved).
    #[error("the chunk could not be moved aside: {0}")]
    Move(StorageError),
    /// The chunk is aside, but its tombstone could not be made durable; run the repair again.
    #[error("the chunk is aside, but the journal could not record it ({0}); run the repair again")]
    Journal(String),
}

/// What a quarantine did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quarantined {
    /// The chunk.
    pub chunk: ChunkId,
    /// This run moved it (`false`: it was already aside from an interrupted run).
    pub moved: bool,
    /// This run wrote its tombstone (`false`: the journal already held it).
    pub recorded: bool,
}

/// Moves `chunk` into quarantine and records it (see the module doc). `journal_keys` and
/// `reference` are the namespace's (from `KeyCustody`); the storage must hold the writer lock.
pub fn quarantine_chunk(
    storage: &Arc<dyn Storage>,
    chunk: ChunkId,
    journal_keys: &JournalKeys,
    reference: &KeyReference,
    clock: Arc<dyn Clock>,
) -> Result<Quarantined, QuarantineError> {
    if !storage.writable()
        || !storage.has_area(Area::Quarantine)
        || !storage.has_area(Area::Journal)
    {
        return Err(QuarantineError::NotWritable);
    }
    let name = chunk_file_name(chunk);
    let moved = match storage.rename(Area::Chunks, &name, Area::Quarantine, &name, Replace::Never) {
        Ok(()) => {
            storage
                .sync_dir(Area::Quarantine)
                .map_err(QuarantineError::Move)?;
            storage
                .sync_dir(Area::Chunks)
                .map_err(QuarantineError::Move)?;
            true
        }
        Err(StorageError::NotFound) if in_quarantine(storage.as_ref(), &name) => false,
        Err(StorageError::NotFound) => return Err(QuarantineError::NoSuchChunk(chunk.to_hex())),
        Err(e) => return Err(QuarantineError::Move(e)),
    };
    if storage.has_area(Area::Index) {
        // Derived and rebuildable: a failure here only leaves an orphan the next load removes.
        let _ = storage.remove(Area::Index, &index_file_name(chunk));
    }
    let journal_error = |e: &dyn std::fmt::Display| QuarantineError::Journal(e.to_string());
    let report = StoreReader::<Journal>::new(Arc::clone(storage))
        .read(journal_keys)
        .map_err(|e| journal_error(&e))?;
    let state = State::replay(report.records().map(|r| &r.event.event));
    if state.quarantined.contains(&chunk) {
        return Ok(Quarantined {
            chunk,
            moved,
            recorded: false,
        });
    }
    let now_ms = clock.now_ms();
    let mut writer = StoreWriter::<Journal>::open_after_read(
        Arc::clone(storage),
        journal_keys.clone(),
        WriterConfig::new(reference.clone(), NonZeroU64::MIN),
        clock,
        &report,
    )
    .map_err(|e| journal_error(&e))?;
    writer
        .append(vec![JournalEntry {
            time_ms: now_ms,
            event: JournalEvent::ChunkQuarantined {
                chunk,
                caller: CallerKind::OwnerCli,
            },
        }])
        .map_err(|e| journal_error(&e))?;
    writer.sync().map_err(|e| journal_error(&e))?;
    Ok(Quarantined {
        chunk,
        moved,
        recorded: true,
    })
}

fn in_quarantine(storage: &dyn Storage, name: &crate::storage::FileName) -> bool {
    storage.open_read(Area::Quarantine, name).is_ok()
}
