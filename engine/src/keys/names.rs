//! Validated names: namespaces, store ids, key references, and how they map to credential-store
//! names.
//!
//! A [`KeyReference`] is written into every chunk header, so it is validated as strictly as any
//! other input read back from disk. A reference is bound to exactly one [`Namespace`]: the
//! credential that holds it is named from both (see [`CredentialNaming`]), so the same reference
//! text in another namespace names another credential.
//!
//! A namespace's key references come in three shapes ([`ReferenceKind`]):
//!
//! - the **reference-named** key `com.trycua.<namespace>.computer-history.v1` (the
//!   [`Namespace::primary_reference`]): the name and credential the reference implementation's
//!   own platform providers use, so a stock reference and annal find the same key. It is one per
//!   namespace, so which store it belongs to is recorded beside it (the owner record, a
//!   [`StoreId`]);
//! - a **store-bound** key `<namespace>.<store id>.history.v1`: a key of one store's own, for a
//!   second store of the same namespace;
//! - the **legacy** key `<namespace>.history.v1`, which stores written before the reference
//!   naming name in their chunks; still read, never created.

use std::fmt;

/// Longest namespace, in bytes (ASCII). Matches the reference implementation's limit.
pub const NAMESPACE_MAX_LEN_BYTES: usize = 64;

/// Longest key reference, in bytes (ASCII): the storage profile's limit on the header's
/// `key_reference` text, defined once with the header.
pub const KEY_REFERENCE_MAX_LEN_BYTES: usize = crate::profile::header::MAX_HEADER_TEXT_LEN_BYTES;

/// Service name prefix of annal's own credentials. The namespace follows it.
pub const ANNAL_SERVICE_PREFIX: &str = "annal.history.v1.";

/// Suffix appended to a namespace to form its primary key reference (`<namespace>.history.v1`),
/// the same shape the reference implementation writes into its chunk headers.
pub const PRIMARY_REFERENCE_SUFFIX: &str = ".history.v1";

/// Service name prefix of the reference implementation's credentials
/// (`com.trycua.<namespace>.computer-history.v1`).
pub const CUA_SERVICE_PREFIX: &str = "com.trycua.";

/// Service name suffix of the reference implementation's credentials.
pub const CUA_SERVICE_SUFFIX: &str = ".computer-history.v1";

/// The single account name under which the reference implementation keeps a namespace's root
/// key.
pub const CUA_ACCOUNT: &str = "namespace-root-key-v1";

/// Account of a namespace's seal checkpoint credential, under the namespace's annal service
/// beside its root keys. `:` is outside the key-reference alphabet, so the checkpoint never lists
/// as a key reference; it is also outside the namespace alphabet and is neither the keyutils
/// divider (`@`) nor white space, so the description parses back exactly. A store with a
/// [`StoreId`] keeps its checkpoint under `seal-checkpoint:v1:<store id>`
/// ([`CHECKPOINT_ACCOUNT`], `:`, the id); the bare account is the checkpoint of a store written
/// before store ids (its legacy name).
pub const CHECKPOINT_ACCOUNT: &str = "seal-checkpoint:v1";

/// Account, under the namespace's annal service, of the owner record of the namespace's
/// reference-named key: its value is the 16-byte [`StoreId`] of the store the key belongs to.
/// `:` keeps it out of the key-reference alphabet, so it never lists as a key.
pub const REFERENCE_OWNER_ACCOUNT: &str = "reference-key-owner:v1";

/// Length of a store id, in bytes (rendered as twice as many lower-case hex characters).
pub const STORE_ID_LEN_BYTES: usize = 16;

/// A name was rejected. Carries no copy of the rejected text (it may be anything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    #[error("name is empty")]
    Empty,
    /// The name is longer than its limit.
    #[error("name is longer than {max_len_bytes} bytes")]
    TooLong {
        /// The limit that was exceeded, in bytes.
        max_len_bytes: usize,
    },
    /// The name holds a character outside its allowed set.
    #[error("name holds a character outside its allowed set")]
    BadCharacter,
}

/// A history namespace: one store root and one root key. ASCII letters, digits, `-` and `_`,
/// 1..=[`NAMESPACE_MAX_LEN_BYTES`] bytes. No `.` and no `@`, so credential names built from it
/// parse back unambiguously.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

impl Namespace {
    /// Validates and wraps a namespace name.
    pub fn new(name: &str) -> Result<Self, NameError> {
        check(name, NAMESPACE_MAX_LEN_BYTES, |b| {
            b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
        })?;
        Ok(Self(name.to_owned()))
    }

    /// The namespace name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The reference-named key of this namespace, `com.trycua.<namespace>.computer-history.v1`:
    /// the key reference the reference implementation writes into its chunk headers, and the
    /// one `create_or_load` uses. Its credential is the reference's own (service = this text,
    /// account [`CUA_ACCOUNT`]).
    pub fn primary_reference(&self) -> KeyReference {
        // A namespace is at most 64 bytes of [A-Za-z0-9_-]; with the fixed prefix and suffix the
        // result always satisfies the reference rules, so it is built directly.
        const _: () = assert!(
            CUA_SERVICE_PREFIX.len() + NAMESPACE_MAX_LEN_BYTES + CUA_SERVICE_SUFFIX.len()
                <= KEY_REFERENCE_MAX_LEN_BYTES
        );
        KeyReference(format!(
            "{CUA_SERVICE_PREFIX}{}{CUA_SERVICE_SUFFIX}",
            self.0
        ))
    }

    /// The reference stores written before the reference naming name in their chunks:
    /// `<namespace>.history.v1` (annal's service, account = this text). Read, never created.
    pub fn legacy_reference(&self) -> KeyReference {
        const _: () = assert!(
            NAMESPACE_MAX_LEN_BYTES + PRIMARY_REFERENCE_SUFFIX.len() <= KEY_REFERENCE_MAX_LEN_BYTES
        );
        KeyReference(format!("{}{PRIMARY_REFERENCE_SUFFIX}", self.0))
    }

    /// The key of one store's own: `<namespace>.<store id>.history.v1` (annal's service, account
    /// = this text).
    pub fn store_reference(&self, store: &StoreId) -> KeyReference {
        const _: () = assert!(
            NAMESPACE_MAX_LEN_BYTES + 1 + 2 * STORE_ID_LEN_BYTES + PRIMARY_REFERENCE_SUFFIX.len()
                <= KEY_REFERENCE_MAX_LEN_BYTES
        );
        KeyReference(format!(
            "{}.{}{PRIMARY_REFERENCE_SUFFIX}",
            self.0,
            store.to_hex()
        ))
    }

    /// Which of this namespace's shapes `reference` has.
    pub fn kind_of(&self, reference: &KeyReference) -> ReferenceKind {
        if reference == &self.primary_reference() {
            return ReferenceKind::ReferenceNamed;
        }
        if reference == &self.legacy_reference() {
            return ReferenceKind::Legacy;
        }
        let store = reference
            .as_str()
            .strip_prefix(self.0.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .and_then(|rest| rest.strip_suffix(PRIMARY_REFERENCE_SUFFIX))
            .and_then(StoreId::parse);
        match store {
            Some(store) => ReferenceKind::StoreBound(store),
            None => ReferenceKind::Other,
        }
    }
}

/// The shape of a key reference within its namespace (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceKind {
    /// `com.trycua.<namespace>.computer-history.v1`: the reference implementation's naming.
    ReferenceNamed,
    /// `<namespace>.<store id>.history.v1`: a key of that store's own.
    StoreBound(StoreId),
    /// `<namespace>.history.v1`: annal's naming before the reference naming.
    Legacy,
    /// Any other reference (another key epoch's, or another tool's).
    Other,
}

impl ReferenceKind {
    /// A stable name for `annal doctor`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ReferenceNamed => "reference",
            Self::StoreBound(_) => "store",
            Self::Legacy => "legacy",
            Self::Other => "other",
        }
    }
}

/// The identity of one store: 16 random bytes made when the store is created (or adopted), kept
/// in its sidecar (`engine/store-id`, `docs/design.md`). Two stores of one namespace under one
/// user have different ids, so their seal checkpoints and store-bound keys never collide.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreId([u8; STORE_ID_LEN_BYTES]);

impl StoreId {
    /// Wraps raw id bytes.
    pub const fn from_bytes(bytes: [u8; STORE_ID_LEN_BYTES]) -> Self {
        Self(bytes)
    }

    /// The id bytes.
    pub const fn as_bytes(&self) -> &[u8; STORE_ID_LEN_BYTES] {
        &self.0
    }

    /// Parses exactly [`STORE_ID_LEN_BYTES`] * 2 lower-case hex characters.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 2 * STORE_ID_LEN_BYTES
            || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return None;
        }
        let mut bytes = [0u8; STORE_ID_LEN_BYTES];
        for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(Self(bytes))
    }

    /// Parses the id's raw bytes (as kept in the owner record).
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; STORE_ID_LEN_BYTES]>::try_from(bytes).ok().map(Self)
    }

    /// The id as lower-case hex.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreId({})", self.to_hex())
    }
}

impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Which of a namespace's annal-side records a credential holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    /// The seal checkpoint of the store with this id, or (`None`) the legacy per-namespace one.
    Checkpoint(Option<&'a StoreId>),
    /// The owner record of the reference-named key.
    ReferenceOwner,
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of one root key within a namespace, as written into chunk headers. ASCII letters,
/// digits, `.`, `-` and `_`, 1..=[`KEY_REFERENCE_MAX_LEN_BYTES`] bytes (no `@`, no `/`, no
/// spaces).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyReference(String);

impl KeyReference {
    /// Validates and wraps a key reference (for example one read from a chunk header).
    pub fn new(reference: &str) -> Result<Self, NameError> {
        check(reference, KEY_REFERENCE_MAX_LEN_BYTES, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')
        })?;
        Ok(Self(reference.to_owned()))
    }

    /// The reference text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn check(name: &str, max_len_bytes: usize, allowed: impl Fn(u8) -> bool) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > max_len_bytes {
        return Err(NameError::TooLong { max_len_bytes });
    }
    if !name.bytes().all(allowed) {
        return Err(NameError::BadCharacter);
    }
    Ok(())
}

/// How a (namespace, reference) pair maps to a credential's service and account names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CredentialNaming {
    /// annal's naming. The namespace's reference-named key
    /// ([`Namespace::primary_reference`]) is the reference implementation's credential: service
    /// `com.trycua.<namespace>.computer-history.v1`, account `namespace-root-key-v1`. Every other
    /// reference (store-bound, legacy) is under service `annal.history.v1.<namespace>` with the
    /// reference as account, and so are annal's records (seal checkpoints, the owner record).
    /// Listing a namespace lists both services.
    #[default]
    Annal,
    /// The reference implementation's credential only, read-only: service
    /// `com.trycua.<namespace>.computer-history.v1`, account `namespace-root-key-v1`, known to
    /// annal under the namespace's primary reference. annal never creates or destroys a
    /// credential through this naming and keeps no record under it.
    CuaReference,
}

/// The service and account of one credential. Crate-private: callers never see store names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CredentialName {
    /// The service (Secret Service attribute `service`; part of the keyutils description).
    pub(crate) service: String,
    /// The account (Secret Service attribute `username`; part of the keyutils description).
    pub(crate) account: String,
}

impl CredentialNaming {
    /// Whether annal may create and destroy credentials under this naming.
    pub fn is_writable(self) -> bool {
        matches!(self, Self::Annal)
    }

    /// annal's own service of `namespace` (store-bound and legacy keys, records).
    pub(crate) fn annal_service(namespace: &Namespace) -> String {
        format!("{ANNAL_SERVICE_PREFIX}{}", namespace.as_str())
    }

    /// The reference implementation's service of `namespace`.
    pub(crate) fn cua_service(namespace: &Namespace) -> String {
        format!(
            "{CUA_SERVICE_PREFIX}{}{CUA_SERVICE_SUFFIX}",
            namespace.as_str()
        )
    }

    /// The services whose credentials are `namespace`'s keys under this naming.
    pub(crate) fn services(self, namespace: &Namespace) -> Vec<String> {
        match self {
            Self::Annal => vec![Self::annal_service(namespace), Self::cua_service(namespace)],
            Self::CuaReference => vec![Self::cua_service(namespace)],
        }
    }

    /// The credential holding `reference` in `namespace`, or `None` when this naming has no
    /// credential for that reference (the reference naming knows only the primary reference).
    pub(crate) fn credential(
        self,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Option<CredentialName> {
        if reference == &namespace.primary_reference() {
            return Some(CredentialName {
                service: Self::cua_service(namespace),
                account: CUA_ACCOUNT.to_owned(),
            });
        }
        match self {
            Self::Annal => Some(CredentialName {
                service: Self::annal_service(namespace),
                account: reference.as_str().to_owned(),
            }),
            Self::CuaReference => None,
        }
    }

    /// The credential holding one of `namespace`'s records, or `None` under a naming that keeps
    /// none (the reference implementation keeps no checkpoint, and annal writes nothing there).
    pub(crate) fn record_credential(
        self,
        namespace: &Namespace,
        record: Record<'_>,
    ) -> Option<CredentialName> {
        match self {
            Self::Annal => Some(CredentialName {
                service: Self::annal_service(namespace),
                account: match record {
                    Record::Checkpoint(None) => CHECKPOINT_ACCOUNT.to_owned(),
                    Record::Checkpoint(Some(store)) => {
                        format!("{CHECKPOINT_ACCOUNT}:{}", store.to_hex())
                    }
                    Record::ReferenceOwner => REFERENCE_OWNER_ACCOUNT.to_owned(),
                },
            }),
            Self::CuaReference => None,
        }
    }

    /// Maps an account found under `service` back to a key reference of `namespace`, or `None`
    /// when the account is not a key of this naming (a record, or another tool's).
    pub(crate) fn reference_of_account(
        self,
        namespace: &Namespace,
        service: &str,
        account: &str,
    ) -> Option<KeyReference> {
        if service == Self::cua_service(namespace) {
            return (account == CUA_ACCOUNT).then(|| namespace.primary_reference());
        }
        match self {
            Self::Annal if service == Self::annal_service(namespace) => {
                KeyReference::new(account)
                    .ok()
                    // The reference-named key lives under the reference's service only.
                    .filter(|r| r != &namespace.primary_reference())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_rules() {
        assert!(Namespace::new("default").is_ok());
        assert!(Namespace::new("cua-driver_2").is_ok());
        assert_eq!(Namespace::new(""), Err(NameError::Empty));
        assert_eq!(Namespace::new("a.b"), Err(NameError::BadCharacter));
        assert_eq!(Namespace::new("../x"), Err(NameError::BadCharacter));
        assert_eq!(Namespace::new("a@b"), Err(NameError::BadCharacter));
        assert!(Namespace::new(&"n".repeat(64)).is_ok());
        assert_eq!(
            Namespace::new(&"n".repeat(65)),
            Err(NameError::TooLong { max_len_bytes: 64 })
        );
    }

    #[test]
    fn reference_rules() {
        assert!(KeyReference::new("fixture.history.v1").is_ok());
        assert!(KeyReference::new(&"r".repeat(128)).is_ok());
        assert_eq!(
            KeyReference::new(&"r".repeat(129)),
            Err(NameError::TooLong { max_len_bytes: 128 })
        );
        assert_eq!(KeyReference::new(""), Err(NameError::Empty));
        for bad in ["a b", "a/b", "a@b", "é", "a\nb"] {
            assert_eq!(
                KeyReference::new(bad),
                Err(NameError::BadCharacter),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn primary_reference_is_the_reference_implementations_name() {
        let ns = Namespace::new("fixture").unwrap();
        assert_eq!(
            ns.primary_reference().as_str(),
            "com.trycua.fixture.computer-history.v1"
        );
        assert_eq!(ns.legacy_reference().as_str(), "fixture.history.v1");
        let longest = Namespace::new(&"n".repeat(64)).unwrap();
        assert!(KeyReference::new(longest.primary_reference().as_str()).is_ok());
        assert!(KeyReference::new(longest.legacy_reference().as_str()).is_ok());
        let id = StoreId::from_bytes([0xab; STORE_ID_LEN_BYTES]);
        assert!(KeyReference::new(longest.store_reference(&id).as_str()).is_ok());
    }

    #[test]
    fn every_shape_is_told_apart_and_only_for_its_own_namespace() {
        let ns = Namespace::new("work").unwrap();
        let other = Namespace::new("work2").unwrap();
        let id = StoreId::from_bytes([7; STORE_ID_LEN_BYTES]);
        assert_eq!(
            ns.kind_of(&ns.primary_reference()),
            ReferenceKind::ReferenceNamed
        );
        assert_eq!(ns.kind_of(&ns.legacy_reference()), ReferenceKind::Legacy);
        assert_eq!(
            ns.kind_of(&ns.store_reference(&id)),
            ReferenceKind::StoreBound(id)
        );
        assert_eq!(
            ns.store_reference(&id).as_str(),
            "work.07070707070707070707070707070707.history.v1"
        );
        for foreign in [
            other.primary_reference(),
            other.legacy_reference(),
            other.store_reference(&id),
        ] {
            assert_eq!(ns.kind_of(&foreign), ReferenceKind::Other, "{foreign}");
        }
        // An upper-case or short id is not a store id.
        for bad in [
            "work.0707.history.v1",
            "work.07070707070707070707070707070A07.history.v1",
        ] {
            assert_eq!(
                ns.kind_of(&KeyReference::new(bad).unwrap()),
                ReferenceKind::Other
            );
        }
    }

    #[test]
    fn store_ids_round_trip_as_lower_case_hex_only() {
        let id = StoreId::from_bytes([
            0xab, 0xcd, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xfe,
        ]);
        assert_eq!(StoreId::parse(&id.to_hex()), Some(id));
        assert_eq!(StoreId::from_slice(id.as_bytes()), Some(id));
        assert_eq!(StoreId::parse(&id.to_hex().to_uppercase()), None);
        assert_eq!(StoreId::parse("00"), None);
        assert_eq!(StoreId::parse(&"g".repeat(32)), None);
        assert_eq!(StoreId::from_slice(&[0; 15]), None);
    }

    #[test]
    fn credential_names_bind_reference_to_namespace() {
        let a = Namespace::new("a").unwrap();
        let b = Namespace::new("b").unwrap();
        let r = KeyReference::new("same.v1").unwrap();
        let ca = CredentialNaming::Annal.credential(&a, &r).unwrap();
        let cb = CredentialNaming::Annal.credential(&b, &r).unwrap();
        assert_ne!(ca, cb);
        assert_eq!(ca.service, "annal.history.v1.a");
        assert_eq!(ca.account, "same.v1");
    }

    #[test]
    fn records_sit_beside_the_keys_and_are_never_key_references() {
        let ns = Namespace::new("work").unwrap();
        let id = StoreId::from_bytes([1; STORE_ID_LEN_BYTES]);
        let service = CredentialNaming::annal_service(&ns);
        let legacy = CredentialNaming::Annal
            .record_credential(&ns, Record::Checkpoint(None))
            .unwrap();
        assert_eq!(legacy.service, service);
        assert_eq!(legacy.account, "seal-checkpoint:v1");
        let bound = CredentialNaming::Annal
            .record_credential(&ns, Record::Checkpoint(Some(&id)))
            .unwrap();
        assert_eq!(
            bound.account,
            "seal-checkpoint:v1:01010101010101010101010101010101"
        );
        let owner = CredentialNaming::Annal
            .record_credential(&ns, Record::ReferenceOwner)
            .unwrap();
        assert_eq!(owner.account, "reference-key-owner:v1");
        for record in [&legacy, &bound, &owner] {
            assert_eq!(
                KeyReference::new(&record.account),
                Err(NameError::BadCharacter)
            );
            assert_eq!(
                CredentialNaming::Annal.reference_of_account(&ns, &service, &record.account),
                None
            );
            assert!(!record.account.contains(['@', ' ', '\n']));
        }
        assert!(
            CredentialNaming::CuaReference
                .record_credential(&ns, Record::Checkpoint(None))
                .is_none()
        );
    }

    #[test]
    fn the_primary_reference_is_the_reference_implementations_credential_under_both_namings() {
        let ns = Namespace::new("cua-driver").unwrap();
        for naming in [CredentialNaming::Annal, CredentialNaming::CuaReference] {
            let name = naming.credential(&ns, &ns.primary_reference()).unwrap();
            assert_eq!(name.service, "com.trycua.cua-driver.computer-history.v1");
            assert_eq!(name.account, "namespace-root-key-v1");
            assert_eq!(
                naming.reference_of_account(&ns, &name.service, &name.account),
                Some(ns.primary_reference())
            );
        }
        let legacy = CredentialNaming::Annal
            .credential(&ns, &ns.legacy_reference())
            .unwrap();
        assert_eq!(legacy.service, "annal.history.v1.cua-driver");
        assert_eq!(legacy.account, "cua-driver.history.v1");
        let other = KeyReference::new("other.v1").unwrap();
        assert!(
            CredentialNaming::CuaReference
                .credential(&ns, &other)
                .is_none()
        );
        assert!(!CredentialNaming::CuaReference.is_writable());
    }
}
