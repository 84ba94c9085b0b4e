//! The chunk header: item 0 of every chunk.
//!
//! We write exactly one form, `[1, 24, epoch, key_reference, stream_id, chunk_id,
//! h'nonce_prefix']`, canonical (definite lengths, shortest-form integers), byte-identical to
//! what the reference writes for the same fields. We also read the older form whose nonce prefix
//! is an array of four unsigned integers, because the reference still accepts it; we never write
//! it. Canonicality is checked when reading by re-encoding the decoded value and comparing bytes.

use annal_schema::OpaqueId;
use ciborium::Value;

use super::{ALGORITHM_CHACHA20_POLY1305, NONCE_PREFIX_LEN_BYTES, PROFILE_VERSION};
use crate::keys::material::CHUNK_ID_LEN_BYTES;

/// Longest key reference or stream id, in bytes (CDDL `tstr .size (1..128)`).
pub const MAX_HEADER_TEXT_LEN_BYTES: usize = 128;

/// Number of elements in the header array.
pub const HEADER_ITEMS: usize = 7;

/// A 128-bit chunk identifier; on disk it is 32 lower-case hex characters, both in the header
/// and in the file name `<chunk_id>.cborseq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId(pub [u8; CHUNK_ID_LEN_BYTES]);

impl ChunkId {
    /// The 32 lower-case hex characters of this id (the contract's opaque-id spelling).
    pub fn to_hex(&self) -> String {
        OpaqueId::from_bytes(self.0).as_str().to_owned()
    }

    /// Parses exactly 32 lower-case hex characters; anything else (upper case included) is
    /// refused, because the contract fixes one spelling.
    pub fn from_hex(text: &str) -> Option<Self> {
        OpaqueId::new(text).ok().map(|id| Self(id.to_bytes()))
    }
}

/// The fields of a chunk header. Profile version and algorithm are constants of the profile and
/// so are not fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Key epoch (> 0); part of the chunk key derivation, so a rotated root key never decrypts
    /// an older epoch's chunks by accident.
    key_epoch: u64,
    /// Name of the root key in the credential store (1..=128 bytes); lets a reader find the key.
    key_reference: String,
    /// The stream this chunk belongs to (1..=128 bytes); part of the chunk key derivation.
    stream_id: String,
    /// This chunk's id; the HKDF salt of its key and the stem of its file name.
    chunk_id: ChunkId,
    /// Random per-chunk prefix of every record IV.
    nonce_prefix: [u8; NONCE_PREFIX_LEN_BYTES],
}

/// A header field is outside what the contract allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderFieldError {
    /// The key epoch must be greater than zero.
    #[error("key epoch must be greater than zero")]
    ZeroEpoch,
    /// The key reference must be 1..=128 bytes.
    #[error("key reference must be 1 to 128 bytes long")]
    KeyReferenceLength,
    /// The stream id must be 1..=128 bytes.
    #[error("stream id must be 1 to 128 bytes long")]
    StreamIdLength,
    /// CBOR encoding into memory failed (not expected to happen).
    #[error("encoding the header failed")]
    Encode,
}

impl ChunkHeader {
    /// A header with the given fields, refusing any the contract forbids.
    pub fn new(
        key_epoch: u64,
        key_reference: &str,
        stream_id: &str,
        chunk_id: ChunkId,
        nonce_prefix: [u8; NONCE_PREFIX_LEN_BYTES],
    ) -> Result<Self, HeaderFieldError> {
        if key_epoch == 0 {
            return Err(HeaderFieldError::ZeroEpoch);
        }
        if !(1..=MAX_HEADER_TEXT_LEN_BYTES).contains(&key_reference.len()) {
            return Err(HeaderFieldError::KeyReferenceLength);
        }
        if !(1..=MAX_HEADER_TEXT_LEN_BYTES).contains(&stream_id.len()) {
            return Err(HeaderFieldError::StreamIdLength);
        }
        Ok(Self {
            key_epoch,
            key_reference: key_reference.to_owned(),
            stream_id: stream_id.to_owned(),
            chunk_id,
            nonce_prefix,
        })
    }

    /// The key epoch.
    pub fn key_epoch(&self) -> u64 {
        self.key_epoch
    }

    /// The key reference.
    pub fn key_reference(&self) -> &str {
        &self.key_reference
    }

    /// The stream id.
    pub fn stream_id(&self) -> &str {
        &self.stream_id
    }

    /// The chunk id.
    pub fn chunk_id(&self) -> ChunkId {
        self.chunk_id
    }

    /// The nonce prefix.
    pub fn nonce_prefix(&self) -> [u8; NONCE_PREFIX_LEN_BYTES] {
        self.nonce_prefix
    }

    /// The canonical encoding (the only form annal writes). These exact bytes are the external
    /// AAD of every record in the chunk.
    pub fn encode(&self) -> Result<Vec<u8>, HeaderFieldError> {
        let value = self.to_value(NoncePrefixForm::Bytes);
        let mut out = Vec::with_capacity(128);
        ciborium::ser::into_writer(&value, &mut out).map_err(|_| HeaderFieldError::Encode)?;
        Ok(out)
    }

    fn to_value(&self, form: NoncePrefixForm) -> Value {
        let prefix = match form {
            NoncePrefixForm::Bytes => Value::Bytes(self.nonce_prefix.to_vec()),
            NoncePrefixForm::LegacyUintArray => Value::Array(
                self.nonce_prefix
                    .iter()
                    .map(|b| Value::Integer(u64::from(*b).into()))
                    .collect(),
            ),
        };
        Value::Array(vec![
            Value::Integer(PROFILE_VERSION.into()),
            Value::Integer(ALGORITHM_CHACHA20_POLY1305.into()),
            Value::Integer(self.key_epoch.into()),
            Value::Text(self.key_reference.clone()),
            Value::Text(self.stream_id.clone()),
            Value::Text(self.chunk_id.to_hex()),
            prefix,
        ])
    }
}

/// How the nonce prefix was spelled in a header that was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoncePrefixForm {
    /// `bstr .size 4`: the current form, the only one annal writes.
    Bytes,
    /// An array of four unsigned integers (each 0..=255): the older form the reference still
    /// reads. Accepted when reading, never written.
    LegacyUintArray,
}

/// A header read from a chunk, with the exact bytes it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedHeader {
    /// The decoded fields.
    pub header: ChunkHeader,
    /// Which nonce-prefix spelling the file used.
    pub form: NoncePrefixForm,
    /// The exact bytes of item 0: the external AAD of every record.
    pub bytes: Vec<u8>,
}

/// Why a header item was refused. The reader maps each to a [`super::CorruptReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderFault {
    /// Not the 7-element array of the right types and ranges.
    Malformed,
    /// Item 0 is not 1.
    UnsupportedVersion,
    /// Item 1 is not 24.
    WrongAlgorithm,
    /// Well-formed but not in canonical (definite-length, shortest-form) encoding.
    NonCanonical,
}

/// Parses header item 0 from its decoded value and the exact bytes it was decoded from.
pub(crate) fn parse_header(value: Value, bytes: &[u8]) -> Result<ParsedHeader, HeaderFault> {
    let Value::Array(items) = value else {
        return Err(HeaderFault::Malformed);
    };
    let Ok::<[Value; HEADER_ITEMS], _>([version, alg, epoch, key_ref, stream, chunk, prefix]) =
        items.try_into()
    else {
        return Err(HeaderFault::Malformed);
    };
    let version = as_u64(&version).ok_or(HeaderFault::Malformed)?;
    if version != PROFILE_VERSION {
        return Err(HeaderFault::UnsupportedVersion);
    }
    let alg = match alg {
        Value::Integer(i) => i128::from(i),
        _ => return Err(HeaderFault::Malformed),
    };
    if alg != i128::from(ALGORITHM_CHACHA20_POLY1305) {
        return Err(HeaderFault::WrongAlgorithm);
    }
    let epoch = as_u64(&epoch).ok_or(HeaderFault::Malformed)?;
    let (Value::Text(key_ref), Value::Text(stream), Value::Text(chunk)) = (key_ref, stream, chunk)
    else {
        return Err(HeaderFault::Malformed);
    };
    let chunk_id = ChunkId::from_hex(&chunk).ok_or(HeaderFault::Malformed)?;
    let (nonce_prefix, form) = match prefix {
        Value::Bytes(b) => (
            <[u8; NONCE_PREFIX_LEN_BYTES]>::try_from(b.as_slice())
                .map_err(|_| HeaderFault::Malformed)?,
            NoncePrefixForm::Bytes,
        ),
        Value::Array(parts) => {
            let mut out = [0u8; NONCE_PREFIX_LEN_BYTES];
            if parts.len() != NONCE_PREFIX_LEN_BYTES {
                return Err(HeaderFault::Malformed);
            }
            for (slot, part) in out.iter_mut().zip(parts.iter()) {
                let n = as_u64(part).ok_or(HeaderFault::Malformed)?;
                *slot = u8::try_from(n).map_err(|_| HeaderFault::Malformed)?;
            }
            (out, NoncePrefixForm::LegacyUintArray)
        }
        _ => return Err(HeaderFault::Malformed),
    };
    let header = ChunkHeader::new(epoch, &key_ref, &stream, chunk_id, nonce_prefix)
        .map_err(|_| HeaderFault::Malformed)?;
    // Canonical check: re-encode the same value in the same form and compare bytes.
    let mut again = Vec::with_capacity(bytes.len());
    ciborium::ser::into_writer(&header.to_value(form), &mut again)
        .map_err(|_| HeaderFault::Malformed)?;
    if again != bytes {
        return Err(HeaderFault::NonCanonical);
    }
    Ok(ParsedHeader {
        header,
        form,
        bytes: bytes.to_vec(),
    })
}

fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_id_hex_round_trips_and_refuses_upper_case() {
        let id = ChunkId([0xab; 16]);
        assert_eq!(ChunkId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(ChunkId::from_hex(&id.to_hex().to_uppercase()), None);
        assert_eq!(ChunkId::from_hex("ab"), None);
    }

    #[test]
    fn new_refuses_out_of_contract_fields() {
        let id = ChunkId([0; 16]);
        assert_eq!(
            ChunkHeader::new(0, "k", "s", id, [0; 4]),
            Err(HeaderFieldError::ZeroEpoch)
        );
        assert_eq!(
            ChunkHeader::new(1, "", "s", id, [0; 4]),
            Err(HeaderFieldError::KeyReferenceLength)
        );
        assert_eq!(
            ChunkHeader::new(1, "k", &"s".repeat(129), id, [0; 4]),
            Err(HeaderFieldError::StreamIdLength)
        );
        assert!(ChunkHeader::new(1, "k", &"s".repeat(128), id, [0; 4]).is_ok());
    }

    #[test]
    fn legacy_form_parses_and_is_never_written() {
        let header =
            ChunkHeader::new(1, "k", "s", ChunkId([7; 16]), [0xda, 1, 0xe3, 0x73]).unwrap();
        let mut legacy = Vec::new();
        ciborium::ser::into_writer(
            &header.to_value(NoncePrefixForm::LegacyUintArray),
            &mut legacy,
        )
        .unwrap();
        let value: Value = ciborium::de::from_reader(legacy.as_slice()).unwrap();
        let parsed = parse_header(value, &legacy).unwrap();
        assert_eq!(parsed.form, NoncePrefixForm::LegacyUintArray);
        assert_eq!(parsed.header, header);
        let written = header.encode().unwrap();
        assert_ne!(written, legacy);
        let value: Value = ciborium::de::from_reader(written.as_slice()).unwrap();
        assert_eq!(
            parse_header(value, &written).unwrap().form,
            NoncePrefixForm::Bytes
        );
    }
}
