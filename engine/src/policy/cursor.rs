//! Paging cursors for `history_query`: opaque, single-use, bound to one principal, one engine
//! run and one query's filters, valid [`CURSOR_TTL_SECS`].
//!
//! A cursor is `hex(nonce || XChaCha20-Poly1305(cursor key, nonce, claims, aad))`, the claims
//! being a fixed 112-byte record: a random cursor id (single use), the engine run's generation,
//! a digest of the principal, a digest of the filters, the exclusive upper sequence bound of the
//! next page and the issue time. Encrypted, it reveals nothing (no sequence in clear);
//! authenticated, it cannot be forged or altered. The [`CursorBook`] remembers which ids are
//! outstanding, so a second use is refused. Every refusal has a fixed code
//! ([`CursorRefusal`]) and never reads anything.

use std::collections::VecDeque;
use std::sync::Arc;

use annal_schema::ids::{HexCase, decode_hex_into, encode_lower_hex};
use annal_schema::tools::QueryRequest;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use zeroize::{Zeroize, ZeroizeOnDrop};

use super::{CursorRefusal, Principal};
use crate::entropy::{Entropy, EntropyError};
use crate::keys::PurposeKey;
use crate::keys::material::KEY_LEN_BYTES;

/// How long a cursor stays valid after it was issued, in seconds.
pub const CURSOR_TTL_SECS: u64 = 60;

/// Most cursors outstanding at once; past it the oldest is forgotten (and refused if used).
pub const CURSORS_OUTSTANDING_MAX: usize = 4_096;

/// Bytes of the random cursor id.
const CURSOR_ID_LEN_BYTES: usize = 16;

/// Bytes of the engine run's generation.
pub const GENERATION_LEN_BYTES: usize = 16;

/// Bytes of the claims: id, generation, principal digest, filter digest, bound, issue time.
const CLAIMS_LEN_BYTES: usize = CURSOR_ID_LEN_BYTES + GENERATION_LEN_BYTES + 32 + 32 + 8 + 8;

/// Bytes of an XChaCha20-Poly1305 nonce.
const NONCE_LEN_BYTES: usize = 24;

/// Bytes of the Poly1305 tag.
const TAG_LEN_BYTES: usize = 16;

/// Characters of every cursor: the hex of nonce, claims and tag.
pub const CURSOR_LEN_CHARS: usize = 2 * (NONCE_LEN_BYTES + CLAIMS_LEN_BYTES + TAG_LEN_BYTES);

/// The associated data of every cursor (binds the format version).
const CURSOR_AAD: &[u8] = b"annal/v1/cursor";

/// BLAKE3 derive-key context of the principal digest.
const PRINCIPAL_CONTEXT: &str = "annal v1 cursor principal";

/// BLAKE3 derive-key context of the filter digest.
const FILTER_CONTEXT: &str = "annal v1 cursor filters";

/// Milliseconds in a second.
const MS_PER_SEC: u64 = 1_000;

/// The key cursors are sealed with (zeroized on drop; `Debug` redacts).
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct CursorKey([u8; KEY_LEN_BYTES]);

impl CursorKey {
    /// The cursor key from the cursor purpose key
    /// ([`KeyCustody::cursor_key`](crate::keys::KeyCustody::cursor_key)).
    pub fn new(key: &PurposeKey) -> Self {
        Self(*key.as_bytes())
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&chacha20poly1305::Key::from(self.0))
    }
}

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorKey(<redacted>)")
    }
}

/// What a cursor says, once opened.
struct Claims {
    id: [u8; CURSOR_ID_LEN_BYTES],
    generation: [u8; GENERATION_LEN_BYTES],
    principal: [u8; 32],
    filters: [u8; 32],
    before_sequence: u64,
    issued_at_ms: u64,
}

impl Claims {
    fn to_bytes(&self) -> [u8; CLAIMS_LEN_BYTES] {
        let mut out = [0u8; CLAIMS_LEN_BYTES];
        let parts: [&[u8]; 6] = [
            &self.id,
            &self.generation,
            &self.principal,
            &self.filters,
            &self.before_sequence.to_be_bytes(),
            &self.issued_at_ms.to_be_bytes(),
        ];
        let mut at = 0;
        for part in parts {
            if let Some(slot) = out.get_mut(at..at + part.len()) {
                slot.copy_from_slice(part);
            }
            at += part.len();
        }
        out
    }

    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != CLAIMS_LEN_BYTES {
            return None;
        }
        let (id, rest) = bytes.split_first_chunk::<CURSOR_ID_LEN_BYTES>()?;
        let (generation, rest) = rest.split_first_chunk::<GENERATION_LEN_BYTES>()?;
        let (principal, rest) = rest.split_first_chunk::<32>()?;
        let (filters, rest) = rest.split_first_chunk::<32>()?;
        let (before, rest) = rest.split_first_chunk::<8>()?;
        let (issued, _) = rest.split_first_chunk::<8>()?;
        Some(Self {
            id: *id,
            generation: *generation,
            principal: *principal,
            filters: *filters,
            before_sequence: u64::from_be_bytes(*before),
            issued_at_ms: u64::from_be_bytes(*issued),
        })
    }
}

/// The digest that binds a cursor to its principal.
fn principal_digest(principal: &Principal) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(PRINCIPAL_CONTEXT);
    hasher.update(principal.as_str().as_bytes());
    *hasher.finalize().as_bytes()
}

/// The digest that binds a cursor to a query's filters (limit, session, bounds).
fn filter_digest(request: &QueryRequest) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(FILTER_CONTEXT);
    hasher.update(&[request.limit()]);
    match request.session_id() {
        Some(session) => {
            hasher.update(&[1]);
            hasher.update(&(session.len() as u64).to_be_bytes());
            hasher.update(session.as_bytes());
        }
        None => {
            hasher.update(&[0]);
        }
    }
    for bound in [request.since_sequence(), request.until_sequence()] {
        match bound {
            Some(value) => hasher.update(&[1]).update(&value.to_be_bytes()),
            None => hasher.update(&[0]),
        };
    }
    *hasher.finalize().as_bytes()
}

/// The cursors one engine run issued and that are still unused.
pub struct CursorBook {
    /// Seals and opens cursors.
    key: Arc<CursorKey>,
    /// This run's generation: a cursor of another run is stale.
    generation: [u8; GENERATION_LEN_BYTES],
    /// Outstanding cursor ids with their issue times, oldest first (at most
    /// [`CURSORS_OUTSTANDING_MAX`]: a linear search is cheaper than a map at this size).
    outstanding: VecDeque<([u8; CURSOR_ID_LEN_BYTES], u64)>,
}

impl std::fmt::Debug for CursorBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CursorBook")
            .field("outstanding", &self.outstanding.len())
            .finish_non_exhaustive()
    }
}

impl CursorBook {
    /// A book for one engine run (`generation` random per run).
    pub fn new(key: Arc<CursorKey>, generation: [u8; GENERATION_LEN_BYTES]) -> Self {
        Self {
            key,
            generation,
            outstanding: VecDeque::new(),
        }
    }

    /// How many cursors are outstanding.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Issues a cursor for the page of `request` below `before_sequence`, to `principal`.
    pub fn issue(
        &mut self,
        principal: &Principal,
        request: &QueryRequest,
        before_sequence: u64,
        now_ms: u64,
        entropy: &mut dyn Entropy,
    ) -> Result<String, EntropyError> {
        let mut id = [0u8; CURSOR_ID_LEN_BYTES];
        entropy.fill(&mut id)?;
        let mut nonce = [0u8; NONCE_LEN_BYTES];
        entropy.fill(&mut nonce)?;
        let claims = Claims {
            id,
            generation: self.generation,
            principal: principal_digest(principal),
            filters: filter_digest(request),
            before_sequence,
            issued_at_ms: now_ms,
        };
        let plaintext = claims.to_bytes();
        let sealed = self
            .key
            .cipher()
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: &plaintext,
                    aad: CURSOR_AAD,
                },
            )
            .map_err(|_| EntropyError)?;
        self.forget_expired(now_ms);
        if self.outstanding.len() >= CURSORS_OUTSTANDING_MAX {
            self.outstanding.pop_front();
        }
        self.outstanding.push_back((id, now_ms));
        let mut wire = Vec::with_capacity(NONCE_LEN_BYTES + sealed.len());
        wire.extend_from_slice(&nonce);
        wire.extend_from_slice(&sealed);
        Ok(encode_lower_hex(&wire))
    }

    /// Redeems `text` for `principal` and `request` at `now_ms`: the exclusive upper sequence
    /// bound of the page it stands for. The cursor is used up only when it is accepted; a
    /// refused one stays as it was (a foreign actor cannot burn another's cursor).
    pub fn redeem(
        &mut self,
        text: &str,
        principal: &Principal,
        request: &QueryRequest,
        now_ms: u64,
    ) -> Result<u64, CursorRefusal> {
        if text.len() != CURSOR_LEN_CHARS {
            return Err(CursorRefusal::Invalid);
        }
        let mut wire = [0u8; CURSOR_LEN_CHARS / 2];
        decode_hex_into(text.as_bytes(), HexCase::Lower, &mut wire)
            .map_err(|_| CursorRefusal::Invalid)?;
        let (nonce, sealed) = wire
            .split_first_chunk::<NONCE_LEN_BYTES>()
            .ok_or(CursorRefusal::Invalid)?;
        let plaintext = self
            .key
            .cipher()
            .decrypt(
                &XNonce::from(*nonce),
                Payload {
                    msg: sealed,
                    aad: CURSOR_AAD,
                },
            )
            .map_err(|_| CursorRefusal::Invalid)?;
        let claims = Claims::from_bytes(&plaintext).ok_or(CursorRefusal::Invalid)?;
        if claims.generation != self.generation {
            return Err(CursorRefusal::Stale);
        }
        if claims.principal != principal_digest(principal) {
            return Err(CursorRefusal::ForeignActor);
        }
        if claims.filters != filter_digest(request) {
            return Err(CursorRefusal::FilterMismatch);
        }
        if now_ms
            >= claims
                .issued_at_ms
                .saturating_add(CURSOR_TTL_SECS * MS_PER_SEC)
        {
            return Err(CursorRefusal::Expired);
        }
        let Some(at) = self.outstanding.iter().position(|(id, _)| *id == claims.id) else {
            return Err(CursorRefusal::Replayed);
        };
        self.outstanding.remove(at);
        Ok(claims.before_sequence)
    }

    /// Forgets cursors past their time (they would be refused as expired anyway).
    fn forget_expired(&mut self, now_ms: u64) {
        let ttl_ms = CURSOR_TTL_SECS * MS_PER_SEC;
        while self
            .outstanding
            .front()
            .is_some_and(|(_, issued)| now_ms >= issued.saturating_add(ttl_ms))
        {
            self.outstanding.pop_front();
        }
    }
}
