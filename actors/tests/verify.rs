//! `annal verify`, run as the built binary against a store the engine wrote and against the
//! reference fixture, clean and after deliberate damage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::SeededEntropy;
use annal_engine::keys::{InMemoryProvider, KeyProvider, Namespace};
use annal_engine::storage::StoreLayout;
use annal_schema::Capability;

const ROOT: [u8; 32] = [0x5c; 32];

fn key_file(dir: &Path, root: &[u8; 32]) -> std::path::PathBuf {
    let path = dir.join("key.hex");
    let hex: String = root.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, hex).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn verify(dir: &Path, key: &Path) -> (Option<i32>, serde_json::Value) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .arg("verify")
        .arg(dir)
        .arg("--key-hex-file")
        .arg(key)
        .arg("--json")
        .output()
        .unwrap();
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), value)
}

/// A store the engine wrote, with at least one sealed (closed) chunk.
fn engine_store(dir: &Path) -> std::path::PathBuf {
    let ns_dir = dir.join("work");
    let namespace = Namespace::new("work").unwrap();
    let provider = Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(1))).unwrap());
    provider
        .put_raw(&namespace, &namespace.primary_reference(), &ROOT)
        .unwrap();
    let engine = Engine::start(
        EngineConfig::new(StoreLayout::in_namespace_dir(&ns_dir), namespace),
        provider as Arc<dyn KeyProvider>,
    )
    .unwrap();
    engine.enable().unwrap();
    let capture = engine.capture();
    for _ in 0..7_000 {
        while engine.queued_events() > 256 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
    }
    engine.flush().unwrap();
    engine.shutdown();
    ns_dir
}

fn findings(value: &serde_json::Value) -> Vec<String> {
    value["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["findings"].as_array().unwrap().clone())
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_store_the_engine_wrote_verifies_clean_and_a_deleted_chunk_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let ns_dir = engine_store(dir.path());
    let key = key_file(dir.path(), &ROOT);
    let (code, clean) = verify(&ns_dir, &key);
    assert_eq!(code, Some(0), "{clean}");
    assert_eq!(clean["clean"], true);
    assert!(clean["seals"].as_u64().unwrap() >= 1);
    // Delete the sealed (older) chunk: its seal still names it.
    let sealed = clean["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| !c["sealed"].is_null())
        .unwrap()["file"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::remove_file(ns_dir.join("computer-history/chunks").join(&sealed)).unwrap();
    let (code, damaged) = verify(&ns_dir, &key);
    assert_eq!(code, Some(1));
    assert_eq!(damaged["clean"], false);
    assert!(
        findings(&damaged).contains(&"missing".to_owned()),
        "{damaged}"
    );
}

#[test]
fn the_reference_fixture_verifies_clean_without_seals_and_a_wrong_key_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/cua-reference/store");
    let mut fixture_root = [0u8; 32];
    for (i, b) in fixture_root.iter_mut().enumerate() {
        *b = i as u8;
    }
    let (code, value) = verify(&store, &key_file(dir.path(), &fixture_root));
    assert_eq!(code, Some(0), "{value}");
    assert_eq!(value["seals"], 0);
    let other = tempfile::tempdir().unwrap();
    let (code, value) = verify(&store, &key_file(other.path(), &[7; 32]));
    assert_eq!(code, Some(1), "{value}");
    assert_eq!(value["clean"], false);
}
