//! Choosing a credential store (`--key-store secret-service|keyutils|auto`) and diagnosing
//! every store (`annal doctor`).
//!
//! Probe order for `auto`: an unlocked Secret Service that answers within
//! [`SECRET_SERVICE_PROBE_TIMEOUT_MS`] first, otherwise the kernel keyring. There is no other
//! fallback: no environment variable, no file, no process-local key.

use std::str::FromStr;

use annal_schema::HealthCategory;

use super::error::KeyError;
use super::keyutils::{self, KeyutilsProvider};
use super::names::CredentialNaming;
use super::provider::{KeyProvider, KeyStoreKind};
use super::secret_service::{
    self, SECRET_SERVICE_PROBE_TIMEOUT_MS, SecretServiceProvider, SecretServiceState,
};
use crate::entropy::Entropy;

/// The store a person asked for (`--key-store`, or `key_store` in config, same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyStoreChoice {
    /// The Secret Service, and nothing else.
    SecretService,
    /// The kernel keyring, and nothing else.
    Keyutils,
    /// An unlocked Secret Service if one answers in time, otherwise the kernel keyring.
    #[default]
    Auto,
}

impl KeyStoreChoice {
    /// Every choice, in the order `--help` lists them.
    pub const ALL: [KeyStoreChoice; 3] = [Self::SecretService, Self::Keyutils, Self::Auto];

    /// The stable name used on the command line and in config.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SecretService => "secret-service",
            Self::Keyutils => "keyutils",
            Self::Auto => "auto",
        }
    }
}

impl std::fmt::Display for KeyStoreChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A key-store name that is not one of `secret-service`, `keyutils`, `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown key store (expected secret-service, keyutils or auto)")]
pub struct UnknownKeyStore;

impl FromStr for KeyStoreChoice {
    type Err = UnknownKeyStore;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or(UnknownKeyStore)
    }
}

/// What a probe found in one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreState {
    /// The store answered and can hold keys now.
    Usable,
    /// The store answered but is locked (or has no collection to hold keys yet).
    Locked,
    /// The store is not there or did not answer.
    Missing,
}

impl StoreState {
    /// The stable name used in `--json` output.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Usable => "usable",
            Self::Locked => "locked",
            Self::Missing => "missing",
        }
    }
}

/// One store's diagnosis. Holds no secret and no store path; `error` keeps the underlying
/// failure for local logs.
#[derive(Debug)]
pub struct KeyStoreReport {
    /// Which store.
    pub kind: KeyStoreKind,
    /// What the probe found.
    pub state: StoreState,
    /// One line for a person: what to do (or what is fine).
    pub hint: &'static str,
    /// The underlying failure, `None` when usable.
    pub error: Option<KeyError>,
}

const HINT_SS_USABLE: &str = "the Secret Service answered and its default collection is unlocked";
const HINT_SS_LOCKED: &str = "unlock the login keyring: log in to the desktop session, or run \
     `gnome-keyring-daemon --unlock` and type its password";
const HINT_SS_NO_BUS: &str =
    "no D-Bus session bus: run annal inside a desktop session or under `dbus-run-session`";
const HINT_SS_NO_PROVIDER: &str = "no Secret Service answered on the session bus: start one, \
     for example `gnome-keyring-daemon --start --components=secrets`";
const HINT_KEYUTILS_USABLE: &str = "the kernel keyring works (keys last until reboot; unused \
     persistent keyrings expire after a few days)";
const HINT_KEYUTILS_MISSING: &str = "the kernel keyring refused a test key: check kernel keys \
     support, the user key quota (/proc/key-users) and container seccomp rules for keyctl";

/// What a person must know when the key is in the kernel keyring: said by `doctor`, `status`
/// and `enable` (one sentence, so the three say the same).
pub const KEYUTILS_DURABILITY_WARNING: &str = "the kernel keyring keeps keys in memory only: they \
     do not survive a reboot, and after one this history becomes unreadable; on a desktop, an \
     unlocked Secret Service is the durable choice (--key-store secret-service)";

/// Whether a session bus address is known at all (diagnosis only: picks the hint).
fn session_bus_configured() -> bool {
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
        return true;
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(|dir| std::path::Path::new(&dir).join("bus").exists())
        .unwrap_or(false)
}

impl KeyStoreReport {
    /// The fixed category of the failure, `None` when usable (derived from `error`).
    pub fn category(&self) -> Option<HealthCategory> {
        self.error.as_ref().map(KeyError::category)
    }
}

/// Probes the Secret Service within [`SECRET_SERVICE_PROBE_TIMEOUT_MS`]. Never prompts, never
/// writes.
pub fn probe_secret_service() -> KeyStoreReport {
    let kind = KeyStoreKind::SecretService;
    match secret_service::probe(SECRET_SERVICE_PROBE_TIMEOUT_MS) {
        SecretServiceState::Unlocked => KeyStoreReport {
            kind,
            state: StoreState::Usable,
            hint: HINT_SS_USABLE,
            error: None,
        },
        SecretServiceState::Locked(error) => KeyStoreReport {
            kind,
            state: StoreState::Locked,
            hint: HINT_SS_LOCKED,
            error: Some(error),
        },
        SecretServiceState::Unreachable(error) => KeyStoreReport {
            kind,
            state: StoreState::Missing,
            hint: if session_bus_configured() {
                HINT_SS_NO_PROVIDER
            } else {
                HINT_SS_NO_BUS
            },
            error: Some(error),
        },
    }
}

/// Probes the kernel keyring: establishes annal's session keyring, writes, reads back and
/// removes a throw-away key.
pub fn probe_keyutils() -> KeyStoreReport {
    let kind = KeyStoreKind::Keyutils;
    match keyutils::probe() {
        Ok(()) => KeyStoreReport {
            kind,
            state: StoreState::Usable,
            hint: HINT_KEYUTILS_USABLE,
            error: None,
        },
        Err(error) => KeyStoreReport {
            kind,
            state: StoreState::Missing,
            hint: HINT_KEYUTILS_MISSING,
            error: Some(error),
        },
    }
}

/// Probes every store, in the `auto` order.
pub fn probe_all() -> Vec<KeyStoreReport> {
    vec![probe_secret_service(), probe_keyutils()]
}

/// Which store `choice` selects, given the probe reports (`probe_all` order). `None` when the
/// choice names no usable store. Explicit choices are honoured only when that store is usable.
pub fn chosen_store(choice: KeyStoreChoice, reports: &[KeyStoreReport]) -> Option<KeyStoreKind> {
    let usable = |kind: KeyStoreKind| {
        reports
            .iter()
            .any(|r| r.kind == kind && r.state == StoreState::Usable)
    };
    match choice {
        KeyStoreChoice::SecretService => {
            usable(KeyStoreKind::SecretService).then_some(KeyStoreKind::SecretService)
        }
        KeyStoreChoice::Keyutils => {
            usable(KeyStoreKind::Keyutils).then_some(KeyStoreKind::Keyutils)
        }
        KeyStoreChoice::Auto => [KeyStoreKind::SecretService, KeyStoreKind::Keyutils]
            .into_iter()
            .find(|kind| usable(*kind)),
    }
}

/// Opens the provider `choice` selects. `auto` probes the Secret Service (bounded) and falls
/// back to the kernel keyring only when it is not usable; an explicit choice opens exactly that
/// store (a locked Secret Service then reports `key_locked` on use). Returns the provider; its
/// [`KeyProvider::kind`] is the choice to report.
pub fn open_provider(
    choice: KeyStoreChoice,
    naming: CredentialNaming,
    entropy: Box<dyn Entropy + Send>,
) -> Result<Box<dyn KeyProvider>, KeyError> {
    match choice {
        KeyStoreChoice::SecretService => {
            Ok(Box::new(SecretServiceProvider::open(naming, entropy)?))
        }
        KeyStoreChoice::Keyutils => Ok(Box::new(KeyutilsProvider::open(naming, entropy)?)),
        KeyStoreChoice::Auto => {
            if probe_secret_service().state == StoreState::Usable {
                Ok(Box::new(SecretServiceProvider::open(naming, entropy)?))
            } else {
                Ok(Box::new(KeyutilsProvider::open(naming, entropy)?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(kind: KeyStoreKind, state: StoreState) -> KeyStoreReport {
        KeyStoreReport {
            kind,
            state,
            hint: "",
            error: None,
        }
    }

    #[test]
    fn choice_names_round_trip() {
        for choice in KeyStoreChoice::ALL {
            assert_eq!(choice.as_str().parse::<KeyStoreChoice>(), Ok(choice));
        }
        assert_eq!("file".parse::<KeyStoreChoice>(), Err(UnknownKeyStore));
        assert_eq!(KeyStoreChoice::default(), KeyStoreChoice::Auto);
        for choice in KeyStoreChoice::ALL {
            let json = serde_json::to_string(&choice).unwrap();
            assert_eq!(json, format!("\"{}\"", choice.as_str()));
        }
    }

    #[test]
    fn auto_prefers_an_unlocked_secret_service() {
        use KeyStoreKind::{Keyutils, SecretService};
        let both = [
            report(SecretService, StoreState::Usable),
            report(Keyutils, StoreState::Usable),
        ];
        assert_eq!(
            chosen_store(KeyStoreChoice::Auto, &both),
            Some(SecretService)
        );
        let locked = [
            report(SecretService, StoreState::Locked),
            report(Keyutils, StoreState::Usable),
        ];
        assert_eq!(chosen_store(KeyStoreChoice::Auto, &locked), Some(Keyutils));
        assert_eq!(chosen_store(KeyStoreChoice::SecretService, &locked), None);
        let none = [
            report(SecretService, StoreState::Missing),
            report(Keyutils, StoreState::Missing),
        ];
        assert_eq!(chosen_store(KeyStoreChoice::Auto, &none), None);
    }
}
