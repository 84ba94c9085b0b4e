//! Protocol tests over the in-memory provider, with `keyring_core::mock` error injection.

use crate::keys::ChunkKeys;
use annal_schema::HealthCategory;

use super::*;
use crate::entropy::SeededEntropy;

fn provider() -> InMemoryProvider {
    InMemoryProvider::new(Box::new(SeededEntropy::new(42))).unwrap()
}

fn ns(name: &str) -> Namespace {
    Namespace::new(name).unwrap()
}

fn platform(text: &str) -> keyring_core::error::PlatformError {
    Box::new(std::io::Error::other(text.to_owned()))
}

/// A fingerprint of a custody's key that does not expose it: a derived session id.
fn fingerprint(custody: &KeyCustody) -> String {
    custody
        .session_id_key()
        .session_id("fingerprint")
        .to_string()
}

#[test]
fn create_then_load_returns_the_same_key() {
    let p = provider();
    let a = ns("work");
    let first = p.create_or_load(&a).unwrap();
    assert!(first.was_created());
    assert_eq!(
        first.reference().as_str(),
        "com.trycua.work.computer-history.v1"
    );
    let first = KeyCustody::from_loaded(a.clone(), first);
    let again = KeyCustody::open(&p, &a).unwrap();
    let loaded = KeyCustody::load(&p, &a, &a.primary_reference()).unwrap();
    assert_eq!(fingerprint(&first), fingerprint(&again));
    assert_eq!(fingerprint(&first), fingerprint(&loaded));
    assert_eq!(p.references(&a).unwrap(), vec![a.primary_reference()]);
    assert_eq!(p.stored_credentials(), 1);
}

#[test]
fn new_keys_come_from_the_injected_entropy() {
    let a = ns("work");
    let one = KeyCustody::open(&provider(), &a).unwrap();
    let two = KeyCustody::open(&provider(), &a).unwrap();
    assert_eq!(fingerprint(&one), fingerprint(&two));
    let other = InMemoryProvider::new(Box::new(SeededEntropy::new(43))).unwrap();
    let three = KeyCustody::open(&other, &a).unwrap();
    assert_ne!(fingerprint(&one), fingerprint(&three));
}

#[test]
fn read_paths_never_create_a_key() {
    let p = provider();
    let a = ns("empty");
    let error = p.load(&a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    let error = KeyCustody::load(&p, &a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    assert!(p.references(&a).unwrap().is_empty());
    assert_eq!(p.stored_credentials(), 0);
}

#[test]
fn locked_store_is_key_locked_and_creates_nothing() {
    let p = provider();
    let a = ns("work");
    p.inject_error(
        &a,
        &a.primary_reference(),
        keyring_core::Error::NoStorageAccess(platform("collection is locked")),
    )
    .unwrap();
    let error = p.create_or_load(&a).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyLocked);
    assert_eq!(p.stored_credentials(), 0);
}

#[test]
fn unreachable_store_is_key_unavailable() {
    let p = provider();
    let a = ns("work");
    p.inject_error(
        &a,
        &a.primary_reference(),
        keyring_core::Error::PlatformFailure(platform("org.freedesktop.DBus.Error.ServiceUnknown")),
    )
    .unwrap();
    let error = p.create_or_load(&a).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    assert!(!error.to_string().contains("DBus"));
}

#[test]
fn no_entry_on_load_is_key_unavailable() {
    let p = provider();
    let a = ns("work");
    p.create_or_load(&a).unwrap();
    p.inject_error(&a, &a.primary_reference(), keyring_core::Error::NoEntry)
        .unwrap();
    let error = p.load(&a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    // The fault was one-shot and the key is intact.
    assert!(p.load(&a, &a.primary_reference()).is_ok());
}

#[test]
fn bad_encoding_is_key_corrupt() {
    let p = provider();
    let a = ns("work");
    p.create_or_load(&a).unwrap();
    p.inject_error(
        &a,
        &a.primary_reference(),
        keyring_core::Error::BadEncoding(vec![0xff; 32]),
    )
    .unwrap();
    let error = p.load(&a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyCorrupt);
}

#[test]
fn wrong_length_is_key_corrupt_on_every_path() {
    let p = provider();
    let a = ns("work");
    p.put_raw(&a, &a.primary_reference(), &[7u8; 31]).unwrap();
    let error = p.load(&a, &a.primary_reference()).unwrap_err();
    assert!(matches!(
        error,
        KeyError::WrongLength {
            actual_len_bytes: 31
        }
    ));
    assert_eq!(error.category(), HealthCategory::KeyCorrupt);
    // create_or_load must not overwrite a corrupt key with a fresh one.
    let error = p.create_or_load(&a).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyCorrupt);
    p.put_raw(&a, &a.primary_reference(), &[7u8; 33]).unwrap();
    assert_eq!(
        p.load(&a, &a.primary_reference()).unwrap_err().category(),
        HealthCategory::KeyCorrupt
    );
}

#[test]
fn read_back_mismatch_is_key_corrupt() {
    let p = provider();
    let a = ns("work");
    p.tamper_next_write();
    let error = p.create_or_load(&a).unwrap_err();
    assert!(matches!(error, KeyError::ReadBackMismatch));
    assert_eq!(error.category(), HealthCategory::KeyCorrupt);
}

#[test]
fn rejected_request_on_create_path_creates_nothing() {
    let p = provider();
    let a = ns("work");
    p.create_or_load(&a).unwrap();
    let b = ns("other");
    p.inject_error(
        &b,
        &b.primary_reference(),
        keyring_core::Error::Invalid("service".into(), "rejected".into()),
    )
    .unwrap();
    let error = p.create_or_load(&b).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyUnavailable);
    assert!(p.references(&b).unwrap().is_empty());
    assert_eq!(p.stored_credentials(), 1);
}

#[test]
fn two_namespaces_destroying_one_leaves_the_other() {
    let p = provider();
    let a = ns("alpha");
    let b = ns("beta");
    let ka = KeyCustody::open(&p, &a).unwrap();
    let kb = KeyCustody::open(&p, &b).unwrap();
    // The same reference text in two namespaces names two credentials.
    let shared = KeyReference::new("shared.v2").unwrap();
    p.put_raw(&a, &shared, &[1u8; 32]).unwrap();
    p.put_raw(&b, &shared, &[2u8; 32]).unwrap();
    assert_ne!(fingerprint(&ka), fingerprint(&kb));

    let proof = destroy_namespace(&p, &a).unwrap();
    assert_eq!(proof.namespace(), &a);
    assert_eq!(proof.destroyed().len(), 2);
    assert!(p.references(&a).unwrap().is_empty());
    assert_eq!(
        p.load(&a, &a.primary_reference()).unwrap_err().category(),
        HealthCategory::KeyUnavailable
    );

    let kb_again = KeyCustody::load(&p, &b, &b.primary_reference()).unwrap();
    assert_eq!(fingerprint(&kb), fingerprint(&kb_again));
    assert_eq!(
        p.references(&b).unwrap(),
        vec![b.primary_reference(), shared.clone()]
    );
    assert!(p.load(&b, &shared).is_ok());
}

#[test]
fn destroy_that_does_not_take_is_key_destroy_failed_and_keeps_the_key() {
    let p = provider();
    let a = ns("work");
    let before = KeyCustody::open(&p, &a).unwrap();
    // The store claims the credential is already gone, but it is still there.
    p.inject_error(&a, &a.primary_reference(), keyring_core::Error::NoEntry)
        .unwrap();
    let error = destroy_namespace(&p, &a).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyDestroyFailed);
    let after = KeyCustody::load(&p, &a, &a.primary_reference()).unwrap();
    assert_eq!(fingerprint(&before), fingerprint(&after));
}

#[test]
fn destroy_error_is_key_destroy_failed() {
    let p = provider();
    let a = ns("work");
    p.create_or_load(&a).unwrap();
    p.inject_error(
        &a,
        &a.primary_reference(),
        keyring_core::Error::NoStorageAccess(platform("locked")),
    )
    .unwrap();
    let error = p.destroy(&a, &a.primary_reference()).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyDestroyFailed);
    assert!(p.load(&a, &a.primary_reference()).is_ok());
}

#[test]
fn listing_failure_during_destroy_is_key_destroy_failed() {
    let p = provider();
    let a = ns("work");
    p.create_or_load(&a).unwrap();
    p.inject_error(
        &a,
        &a.primary_reference(),
        keyring_core::Error::PlatformFailure(platform("bus went away")),
    )
    .unwrap();
    let error = destroy_namespace(&p, &a).unwrap_err();
    assert_eq!(error.category(), HealthCategory::KeyDestroyFailed);
    assert_eq!(p.stored_credentials(), 1);
}

#[test]
fn destroying_an_absent_reference_is_verified_absent() {
    let p = provider();
    let a = ns("work");
    let proof = p.destroy(&a, &a.primary_reference()).unwrap();
    assert_eq!(proof.reference(), &a.primary_reference());
    let proof = destroy_namespace(&p, &a).unwrap();
    assert!(proof.destroyed().is_empty());
}

#[test]
fn reference_naming_reads_but_never_writes() {
    let p = InMemoryProvider::with_naming(
        CredentialNaming::CuaReference,
        Box::new(SeededEntropy::new(1)),
    )
    .unwrap();
    let a = ns("fixture");
    // Nothing there: create_or_load must not create under the reference's naming.
    assert_eq!(
        p.create_or_load(&a).unwrap_err().category(),
        HealthCategory::KeyUnavailable
    );
    assert_eq!(p.stored_credentials(), 0);
    let root: Vec<u8> = (0u8..32).collect();
    p.put_raw(&a, &a.primary_reference(), &root).unwrap();
    let custody = KeyCustody::load(&p, &a, &a.primary_reference()).unwrap();
    // The fixture's documented session id proves the bytes went through unchanged.
    assert_eq!(
        custody
            .session_id_key()
            .session_id("fixture-session-1")
            .as_str(),
        "b11ddce8dbd1872c9250e3f67dad2d9d"
    );
    assert_eq!(p.references(&a).unwrap(), vec![a.primary_reference()]);
    let other = KeyReference::new("other.v1").unwrap();
    assert_eq!(
        p.load(&a, &other).unwrap_err().category(),
        HealthCategory::KeyUnavailable
    );
    assert_eq!(
        destroy_namespace(&p, &a).unwrap_err().category(),
        HealthCategory::KeyDestroyFailed
    );
    assert!(p.load(&a, &a.primary_reference()).is_ok());
}

#[test]
fn custody_hands_out_the_material_derivations() {
    let p = InMemoryProvider::new(Box::new(SeededEntropy::new(9))).unwrap();
    let a = ns("work");
    let root: Vec<u8> = (0u8..32).collect();
    p.put_raw(&a, &a.primary_reference(), &root).unwrap();
    let custody = KeyCustody::open(&p, &a).unwrap();
    let reference = RootKey::from_slice(&root).unwrap();
    let chunk_id = [3u8; 16];
    assert_eq!(
        custody
            .history_keys()
            .chunk_key(&chunk_id, "s", 1)
            .as_bytes(),
        reference.chunk_key(&chunk_id, "s", 1).as_bytes()
    );
    assert_eq!(
        custody.seal_key().as_bytes(),
        reference.seal_key().as_bytes()
    );
    assert_eq!(
        custody.index_key().as_bytes(),
        reference.index_key().as_bytes()
    );
    assert_eq!(
        custody
            .journal_keys()
            .chunk_key(&chunk_id, "s", 1)
            .as_bytes(),
        JournalKeys::from_namespace_root(&reference)
            .chunk_key(&chunk_id, "s", 1)
            .as_bytes()
    );
    // The two streams' keys are distinct types and never coincide for the same chunk.
    assert_ne!(
        custody
            .journal_keys()
            .chunk_key(&chunk_id, "s", 1)
            .as_bytes(),
        custody
            .history_keys()
            .chunk_key(&chunk_id, "s", 1)
            .as_bytes()
    );
    assert_eq!(
        format!("{:?}", custody.history_keys()),
        "HistoryKeys(<redacted>)"
    );
    assert_eq!(
        format!("{:?}", custody.journal_keys()),
        "JournalKeys(<redacted>)"
    );
    let shown = format!("{custody:?}");
    assert!(shown.contains("redacted"), "{shown}");
    assert!(!shown.contains("[0, 1, 2"), "{shown}");
}

/// Entropy that takes its time, so racing first uses overlap.
struct SlowEntropy(SeededEntropy);

impl crate::entropy::Entropy for SlowEntropy {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), crate::entropy::EntropyError> {
        std::thread::sleep(std::time::Duration::from_millis(20));
        self.0.fill(buf)
    }
}

#[test]
fn concurrent_first_use_yields_one_key() {
    let p = std::sync::Arc::new(
        InMemoryProvider::new(Box::new(SlowEntropy(SeededEntropy::new(5)))).unwrap(),
    );
    let a = ns("work");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let p = p.clone();
            let a = a.clone();
            std::thread::spawn(move || fingerprint(&KeyCustody::open(p.as_ref(), &a).unwrap()))
        })
        .collect();
    let prints: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(prints.windows(2).all(|w| w[0] == w[1]), "{prints:?}");
    assert_eq!(p.stored_credentials(), 1);
}

#[test]
fn destroying_a_namespace_removes_its_checkpoint_and_leaves_the_others() {
    let p = provider();
    let (a, b) = (ns("alpha"), ns("beta"));
    KeyCustody::open(&p, &a).unwrap();
    KeyCustody::open(&p, &b).unwrap();
    p.store_checkpoint(&a, None, b"checkpoint a").unwrap();
    p.store_checkpoint(&b, None, b"checkpoint b").unwrap();
    assert_eq!(p.stored_credentials(), 4);
    // The checkpoint is not a key: it is never listed or destroyed as one.
    assert_eq!(p.references(&a).unwrap(), vec![a.primary_reference()]);

    let proof = destroy_namespace(&p, &a).unwrap();
    assert_eq!(proof.destroyed(), [a.primary_reference()]);
    assert_eq!(p.load_checkpoint(&a, None).unwrap(), None);
    assert_eq!(p.stored_credentials(), 2);
    assert_eq!(
        p.load_checkpoint(&b, None).unwrap().as_deref(),
        Some(&b"checkpoint b"[..])
    );
    assert!(KeyCustody::load(&p, &b, &b.primary_reference()).is_ok());
}

#[test]
fn a_checkpoint_that_does_not_go_away_is_key_destroy_failed() {
    let p = provider();
    let a = ns("work");
    KeyCustody::open(&p, &a).unwrap();
    p.store_checkpoint(&a, None, b"held").unwrap();
    // The store claims the checkpoint is already gone, but it is still there. (Injected on
    // `destroy_checkpoint` itself: within `destroy_namespace` the listing's read of the same
    // credential would take the one-shot fault first.)
    p.inject_checkpoint_error(&a, None, keyring_core::Error::NoEntry)
        .unwrap();
    let error = p.destroy_checkpoint(&a, None).unwrap_err();
    assert!(
        matches!(error, KeyError::DestroyNotVerified { .. }),
        "{error:?}"
    );
    assert_eq!(
        p.load_checkpoint(&a, None).unwrap().as_deref(),
        Some(&b"held"[..])
    );
    // A delete error is key_destroy_failed too; retried, the delete completes.
    p.inject_checkpoint_error(
        &a,
        None,
        keyring_core::Error::NoStorageAccess(platform("locked")),
    )
    .unwrap();
    assert_eq!(
        p.destroy_checkpoint(&a, None).unwrap_err().category(),
        HealthCategory::KeyDestroyFailed
    );
    destroy_namespace(&p, &a).unwrap();
    assert_eq!(p.stored_credentials(), 0);
}

#[test]
fn the_checkpoint_credential_reads_back_what_was_stored() {
    let p = provider();
    let a = ns("work");
    assert_eq!(p.load_checkpoint(&a, None).unwrap(), None);
    p.store_checkpoint(&a, None, &[1, 2, 3]).unwrap();
    p.store_checkpoint(&a, None, &[4, 5]).unwrap();
    assert_eq!(p.load_checkpoint(&a, None).unwrap(), Some(vec![4, 5]));
    assert_eq!(p.stored_credentials(), 1);
    p.inject_checkpoint_error(&a, None, keyring_core::Error::BadEncoding(vec![9; 41]))
        .unwrap();
    assert_eq!(
        p.load_checkpoint(&a, None).unwrap_err().category(),
        HealthCategory::KeyCorrupt
    );
}
