//! Validated names: namespaces, key references, and how they map to credential-store names.
//!
//! A [`KeyReference`] is written into every chunk header, so it is validated as strictly as any
//! other input read back from disk. A reference is bound to exactly one [`Namespace`]: the
//! credential that holds it is named from both (see [`CredentialNaming`]), so the same reference
//! text in another namespace names another credential.

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
/// divider (`@`) nor white space, so the description parses back exactly.
pub const CHECKPOINT_ACCOUNT: &str = "seal-checkpoint:v1";

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

    /// The reference `create_or_load` uses for this namespace: `<namespace>.history.v1`.
    pub fn primary_reference(&self) -> KeyReference {
        // A namespace is at most 64 bytes of [A-Za-z0-9_-]; with the 11-byte suffix the result
        // always satisfies the reference rules, so it is built directly.
        const _: () = assert!(
            NAMESPACE_MAX_LEN_BYTES + PRIMARY_REFERENCE_SUFFIX.len() <= KEY_REFERENCE_MAX_LEN_BYTES
        );
        KeyReference(format!("{}{PRIMARY_REFERENCE_SUFFIX}", self.0))
    }
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
    /// annal's own naming: service `annal.history.v1.<namespace>`, account = the key reference.
    /// A namespace may hold several references (one per key epoch); listing a namespace means
    /// listing the accounts of its service.
    #[default]
    Annal,
    /// The reference implementation's naming, for reading stores it wrote: service
    /// `com.trycua.<namespace>.computer-history.v1`, account `namespace-root-key-v1`. It holds
    /// exactly one key per namespace, known to annal under the namespace's primary reference.
    /// Read-only: annal never creates or destroys a credential named this way.
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

    /// The service name every credential of `namespace` carries.
    pub(crate) fn service(self, namespace: &Namespace) -> String {
        match self {
            Self::Annal => format!("{ANNAL_SERVICE_PREFIX}{}", namespace.as_str()),
            Self::CuaReference => {
                format!(
                    "{CUA_SERVICE_PREFIX}{}{CUA_SERVICE_SUFFIX}",
                    namespace.as_str()
                )
            }
        }
    }

    /// The credential holding `reference` in `namespace`, or `None` when this naming has no
    /// credential for that reference (the reference naming knows only the primary reference).
    pub(crate) fn credential(
        self,
        namespace: &Namespace,
        reference: &KeyReference,
    ) -> Option<CredentialName> {
        let service = self.service(namespace);
        match self {
            Self::Annal => Some(CredentialName {
                service,
                account: reference.as_str().to_owned(),
            }),
            Self::CuaReference => {
                (reference == &namespace.primary_reference()).then(|| CredentialName {
                    service,
                    account: CUA_ACCOUNT.to_owned(),
                })
            }
        }
    }

    /// The credential holding `namespace`'s seal checkpoint, or `None` under a naming that has
    /// none (the reference implementation keeps no checkpoint, and annal writes nothing there).
    pub(crate) fn checkpoint_credential(self, namespace: &Namespace) -> Option<CredentialName> {
        match self {
            Self::Annal => Some(CredentialName {
                service: self.service(namespace),
                account: CHECKPOINT_ACCOUNT.to_owned(),
            }),
            Self::CuaReference => None,
        }
    }

    /// Maps an account found under `namespace`'s service back to a key reference, or `None`
    /// when the account does not belong to this naming.
    pub(crate) fn reference_of_account(
        self,
        namespace: &Namespace,
        account: &str,
    ) -> Option<KeyReference> {
        match self {
            Self::Annal => KeyReference::new(account).ok(),
            Self::CuaReference => (account == CUA_ACCOUNT).then(|| namespace.primary_reference()),
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
    fn primary_reference_matches_the_reference_shape() {
        let ns = Namespace::new("fixture").unwrap();
        assert_eq!(ns.primary_reference().as_str(), "fixture.history.v1");
        let longest = Namespace::new(&"n".repeat(64)).unwrap();
        assert!(KeyReference::new(longest.primary_reference().as_str()).is_ok());
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
    fn the_checkpoint_sits_beside_the_keys_and_is_never_a_key_reference() {
        let ns = Namespace::new("work").unwrap();
        let name = CredentialNaming::Annal.checkpoint_credential(&ns).unwrap();
        assert_eq!(name.service, CredentialNaming::Annal.service(&ns));
        assert_eq!(name.account, "seal-checkpoint:v1");
        assert_eq!(
            KeyReference::new(CHECKPOINT_ACCOUNT),
            Err(NameError::BadCharacter)
        );
        assert_eq!(
            CredentialNaming::Annal.reference_of_account(&ns, CHECKPOINT_ACCOUNT),
            None
        );
        assert!(!CHECKPOINT_ACCOUNT.contains(['@', ' ', '\n']));
        assert!(
            CredentialNaming::CuaReference
                .checkpoint_credential(&ns)
                .is_none()
        );
    }

    #[test]
    fn cua_naming_is_the_reference_credential() {
        let ns = Namespace::new("cua-driver").unwrap();
        let name = CredentialNaming::CuaReference
            .credential(&ns, &ns.primary_reference())
            .unwrap();
        assert_eq!(name.service, "com.trycua.cua-driver.computer-history.v1");
        assert_eq!(name.account, "namespace-root-key-v1");
        let other = KeyReference::new("other.v1").unwrap();
        assert!(
            CredentialNaming::CuaReference
                .credential(&ns, &other)
                .is_none()
        );
        assert!(!CredentialNaming::CuaReference.is_writable());
    }
}
