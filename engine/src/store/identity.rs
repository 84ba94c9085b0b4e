//! A store's identity and the key references it names: what `keys::open_store_key` decides by.
//!
//! The id is 16 random bytes, kept as 32 lower-case hex characters and a newline in the sidecar
//! file `engine/store-id` (0600). [`create_store`](super::create_store) and
//! [`adopt_store`](super::adopt_store) make it; a sidecar made before store ids gets one from
//! [`ensure_store_id`] the first time a writer opens it (the writer lock is held, so two
//! processes never race to make one). It is never rewritten: a copy of the directory is a copy
//! of the store, id included (which is what a restored backup should be).
//!
//! [`key_scope`] reads the id and every key reference the store's chunk headers name (history
//! and journal, read-only, no lock), and the owner's recorded key choice: `engine/key-choice`,
//! `own` and a newline, written by [`record_own_key`] (`annal enable --own-key`), tells a store
//! whose chunks name no key yet to take a key of its own (`keys::KeyChoice::Own`).

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::read::HEADER_READ_LIMIT_BYTES;
use super::{CHUNK_FILE_EXTENSION, parse_chunk_file_name};
use crate::entropy::Entropy;
use crate::keys::names::STORE_ID_LEN_BYTES;
use crate::keys::{KeyChoice, KeyReference, StoreId, StoreKeyScope};
use crate::profile::read_header;
use crate::storage::{Access, Area, EntryKind, FsStorage, Storage, StoreLayout};

/// The store id's file in the sidecar.
pub const STORE_ID_FILE_NAME: &str = "store-id";

/// Suffix of a sidecar file's temporary name while it is written.
const TMP_SUFFIX: &str = ".tmp";

/// The owner's key choice's file in the sidecar.
pub const KEY_CHOICE_FILE_NAME: &str = "key-choice";

/// Its only content: take a key of the store's own.
const KEY_CHOICE_OWN: &str = "own\n";

/// Longest key choice file read, in bytes.
const KEY_CHOICE_FILE_MAX_LEN_BYTES: u64 = 16;

/// Longest store id file read, in bytes (the id's hex and a newline; more is malformed).
const STORE_ID_FILE_MAX_LEN_BYTES: u64 = 2 * STORE_ID_LEN_BYTES as u64 + 1;

/// The store's identity could not be read or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreIdError {
    /// `engine/store-id` holds something that is not a store id. It is never replaced (the
    /// store's checkpoint and own key are named by it): restore it from a backup, or remove it
    /// to give the store a new identity (its own key is then lost).
    #[error(
        "the sidecar's store-id file is malformed; restore it or remove it (docs/key-custody.md)"
    )]
    Malformed,
    /// Reading or writing it (or the key choice) failed.
    #[error("{what} the store's identity: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The random source failed.
    #[error("the random source failed while making a store id")]
    Entropy,
}

/// Reads a small sidecar file, `None` when it does not exist; at most `max_len_bytes` + 1
/// bytes are read (so an over-long one is seen as such).
fn read_small(
    sidecar: &Path,
    name: &str,
    max_len_bytes: u64,
) -> Result<Option<String>, StoreIdError> {
    let path = sidecar.join(name);
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreIdError::Io {
                what: "reading",
                source,
            });
        }
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, max_len_bytes + 1), &mut text)
        .map_err(|_| StoreIdError::Malformed)?;
    Ok(Some(text))
}

/// Reads the store id from `sidecar`, `None` when it has none.
pub fn read_store_id(sidecar: &Path) -> Result<Option<StoreId>, StoreIdError> {
    match read_small(sidecar, STORE_ID_FILE_NAME, STORE_ID_FILE_MAX_LEN_BYTES)? {
        None => Ok(None),
        Some(text) => text
            .strip_suffix('\n')
            .and_then(StoreId::parse)
            .map(Some)
            .ok_or(StoreIdError::Malformed),
    }
}

/// The owner's recorded key choice in `sidecar`: `Own` when recorded, else the default.
pub fn recorded_key_choice(sidecar: &Path) -> Result<KeyChoice, StoreIdError> {
    match read_small(sidecar, KEY_CHOICE_FILE_NAME, KEY_CHOICE_FILE_MAX_LEN_BYTES)? {
        None => Ok(KeyChoice::default()),
        Some(text) if text == KEY_CHOICE_OWN => Ok(KeyChoice::Own),
        Some(_) => Err(StoreIdError::Malformed),
    }
}

/// Records that the store of `sidecar` takes a key of its own when its chunks name none yet:
/// written to a temporary file, synced, renamed into place, the sidecar synced.
pub fn record_own_key(sidecar: &Path) -> Result<(), StoreIdError> {
    write_atomically(sidecar, KEY_CHOICE_FILE_NAME, KEY_CHOICE_OWN.as_bytes())
}

/// The store id of `sidecar`, made (from `entropy`) when it has none: written to a temporary
/// file, synced, renamed into place, the sidecar synced. Call with the writer lock held.
pub fn ensure_store_id(sidecar: &Path, entropy: &mut dyn Entropy) -> Result<StoreId, StoreIdError> {
    if let Some(id) = read_store_id(sidecar)? {
        return Ok(id);
    }
    let mut bytes = [0u8; STORE_ID_LEN_BYTES];
    entropy
        .fill(&mut bytes)
        .map_err(|_| StoreIdError::Entropy)?;
    let id = StoreId::from_bytes(bytes);
    write_atomically(
        sidecar,
        STORE_ID_FILE_NAME,
        format!("{}\n", id.to_hex()).as_bytes(),
    )?;
    Ok(id)
}

/// Writes `contents` as `sidecar/name`: a fresh `name.tmp` (a stale one is removed first),
/// synced, renamed over `name`, the sidecar synced. Never follows a symlink.
fn write_atomically(sidecar: &Path, name: &str, contents: &[u8]) -> Result<(), StoreIdError> {
    let io = |what| move |source| StoreIdError::Io { what, source };
    let tmp = sidecar.join(format!("{name}{TMP_SUFFIX}"));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(io("removing a stale temporary of")(source)),
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)
        .map_err(io("creating"))?;
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(io("writing"))?;
    std::fs::rename(&tmp, sidecar.join(name)).map_err(io("renaming"))?;
    std::fs::File::open(sidecar)
        .and_then(|dir| dir.sync_all())
        .map_err(io("syncing the directory of"))?;
    Ok(())
}

/// What `keys::open_store_key` needs about the store at `layout`: its id (`None` without a
/// sidecar or an id) and every key reference its chunk headers name. A header that cannot be
/// read is skipped here (verify reports it; `store::plan_store_delete` refuses it).
pub fn key_scope(layout: &StoreLayout) -> Result<StoreKeyScope, StoreIdError> {
    let id = match layout.sidecar() {
        Some(sidecar) => read_store_id(sidecar)?,
        None => None,
    };
    let (history, journal) = match crate::store::open_store(layout, Access::Read) {
        Ok(storage) => (
            named_references(&storage, Area::Chunks),
            named_references(&storage, Area::Journal),
        ),
        // No store yet (first enable): it names nothing.
        Err(_) => (BTreeSet::new(), BTreeSet::new()),
    };
    let named = history.union(&journal).cloned().collect();
    Ok(StoreKeyScope { id, named, journal })
}

/// Every key reference the readable chunk headers in `area` of `storage` name.
pub(crate) fn named_references(storage: &FsStorage, area: Area) -> BTreeSet<KeyReference> {
    let mut named = BTreeSet::new();
    {
        let Ok(entries) = storage.list(area) else {
            return named;
        };
        for entry in entries {
            let Some(name) = entry.file_name() else {
                continue;
            };
            if entry.kind != EntryKind::File
                || !name.as_str().ends_with(CHUNK_FILE_EXTENSION)
                || parse_chunk_file_name(name.as_str()).is_none()
            {
                continue;
            }
            if let Some(reference) = chunk_key_reference(storage, area, &name) {
                named.insert(reference);
            }
        }
    }
    named
}

/// The key reference a chunk's header names, or `None` if the header cannot be read.
pub(crate) fn chunk_key_reference(
    storage: &FsStorage,
    area: Area,
    name: &crate::storage::FileName,
) -> Option<KeyReference> {
    let file = storage.open_read(area, name).ok()?;
    let mut front = vec![0u8; file.len().min(HEADER_READ_LIMIT_BYTES) as usize];
    file.read_exact_at(0, &mut front).ok()?;
    let (parsed, _) = read_header(&front).ok()?;
    KeyReference::new(parsed.header.key_reference()).ok()
}
