//! Key custody against the REAL credential stores: the Secret Service on the D-Bus session bus
//! and the kernel keyring, plus the locked-collection case.
//!
//! Without those services these tests print why they did not run and pass. With
//! `ANNAL_REQUIRE_REAL_KEY_STORES=1` (set by `.ci/test`) a missing store FAILS the test instead.
//! The locked case runs only with `ANNAL_EXPECT_LOCKED_SECRET_SERVICE=1`, in a D-Bus session
//! whose keyring was never unlocked (`.ci/test` starts one).
//!
//! Every test deletes every key it creates, even when it fails (a drop guard).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{
    CredentialNaming, KeyCustody, KeyProvider, KeyReference, KeyStoreReport, KeyutilsProvider,
    Namespace, SecretServiceProvider, StoreState, destroy_namespace, probe_keyutils,
    probe_secret_service,
};
use annal_engine::seal::{Checkpoint, CheckpointStore, CredentialCheckpoints};
use annal_schema::HealthCategory;
use keyring_core::{CredentialStore, Entry};

/// Set to `1` to make a missing real store a failure instead of a skip.
const REQUIRE_ENV: &str = "ANNAL_REQUIRE_REAL_KEY_STORES";

/// Set to `1` to run the locked-collection case (and fail if the collection is not locked).
const EXPECT_LOCKED_ENV: &str = "ANNAL_EXPECT_LOCKED_SECRET_SERVICE";

/// How long the locked case may take before it counts as a hang, in milliseconds.
const LOCKED_CASE_MAX_MS: u64 = 10_000;

fn env_is_one(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// True when the store is usable. Otherwise prints why the test did not run, or panics when
/// real stores are required.
fn store_is_usable(test: &str, report: &KeyStoreReport) -> bool {
    if report.state == StoreState::Usable {
        return true;
    }
    let why = format!(
        "{test}: NOT RUN: {} is {} ({}; {})",
        report.kind,
        report.state.as_str(),
        report.hint,
        report
            .error
            .as_ref()
            .and_then(|e| e.detail_for_local_log())
            .unwrap_or("no detail"),
    );
    assert!(!env_is_one(REQUIRE_ENV), "{why}, but {REQUIRE_ENV}=1");
    eprintln!("{why}");
    false
}

/// A namespace no other run uses.
fn unique_namespace(tag: &str) -> Namespace {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Namespace::new(&format!("t{}-{nanos}-{tag}", std::process::id())).unwrap()
}

/// Destroys every key of its namespaces when dropped, whatever happened in the test. Also
/// removes the planted extra reference directly, in case listing fails.
struct Cleanup<'a> {
    provider: &'a dyn KeyProvider,
    namespaces: Vec<Namespace>,
    extra: Vec<(Namespace, KeyReference)>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for (namespace, reference) in &self.extra {
            let _ = self.provider.destroy(namespace, reference);
        }
        for namespace in &self.namespaces {
            let _ = self.provider.destroy_checkpoint(namespace, None);
            let _ = self
                .provider
                .destroy(namespace, &namespace.primary_reference());
            if let Ok(references) = self.provider.references(namespace) {
                for reference in references {
                    let _ = self.provider.destroy(namespace, &reference);
                }
            }
        }
    }
}

fn fingerprint(custody: &KeyCustody) -> String {
    custody
        .session_id_key()
        .session_id("fingerprint")
        .to_string()
}

/// The whole lifecycle on one real store. `raw` opens the same store directly, to plant a
/// corrupt value the way another program could.
fn exercise(provider: &dyn KeyProvider, raw: &std::sync::Arc<CredentialStore>, tag: &str) {
    let a = unique_namespace(&format!("{tag}a"));
    let b = unique_namespace(&format!("{tag}b"));
    let corrupt = KeyReference::new("corrupt.e2").unwrap();
    let _cleanup = Cleanup {
        provider,
        namespaces: vec![a.clone(), b.clone()],
        extra: vec![(a.clone(), corrupt.clone())],
    };

    // Read paths on an empty namespace: key_unavailable, nothing created.
    assert!(provider.references(&a).unwrap().is_empty());
    let error = provider.load(&a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    assert!(provider.references(&a).unwrap().is_empty());

    // Create, then load the same key three ways.
    let first = provider.create_or_load(&a).unwrap();
    assert!(first.was_created());
    let first = KeyCustody::from_loaded(a.clone(), first);
    let again = provider.create_or_load(&a).unwrap();
    assert!(!again.was_created());
    let again = KeyCustody::from_loaded(a.clone(), again);
    let loaded = KeyCustody::load(provider, &a, &a.primary_reference()).unwrap();
    assert_eq!(fingerprint(&first), fingerprint(&again));
    assert_eq!(fingerprint(&first), fingerprint(&loaded));

    let kb = KeyCustody::open(provider, &b).unwrap();
    assert_ne!(fingerprint(&first), fingerprint(&kb));

    // A wrong-length value planted by another program: key_corrupt.
    let service = format!("annal.history.v1.{a}");
    Entry::new_in_store(raw, &service, corrupt.as_str())
        .unwrap()
        .set_secret(&[9u8; 16])
        .unwrap();
    let error = provider.load(&a, &corrupt).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyCorrupt);
    assert_eq!(
        provider.references(&a).unwrap(),
        vec![a.primary_reference(), corrupt.clone()]
    );

    // The seal checkpoint beside the keys: stored, read back, moved forward only, and never
    // listed as a key reference.
    let held = |ordinal| Checkpoint {
        ordinal,
        digest: [ordinal as u8; 32],
    };
    let checkpoints = CredentialCheckpoints::new(provider, &a, None);
    assert_eq!(checkpoints.load().unwrap(), None);
    checkpoints.store(&held(1)).unwrap();
    checkpoints.store(&held(4)).unwrap();
    assert!(checkpoints.store(&held(3)).is_err());
    assert_eq!(checkpoints.load().unwrap(), Some(held(4)));
    CredentialCheckpoints::new(provider, &b, None)
        .store(&held(9))
        .unwrap();
    assert_eq!(provider.references(&a).unwrap().len(), 2);

    // Cryptographic delete of a: every reference gone and verified, its checkpoint too; b
    // untouched.
    let proof = destroy_namespace(provider, &a).unwrap();
    assert_eq!(proof.destroyed().len(), 2);
    assert!(provider.references(&a).unwrap().is_empty());
    assert_eq!(checkpoints.load().unwrap(), None);
    assert_eq!(
        CredentialCheckpoints::new(provider, &b, None)
            .load()
            .unwrap(),
        Some(held(9))
    );
    assert_eq!(
        provider
            .load(&a, &a.primary_reference())
            .unwrap_err()
            .category(),
        HealthCategory::KeyUnavailable
    );
    let kb_again = KeyCustody::load(provider, &b, &b.primary_reference()).unwrap();
    assert_eq!(fingerprint(&kb), fingerprint(&kb_again));
    assert_eq!(
        provider.references(&b).unwrap(),
        vec![b.primary_reference()]
    );

    destroy_namespace(provider, &b).unwrap();
    assert!(provider.references(&b).unwrap().is_empty());
    assert_eq!(provider.load_checkpoint(&b, None).unwrap(), None);
}

#[test]
fn real_secret_service_key_lifecycle() {
    if !store_is_usable("real_secret_service_key_lifecycle", &probe_secret_service()) {
        return;
    }
    let provider = SecretServiceProvider::open(CredentialNaming::Annal, Box::new(OsEntropy))
        .expect("the probe said the Secret Service is usable");
    let raw: std::sync::Arc<CredentialStore> =
        zbus_secret_service_keyring_store::Store::new().unwrap();
    exercise(&provider, &raw, "ss");
}

#[test]
fn real_keyutils_key_lifecycle() {
    if !store_is_usable("real_keyutils_key_lifecycle", &probe_keyutils()) {
        return;
    }
    let provider = KeyutilsProvider::open(CredentialNaming::Annal, Box::new(OsEntropy))
        .expect("the probe said the kernel keyring is usable");
    let raw: std::sync::Arc<CredentialStore> = linux_keyutils_keyring_store::Store::new().unwrap();
    exercise(&provider, &raw, "ku");
}

#[test]
fn real_secret_service_reads_a_reference_implementation_credential() {
    if !store_is_usable(
        "real_secret_service_reads_a_reference_implementation_credential",
        &probe_secret_service(),
    ) {
        return;
    }
    let provider =
        SecretServiceProvider::open(CredentialNaming::CuaReference, Box::new(OsEntropy)).unwrap();
    let raw: std::sync::Arc<CredentialStore> =
        zbus_secret_service_keyring_store::Store::new().unwrap();
    let namespace = unique_namespace("cua");
    let service = format!("com.trycua.{namespace}.computer-history.v1");
    let entry = Entry::new_in_store(&raw, &service, "namespace-root-key-v1").unwrap();
    struct Remove(Entry);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = self.0.delete_credential();
        }
    }
    let root: Vec<u8> = (0u8..32).collect();
    entry.set_secret(&root).unwrap();
    let _remove = Remove(entry);
    let custody = KeyCustody::load(&provider, &namespace, &namespace.primary_reference()).unwrap();
    assert_eq!(
        custody
            .session_id_key()
            .session_id("fixture-session-1")
            .as_str(),
        "b11ddce8dbd1872c9250e3f67dad2d9d"
    );
    assert_eq!(
        provider.references(&namespace).unwrap(),
        vec![namespace.primary_reference()]
    );
    // Read-only: never destroyed through annal.
    assert_eq!(
        destroy_namespace(&provider, &namespace)
            .unwrap_err()
            .category(),
        HealthCategory::KeyDestroyFailed
    );
}

#[test]
fn real_secret_service_annal_keeps_the_key_where_the_reference_implementation_reads_it() {
    if !store_is_usable(
        "real_secret_service_annal_keeps_the_key_where_the_reference_implementation_reads_it",
        &probe_secret_service(),
    ) {
        return;
    }
    let provider =
        SecretServiceProvider::open(CredentialNaming::Annal, Box::new(OsEntropy)).unwrap();
    let namespace = unique_namespace("ref");
    let _cleanup = Cleanup {
        provider: &provider,
        namespaces: vec![namespace.clone()],
        extra: Vec::new(),
    };
    let created = provider.create_or_load(&namespace).unwrap();
    assert_eq!(
        created.reference().as_str(),
        format!("com.trycua.{namespace}.computer-history.v1")
    );
    let custody = KeyCustody::from_loaded(namespace.clone(), created);
    // The reference's Linux provider looks the key up by exactly these two attributes (its
    // `keyring` 4.1.6 v1 entry, no target): the same item, the same bytes.
    let raw: std::sync::Arc<CredentialStore> =
        zbus_secret_service_keyring_store::Store::new().unwrap();
    let service = format!("com.trycua.{namespace}.computer-history.v1");
    let entry = Entry::new_in_store(&raw, &service, "namespace-root-key-v1").unwrap();
    let bytes = entry.get_secret().unwrap();
    let root = annal_engine::keys::RootKey::from_slice(&bytes).unwrap();
    assert_eq!(
        root.session_id_key().session_id("fingerprint").to_string(),
        fingerprint(&custody)
    );
    let attributes = entry.get_attributes().unwrap();
    assert_eq!(attributes.get("service"), Some(&service));
    assert_eq!(
        attributes.get("username").map(String::as_str),
        Some("namespace-root-key-v1")
    );
    assert!(!attributes.contains_key("target"), "{attributes:?}");
}

/// Runs in a D-Bus session whose gnome-keyring was never unlocked (`.ci/test`).
#[test]
fn real_secret_service_locked_collection_is_key_locked_quickly() {
    if !env_is_one(EXPECT_LOCKED_ENV) {
        eprintln!(
            "real_secret_service_locked_collection_is_key_locked_quickly: NOT RUN: needs a \
             never-unlocked Secret Service and {EXPECT_LOCKED_ENV}=1 (.ci/test runs it)"
        );
        return;
    }
    let started = Instant::now();
    let report = probe_secret_service();
    assert_eq!(report.state, StoreState::Locked, "{report:?}");
    eprintln!(
        "locked case: probe found {:?}",
        report.error.as_ref().and_then(|e| e.detail_for_local_log())
    );
    assert_eq!(report.category(), Some(HealthCategory::KeyLocked));

    // The store calls run on a helper thread so a hang fails the test instead of stalling CI.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = (|| {
            let provider =
                SecretServiceProvider::open(CredentialNaming::Annal, Box::new(OsEntropy))?;
            let namespace = unique_namespace("locked");
            let created = provider.create_or_load(&namespace).map(|_| ());
            let listed = provider.references(&namespace);
            // Should anything have been created after all, remove it.
            let _ = destroy_namespace(&provider, &namespace);
            Ok::<_, annal_engine::keys::KeyError>((created, listed))
        })();
        let _ = tx.send(outcome);
    });
    let outcome = rx
        .recv_timeout(Duration::from_millis(LOCKED_CASE_MAX_MS))
        .expect("a locked Secret Service must answer quickly, not hang");
    let (created, listed) = outcome.expect("connecting to a locked Secret Service works");
    let error = created.expect_err("a locked collection must refuse to create a key");
    assert_eq!(error.category(), HealthCategory::KeyLocked, "{error:?}");
    // Nothing was created: the namespace lists empty (or the listing itself is locked).
    match listed {
        Ok(references) => assert!(references.is_empty()),
        Err(error) => assert_eq!(error.category(), HealthCategory::KeyLocked),
    }
    assert!(started.elapsed() < Duration::from_millis(LOCKED_CASE_MAX_MS));
}

/// `auto` picks an unlocked Secret Service, otherwise the kernel keyring; in `.ci/test`'s main
/// run that is the Secret Service, and `keyutils` still opens the kernel keyring on request.
#[test]
fn real_auto_selection_matches_the_probes() {
    use annal_engine::keys::{KeyStoreChoice, KeyStoreKind, chosen_store, open_provider};
    let reports = vec![probe_secret_service(), probe_keyutils()];
    let Some(expected) = chosen_store(KeyStoreChoice::Auto, &reports) else {
        assert!(
            !env_is_one(REQUIRE_ENV),
            "no usable store, but {REQUIRE_ENV}=1"
        );
        eprintln!("real_auto_selection_matches_the_probes: NOT RUN: no usable store");
        return;
    };
    if env_is_one(REQUIRE_ENV) && !env_is_one(EXPECT_LOCKED_ENV) {
        assert_eq!(expected, KeyStoreKind::SecretService);
    }
    let provider = open_provider(
        KeyStoreChoice::Auto,
        CredentialNaming::Annal,
        Box::new(OsEntropy),
    )
    .unwrap();
    assert_eq!(provider.kind(), expected);
    if chosen_store(KeyStoreChoice::Keyutils, &reports).is_some() {
        let provider = open_provider(
            KeyStoreChoice::Keyutils,
            CredentialNaming::Annal,
            Box::new(OsEntropy),
        )
        .unwrap();
        assert_eq!(provider.kind(), KeyStoreKind::Keyutils);
    }
}
