//! Key material: the namespace root key and the purpose keys derived from it.
//!
//! Every key lives in a zeroizing newtype. The root key never leaves [`RootKey`] except through
//! the derivation methods below, each of which uses its own HKDF info string (documented in
//! `docs/format.md`). The derivations for the chunk key and the session-id key are facts of the
//! storage profile v1 contract and must match the reference implementation byte for byte.

use annal_schema::OpaqueId;
use hkdf::Hkdf;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Length of every symmetric key annal uses, in bytes.
pub const KEY_LEN_BYTES: usize = 32;

/// Length of a chunk id in bytes (it is written as 32 lower-case hex characters).
pub const CHUNK_ID_LEN_BYTES: usize = 16;

/// Length of a keyed session id in bytes (written as 32 lower-case hex characters).
pub const SESSION_ID_LEN_BYTES: usize = 16;

/// Length of a raw event or action id, in bytes (128 bits: an `OpaqueId`'s 32 hex digits).
pub const RAW_ID_LEN_BYTES: usize = 16;

/// HKDF info prefix for per-chunk keys (profile v1 contract).
pub const CHUNK_KEY_INFO: &[u8] = b"cua-driver/history-profile/v1/chunk-key";

/// HKDF info for the session-id HMAC key (profile v1 contract).
pub const SESSION_ID_KEY_INFO: &[u8] = b"cua-driver/history-profile/v1/session-id-key";

/// HKDF info for the key that authenticates annal's chunk seals (annal-only).
pub const SEAL_KEY_INFO: &[u8] = b"annal/v1/seal-mac-key";

/// HKDF info for the key that encrypts annal's derived index (annal-only).
pub const INDEX_KEY_INFO: &[u8] = b"annal/v1/index-key";

/// HKDF info of the key that seals paging cursors (annal-only).
pub const CURSOR_KEY_INFO: &[u8] = b"annal/v1/cursor-key";

/// HKDF info for the root of annal's engine journal stream (annal-only).
pub const JOURNAL_KEY_INFO: &[u8] = b"annal/v1/journal-root-key";

/// Fills `out` with the raw ids numbered `first`, `first + 1`, ... ([`RAW_ID_LEN_BYTES`] each):
/// the bytes at offset `16 * number` of the BLAKE3 output stream keyed by `key`. Distinct
/// numbers read disjoint bytes, so ids never repeat under one key, and without the key they
/// cannot be guessed; a run of ids is one read (one compression per four ids, where a keyed
/// hash per id cost one each). Event ids (a writer generation's key, by sequence) and action
/// ids (a capture channel's seed, by action number) are made this way.
pub fn keyed_ids(key: &[u8; KEY_LEN_BYTES], first: u64, out: &mut [u8]) {
    let mut stream = blake3::Hasher::new_keyed(key).finalize_xof();
    // Numbers stay far below 2^60 (one per nanosecond for 36 years): the offset never saturates.
    stream.set_position(first.saturating_mul(RAW_ID_LEN_BYTES as u64));
    stream.fill(out);
}

/// The `index`-th raw id of a run [`keyed_ids`] filled (all zeros past its end, which callers
/// never ask for: they size the run to what they read).
pub fn keyed_id_at(ids: &[u8], index: usize) -> [u8; RAW_ID_LEN_BYTES] {
    ids.chunks_exact(RAW_ID_LEN_BYTES)
        .nth(index)
        .and_then(|id| id.try_into().ok())
        .unwrap_or_default()
}

/// Derives per-chunk keys without exposing the root they come from.
///
/// The codec and the store take this rather than a [`RootKey`]. Its two implementations are
/// distinct types, one per stream, so a writer handed the journal's keys cannot seal history
/// chunks with them (and the reverse): [`HistoryKeys`] (the profile v1 contract derivation from
/// the namespace root) and [`JournalKeys`] (the same derivation from the journal root).
pub trait ChunkKeys {
    /// The key of one chunk (see [`RootKey::chunk_key`]).
    fn chunk_key(
        &self,
        chunk_id: &[u8; CHUNK_ID_LEN_BYTES],
        stream_id: &str,
        key_epoch: u64,
    ) -> ChunkKey;

    /// The key of one chunk whose header names `key_reference`: by default the same as
    /// [`Self::chunk_key`]; [`HistoryKeys`] holding another root under that reference (a store
    /// whose chunks name more than one key) derives it from that root.
    fn chunk_key_for(
        &self,
        key_reference: &str,
        chunk_id: &[u8; CHUNK_ID_LEN_BYTES],
        stream_id: &str,
        key_epoch: u64,
    ) -> ChunkKey {
        let _ = key_reference;
        self.chunk_key(chunk_id, stream_id, key_epoch)
    }
}

/// The chunk keys of the history stream. Holds the namespace root (the contract derives every
/// history chunk key from it with the chunk id as salt, so no narrower key exists) but never
/// gives it out: the only thing it does is derive chunk keys.
#[derive(Clone)]
pub struct HistoryKeys {
    /// The namespace root key, shared with the custody that handed this out.
    root: std::sync::Arc<RootKey>,
    /// Other roots the store's chunks name, by key reference (chunks the reference
    /// implementation appended under its own key, for example); never the primary's reference.
    others: std::sync::Arc<std::collections::BTreeMap<String, std::sync::Arc<RootKey>>>,
}

impl HistoryKeys {
    /// History chunk keys from a bare root key: for offline tools that were given the key
    /// (`annal inspect --key-hex-file`) and for tests. The engine gets its keys from
    /// [`KeyCustody::history_keys`](crate::keys::KeyCustody::history_keys).
    pub fn from_root(root: RootKey) -> Self {
        Self {
            root: std::sync::Arc::new(root),
            others: std::sync::Arc::default(),
        }
    }

    pub(crate) fn shared(
        root: std::sync::Arc<RootKey>,
        others: std::sync::Arc<std::collections::BTreeMap<String, std::sync::Arc<RootKey>>>,
    ) -> Self {
        Self { root, others }
    }
}

impl ChunkKeys for HistoryKeys {
    fn chunk_key(
        &self,
        chunk_id: &[u8; CHUNK_ID_LEN_BYTES],
        stream_id: &str,
        key_epoch: u64,
    ) -> ChunkKey {
        self.root.chunk_key(chunk_id, stream_id, key_epoch)
    }

    fn chunk_key_for(
        &self,
        key_reference: &str,
        chunk_id: &[u8; CHUNK_ID_LEN_BYTES],
        stream_id: &str,
        key_epoch: u64,
    ) -> ChunkKey {
        self.others
            .get(key_reference)
            .unwrap_or(&self.root)
            .chunk_key(chunk_id, stream_id, key_epoch)
    }
}

impl std::fmt::Debug for HistoryKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HistoryKeys(<redacted>)")
    }
}

/// The chunk keys of the engine journal: derived like history chunk keys, but from the journal
/// root (itself derived from the namespace root with its own info string), so journal and
/// history keys never coincide. Holds only the journal root, never the namespace root.
#[derive(Clone)]
pub struct JournalKeys {
    /// The journal root key.
    journal_root: std::sync::Arc<RootKey>,
}

impl JournalKeys {
    /// The journal keys of the namespace whose root is `root`.
    pub fn from_namespace_root(root: &RootKey) -> Self {
        Self {
            journal_root: std::sync::Arc::new(root.journal_root_key()),
        }
    }
}

impl ChunkKeys for JournalKeys {
    fn chunk_key(
        &self,
        chunk_id: &[u8; CHUNK_ID_LEN_BYTES],
        stream_id: &str,
        key_epoch: u64,
    ) -> ChunkKey {
        self.journal_root.chunk_key(chunk_id, stream_id, key_epoch)
    }
}

impl std::fmt::Debug for JournalKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JournalKeys(<redacted>)")
    }
}

/// The 32-byte namespace root key. Zeroized on drop; never cloned, printed or serialized.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct RootKey([u8; KEY_LEN_BYTES]);

impl RootKey {
    /// Wraps raw key bytes. The caller's copy should be zeroized by the caller.
    pub fn from_bytes(bytes: [u8; KEY_LEN_BYTES]) -> Self {
        Self(bytes)
    }

    /// Wraps a slice, refusing any length other than [`KEY_LEN_BYTES`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, WrongKeyLength> {
        let array: [u8; KEY_LEN_BYTES] = bytes.try_into().map_err(|_| WrongKeyLength {
            actual_len_bytes: bytes.len(),
        })?;
        Ok(Self(array))
    }

    /// Derives the key of one chunk:
    /// HKDF-SHA-256(salt = chunk id bytes, IKM = root, info = CHUNK_KEY_INFO || stream id ||
    /// u64_be(key epoch)).
    pub fn chunk_key(
        &self,
        chunk_id: &[u8; CHUNK_ID_LEN_BYTES],
        stream_id: &str,
        key_epoch: u64,
    ) -> ChunkKey {
        let hk = Hkdf::<Sha256>::new(Some(chunk_id), &self.0);
        let mut okm = [0u8; KEY_LEN_BYTES];
        let epoch = key_epoch.to_be_bytes();
        let info: [&[u8]; 3] = [CHUNK_KEY_INFO, stream_id.as_bytes(), &epoch];
        expand(&hk, &info, &mut okm);
        ChunkKey(okm)
    }

    /// Derives the HMAC key used to turn raw session labels into opaque session ids.
    pub fn session_id_key(&self) -> SessionIdKey {
        SessionIdKey(self.purpose_key(SESSION_ID_KEY_INFO))
    }

    /// Derives the key that authenticates chunk seals.
    pub fn seal_key(&self) -> PurposeKey {
        PurposeKey(self.purpose_key(SEAL_KEY_INFO))
    }

    /// Derives the key that encrypts the derived index.
    pub fn index_key(&self) -> PurposeKey {
        PurposeKey(self.purpose_key(INDEX_KEY_INFO))
    }

    /// Derives the key that seals paging cursors.
    pub fn cursor_key(&self) -> PurposeKey {
        PurposeKey(self.purpose_key(CURSOR_KEY_INFO))
    }

    /// Derives the root of the engine journal stream (its chunks derive from it like history
    /// chunks derive from the namespace root).
    fn journal_root_key(&self) -> RootKey {
        RootKey(self.purpose_key(JOURNAL_KEY_INFO))
    }

    /// HKDF-SHA-256 with no salt over the root key, for one purpose.
    fn purpose_key(&self, info: &[u8]) -> [u8; KEY_LEN_BYTES] {
        let hk = Hkdf::<Sha256>::new(None, &self.0);
        let mut okm = [0u8; KEY_LEN_BYTES];
        expand(&hk, &[info], &mut okm);
        okm
    }
}

impl std::fmt::Debug for RootKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RootKey(<redacted>)")
    }
}

/// HKDF-Expand into a 32-byte buffer. 32 bytes is far below HKDF-SHA-256's limit of
/// 255 * 32 bytes, so expansion cannot fail; the length is asserted at compile time.
fn expand(hk: &Hkdf<Sha256>, info: &[&[u8]], okm: &mut [u8; KEY_LEN_BYTES]) {
    const _: () = assert!(KEY_LEN_BYTES <= 255 * 32);
    if hk.expand_multi_info(info, okm).is_err() {
        // Unreachable by the assertion above; keep the key all-zero rather than panic, and make
        // the failure loud in debug builds.
        debug_assert!(false, "HKDF expand of 32 bytes failed");
    }
}

/// A raw key of the wrong length was offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("key material must be 32 bytes, got {actual_len_bytes}")]
pub struct WrongKeyLength {
    /// How many bytes were offered.
    pub actual_len_bytes: usize,
}

/// The ChaCha20-Poly1305 key of one chunk.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct ChunkKey([u8; KEY_LEN_BYTES]);

impl ChunkKey {
    /// The raw bytes, for handing to the AEAD.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN_BYTES] {
        &self.0
    }
}

impl std::fmt::Debug for ChunkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChunkKey(<redacted>)")
    }
}

/// A 32-byte key for one annal-only purpose (seal MAC, index encryption).
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct PurposeKey([u8; KEY_LEN_BYTES]);

impl PurposeKey {
    /// The raw bytes, for handing to the primitive that uses this key.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN_BYTES] {
        &self.0
    }
}

impl std::fmt::Debug for PurposeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PurposeKey(<redacted>)")
    }
}

/// The HMAC-SHA-256 key that maps raw session labels to opaque session ids.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct SessionIdKey([u8; KEY_LEN_BYTES]);

impl SessionIdKey {
    /// The keyed session id of a raw label: the first 16 bytes of HMAC-SHA-256(key, label), as
    /// an opaque id (32 lower-case hex characters). The label itself is never stored.
    pub fn session_id(&self, raw_label: &str) -> OpaqueId {
        let mut first = [0u8; SESSION_ID_LEN_BYTES];
        // HMAC accepts keys of any length, so `new_from_slice` cannot fail; if it ever did, the
        // id stays all-zero rather than panicking.
        if let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0) {
            mac.update(raw_label.as_bytes());
            first.copy_from_slice(&mac.finalize().into_bytes()[..SESSION_ID_LEN_BYTES]);
        }
        OpaqueId::from_bytes(first)
    }
}

impl std::fmt::Debug for SessionIdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionIdKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Facts from `shared/fixtures/cua-reference/README.md`.
    const FIXTURE_ROOT: [u8; 32] = [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
        25, 26, 27, 28, 29, 30, 31,
    ];

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn chunk_key_matches_reference_fixture() {
        let root = RootKey::from_bytes(FIXTURE_ROOT);
        let chunk_id: [u8; 16] = [
            0xa9, 0xc3, 0x3b, 0x30, 0x41, 0x82, 0x57, 0x73, 0x83, 0xe6, 0x9c, 0x9e, 0x2b, 0x8e,
            0x68, 0x62,
        ];
        let key = root.chunk_key(&chunk_id, "6dd3aa1eef99854a9a3d39ba1e2315f1", 1);
        assert_eq!(
            hex(key.as_bytes()),
            "efc1c03b524841aab76b62ed92503f5c6fba3a0cd2a7ee01995db464b2fccaa0"
        );
        // Any change of epoch, stream or chunk gives another key.
        let other = root.chunk_key(&chunk_id, "6dd3aa1eef99854a9a3d39ba1e2315f1", 2);
        assert_ne!(key.as_bytes(), other.as_bytes());
    }

    #[test]
    fn session_id_matches_reference_fixture() {
        let root = RootKey::from_bytes(FIXTURE_ROOT);
        assert_eq!(
            root.session_id_key()
                .session_id("fixture-session-1")
                .as_str(),
            "b11ddce8dbd1872c9250e3f67dad2d9d"
        );
    }

    #[test]
    fn purpose_keys_are_distinct() {
        let root = RootKey::from_bytes(FIXTURE_ROOT);
        let seal = root.seal_key();
        let index = root.index_key();
        let cursor = root.cursor_key();
        assert_ne!(seal.as_bytes(), index.as_bytes());
        assert_ne!(cursor.as_bytes(), index.as_bytes());
        assert_ne!(cursor.as_bytes(), seal.as_bytes());
        assert_ne!(seal.as_bytes(), &FIXTURE_ROOT);
    }

    #[test]
    fn wrong_length_is_refused_and_debug_redacts() {
        assert_eq!(
            RootKey::from_slice(&[0u8; 31]).err(),
            Some(WrongKeyLength {
                actual_len_bytes: 31
            })
        );
        let root = RootKey::from_bytes(FIXTURE_ROOT);
        assert_eq!(format!("{root:?}"), "RootKey(<redacted>)");
    }
}
