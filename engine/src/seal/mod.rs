//! Chunk seals: when the writer closes a history chunk, an authenticated record of exactly what
//! the chunk holds goes into the sidecar (`engine/seals/<chunk_id>.seal`), chained to the seal
//! before it; and `verify`, which walks every chunk, seal and the checkpoint.
//!
//! A seal names its chunk and stream, counts its records and bytes, gives the first and last
//! sequence and event time, a BLAKE3 chain digest over the chunk's exact bytes (header, then
//! every COSE item in order), the digest of the previous seal and its own position (`ordinal`)
//! in the chain. It is canonical CBOR followed by a keyed BLAKE3 MAC under the seal purpose key
//! (`annal/v1/seal-mac-key`), so nobody without the key can make or change one. The newest
//! seal's ordinal and digest are the [`Checkpoint`], kept outside the store directory, so a
//! directory replaced with an older copy is noticed. Byte layout: `docs/format.md` ("Seals");
//! what `verify` reports and how: `docs/design.md` ("Verify").
//!
//! # Layout
//!
//! - this module: [`SealKey`], [`Seal`] and its encoding, [`chain_digest`], [`seal_chunk`]
//!   (writes one seal atomically), [`read_seals`] (each one verified), [`chain_tip`].
//! - [`checkpoint`]: [`Checkpoint`] and its stored encoding, the [`CheckpointStore`] trait, the
//!   credential-store backing ([`CredentialCheckpoints`]) and an in-memory one, the rollback rule
//!   ([`is_rolled_back`]) and the writer's [`reconcile`].
//! - [`verify`](mod@verify): [`verify()`](verify::verify) and its typed findings.
//!
//! Pure rules over the [`Storage`] seam: no threads, no clocks.

pub mod checkpoint;
pub mod verify;

use ciborium::Value;
use zeroize::{Zeroize, ZeroizeOnDrop};

pub use checkpoint::{
    Checkpoint, CheckpointError, CheckpointStore, CredentialCheckpoints, InMemoryCheckpoints,
    Reconciled, is_rolled_back, reconcile,
};
pub use verify::{
    CheckpointReading, ChunkCheck, ChunkFinding, Mismatch, StoreFinding, VerifyError, VerifyReport,
    verify,
};

use std::time::Duration;

use crate::keys::material::{CHUNK_ID_LEN_BYTES, KEY_LEN_BYTES};
use crate::keys::{KeyCustody, PurposeKey};
use crate::profile::ChunkId;
use crate::storage::{Area, EntryKind, FileName, Replace, Storage, StorageError, read_bounded};
use crate::store::{ClosedChunk, chunk_file_name};

/// The seal format version, item 0 of every seal.
pub const SEAL_FORMAT_VERSION: u64 = 1;

/// Extension of a seal file (`<chunk_id>.seal`).
pub const SEAL_FILE_EXTENSION: &str = ".seal";

/// Length of a seal's keyed BLAKE3 MAC, in bytes (it follows the CBOR encoding).
pub const SEAL_MAC_LEN_BYTES: usize = 32;

/// Length of a BLAKE3 digest (chain digest, seal digest), in bytes.
pub const DIGEST_LEN_BYTES: usize = 32;

/// Number of items in a seal's CBOR array.
pub const SEAL_ITEMS: usize = 12;

/// Longest stream id a seal carries, in bytes (the contract's ids are 32 hex characters; a
/// header's text fields are bounded well below this).
pub const SEAL_STREAM_ID_MAX_LEN_BYTES: usize = 256;

/// Largest seal file read, in bytes. A seal is twelve short items and a MAC (about 200 bytes
/// with a 32-character stream id); a larger file is refused without being parsed.
pub const MAX_SEAL_FILE_BYTES: u64 = 1024;

/// Prefix of a seal's temporary name in `engine/tmp/` (`seal.<chunk_id>.seal.tmp`), distinct
/// from the chunk writers' `<stream>.<id>.cborseq.tmp`.
const SEAL_TEMP_PREFIX: &str = "seal.";

/// Nanoseconds in a second: a seal's time is `[seconds, nanoseconds]` with the second item
/// below this.
const NANOS_PER_SEC: u32 = 1_000_000_000;

/// The key that authenticates seals: the namespace's seal purpose key. Zeroized on drop; never
/// printed.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct SealKey([u8; KEY_LEN_BYTES]);

impl SealKey {
    /// The seal key from the seal purpose key ([`KeyCustody::seal_key`]).
    pub fn from_purpose_key(key: &PurposeKey) -> Self {
        Self(*key.as_bytes())
    }

    /// The seal key of a namespace, derived by its custody.
    pub fn from_custody(custody: &KeyCustody) -> Self {
        Self::from_purpose_key(&custody.seal_key())
    }

    /// `BLAKE3-keyed(seal key, bytes)`.
    fn mac(&self, bytes: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.0, bytes)
    }
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(<redacted>)")
    }
}

/// What one seal states about one closed chunk. Closed: every field is part of the encoding,
/// and a seal read back is exactly the one written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal {
    /// The seal format version ([`SEAL_FORMAT_VERSION`]).
    pub version: u64,
    /// Its position in the store's seal chain: 1 for the first seal, then one more per seal, in
    /// the order chunks were closed (across all streams).
    pub ordinal: u64,
    /// The chunk's stream id, exactly as its header spells it.
    pub stream_id: String,
    /// The chunk.
    pub chunk_id: ChunkId,
    /// How many records the chunk holds (>= 1: an empty chunk is never sealed).
    pub records: u64,
    /// The chunk file's length in bytes.
    pub len_bytes: u64,
    /// `data.sequence` of the first record.
    pub first_sequence: u64,
    /// `data.sequence` of the last record.
    pub last_sequence: u64,
    /// Event time of the first record, since the Unix epoch.
    pub first_time: Duration,
    /// Event time of the last record, since the Unix epoch.
    pub last_time: Duration,
    /// The chain digest over the chunk's exact bytes ([`chain_digest`]).
    pub chain: [u8; DIGEST_LEN_BYTES],
    /// The previous seal's [`digest`](Seal::digest); all zeros for ordinal 1.
    pub previous: [u8; DIGEST_LEN_BYTES],
}

/// Why a seal file is not a seal annal can trust. Never trusted, always reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SealFault {
    /// The name is not `<32 lower hex>.seal`.
    BadName,
    /// A symlink, directory or other non-regular entry under a seal's name.
    NotRegularFile,
    /// Larger than [`MAX_SEAL_FILE_BYTES`].
    TooLarge,
    /// Opening or reading it failed.
    Unreadable,
    /// Shorter than a MAC, or the MAC does not verify under the seal key: changed bytes, another
    /// key, or not a seal at all (deliberately not told apart).
    BadMac,
    /// The MAC verifies but the encoding is not a canonical seal of this version.
    Malformed,
    /// The MAC verifies but the seal names another chunk than its file name.
    NameMismatch,
}

impl SealFault {
    /// A stable snake_case name (`--json`, docs).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::BadName => "bad_name",
            Self::NotRegularFile => "not_a_regular_file",
            Self::TooLarge => "too_large",
            Self::Unreadable => "unreadable",
            Self::BadMac => "bad_mac",
            Self::Malformed => "malformed",
            Self::NameMismatch => "name_mismatch",
        }
    }
}

impl std::fmt::Display for SealFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `engine/seals/` and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealRead {
    /// The file name (lossy when not UTF-8).
    pub file_name: String,
    /// The chunk id its name carries, when the name is well formed.
    pub chunk_id: Option<ChunkId>,
    /// The verified seal, or why it is not one.
    pub seal: Result<Seal, SealFault>,
}

/// Sealing a chunk failed. Carries no key material and no file contents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The storage failed (`operation`: `read`, `create`, `write`, `sync`, `rename`, `sync
    /// directory`, `remove`).
    #[error("{operation} failed while sealing a chunk: {source}")]
    Storage {
        /// What was being done.
        operation: &'static str,
        /// The storage error.
        source: StorageError,
    },
    /// The chunk on disk is not what the writer reported closing (`what` names the field that
    /// disagrees): nothing is sealed.
    #[error("the chunk on disk disagrees with the closed chunk: {what}")]
    ChunkDisagrees {
        /// The field (`length`: the file's length; `records`: no records, or a first sequence
        /// above the last).
        what: &'static str,
    },
    /// The chunk already has a seal (a seal is never replaced).
    #[error("the chunk already has a seal")]
    AlreadySealed,
    /// The previous seal's ordinal is `u64::MAX`.
    #[error("the seal chain has no ordinals left")]
    OrdinalsExhausted,
    /// The seal could not be encoded (a field out of the format's range).
    #[error("the seal could not be encoded: {what}")]
    Encode {
        /// Which field.
        what: &'static str,
    },
}

fn storage_failed(operation: &'static str) -> impl FnOnce(StorageError) -> SealError {
    move |source| SealError::Storage { operation, source }
}

/// `<chunk_id>.seal`.
pub fn seal_file_name(chunk_id: ChunkId) -> FileName {
    FileName::from_known(format!("{}{SEAL_FILE_EXTENSION}", chunk_id.to_hex()))
}

/// The chunk id of a `<32 lower hex>.seal` name; `None` for anything else.
pub fn parse_seal_file_name(name: &str) -> Option<ChunkId> {
    name.strip_suffix(SEAL_FILE_EXTENSION)
        .and_then(ChunkId::from_hex)
}

fn seal_temp_file_name(chunk_id: ChunkId) -> FileName {
    FileName::from_known(format!(
        "{SEAL_TEMP_PREFIX}{}{SEAL_FILE_EXTENSION}{}",
        chunk_id.to_hex(),
        crate::store::TEMP_FILE_EXTENSION
    ))
}

/// The chain digest of a chunk: `BLAKE3(header || item_1 || ... || item_n)`, over the exact
/// bytes of the file (item 0, then each COSE_Encrypt0 item in file order). Every item is one
/// self-delimiting CBOR item, so the concatenation has exactly one split and the digest covers
/// every byte of a clean chunk. (One hash over the whole run, rather than one per record, lets
/// BLAKE3 hash a write's records in parallel lanes: the writer folds in each write at once.)
pub fn chain_digest<'a>(
    header: &[u8],
    items: impl IntoIterator<Item = &'a [u8]>,
) -> [u8; DIGEST_LEN_BYTES] {
    let mut chain = ChainDigest::new(header);
    for item in items {
        chain.push(item);
    }
    chain.value()
}

/// [`chain_digest`] computed as the bytes arrive: the writer folds in each write (whole record
/// items) as it makes it, so closing a chunk never reads it back.
#[derive(Debug, Clone)]
pub struct ChainDigest {
    /// BLAKE3 over the header and the items pushed so far.
    hasher: blake3::Hasher,
}

impl ChainDigest {
    /// Starts with the header item's bytes.
    pub fn new(header: &[u8]) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(header);
        Self { hasher }
    }

    /// Folds in the next bytes: one or more whole record items, in file order.
    pub fn push(&mut self, items: &[u8]) {
        self.hasher.update(items);
    }

    /// The digest of everything pushed so far.
    pub fn value(&self) -> [u8; DIGEST_LEN_BYTES] {
        *self.hasher.finalize().as_bytes()
    }
}

fn time_value(time: Duration) -> Value {
    Value::Array(vec![
        Value::Integer(time.as_secs().into()),
        Value::Integer(time.subsec_nanos().into()),
    ])
}

fn uint(value: &Value) -> Option<u64> {
    match value {
        Value::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

fn digest_bytes(value: &Value) -> Option<[u8; DIGEST_LEN_BYTES]> {
    match value {
        Value::Bytes(b) => b.as_slice().try_into().ok(),
        _ => None,
    }
}

fn time_of(value: &Value) -> Option<Duration> {
    let Value::Array(parts) = value else {
        return None;
    };
    let [secs, nanos] = parts.as_slice() else {
        return None;
    };
    let nanos = u32::try_from(uint(nanos)?)
        .ok()
        .filter(|n| *n < NANOS_PER_SEC)?;
    Some(Duration::new(uint(secs)?, nanos))
}

impl Seal {
    /// What this seal vouches for, for a writer opening the store without reading its chunk.
    pub fn sealed_chunk(&self) -> crate::store::SealedChunk {
        crate::store::SealedChunk {
            chunk_id: self.chunk_id,
            len_bytes: self.len_bytes,
            stream_id: self.stream_id.clone(),
            first_sequence: self.first_sequence,
            last_sequence: self.last_sequence,
        }
    }

    /// The canonical CBOR encoding: a definite-length array of [`SEAL_ITEMS`] items (layout in
    /// `docs/format.md`, "Seals"), every integer in its shortest form, written by ciborium.
    pub fn encode(&self) -> Result<Vec<u8>, SealError> {
        if self.stream_id.len() > SEAL_STREAM_ID_MAX_LEN_BYTES {
            return Err(SealError::Encode { what: "stream_id" });
        }
        let value = Value::Array(vec![
            Value::Integer(self.version.into()),
            Value::Integer(self.ordinal.into()),
            Value::Text(self.stream_id.clone()),
            Value::Bytes(self.chunk_id.0.to_vec()),
            Value::Integer(self.records.into()),
            Value::Integer(self.len_bytes.into()),
            Value::Integer(self.first_sequence.into()),
            Value::Integer(self.last_sequence.into()),
            time_value(self.first_time),
            time_value(self.last_time),
            Value::Bytes(self.chain.to_vec()),
            Value::Bytes(self.previous.to_vec()),
        ]);
        let mut out = Vec::new();
        ciborium::ser::into_writer(&value, &mut out)
            .map_err(|_| SealError::Encode { what: "cbor" })?;
        Ok(out)
    }

    /// Parses an encoding (already authenticated): exactly one item, the closed array of this
    /// version, and canonical (it re-encodes to the same bytes).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut cursor = bytes;
        let value: Value = ciborium::de::from_reader(&mut cursor).ok()?;
        if !cursor.is_empty() {
            return None;
        }
        let Value::Array(items) = value else {
            return None;
        };
        let [
            version,
            ordinal,
            stream,
            chunk,
            records,
            len,
            first_seq,
            last_seq,
            first_time,
            last_time,
            chain,
            previous,
        ] = <[Value; SEAL_ITEMS]>::try_from(items).ok()?;
        let Value::Text(stream_id) = stream else {
            return None;
        };
        let Value::Bytes(chunk) = chunk else {
            return None;
        };
        let chunk: [u8; CHUNK_ID_LEN_BYTES] = chunk.as_slice().try_into().ok()?;
        let seal = Seal {
            version: uint(&version).filter(|v| *v == SEAL_FORMAT_VERSION)?,
            ordinal: uint(&ordinal).filter(|o| *o >= 1)?,
            stream_id,
            chunk_id: ChunkId(chunk),
            records: uint(&records)?,
            len_bytes: uint(&len)?,
            first_sequence: uint(&first_seq)?,
            last_sequence: uint(&last_seq)?,
            first_time: time_of(&first_time)?,
            last_time: time_of(&last_time)?,
            chain: digest_bytes(&chain)?,
            previous: digest_bytes(&previous)?,
        };
        (seal.encode().ok()? == bytes).then_some(seal)
    }

    /// The seal's digest: `BLAKE3(encoding)`. The next seal's `previous` and the checkpoint
    /// hold it. (A seal is trusted only after its MAC verified, and the MAC covers the
    /// encoding, so the digest needs no key.)
    pub fn digest(&self) -> [u8; DIGEST_LEN_BYTES] {
        match self.encode() {
            Ok(bytes) => *blake3::hash(&bytes).as_bytes(),
            // A seal that cannot be encoded was never written or read; its digest matches no
            // real seal's.
            Err(_) => [0u8; DIGEST_LEN_BYTES],
        }
    }

    /// The seal file's bytes: the encoding, then `BLAKE3-keyed(seal key, encoding)`.
    pub fn to_file_bytes(&self, key: &SealKey) -> Result<Vec<u8>, SealError> {
        let mut bytes = self.encode()?;
        let mac = key.mac(&bytes);
        bytes.extend_from_slice(mac.as_bytes());
        Ok(bytes)
    }

    /// Verifies a seal file's bytes under `key` (MAC first, in constant time; only then parsed).
    pub fn from_file_bytes(bytes: &[u8], key: &SealKey) -> Result<Self, SealFault> {
        let Some(split) = bytes.len().checked_sub(SEAL_MAC_LEN_BYTES) else {
            return Err(SealFault::BadMac);
        };
        let (encoding, mac) = bytes.split_at(split);
        let mac: [u8; SEAL_MAC_LEN_BYTES] = mac.try_into().map_err(|_| SealFault::BadMac)?;
        // `blake3::Hash` compares in constant time.
        if blake3::Hash::from(mac) != key.mac(encoding) {
            return Err(SealFault::BadMac);
        }
        Self::decode(encoding).ok_or(SealFault::Malformed)
    }
}

/// Seals chunk `closed` (as the writer's receipt reported it, chain digest included) after
/// `previous` (the chain's newest seal, `None` for the first), and writes
/// `engine/seals/<id>.seal` atomically (a new file in `engine/tmp/`, synced, renamed without
/// replacing, the directory synced). Needs a writable storage (the writer's). Returns the seal
/// written.
///
/// The chunk is not read back: the writer computed the digest over the bytes it wrote and
/// synced, and a read-back would come from the page cache, not the disk, while costing a full
/// decrypt and parse of the chunk on the writer's task at every rotation. One `stat` checks that
/// the file is still the length reported; `verify` checks the bytes on disk against the seal.
pub fn seal_chunk(
    storage: &dyn Storage,
    closed: &ClosedChunk,
    previous: Option<&Seal>,
    key: &SealKey,
) -> Result<Seal, SealError> {
    let seal = prepare_seal(closed, previous)?;
    write_seal(storage, closed, &seal, key)?;
    Ok(seal)
}

/// The seal of `closed` after `previous`, in memory (no I/O): the writer chains the next seal
/// to it at once and leaves [`write_seal`] to another thread, off the capture path.
pub fn prepare_seal(closed: &ClosedChunk, previous: Option<&Seal>) -> Result<Seal, SealError> {
    if closed.records == 0 || closed.first_sequence > closed.last_sequence {
        return Err(SealError::ChunkDisagrees { what: "records" });
    }
    let (ordinal, previous) = match previous {
        None => (1, [0u8; DIGEST_LEN_BYTES]),
        Some(p) => (
            p.ordinal
                .checked_add(1)
                .ok_or(SealError::OrdinalsExhausted)?,
            p.digest(),
        ),
    };
    Ok(Seal {
        version: SEAL_FORMAT_VERSION,
        ordinal,
        stream_id: closed.stream_id.as_str().to_owned(),
        chunk_id: closed.chunk_id,
        records: closed.records,
        len_bytes: closed.len_bytes,
        first_sequence: closed.first_sequence,
        last_sequence: closed.last_sequence,
        first_time: closed.first_time,
        last_time: closed.last_time,
        chain: closed.chain,
        previous,
    })
}

/// Writes `seal` (prepared from `closed`) once the chunk on disk still has the length reported.
pub fn write_seal(
    storage: &dyn Storage,
    closed: &ClosedChunk,
    seal: &Seal,
    key: &SealKey,
) -> Result<(), SealError> {
    let file = storage
        .open_read(Area::Chunks, &chunk_file_name(closed.chunk_id))
        .map_err(storage_failed("read"))?;
    if file.current_len().map_err(storage_failed("read"))? != closed.len_bytes {
        return Err(SealError::ChunkDisagrees { what: "length" });
    }
    drop(file);
    write_seal_file(storage, seal, key)
}

/// The record items at `(offset, len)` of `bytes`, or `None` when one lies outside.
pub(crate) fn record_items(
    bytes: &[u8],
    locations: impl Iterator<Item = (u64, u64)>,
) -> Option<Vec<&[u8]>> {
    locations
        .map(|(offset, len)| {
            let start = usize::try_from(offset).ok()?;
            let end = start.checked_add(usize::try_from(len).ok()?)?;
            bytes.get(start..end)
        })
        .collect()
}

fn write_seal_file(storage: &dyn Storage, seal: &Seal, key: &SealKey) -> Result<(), SealError> {
    let bytes = seal.to_file_bytes(key)?;
    let tmp = seal_temp_file_name(seal.chunk_id);
    // A temporary seal left by a crash was never renamed into place: nobody read it.
    match storage.remove(Area::Tmp, &tmp) {
        Ok(()) | Err(StorageError::NotFound) => {}
        Err(e) => return Err(storage_failed("remove")(e)),
    }
    let mut file = storage
        .create_new(Area::Tmp, &tmp)
        .map_err(storage_failed("create"))?;
    file.append(&bytes).map_err(storage_failed("write"))?;
    file.sync().map_err(storage_failed("sync"))?;
    drop(file);
    match storage.rename(
        Area::Tmp,
        &tmp,
        Area::Seals,
        &seal_file_name(seal.chunk_id),
        Replace::Never,
    ) {
        Ok(()) => {}
        Err(StorageError::AlreadyExists) => {
            // Leave nothing behind; the existing seal stands.
            let _ = storage.remove(Area::Tmp, &tmp);
            return Err(SealError::AlreadySealed);
        }
        Err(e) => return Err(storage_failed("rename")(e)),
    }
    storage
        .sync_dir(Area::Seals)
        .map_err(storage_failed("sync directory"))
}

/// Reading the seals failed before any seal could be judged: `engine/seals/` could not be
/// listed.
#[derive(Debug, thiserror::Error)]
#[error("listing engine/seals/: {source}")]
pub struct ReadSealsError {
    /// The storage error.
    #[source]
    pub source: StorageError,
}

/// Reads and verifies every entry of `engine/seals/` under `key`, sorted by name. A seal that
/// fails its MAC, is malformed or sits under another chunk's name is reported as such
/// ([`SealFault`]) and never trusted. A store without a sidecar has no seals.
pub fn read_seals(storage: &dyn Storage, key: &SealKey) -> Result<Vec<SealRead>, ReadSealsError> {
    if !storage.has_area(Area::Seals) {
        return Ok(Vec::new());
    }
    let entries = storage
        .list(Area::Seals)
        .map_err(|source| ReadSealsError { source })?;
    let mut seals = Vec::with_capacity(entries.len());
    for entry in entries {
        let file_name = entry.name.to_string_lossy().into_owned();
        let chunk_id = entry
            .name
            .to_str()
            .and_then(parse_seal_file_name)
            .filter(|_| entry.file_name().is_some());
        let seal = match (chunk_id, entry.kind) {
            (None, _) => Err(SealFault::BadName),
            (Some(_), EntryKind::Symlink | EntryKind::Dir | EntryKind::Other) => {
                Err(SealFault::NotRegularFile)
            }
            (Some(id), EntryKind::File) => read_one(storage, id, key),
        };
        seals.push(SealRead {
            file_name,
            chunk_id,
            seal,
        });
    }
    Ok(seals)
}

/// Reads and verifies the seal of `chunk_id` alone, as [`read_seals`] does each entry (a valid
/// seal under another chunk's name is `NameMismatch`), without reading every other one.
pub fn read_one(
    storage: &dyn Storage,
    chunk_id: ChunkId,
    key: &SealKey,
) -> Result<Seal, SealFault> {
    let file = storage
        .open_read(Area::Seals, &seal_file_name(chunk_id))
        .map_err(|e| match e {
            StorageError::Symlink | StorageError::NotRegularFile => SealFault::NotRegularFile,
            _ => SealFault::Unreadable,
        })?;
    let bytes = read_bounded(file.as_ref(), MAX_SEAL_FILE_BYTES)
        .map_err(|_| SealFault::Unreadable)?
        .map_err(|_| SealFault::TooLarge)?;
    let seal = Seal::from_file_bytes(&bytes, key)?;
    if seal.chunk_id != chunk_id {
        return Err(SealFault::NameMismatch);
    }
    Ok(seal)
}

/// What the verified seals among `seals` vouch for: the chunks a writer or a reader opening the
/// store need not read. A seal that does not verify vouches for nothing.
pub fn vouched_chunks(seals: &[SealRead]) -> Vec<crate::store::SealedChunk> {
    seals
        .iter()
        .filter_map(|s| s.seal.as_ref().ok())
        .map(Seal::sealed_chunk)
        .collect()
}

/// The newest verified seal (the highest ordinal): what the next [`seal_chunk`] chains to, and
/// what the checkpoint records.
pub fn chain_tip(seals: &[SealRead]) -> Option<&Seal> {
    seals
        .iter()
        .filter_map(|s| s.seal.as_ref().ok())
        .max_by_key(|s| s.ordinal)
}

#[cfg(test)]
mod tests;
