//! Key custody failures and their fixed health categories.
//!
//! `Display` is fixed text per variant: it never shows a store path, a service or account name,
//! key bytes or a raw OS/D-Bus error. The underlying error is kept as a string for local logs
//! only ([`KeyError::detail_for_local_log`]), and that string is built without any secret bytes
//! the store may have returned.

use annal_schema::HealthCategory;
use zeroize::Zeroize;

/// A key custody operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The namespace has no credential for the requested reference.
    #[error("the namespace key does not exist in the credential store")]
    NotFound,
    /// The credential store could not be reached (no D-Bus session, no Secret Service provider,
    /// no usable kernel keyring, a platform failure).
    #[error("the credential store is unavailable")]
    StoreUnavailable {
        /// The underlying error, for local logs only.
        detail: String,
    },
    /// The credential store did not answer within its bound.
    #[error("the credential store did not answer in time")]
    StoreTimedOut {
        /// The bound that passed, in milliseconds.
        timeout_ms: u64,
    },
    /// The credential store refused the request (bad parameter, unsupported operation).
    #[error("the credential store rejected the request")]
    StoreRejected {
        /// The underlying error, for local logs only.
        detail: String,
    },
    /// The credential store is locked (or refused access).
    #[error("the credential store is locked")]
    Locked {
        /// The underlying error, for local logs only.
        detail: String,
    },
    /// The stored key is not 32 bytes long.
    #[error("the stored key has the wrong length")]
    WrongLength {
        /// How many bytes the store returned.
        actual_len_bytes: usize,
    },
    /// The store returned something that is not a key (bad encoding, ambiguous match, a
    /// malformed store).
    #[error("the stored key is malformed")]
    Malformed {
        /// The underlying error, for local logs only (never the bytes themselves).
        detail: String,
    },
    /// A newly written key read back different from what was written.
    #[error("a newly stored key did not read back intact")]
    ReadBackMismatch,
    /// The random source failed while generating a key.
    #[error("the random source failed while generating a key")]
    EntropyFailed,
    /// Destroying a key could not be completed or verified; the key may still exist and every
    /// file must be kept.
    #[error("destroying the namespace key could not be verified")]
    DestroyNotVerified {
        /// The underlying reason, for local logs only.
        detail: String,
    },
    /// The credential naming in use is read-only (the reference implementation's), so annal
    /// refuses to create or destroy a credential.
    #[error("the credential naming in use is read-only")]
    ReadOnlyNaming,
    /// The namespace's reference-named key belongs to another store of the same namespace (its
    /// owner record names another store id). Nothing was created or changed.
    #[error(
        "the namespace's key belongs to another store of the same namespace; give this store a \
         key of its own (key choice `own`), or use another namespace"
    )]
    OwnedByAnotherStore,
}

impl KeyError {
    /// The fixed health category of this failure.
    pub fn category(&self) -> HealthCategory {
        match self {
            Self::NotFound
            | Self::StoreUnavailable { .. }
            | Self::StoreTimedOut { .. }
            | Self::StoreRejected { .. }
            | Self::EntropyFailed
            | Self::OwnedByAnotherStore => HealthCategory::KeyUnavailable,
            Self::Locked { .. } => HealthCategory::KeyLocked,
            Self::WrongLength { .. } | Self::Malformed { .. } | Self::ReadBackMismatch => {
                HealthCategory::KeyCorrupt
            }
            Self::DestroyNotVerified { .. } | Self::ReadOnlyNaming => {
                HealthCategory::KeyDestroyFailed
            }
        }
    }

    /// The underlying error text, for local logs only. Never show it to an agent: it may name
    /// a store path, service or account.
    pub fn detail_for_local_log(&self) -> Option<&str> {
        match self {
            Self::StoreUnavailable { detail }
            | Self::StoreRejected { detail }
            | Self::Locked { detail }
            | Self::Malformed { detail }
            | Self::DestroyNotVerified { detail } => Some(detail),
            _ => None,
        }
    }

    /// Turns this failure into a destroy failure (the caller asked to destroy; whatever went
    /// wrong, the key may still exist).
    pub(crate) fn into_destroy_failure(self) -> KeyError {
        match self {
            Self::DestroyNotVerified { .. } | Self::ReadOnlyNaming | Self::OwnedByAnotherStore => {
                self
            }
            other => {
                let detail = match other.detail_for_local_log() {
                    Some(d) => format!("{other}: {d}"),
                    None => other.to_string(),
                };
                Self::DestroyNotVerified { detail }
            }
        }
    }
}

/// Which store produced a keyring error; decides how "access denied" is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorSource {
    /// The Secret Service (and the in-memory mock, which stands in for it): a refusal of
    /// access means a locked collection or a dismissed unlock prompt.
    SecretServiceLike,
    /// The kernel keyring: a refusal of access means the process has no usable session keyring
    /// or lacks permission, not a lock a person could open.
    Keyutils,
}

/// Maps a keyring-core error to a [`KeyError`], wiping any secret bytes it carries.
pub(crate) fn from_keyring(error: keyring_core::Error, source: ErrorSource) -> KeyError {
    use keyring_core::Error as E;
    match error {
        E::NoEntry => KeyError::NotFound,
        E::NoStorageAccess(inner) => {
            let detail = format!("no storage access: {inner}");
            match source {
                ErrorSource::SecretServiceLike => KeyError::Locked { detail },
                ErrorSource::Keyutils => KeyError::StoreUnavailable { detail },
            }
        }
        E::PlatformFailure(inner) => KeyError::StoreUnavailable {
            detail: format!("platform failure: {inner}"),
        },
        E::BadEncoding(mut bytes) => {
            let len = bytes.len();
            bytes.zeroize();
            KeyError::Malformed {
                detail: format!("bad encoding ({len} bytes)"),
            }
        }
        E::BadDataFormat(mut bytes, inner) => {
            let len = bytes.len();
            bytes.zeroize();
            KeyError::Malformed {
                detail: format!("bad data format ({len} bytes): {inner}"),
            }
        }
        E::BadStoreFormat(reason) => KeyError::Malformed {
            detail: format!("bad store format: {reason}"),
        },
        E::Ambiguous(entries) => KeyError::Malformed {
            detail: format!("{} credentials match one name", entries.len()),
        },
        E::TooLong(attr, limit) => KeyError::StoreRejected {
            detail: format!("{attr} longer than {limit}"),
        },
        E::Invalid(attr, reason) => KeyError::StoreRejected {
            detail: format!("invalid {attr}: {reason}"),
        },
        E::NoDefaultStore => KeyError::StoreUnavailable {
            detail: "no default store".to_owned(),
        },
        E::NotSupportedByStore(what) => KeyError::StoreRejected {
            detail: format!("not supported: {what}"),
        },
        other => KeyError::StoreUnavailable {
            detail: format!("unrecognised keyring error: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(text: &str) -> keyring_core::error::PlatformError {
        Box::new(std::io::Error::other(text.to_owned()))
    }

    #[test]
    fn categories_are_fixed() {
        use keyring_core::Error as E;
        let cases: Vec<(keyring_core::Error, ErrorSource, HealthCategory)> = vec![
            (
                E::NoEntry,
                ErrorSource::SecretServiceLike,
                HealthCategory::KeyUnavailable,
            ),
            (
                E::NoStorageAccess(boxed("locked")),
                ErrorSource::SecretServiceLike,
                HealthCategory::KeyLocked,
            ),
            (
                E::NoStorageAccess(boxed("EACCES")),
                ErrorSource::Keyutils,
                HealthCategory::KeyUnavailable,
            ),
            (
                E::PlatformFailure(boxed("ServiceUnknown")),
                ErrorSource::SecretServiceLike,
                HealthCategory::KeyUnavailable,
            ),
            (
                E::BadEncoding(vec![1, 2]),
                ErrorSource::Keyutils,
                HealthCategory::KeyCorrupt,
            ),
            (
                E::BadDataFormat(vec![1], boxed("x")),
                ErrorSource::Keyutils,
                HealthCategory::KeyCorrupt,
            ),
            (
                E::Ambiguous(vec![]),
                ErrorSource::SecretServiceLike,
                HealthCategory::KeyCorrupt,
            ),
        ];
        for (error, source, want) in cases {
            assert_eq!(from_keyring(error, source).category(), want);
        }
        assert_eq!(
            KeyError::ReadBackMismatch.category(),
            HealthCategory::KeyCorrupt
        );
        assert_eq!(
            KeyError::DestroyNotVerified {
                detail: String::new()
            }
            .category(),
            HealthCategory::KeyDestroyFailed
        );
    }

    #[test]
    fn display_hides_detail_and_secrets() {
        let error = from_keyring(
            keyring_core::Error::NoStorageAccess(boxed("/run/user/0/keyring/control svc@acct")),
            ErrorSource::SecretServiceLike,
        );
        let shown = error.to_string();
        assert!(!shown.contains("/run"), "{shown}");
        assert!(!shown.contains("acct"), "{shown}");
        assert!(
            error
                .detail_for_local_log()
                .is_some_and(|d| d.contains("/run"))
        );

        let secret = b"SECRET-KEY-BYTES".to_vec();
        let error = from_keyring(
            keyring_core::Error::BadEncoding(secret),
            ErrorSource::Keyutils,
        );
        assert!(!format!("{error} {error:?}").contains("SECRET"));
    }

    #[test]
    fn destroy_failure_wraps_every_other_error() {
        let error = KeyError::Locked { detail: "x".into() }.into_destroy_failure();
        assert_eq!(error.category(), HealthCategory::KeyDestroyFailed);
    }
}
