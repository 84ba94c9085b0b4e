//! One COSE_Encrypt0 record: sealing (writer side) and the AEAD opening used by the reader.
//!
//! The COSE structure is built and parsed by `coset`, the AEAD is `chacha20poly1305`; nothing
//! here hand-rolls CBOR or crypto. Nonce uniqueness is structural: the only way to encrypt a
//! record is through the [`RecordSealer`] of the chunk, which owns the position counter, never
//! goes backwards and refuses to pass [`MAX_RECORDS_PER_CHUNK`].

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce};
use coset::{CoseEncrypt0, CoseEncrypt0Builder, HeaderBuilder, TaggedCborSerializable, iana};

use super::header::ChunkHeader;
use super::{
    HeaderFieldError, IV_LEN_BYTES, MAX_PLAINTEXT_LEN_BYTES, MAX_RECORD_LEN_BYTES,
    MAX_RECORDS_PER_CHUNK, NONCE_PREFIX_LEN_BYTES,
};
use crate::keys::ChunkKeys;

/// The IV of the record at `position`: nonce prefix || u64_be(position).
pub fn record_iv(prefix: [u8; NONCE_PREFIX_LEN_BYTES], position: u64) -> [u8; IV_LEN_BYTES] {
    let mut iv = [0u8; IV_LEN_BYTES];
    iv[..NONCE_PREFIX_LEN_BYTES].copy_from_slice(&prefix);
    iv[NONCE_PREFIX_LEN_BYTES..].copy_from_slice(&position.to_be_bytes());
    iv
}

/// The AEAD of one chunk, keyed with that chunk's derived key.
pub(crate) struct ChunkCipher {
    /// ChaCha20-Poly1305 keyed with the chunk key; its key is zeroized on drop (crate feature
    /// `zeroize`, enabled in engine/Cargo.toml).
    aead: ChaCha20Poly1305,
}

impl ChunkCipher {
    /// Derives the chunk key of `header` from `root` and keys the AEAD with it.
    pub(crate) fn for_header(root: &dyn ChunkKeys, header: &ChunkHeader) -> Self {
        let key = root.chunk_key(&header.chunk_id().0, header.stream_id(), header.key_epoch());
        let aead = ChaCha20Poly1305::new(&Key::from(*key.as_bytes()));
        Self { aead }
    }

    /// Opens a parsed record. Every failure (wrong key, tampered bytes, missing ciphertext) is
    /// the same `Err(())`: the caller must not learn which.
    pub(crate) fn open(&self, record: &CoseEncrypt0, aad: &[u8], iv: &[u8]) -> Result<Vec<u8>, ()> {
        let nonce = Nonce::try_from(iv).map_err(|_| ())?;
        record.decrypt_ciphertext(
            aad,
            || (),
            |ciphertext, enc_structure| {
                self.aead
                    .decrypt(
                        &nonce,
                        Payload {
                            msg: ciphertext,
                            aad: enc_structure,
                        },
                    )
                    .map_err(|_| ())
            },
        )
    }
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
    /// The AEAD or the COSE encoder failed (not expected to happen).
    #[error("encrypting the record failed")]
    Encrypt,
}

/// Encrypts the records of one chunk, in order. Holds the chunk key, the header bytes (the AAD)
/// and the next position, so an IV can never repeat within the chunk.
pub struct RecordSealer {
    /// The chunk's AEAD.
    cipher: ChunkCipher,
    /// Exact header bytes: the external AAD of every record.
    header_bytes: Vec<u8>,
    /// The chunk's nonce prefix.
    nonce_prefix: [u8; NONCE_PREFIX_LEN_BYTES],
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
        Ok(Self {
            cipher: ChunkCipher::for_header(root, header),
            header_bytes: header.encode()?,
            nonce_prefix: header.nonce_prefix(),
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

    /// Encrypts one plaintext as the next record and returns the encoded COSE item.
    pub fn seal(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, SealError> {
        if plaintext.len() > MAX_PLAINTEXT_LEN_BYTES {
            return Err(SealError::PlaintextTooLarge {
                len_bytes: plaintext.len(),
            });
        }
        if self.next_position >= MAX_RECORDS_PER_CHUNK {
            return Err(SealError::ChunkFull);
        }
        let iv = record_iv(self.nonce_prefix, self.next_position);
        let nonce = Nonce::from(iv);
        let protected = HeaderBuilder::new()
            .algorithm(iana::Algorithm::ChaCha20Poly1305)
            .build();
        let unprotected = HeaderBuilder::new().iv(iv.to_vec()).build();
        let cose = CoseEncrypt0Builder::new()
            .protected(protected)
            .unprotected(unprotected)
            .try_create_ciphertext(plaintext, &self.header_bytes, |pt, enc_structure| {
                self.cipher
                    .aead
                    .encrypt(
                        &nonce,
                        Payload {
                            msg: pt,
                            aad: enc_structure,
                        },
                    )
                    .map_err(|_| SealError::Encrypt)
            })?
            .build();
        let bytes = cose.to_tagged_vec().map_err(|_| SealError::Encrypt)?;
        assert!(
            bytes.len() <= MAX_RECORD_LEN_BYTES,
            "record framing exceeds its bound"
        );
        self.next_position += 1;
        Ok(bytes)
    }
}
