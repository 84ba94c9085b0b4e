//! The Linux kernel key retention service (keyutils) provider.
//!
//! The store (`linux-keyutils-keyring-store`) adds each key to the process's session keyring and
//! links it into the user's persistent keyring. That works only when the process has a session
//! keyring of its own: a process that inherited the shared user-session keyring gets
//! `AccessDenied` on write and a half-linked key. So annal establishes its own session keyring
//! first ([`establish_session_keyring`]): call it once at start-up, before any thread is
//! spawned (a session keyring belongs to the thread that joins it and to the threads it spawns
//! afterwards), or run annal under `keyctl session - annal ...`. If the process already has a
//! session keyring, the call keeps it.
//!
//! Keys live in kernel memory: they survive the process, not a reboot, and the persistent
//! keyring expires after a few days without use (`/proc/sys/kernel/keys/persistent_keyring_expiry`).
//!
//! Credential description: `keyring:<account>@<service>` (the store's default), for example
//! `keyring:work.history.v1@annal.history.v1.work`.

use std::collections::BTreeSet;
use std::io::Read;
use std::sync::Arc;

use linux_keyutils::{KeyRing, KeyRingIdentifier};

use super::error::{ErrorSource, KeyError};
use super::names::{CredentialName, CredentialNaming};
use super::provider::{KeyStoreKind, KeyringProvider, Lister, MAX_REFERENCES_PER_NAMESPACE};
use crate::entropy::Entropy;

/// Where the kernel lists the keys this process may view.
const PROC_KEYS_PATH: &str = "/proc/keys";

/// Most bytes of `/proc/keys` read while listing a namespace (about 100 bytes a line, so room for
/// tens of thousands of keys).
const PROC_KEYS_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// The description prefix the keyutils store uses by default.
const DESCRIPTION_PREFIX: &str = "keyring:";

/// The separator between account and service in a keyutils description.
const DESCRIPTION_DIVIDER: char = '@';

/// Description prefix of the throw-away key the probe writes and removes. Each probe's key is
/// its own (`<prefix>:<pid>:<n>`): threads and processes share a session keyring, and adding a
/// key under a description already there replaces it, so with one fixed name a probe could
/// read, or invalidate, another's key and report the keyring missing.
const PROBE_DESCRIPTION: &str = "annal:probe";

/// Probes made by this process (part of each probe key's description).
static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Makes sure this process (more exactly: this thread and the threads it spawns from now on) has
/// a session keyring of its own, creating an anonymous one if it has none. Call once at
/// start-up, before spawning threads. Idempotent.
pub fn establish_session_keyring() -> Result<(), KeyError> {
    KeyRing::from_special_id(KeyRingIdentifier::Session, true)
        .map(|_| ())
        .map_err(|e| KeyError::StoreUnavailable {
            detail: format!("cannot establish a session keyring: {e:?}"),
        })
}

/// A provider over the kernel keyring.
#[derive(Debug)]
pub struct KeyutilsProvider {
    /// The shared keyring-backed implementation.
    inner: KeyringProvider,
}

impl KeyutilsProvider {
    /// Opens the kernel keyring, establishing a session keyring first (see the module docs).
    pub fn open(
        naming: CredentialNaming,
        entropy: Box<dyn Entropy + Send>,
    ) -> Result<Self, KeyError> {
        establish_session_keyring()?;
        let store = linux_keyutils_keyring_store::Store::new()
            .map_err(|e| super::error::from_keyring(e, ErrorSource::Keyutils))?;
        let store: Arc<keyring_core::CredentialStore> = store;
        Ok(Self {
            inner: KeyringProvider::new(
                store,
                KeyStoreKind::Keyutils,
                naming,
                Lister::Keyutils,
                ErrorSource::Keyutils,
                entropy,
            ),
        })
    }
}

super::provider_delegate!(KeyutilsProvider);

/// Lists the accounts under `service`: candidates come from `/proc/keys` (every key this
/// process may view, including keys of other sessions), and each is confirmed through the
/// store, so only keys this process can actually reach are reported.
pub(crate) fn accounts(
    provider: &KeyringProvider,
    service: &str,
) -> Result<BTreeSet<String>, KeyError> {
    let mut text = String::new();
    std::fs::File::open(PROC_KEYS_PATH)
        .and_then(|f| f.take(PROC_KEYS_MAX_BYTES).read_to_string(&mut text))
        .map_err(|e| KeyError::StoreUnavailable {
            detail: format!("cannot read the kernel key list: {e}"),
        })?;
    let mut out = BTreeSet::new();
    for account in candidate_accounts(&text, service) {
        let name = CredentialName {
            service: service.to_owned(),
            account: account.clone(),
        };
        if provider.exists(&name)? {
            out.insert(account);
        }
        if out.len() > MAX_REFERENCES_PER_NAMESPACE {
            break;
        }
    }
    Ok(out)
}

/// Parses `/proc/keys` for user keys described `keyring:<account>@<service>`.
fn candidate_accounts(proc_keys: &str, service: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in proc_keys.lines() {
        // id flags usage timeout perm uid gid type description: summary
        let mut fields = line.split_whitespace();
        let Some(kind) = fields.nth(7) else { continue };
        if kind != "user" {
            continue;
        }
        let Some(description) = fields.next().and_then(|d| d.strip_suffix(':')) else {
            continue;
        };
        let Some(rest) = description.strip_prefix(DESCRIPTION_PREFIX) else {
            continue;
        };
        let Some((account, found_service)) = rest.split_once(DESCRIPTION_DIVIDER) else {
            continue;
        };
        if found_service == service {
            out.insert(account.to_owned());
        }
        if out.len() > MAX_REFERENCES_PER_NAMESPACE {
            break;
        }
    }
    out
}

/// Checks that the kernel keyring is usable: establishes the session keyring, writes a probe
/// key into it, reads it back and invalidates it. Leaves nothing behind.
pub(crate) fn probe() -> Result<(), KeyError> {
    establish_session_keyring()?;
    let unavailable = |what: &str, e: linux_keyutils::KeyError| KeyError::StoreUnavailable {
        detail: format!("keyutils probe: {what}: {e:?}"),
    };
    let session = KeyRing::from_special_id(KeyRingIdentifier::Session, false)
        .map_err(|e| unavailable("session keyring", e))?;
    let description = format!(
        "{PROBE_DESCRIPTION}:{}:{}",
        std::process::id(),
        PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let key = session
        .add_key(&description, b"probe")
        .map_err(|e| unavailable("add", e))?;
    let read = key.read_to_vec();
    let removed = key.invalidate();
    let read = read.map_err(|e| unavailable("read", e))?;
    removed.map_err(|e| unavailable("invalidate", e))?;
    if read != b"probe" {
        return Err(KeyError::StoreUnavailable {
            detail: "keyutils probe read back other bytes".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes made at once by many threads (as concurrent tests, or an MCP bridge and the CLI,
    /// do) all find the keyring usable. With one fixed probe key, one probe read or invalidated
    /// another's key and reported the keyring missing (seen in CI under load).
    #[test]
    fn concurrent_probes_never_meet_each_others_key() {
        /// Threads probing at once.
        const THREADS: usize = 8;
        /// Probes per thread.
        const ROUNDS: usize = 50;
        if let Err(error) = probe() {
            let required = std::env::var("ANNAL_REQUIRE_REAL_KEY_STORES").as_deref() == Ok("1");
            assert!(!required, "the kernel keyring is required here: {error:?}");
            eprintln!("concurrent_probes_never_meet_each_others_key: NOT RUN: {error:?}");
            return;
        }
        let failures: usize = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|_| scope.spawn(|| (0..ROUNDS).filter(|_| probe().is_err()).count()))
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or(ROUNDS))
                .sum()
        });
        assert_eq!(
            failures,
            0,
            "{failures} of {} probes failed",
            THREADS * ROUNDS
        );
    }

    #[test]
    fn proc_keys_parsing_finds_exact_service() {
        let text = "\
01d6011a I------     1 perm 0f0b0000     0     0 keyring   .blacklist: empty
2f3f0001 I--Q---     1 perm 3f010000     0     0 user      keyring:a.history.v1@annal.history.v1.a: 32
2f3f0002 I--Q---     1 perm 3f010000     0     0 user      keyring:a.e2@annal.history.v1.a: 32
2f3f0003 I--Q---     1 perm 3f010000     0     0 user      keyring:b.history.v1@annal.history.v1.ab: 32
2f3f0004 I--Q---     1 perm 3f010000     0     0 user      other:thing: 5
2f3f0005 I--Q---     1 perm 3f010000     0     0 keyring   keyring:x@annal.history.v1.a: 1
";
        let found = candidate_accounts(text, "annal.history.v1.a");
        let want: BTreeSet<String> = ["a.e2", "a.history.v1"].map(String::from).into();
        assert_eq!(found, want);
    }
}
