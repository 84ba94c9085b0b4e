//! Cryptographic delete: plan, destroy the keys, then remove the files.
//!
//! 1. [`plan_store_delete`] reads every chunk header of the store (history and journal) while
//!    holding the writer lock and records which key references they name. Any header it cannot
//!    read, or any reference that does not parse, stops the delete here, before a key is
//!    touched: once the keys are gone an unreadable header could never be attributed again.
//! 2. The caller destroys the store's keys with
//!    [`destroy_store_keys`](crate::keys::destroy_store_keys) (given [`DeletePlan::key_scope`]:
//!    exactly this store's keys and checkpoint, never another store's of the same namespace),
//!    which verifies each is absent and returns a [`NamespaceKeysDestroyed`] proof.
//! 3. [`delete_store_files`] takes the plan and the proof, checks that the proof is for the
//!    plan's namespace and covers every reference the plan found (so deleting one namespace
//!    never touches another's data), and only then removes the contract store and the sidecar.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::identity::chunk_key_reference;
use super::{CHUNK_FILE_EXTENSION, parse_chunk_file_name};
use crate::keys::{KeyReference, Namespace, NamespaceKeysDestroyed, StoreId, StoreKeyScope};
use crate::storage::{Area, EntryKind, FsStorage, Storage, StorageError};

/// What a delete will remove, learned before any key is destroyed.
#[derive(Debug)]
pub struct DeletePlan {
    /// The store, still open for writing: the writer lock is held from the plan to the removal,
    /// so no writer can add a chunk in between.
    storage: FsStorage,
    /// The namespace the caller is deleting.
    namespace: Namespace,
    /// Every key reference a chunk header names.
    references: BTreeSet<KeyReference>,
    /// How many chunk files (history and journal) the plan found.
    chunks: usize,
    /// The store's id (`None` without one, or when its file is malformed).
    store_id: Option<StoreId>,
}

impl DeletePlan {
    /// The key references the store's chunks name (all must be destroyed).
    pub fn references(&self) -> &BTreeSet<KeyReference> {
        &self.references
    }

    /// How many chunk files will be removed.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// What `keys::destroy_store_keys` destroys for this store: its id and the references its
    /// chunks name.
    pub fn key_scope(&self) -> StoreKeyScope {
        StoreKeyScope {
            id: self.store_id,
            named: self.references.clone(),
            // Not needed to destroy: every named key of the store goes.
            journal: Default::default(),
        }
    }
}

/// What [`delete_store_files`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedStore {
    /// The contract store root that no longer exists.
    pub root: PathBuf,
    /// The sidecar that no longer exists.
    pub sidecar: Option<PathBuf>,
    /// How many chunk files were removed with them.
    pub chunks_removed: usize,
}

/// A delete step failed. Nothing was removed unless the variant says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeleteStoreError {
    /// The storage was opened read-only; planning a delete needs the writer lock.
    #[error("the store was opened read-only; delete needs the writer lock")]
    ReadOnly,
    /// A chunk directory could not be listed. Nothing was removed.
    #[error("listing the {area:?} directory: {source}")]
    List {
        /// The directory.
        area: Area,
        /// The storage error.
        source: StorageError,
    },
    /// A chunk's header cannot be read, so its namespace is unknown. Nothing was destroyed or
    /// removed: repair (quarantine) the chunk first.
    #[error("chunk {file} has an unreadable header; nothing was destroyed or removed")]
    UnreadableHeader {
        /// The chunk file name.
        file: String,
    },
    /// The proof is for another namespace than the plan.
    #[error("the destroy proof is for namespace {proof}, not {plan}; nothing was removed")]
    WrongNamespace {
        /// The plan's namespace.
        plan: String,
        /// The proof's namespace.
        proof: String,
    },
    /// A chunk names a key reference the proof does not cover (another namespace's key, or one
    /// that was not destroyed). Nothing was removed.
    #[error("a chunk belongs to key {reference}, which was not destroyed; nothing was removed")]
    ForeignChunk {
        /// The uncovered reference.
        reference: String,
    },
    /// Removing the directories failed part-way. The keys are already gone, so what is left
    /// cannot be decrypted; running the delete again removes it.
    #[error("removing {}: {source}", path.display())]
    Remove {
        /// The directory being removed.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Step 1: reads every chunk header of the store behind `storage` (opened for writing, so the
/// writer lock is held until the delete ends) and plans the delete of `namespace`.
pub fn plan_store_delete(
    storage: FsStorage,
    namespace: &Namespace,
) -> Result<DeletePlan, DeleteStoreError> {
    if !storage.writable() {
        return Err(DeleteStoreError::ReadOnly);
    }
    let mut references = BTreeSet::new();
    let mut chunks = 0usize;
    for area in [Area::Chunks, Area::Journal] {
        let entries = storage
            .list(area)
            .map_err(|source| DeleteStoreError::List { area, source })?;
        for entry in entries {
            let Some(name) = entry.file_name() else {
                continue;
            };
            if !name.as_str().ends_with(CHUNK_FILE_EXTENSION) {
                continue;
            }
            let unreadable = || DeleteStoreError::UnreadableHeader {
                file: name.as_str().to_owned(),
            };
            if entry.kind != EntryKind::File || parse_chunk_file_name(name.as_str()).is_none() {
                return Err(unreadable());
            }
            let reference = chunk_key_reference(&storage, area, &name).ok_or_else(unreadable)?;
            references.insert(reference);
            chunks += 1;
        }
    }
    let store_id = storage
        .layout()
        .sidecar()
        .and_then(|sidecar| super::identity::read_store_id(sidecar).ok().flatten());
    Ok(DeletePlan {
        storage,
        namespace: namespace.clone(),
        references,
        chunks,
        store_id,
    })
}

/// Step 3: removes the store of `plan` after its namespace's keys were destroyed and verified
/// absent (`proof`). Checks first, removes second: the proof must be for the plan's namespace
/// and cover every key reference the plan found. Then the contract store and the sidecar are
/// removed (never following symlinks) and their parent synced.
pub fn delete_store_files(
    plan: DeletePlan,
    proof: &NamespaceKeysDestroyed,
) -> Result<DeletedStore, DeleteStoreError> {
    if proof.namespace() != &plan.namespace {
        return Err(DeleteStoreError::WrongNamespace {
            plan: plan.namespace.as_str().to_owned(),
            proof: proof.namespace().as_str().to_owned(),
        });
    }
    if let Some(uncovered) = plan
        .references
        .iter()
        .find(|r| !proof.destroyed().contains(r))
    {
        return Err(DeleteStoreError::ForeignChunk {
            reference: uncovered.as_str().to_owned(),
        });
    }
    let layout = plan.storage.layout().clone();
    let root = layout.history_root().to_owned();
    let sidecar = layout.sidecar().map(Path::to_owned);
    // The sidecar first: a crash in between leaves a bare contract store no key can decrypt,
    // which a repeated delete removes.
    for dir in sidecar.iter().chain(std::iter::once(&root)) {
        // `remove_dir_all` does not follow symlinks inside the tree.
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DeleteStoreError::Remove {
                    path: dir.clone(),
                    source,
                });
            }
        }
    }
    // The writer lock (inside the removed root) is released only now.
    drop(plan.storage);
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty())
        && let Ok(dir) = std::fs::File::open(parent)
    {
        // Best effort: the delete already happened; a failed parent sync only delays it on disk.
        let _ = dir.sync_all();
    }
    Ok(DeletedStore {
        root,
        sidecar,
        chunks_removed: plan.chunks,
    })
}
