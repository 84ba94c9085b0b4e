//! One COSE_Encrypt0 record: sealing (writer side) and opening (reader side).
//!
//! Nothing here hand-rolls CBOR or crypto: the Enc_structure (the AEAD's AAD) is built by
//! `coset`, byte-string heads are written and read by `ciborium-ll`, the AEAD is `ring`'s
//! ChaCha20-Poly1305 (chosen over RustCrypto's `chacha20poly1305` for speed on small records in
//! a default build; docs/benchmarks.md has both measurements). The same algorithm, so the bytes
//! are the same: the interop test re-seals the reference chunk byte for byte. What is constant for a chunk is computed once per chunk in
//! `ChunkCipher`: the Enc_structure bytes (they hold the exact header bytes), the nonce prefix
//! and the AEAD key schedule. A record is then sealed straight into the caller's buffer
//! ([`RecordSealer::seal_into`]) and opened by checking its fixed framing against the bytes the
//! writer would have written, without decoding it into a CBOR value; only an item that fails
//! that check is decoded, to name what is wrong with it.
//!
//! Nonce uniqueness is structural: the only way to encrypt a record is through the
//! [`RecordSealer`] of the chunk, which owns the position counter, never goes backwards and
//! refuses to pass [`MAX_RECORDS_PER_CHUNK`].

use std::ops::Range;

use ciborium::Value;
use ciborium_ll::{Decoder, Encoder, Header};
use coset::{EncryptionContext, HeaderBuilder, ProtectedHeader, iana};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

use super::header::ChunkHeader;
use super::reader::{CorruptReason, decode_item};
use super::{
    HeaderFieldError, IV_LEN_BYTES, MAX_PLAINTEXT_LEN_BYTES, MAX_RECORD_LEN_BYTES,
    MAX_RECORDS_PER_CHUNK, NONCE_PREFIX_LEN_BYTES, PROTECTED_HEADER_BYTES, TAG_LEN_BYTES,
};
use crate::keys::ChunkKeys;
use crate::keys::material::KEY_LEN_BYTES;

/// CBOR tag of COSE_Encrypt0.
const COSE_ENCRYPT0_TAG: u64 = 16;

/// COSE header label of the IV.
const COSE_IV_LABEL: i64 = 5;

/// COSE header label of the algorithm.
const COSE_ALG_LABEL: i64 = 1;

/// The fixed bytes that open every record before its IV: tag 16, array(3), bstr(4) `{1: 24}`,
/// map(1), key 5, bstr(12). A test proves `ciborium-ll` encodes exactly these bytes.
pub(crate) const RECORD_FRAMING_BEFORE_IV: [u8; 10] =
    [0xd0, 0x83, 0x44, 0xa1, 0x01, 0x18, 0x18, 0xa1, 0x05, 0x4c];

/// Bytes of a record that are fully determined by its chunk and position (framing + IV).
pub(crate) const RECORD_FIXED_PREFIX_LEN_BYTES: usize =
    RECORD_FRAMING_BEFORE_IV.len() + IV_LEN_BYTES;

/// Longest CBOR head (initial byte + 8-byte argument), in bytes.
const MAX_CBOR_HEAD_LEN_BYTES: usize = 9;

/// The IV of the record at `position`: nonce prefix || u64_be(position).
pub fn record_iv(prefix: [u8; NONCE_PREFIX_LEN_BYTES], position: u64) -> [u8; IV_LEN_BYTES] {
    let mut iv = [0u8; IV_LEN_BYTES];
    iv[..NONCE_PREFIX_LEN_BYTES].copy_from_slice(&prefix);
    iv[NONCE_PREFIX_LEN_BYTES..].copy_from_slice(&position.to_be_bytes());
    iv
}

/// The AEAD of one chunk and everything about its records that is constant for the chunk.
pub(crate) struct ChunkCipher {
    /// ChaCha20-Poly1305 keyed with the chunk key. The [`crate::keys::ChunkKey`] it was made
    /// from is zeroized on drop; `ring` keeps its own copy of the 32 key bytes inside this value
    /// and does not zeroize it on drop (it offers no way to, and this crate has no `unsafe`).
    /// That copy lives until its memory is reused: docs/key-custody.md states the residual.
    aead: LessSafeKey,
    /// The COSE Enc_structure `["Encrypt0", h'a1011818', header_bytes]`: the AAD of every record
    /// of the chunk, built once.
    enc_structure: Vec<u8>,
    /// The chunk's nonce prefix (the first 4 bytes of every IV).
    nonce_prefix: [u8; NONCE_PREFIX_LEN_BYTES],
}

impl ChunkCipher {
    /// Derives the chunk key of `header` from `root`, keys the AEAD with it and builds the
    /// Enc_structure over `header_bytes`, the exact bytes of the header item in the file (they
    /// need not be `header.encode()`: a legacy-form header is authenticated as read).
    ///
    /// # Panics
    /// Never in practice: `ring` refuses a ChaCha20-Poly1305 key only when it is not 32 bytes,
    /// and a chunk key is 32 bytes by type.
    pub(crate) fn for_header(
        root: &dyn ChunkKeys,
        header: &ChunkHeader,
        header_bytes: &[u8],
    ) -> Self {
        let key = root.chunk_key_for(
            header.key_reference(),
            &header.chunk_id().0,
            header.stream_id(),
            header.key_epoch(),
        );
        // A chunk key is a ChaCha20-Poly1305 key: 32 bytes.
        const _: () = assert!(KEY_LEN_BYTES == 32);
        let Ok(unbound) = UnboundKey::new(&CHACHA20_POLY1305, key.as_bytes()) else {
            unreachable!("ring refuses a ChaCha20-Poly1305 key only when it is not 32 bytes");
        };
        let aead = LessSafeKey::new(unbound);
        let protected = ProtectedHeader {
            // The exact bytes every record carries, so the AAD is what a reader sees.
            original_data: Some(PROTECTED_HEADER_BYTES.to_vec()),
            header: HeaderBuilder::new()
                .algorithm(iana::Algorithm::ChaCha20Poly1305)
                .build(),
        };
        let enc_structure =
            coset::enc_structure_data(EncryptionContext::CoseEncrypt0, protected, header_bytes);
        Self {
            aead,
            enc_structure,
            nonce_prefix: header.nonce_prefix(),
        }
    }

    /// Encrypts `in_out` in place under the IV `iv` and returns the detached tag.
    fn seal_in_place(
        &self,
        iv: &[u8; IV_LEN_BYTES],
        in_out: &mut [u8],
    ) -> Result<[u8; TAG_LEN_BYTES], ()> {
        let tag = self
            .aead
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(*iv),
                Aad::from(self.enc_structure.as_slice()),
                in_out,
            )
            .map_err(|_| ())?;
        tag.as_ref().try_into().map_err(|_| ())
    }

    /// Decrypts `ciphertext_and_tag` (ciphertext || 16-byte tag) under the IV `iv`. Every
    /// failure (wrong key, tampered bytes, too short for a tag) is the same `Err(())`: the
    /// caller must not learn which.
    fn open_detached(
        &self,
        iv: &[u8; IV_LEN_BYTES],
        ciphertext_and_tag: &[u8],
    ) -> Result<Vec<u8>, ()> {
        let plaintext_len = ciphertext_and_tag
            .len()
            .checked_sub(TAG_LEN_BYTES)
            .ok_or(())?;
        let (ciphertext, tag) = ciphertext_and_tag.split_at(plaintext_len);
        let tag = Tag::try_from(tag).map_err(|_| ())?;
        let mut plaintext = ciphertext.to_vec();
        self.aead
            .open_in_place_separate_tag(
                Nonce::assume_unique_for_key(*iv),
                Aad::from(self.enc_structure.as_slice()),
                tag,
                &mut plaintext,
                0..,
            )
            .map_err(|_| ())?;
        Ok(plaintext)
    }

    /// The byte range of the ciphertext (with its tag) of the record at the front of `bytes`,
    /// when that record is framed exactly as the writer frames the record at `position`: the 10
    /// fixed bytes, the IV of this position, a shortest-form byte-string head, and all of the
    /// ciphertext present. `None` otherwise (the caller then decodes the item to say why).
    /// The record item ends at the range's end.
    fn framed_ciphertext(&self, bytes: &[u8], position: u64) -> Option<Range<usize>> {
        let rest = bytes.strip_prefix(RECORD_FRAMING_BEFORE_IV.as_slice())?;
        let (iv, rest) = rest.split_first_chunk::<IV_LEN_BYTES>()?;
        if *iv != record_iv(self.nonce_prefix, position) {
            return None;
        }
        let mut decoder = Decoder::from(rest);
        let Ok(Header::Bytes(Some(len))) = decoder.pull() else {
            return None;
        };
        let head_len = decoder.offset();
        // Shortest form: the head must be exactly what the encoder writes for this length.
        let mut canonical = [0u8; MAX_CBOR_HEAD_LEN_BYTES];
        let mut unwritten: &mut [u8] = &mut canonical;
        Encoder::from(&mut unwritten)
            .push(Header::Bytes(Some(len)))
            .ok()?;
        let canonical_len = MAX_CBOR_HEAD_LEN_BYTES - unwritten.len();
        if canonical[..canonical_len] != rest[..head_len] {
            return None;
        }
        let start = RECORD_FIXED_PREFIX_LEN_BYTES + head_len;
        let end = start.checked_add(len)?;
        (end <= bytes.len()).then_some(start..end)
    }

    /// Length in bytes of the record item at the front of `bytes` when it is framed exactly as
    /// the record at `position` (see `framed_ciphertext`); `None` when it is not, or when the
    /// item does not end inside `bytes`.
    pub(crate) fn framed_record_len(&self, bytes: &[u8], position: u64) -> Option<usize> {
        self.framed_ciphertext(bytes, position).map(|ct| ct.end)
    }

    /// Opens `item` (expected to be exactly one record item) as the record at `position` and
    /// returns its plaintext. Schema-agnostic: the plaintext is not looked at.
    ///
    /// A record framed exactly as the writer frames it is decrypted directly. Anything else is
    /// decoded as a CBOR value to name its [`CorruptReason`] (the order of checks is the one in
    /// docs/format.md). Every AEAD failure is [`CorruptReason::AuthenticationFailed`], with no
    /// detail.
    pub(crate) fn open_record(&self, item: &[u8], position: u64) -> Result<Vec<u8>, CorruptReason> {
        let iv = record_iv(self.nonce_prefix, position);
        match self.framed_ciphertext(item, position) {
            Some(ciphertext) if ciphertext.end == item.len() => self
                .open_detached(&iv, &item[ciphertext])
                .map_err(|()| CorruptReason::AuthenticationFailed),
            _ => self.open_unframed(item, &iv),
        }
    }

    /// Whether `item` (exactly one CBOR item) is a record of this chunk that authenticates under
    /// the IV it carries, whatever position that IV names: a record the key wrote, found where
    /// it does not belong (replayed, duplicated, reordered). Bytes a crash leaves never pass
    /// this. Only run on an item that already failed [`Self::open_record`], so its decode never
    /// reaches a healthy read.
    pub(crate) fn authenticates_under_own_iv(&self, item: &[u8]) -> bool {
        let mut cursor = item;
        let Ok(Value::Tag(COSE_ENCRYPT0_TAG, inner)) = decode_item(&mut cursor) else {
            return false;
        };
        if !cursor.is_empty() {
            return false;
        }
        let Value::Array(parts) = *inner else {
            return false;
        };
        let Ok::<[Value; 3], _>(
            [
                Value::Bytes(protected),
                Value::Map(unprotected),
                Value::Bytes(ciphertext),
            ],
        ) = parts.try_into()
        else {
            return false;
        };
        // The AAD holds the exact protected bytes every record carries; a record spelled with
        // others cannot authenticate under this chunk's Enc_structure.
        if protected.as_slice() != PROTECTED_HEADER_BYTES {
            return false;
        }
        let iv_label = Value::Integer(COSE_IV_LABEL.into());
        let Some(iv) = unprotected.iter().find_map(|(label, value)| match value {
            Value::Bytes(iv) if *label == iv_label => {
                <[u8; IV_LEN_BYTES]>::try_from(iv.as_slice()).ok()
            }
            _ => None,
        }) else {
            return false;
        };
        self.open_detached(&iv, &ciphertext).is_ok()
    }

    /// The slow path of [`Self::open_record`]: decodes `item` into a CBOR value, classifies what
    /// is wrong with it, and only if nothing is (not expected: the fast framing check accepts
    /// every well-formed record) decrypts it.
    fn open_unframed(
        &self,
        item: &[u8],
        expected_iv: &[u8; IV_LEN_BYTES],
    ) -> Result<Vec<u8>, CorruptReason> {
        let mut cursor = item;
        let value = match decode_item(&mut cursor) {
            Ok(value) if cursor.is_empty() => value,
            _ => return Err(CorruptReason::TrailingGarbage),
        };
        let ciphertext = classify_record(value, item, self.nonce_prefix, expected_iv)?;
        self.open_detached(expected_iv, &ciphertext)
            .map_err(|()| CorruptReason::AuthenticationFailed)
    }
}

/// Checks one decoded record item (`value`, decoded from exactly `item`) against the profile
/// and returns its ciphertext, or the first fault in the order of docs/format.md.
fn classify_record(
    value: Value,
    item: &[u8],
    prefix: [u8; NONCE_PREFIX_LEN_BYTES],
    expected_iv: &[u8; IV_LEN_BYTES],
) -> Result<Vec<u8>, CorruptReason> {
    let mut again = Vec::with_capacity(item.len());
    ciborium::ser::into_writer(&value, &mut again).map_err(|_| CorruptReason::MalformedRecord)?;
    let Value::Tag(COSE_ENCRYPT0_TAG, inner) = value else {
        return Err(CorruptReason::TrailingGarbage);
    };
    let Value::Array(parts) = *inner else {
        return Err(CorruptReason::TrailingGarbage);
    };
    let Ok::<[Value; 3], _>([protected, unprotected, ciphertext]) = parts.try_into() else {
        return Err(CorruptReason::TrailingGarbage);
    };
    let Value::Bytes(protected_bytes) = &protected else {
        return Err(CorruptReason::MalformedRecord);
    };
    if protected_bytes.as_slice() != PROTECTED_HEADER_BYTES {
        return Err(classify_protected(protected_bytes));
    }
    let Value::Map(entries) = &unprotected else {
        return Err(CorruptReason::MalformedRecord);
    };
    let mut iv: Option<[u8; IV_LEN_BYTES]> = None;
    for (label, entry) in entries {
        if *label != Value::Integer(COSE_IV_LABEL.into()) {
            return Err(CorruptReason::UnknownHeaderParameter);
        }
        match entry {
            Value::Bytes(b) if iv.is_none() => {
                iv = Some(
                    b.as_slice()
                        .try_into()
                        .map_err(|_| CorruptReason::MalformedRecord)?,
                );
            }
            _ => return Err(CorruptReason::MalformedRecord),
        }
    }
    let iv = iv.ok_or(CorruptReason::MalformedRecord)?;
    let Value::Bytes(ciphertext) = ciphertext else {
        return Err(CorruptReason::MalformedRecord);
    };
    if again != item {
        return Err(CorruptReason::NonCanonicalRecord);
    }
    if iv[..NONCE_PREFIX_LEN_BYTES] != prefix {
        return Err(CorruptReason::IvPrefixMismatch);
    }
    if iv != *expected_iv {
        return Err(CorruptReason::IvPositionMismatch);
    }
    Ok(ciphertext)
}

/// Says what is wrong with a protected header that is not exactly `{1: 24}`.
fn classify_protected(bytes: &[u8]) -> CorruptReason {
    let mut cursor = bytes;
    let Ok(Value::Map(entries)) = decode_item(&mut cursor) else {
        return CorruptReason::MalformedRecord;
    };
    if !cursor.is_empty() {
        return CorruptReason::MalformedRecord;
    }
    let alg_label = Value::Integer(COSE_ALG_LABEL.into());
    match entries.iter().find(|(label, _)| *label == alg_label) {
        None => return CorruptReason::MalformedRecord,
        Some((_, alg)) if *alg != Value::Integer(24.into()) => {
            return CorruptReason::WrongAlgorithm;
        }
        Some(_) => {}
    }
    if entries.len() > 1 {
        return CorruptReason::UnknownHeaderParameter;
    }
    // Exactly {1: 24}, spelled with more bytes than necessary.
    CorruptReason::NonCanonicalRecord
}

/// Why a record could not be sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The plaintext is longer than [`MAX_PLAINTEXT_LEN_BYTES`].
    #[error("plaintext of {len_bytes} bytes exceeds the record limit")]
    PlaintextTooLarge {
        /// The offered length.
        len_bytes: usize,
    },
    /// The chunk already holds [`MAX_RECORDS_PER_CHUNK`] records; the writer must rotate.
    #[error("the chunk is full; rotate to a new chunk")]
    ChunkFull,
    /// The header could not be encoded.
    #[error("chunk header: {0}")]
    Header(#[from] HeaderFieldError),
    /// The AEAD or the CBOR encoder failed (not expected to happen).
    #[error("encrypting the record failed")]
    Encrypt,
}

/// Encrypts the records of one chunk, in order. Holds the chunk cipher (key, Enc_structure over
/// the header bytes), the header bytes and the next position, so an IV can never repeat within
/// the chunk.
pub struct RecordSealer {
    /// The chunk's AEAD and per-chunk constants.
    cipher: ChunkCipher,
    /// Exact header bytes: the external AAD of every record.
    header_bytes: Vec<u8>,
    /// Position of the next record; only ever increases.
    next_position: u64,
}

impl std::fmt::Debug for RecordSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSealer")
            .field("next_position", &self.next_position)
            .finish_non_exhaustive()
    }
}

impl RecordSealer {
    /// A sealer for a new chunk with `header`, starting at position 0.
    pub fn new(root: &dyn ChunkKeys, header: &ChunkHeader) -> Result<Self, SealError> {
        let header_bytes = header.encode()?;
        Ok(Self {
            cipher: ChunkCipher::for_header(root, header, &header_bytes),
            header_bytes,
            next_position: 0,
        })
    }

    /// The exact header bytes this sealer authenticates every record against.
    pub fn header_bytes(&self) -> &[u8] {
        &self.header_bytes
    }

    /// Position the next sealed record will get (= records sealed so far).
    pub fn next_position(&self) -> u64 {
        self.next_position
    }

    /// Encrypts one plaintext as the next record and returns the encoded COSE item. A thin
    /// wrapper over [`Self::seal_into`].
    pub fn seal(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut out = Vec::new();
        self.seal_into(plaintext, &mut out)?;
        Ok(out)
    }

    /// Encrypts one plaintext as the next record and appends exactly that one record item to
    /// `out` (typically a batch buffer holding earlier records), returning its byte range in
    /// `out`. The ciphertext is produced in place inside `out`: the plaintext is copied once,
    /// and nothing else is allocated when `out` has room.
    ///
    /// On error `out` holds exactly what it held before and the position is not advanced.
    pub fn seal_into(
        &mut self,
        plaintext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, SealError> {
        if plaintext.len() > MAX_PLAINTEXT_LEN_BYTES {
            return Err(SealError::PlaintextTooLarge {
                len_bytes: plaintext.len(),
            });
        }
        if self.next_position >= MAX_RECORDS_PER_CHUNK {
            return Err(SealError::ChunkFull);
        }
        let ciphertext_len = plaintext.len() + TAG_LEN_BYTES;
        let start = out.len();
        out.reserve(RECORD_FIXED_PREFIX_LEN_BYTES + MAX_CBOR_HEAD_LEN_BYTES + ciphertext_len);
        let iv = record_iv(self.cipher.nonce_prefix, self.next_position);
        out.extend_from_slice(&RECORD_FRAMING_BEFORE_IV);
        out.extend_from_slice(&iv);
        if Encoder::from(&mut *out)
            .push(Header::Bytes(Some(ciphertext_len)))
            .is_err()
        {
            out.truncate(start);
            return Err(SealError::Encrypt);
        }
        let body = out.len();
        out.extend_from_slice(plaintext);
        let Ok(tag) = self.cipher.seal_in_place(&iv, &mut out[body..]) else {
            // Do not leave the plaintext behind in the caller's spare capacity.
            out[body..].fill(0);
            out.truncate(start);
            return Err(SealError::Encrypt);
        };
        out.extend_from_slice(&tag);
        assert!(
            out.len() - start <= MAX_RECORD_LEN_BYTES,
            "record framing exceeds its bound"
        );
        self.next_position += 1;
        Ok(start..out.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{HistoryKeys, RootKey};
    use chacha20poly1305::aead::{Aead, Payload};
    use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit};
    use coset::{CoseEncrypt0Builder, TaggedCborSerializable};

    fn header() -> ChunkHeader {
        ChunkHeader::new(
            2,
            "test.history.v1",
            "6dd3aa1eef99854a9a3d39ba1e2315f1",
            super::super::ChunkId([0x33; 16]),
            [9, 8, 7, 6],
        )
        .unwrap()
    }

    fn root() -> HistoryKeys {
        HistoryKeys::from_root(RootKey::from_bytes([0x24; 32]))
    }

    /// The record the previous, coset-built sealer produced for the same inputs (coset for the
    /// COSE structure, RustCrypto's AEAD): the reference that `seal_into` must reproduce byte for
    /// byte.
    fn coset_reference(
        root: &HistoryKeys,
        header: &ChunkHeader,
        position: u64,
        plaintext: &[u8],
    ) -> Vec<u8> {
        let key = root.chunk_key(&header.chunk_id().0, header.stream_id(), header.key_epoch());
        let aead = ChaCha20Poly1305::new(&Key::from(*key.as_bytes()));
        let iv = record_iv(header.nonce_prefix(), position);
        CoseEncrypt0Builder::new()
            .protected(
                HeaderBuilder::new()
                    .algorithm(iana::Algorithm::ChaCha20Poly1305)
                    .build(),
            )
            .unprotected(HeaderBuilder::new().iv(iv.to_vec()).build())
            .create_ciphertext(plaintext, &header.encode().unwrap(), |pt, aad| {
                aead.encrypt(&chacha20poly1305::Nonce::from(iv), Payload { msg: pt, aad })
                    .unwrap()
            })
            .build()
            .to_tagged_vec()
            .unwrap()
    }

    /// Plaintext lengths whose ciphertext (plaintext + 16-byte tag) sits on each side of every
    /// CBOR head-size boundary the plaintext limit allows: 23/24, 255/256, 65535/65536.
    const BOUNDARY_PLAINTEXT_LENS: [usize; 11] = [
        0,
        1,
        23 - TAG_LEN_BYTES,
        24 - TAG_LEN_BYTES,
        255 - TAG_LEN_BYTES,
        256 - TAG_LEN_BYTES,
        664,
        65_535 - TAG_LEN_BYTES,
        65_536 - TAG_LEN_BYTES,
        MAX_PLAINTEXT_LEN_BYTES - 1,
        MAX_PLAINTEXT_LEN_BYTES,
    ];

    #[test]
    fn seal_into_is_byte_identical_to_the_coset_encoder_across_head_sizes() {
        let (root, header) = (root(), header());
        let mut sealer = RecordSealer::new(&root, &header).unwrap();
        let mut batch = b"earlier records".to_vec();
        for (position, len) in BOUNDARY_PLAINTEXT_LENS.into_iter().enumerate() {
            let plaintext: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let before = batch.clone();
            let range = sealer.seal_into(&plaintext, &mut batch).unwrap();
            let expected = coset_reference(&root, &header, position as u64, &plaintext);
            assert_eq!(range, before.len()..batch.len(), "len {len}");
            assert_eq!(&batch[..before.len()], before.as_slice(), "len {len}");
            assert!(batch[range] == expected[..], "len {len} differs");
        }
        // The boundaries really cross every head size: 1-byte, 2, 3 and 5-byte heads.
        let heads: Vec<u8> = BOUNDARY_PLAINTEXT_LENS
            .iter()
            .map(|len| coset_reference(&root, &header, 0, &vec![0; *len])[22])
            .collect();
        assert_eq!(heads[2..4], [0x57, 0x58]);
        assert_eq!(heads[4..6], [0x58, 0x59]);
        assert_eq!(heads[7..9], [0x59, 0x5a]);
    }

    #[test]
    fn seal_is_seal_into_an_empty_buffer() {
        let (root, header) = (root(), header());
        let mut a = RecordSealer::new(&root, &header).unwrap();
        let mut b = RecordSealer::new(&root, &header).unwrap();
        for len in [0, 30, 700] {
            let plaintext = vec![b'x'; len];
            let mut out = Vec::new();
            let range = b.seal_into(&plaintext, &mut out).unwrap();
            assert_eq!(range, 0..out.len());
            assert_eq!(a.seal(&plaintext).unwrap(), out);
        }
        assert_eq!(a.next_position(), 3);
    }

    #[test]
    fn seal_into_errors_leave_the_buffer_and_the_position_unchanged() {
        let (root, header) = (root(), header());
        let mut sealer = RecordSealer::new(&root, &header).unwrap();
        let mut batch = b"earlier".to_vec();
        assert_eq!(
            sealer.seal_into(&vec![0; MAX_PLAINTEXT_LEN_BYTES + 1], &mut batch),
            Err(SealError::PlaintextTooLarge {
                len_bytes: MAX_PLAINTEXT_LEN_BYTES + 1
            })
        );
        assert_eq!(batch, b"earlier");
        assert_eq!(sealer.next_position(), 0);
        sealer.next_position = MAX_RECORDS_PER_CHUNK;
        assert_eq!(
            sealer.seal_into(b"{}", &mut batch),
            Err(SealError::ChunkFull)
        );
        assert_eq!(batch, b"earlier");
        assert_eq!(sealer.next_position(), MAX_RECORDS_PER_CHUNK);
        sealer.next_position = MAX_RECORDS_PER_CHUNK - 1;
        assert!(sealer.seal_into(b"{}", &mut batch).is_ok());
        assert_eq!(sealer.next_position(), MAX_RECORDS_PER_CHUNK);
    }

    #[test]
    fn fixed_framing_is_what_ciborium_ll_encodes() {
        let mut bytes = Vec::new();
        let mut enc = Encoder::from(&mut bytes);
        enc.push(Header::Tag(COSE_ENCRYPT0_TAG)).unwrap();
        enc.push(Header::Array(Some(3))).unwrap();
        enc.bytes(&PROTECTED_HEADER_BYTES, None).unwrap();
        enc.push(Header::Map(Some(1))).unwrap();
        enc.push(Header::Positive(COSE_IV_LABEL as u64)).unwrap();
        enc.push(Header::Bytes(Some(IV_LEN_BYTES))).unwrap();
        assert_eq!(bytes, RECORD_FRAMING_BEFORE_IV);
        let protected = HeaderBuilder::new()
            .algorithm(iana::Algorithm::ChaCha20Poly1305)
            .build();
        let encoded = ProtectedHeader {
            original_data: None,
            header: protected,
        }
        .cbor_bstr()
        .unwrap();
        assert_eq!(encoded, Value::Bytes(PROTECTED_HEADER_BYTES.to_vec()));
    }

    #[test]
    fn open_record_round_trips_and_refuses_other_positions() {
        let (root, header) = (root(), header());
        let mut sealer = RecordSealer::new(&root, &header).unwrap();
        let opener = ChunkCipher::for_header(&root, &header, sealer.header_bytes());
        let mut batch = Vec::new();
        let ranges: Vec<_> = BOUNDARY_PLAINTEXT_LENS
            .iter()
            .map(|len| sealer.seal_into(&vec![b'a'; *len], &mut batch).unwrap())
            .collect();
        for (position, (range, len)) in ranges.iter().zip(BOUNDARY_PLAINTEXT_LENS).enumerate() {
            let position = position as u64;
            let item = &batch[range.clone()];
            assert_eq!(
                opener.framed_record_len(&batch[range.start..], position),
                Some(item.len())
            );
            assert_eq!(opener.open_record(item, position).unwrap(), vec![b'a'; len]);
            assert_eq!(
                opener.open_record(item, position + 1),
                Err(CorruptReason::IvPositionMismatch)
            );
            assert_eq!(
                opener.framed_record_len(&item[..item.len() - 1], position),
                None
            );
        }
    }
}
