//! The freedesktop Secret Service provider (gnome-keyring, KeePassXC, KWallet's bridge).
//!
//! Items are created in the default collection (the login keyring) with the attributes
//! `service` and `username` (see [`CredentialNaming`]) and the label
//! `keyring:<account>@<service>`. The store crate is built with `crypto-rust` and no async
//! runtime feature: its D-Bus connection runs on its own executor thread, so it neither needs nor
//! disturbs tokio. Its calls still block; never make them on an async worker.
//!
//! Connecting and probing run on a helper thread bounded by [`SECRET_SERVICE_PROBE_TIMEOUT_MS`],
//! so a hung bus cannot hang annal. Operations on an opened store are not bounded: a desktop
//! Secret Service may legitimately wait for a person to answer an unlock prompt. Without a
//! prompter (headless), a locked collection fails at once with `key_locked`.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use secret_service::EncryptionType;
use secret_service::blocking::SecretService;

use super::error::{ErrorSource, KeyError, from_keyring};
use super::names::CredentialNaming;
use super::provider::{KeyStoreKind, KeyringProvider, Lister};
use crate::entropy::Entropy;

/// How long annal waits for the Secret Service to connect and answer a probe before treating it
/// as unavailable, in milliseconds. A local D-Bus round trip takes well under 10 ms; 1.5 s
/// allows for D-Bus activation of a provider that is not yet running without making
/// `--key-store auto` slow when there is none.
pub const SECRET_SERVICE_PROBE_TIMEOUT_MS: u64 = 1_500;

/// What a Secret Service probe found.
#[derive(Debug)]
pub(crate) enum SecretServiceState {
    /// Connected, and the default collection is unlocked.
    Unlocked,
    /// Connected, but the default collection is locked or does not exist yet.
    Locked(KeyError),
    /// No session bus, no provider, or no answer in time.
    Unreachable(KeyError),
}

/// Runs `work` on a helper thread and waits at most `timeout_ms` for it. On timeout the helper
/// thread is left to finish (or hang) on its own; its result is discarded.
fn bounded<T: Send + 'static>(
    timeout_ms: u64,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, KeyError> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("annal-secret-service-probe".to_owned())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| KeyError::StoreUnavailable {
            detail: format!("cannot start the probe thread: {e}"),
        })?;
    rx.recv_timeout(Duration::from_millis(timeout_ms))
        .map_err(|_| KeyError::StoreTimedOut { timeout_ms })
}

/// Connects and checks the default collection, within `timeout_ms`. Never prompts, never
/// writes.
pub(crate) fn probe(timeout_ms: u64) -> SecretServiceState {
    let outcome = bounded(timeout_ms, || {
        let ss = match SecretService::connect(EncryptionType::Dh) {
            Ok(ss) => ss,
            Err(e) => {
                return SecretServiceState::Unreachable(KeyError::StoreUnavailable {
                    detail: format!("connect: {e}"),
                });
            }
        };
        match ss.get_default_collection() {
            Ok(collection) => match collection.is_locked() {
                Ok(false) => SecretServiceState::Unlocked,
                Ok(true) => SecretServiceState::Locked(KeyError::Locked {
                    detail: "the default collection is locked".to_owned(),
                }),
                Err(e) => SecretServiceState::Locked(KeyError::Locked {
                    detail: format!("default collection lock state: {e}"),
                }),
            },
            Err(secret_service::Error::NoResult) => SecretServiceState::Locked(KeyError::Locked {
                detail: "there is no default collection (login keyring never created)".to_owned(),
            }),
            Err(e) => SecretServiceState::Locked(KeyError::Locked {
                detail: format!("default collection: {e}"),
            }),
        }
    });
    match outcome {
        Ok(state) => state,
        Err(timeout) => SecretServiceState::Unreachable(timeout),
    }
}

/// A provider over the Secret Service.
#[derive(Debug)]
pub struct SecretServiceProvider {
    /// The shared keyring-backed implementation.
    inner: KeyringProvider,
}

impl SecretServiceProvider {
    /// Connects to the Secret Service on the session bus, within
    /// [`SECRET_SERVICE_PROBE_TIMEOUT_MS`]. Connecting does not check the lock state; use the
    /// selection probe for that.
    pub fn open(
        naming: CredentialNaming,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Self, KeyError> {
        let store = bounded(SECRET_SERVICE_PROBE_TIMEOUT_MS, || {
            zbus_secret_service_keyring_store::Store::new()
        })?
        .map_err(|e| from_keyring(e, ErrorSource::SecretServiceLike))?;
        let store: Arc<keyring_core::CredentialStore> = store;
        Ok(Self {
            inner: KeyringProvider::new(
                store,
                KeyStoreKind::SecretService,
                naming,
                Lister::SecretService,
                ErrorSource::SecretServiceLike,
                entropy,
            ),
        })
    }
}

super::provider_delegate!(SecretServiceProvider);
