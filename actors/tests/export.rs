//! `annal export` and `annal import --check` through the real binary: an export pages through
//! more than one owner read, its events are byte for byte what `annal query --json` returns
//! (in the compact contract JSON), it is audited as the owner's reads, and `import --check`
//! verifies it. The named negative cases, like the corruption corpus: a flipped byte, a
//! truncated archive, a wrong identity and a manifest with a wrong count are each refused
//! (exit 1, the reason named) and write nothing; `--plaintext` is refused without `--out`
//! and without a confirmation (exit 2, naming the flag and the fix).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use age::secrecy::ExposeSecret;
use serde_json::{Value, json};
use support::Sandbox;

/// Actions captured: with their sessions and access events, more than one page (200 events).
const ACTIONS: usize = 120;

/// Captures `ACTIONS` actions (each a started and a completed event) in one session, then
/// flushes.
fn captured(sandbox: &Sandbox) {
    sandbox.ok(&["enable"]);
    let mut raw = sandbox.connect_when_up();
    let session = raw.ask(json!({"op": "session_started", "session": "export-1"}));
    assert!(session.get("ok").is_some(), "{session}");
    for i in 0..ACTIONS {
        let started = raw.ask(json!({
            "op": "action_started",
            "capability": if i % 2 == 0 { "ui.click" } else { "ui.type_text" },
            "session": "export-1",
            "application": {"display_name": "Firefox"},
        }));
        let action = started["ok"]["action"].as_u64().unwrap();
        let completed = raw.ask(json!({
            "op": "action_completed",
            "action": action,
            "outcome": {"effect": "confirmed", "route": "accessibility"},
        }));
        assert!(completed.get("ok").is_some(), "{completed}");
    }
    sandbox.ok(&["flush"]);
}

/// An age identity written 0600 as age-keygen writes it, and its recipient.
fn identity(sandbox: &Sandbox, name: &str) -> (age::x25519::Identity, PathBuf, String) {
    let identity = age::x25519::Identity::generate();
    let path = sandbox.path(name);
    let text = format!(
        "# created: test\n# public key: {}\n{}\n",
        identity.to_public(),
        identity.to_string().expose_secret()
    );
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let recipient = identity.to_public().to_string();
    (identity, path, recipient)
}

fn export(sandbox: &Sandbox, out: &Path, recipient: &str) {
    sandbox.ok(&[
        "export",
        "--recipient",
        recipient,
        "--out",
        out.to_str().unwrap(),
    ]);
}

/// `annal import FILE --identity ID --check`: its output.
fn check(sandbox: &Sandbox, file: &Path, identity: &Path) -> std::process::Output {
    sandbox.run(&[
        "import",
        file.to_str().unwrap(),
        "--identity",
        identity.to_str().unwrap(),
        "--check",
        "--json",
    ])
}

/// Asserts `output` is a refusal with exit `code` whose message holds `needle`.
fn refused(output: &std::process::Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
    assert!(output.stdout.is_empty());
}

/// The archive's lines (header, events, manifest).
fn lines(content: &[u8]) -> Vec<&[u8]> {
    content.split_inclusive(|b| *b == b'\n').collect::<Vec<_>>()
}

fn manifest(content: &[u8]) -> Value {
    let last = lines(content).last().copied().unwrap();
    serde_json::from_slice::<Value>(last).unwrap()["annal_export_manifest"].clone()
}

fn owner_audits(sandbox: &Sandbox) -> usize {
    sandbox.json(&["audit"])["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"] == "owner")
        .count()
}

#[test]
fn an_export_holds_every_event_byte_for_byte_and_import_check_verifies_it() {
    let sandbox = Sandbox::new();
    captured(&sandbox);
    let (id, id_path, recipient) = identity(&sandbox, "id.txt");
    let archive = sandbox.path("history.age");
    let audits_before = owner_audits(&sandbox);
    export(&sandbox, &archive, &recipient);
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Audited as the owner's reads: at least two pages down and two up.
    assert!(owner_audits(&sandbox) >= audits_before + 4);

    let content = age::decrypt(&id, &std::fs::read(&archive).unwrap()).unwrap();
    let all = lines(&content);
    assert_eq!(all[0], b"{\"annal_export\":1}\n");
    let events = &all[1..all.len() - 1];
    assert!(events.len() > 2 * ACTIONS, "{} events", events.len());
    let m = manifest(&content);
    assert_eq!(m["event_count"], events.len());
    assert_eq!(
        m["content_blake3"],
        blake3::hash(&events.concat()).to_hex().as_str()
    );
    assert_eq!(m["annal_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(m["filtered"], false);
    let last = m["last_sequence"].as_u64().unwrap();
    let sequences: Vec<u64> = events
        .iter()
        .map(|l| {
            serde_json::from_slice::<Value>(l).unwrap()["data"]["sequence"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(sequences.last(), Some(&last));

    // Byte for byte what the owner's query returns, in the compact contract JSON.
    let answer = sandbox.json(&[
        "query",
        "--limit",
        "200",
        "--until-sequence",
        &last.to_string(),
    ]);
    let queried = answer["events"].as_array().unwrap();
    assert_eq!(queried.len(), 200);
    let tail = &events[events.len() - 200..];
    for (value, line) in queried.iter().zip(tail) {
        let mut json = annal_schema::Event::from_json_value(value.clone())
            .unwrap()
            .to_json_vec();
        json.push(b'\n');
        assert_eq!(&json[..], *line);
    }

    // A second export holds the first one's events as its prefix (and this export's access
    // events after them).
    let again = sandbox.path("again.age");
    export(&sandbox, &again, &recipient);
    let second = age::decrypt(&id, &std::fs::read(&again).unwrap()).unwrap();
    let second_lines = lines(&second);
    assert!(second_lines.len() > all.len());
    assert_eq!(&second_lines[..all.len() - 1], &all[..all.len() - 1]);

    let output = check(&sandbox, &archive, &id_path);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let verified: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(verified["checked"], true);
    assert_eq!(verified["manifest"], m);
}

#[test]
fn damaged_archives_and_a_wrong_identity_are_refused() {
    let sandbox = Sandbox::new();
    captured(&sandbox);
    let (id, id_path, recipient) = identity(&sandbox, "id.txt");
    let (_, other_path, _) = identity(&sandbox, "other.txt");
    let archive = sandbox.path("history.age");
    export(&sandbox, &archive, &recipient);
    let bytes = std::fs::read(&archive).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = sandbox.path(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };

    // flipped_byte: one bit of the payload (well past the header) changed.
    let mut flipped = bytes.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x01;
    refused(
        &check(&sandbox, &write("flipped.age", &flipped), &id_path),
        1,
        "tampered or truncated",
    );

    // truncated: the last 100 bytes gone, and the archive cut in half.
    for (name, len) in [
        ("cut-end.age", bytes.len() - 100),
        ("cut-half.age", bytes.len() / 2),
    ] {
        refused(
            &check(&sandbox, &write(name, &bytes[..len]), &id_path),
            1,
            "tampered or truncated",
        );
    }

    // wrong_identity: another key.
    refused(&check(&sandbox, &archive, &other_path), 1, "wrong identity");

    // wrong_count: a well-encrypted archive whose manifest says one event more.
    let content = age::decrypt(&id, &bytes).unwrap();
    let all = lines(&content);
    let mut m = manifest(&content);
    m["event_count"] = json!(m["event_count"].as_u64().unwrap() + 1);
    let mut edited = all[..all.len() - 1].concat();
    edited.extend(serde_json::to_vec(&json!({"annal_export_manifest": m})).unwrap());
    edited.push(b'\n');
    let recipient = age::x25519::Recipient::from_str(&recipient).unwrap();
    let reencrypted = age::encrypt(&recipient, &edited).unwrap();
    refused(
        &check(&sandbox, &write("count.age", &reencrypted), &id_path),
        1,
        "event_count",
    );

    // An event left out (the manifest as exported): the count and the digest disagree.
    let mut dropped = all[..2].concat();
    dropped.extend(all[3..].concat());
    refused(
        &check(
            &sandbox,
            &write("dropped.age", &age::encrypt(&recipient, &dropped).unwrap()),
            &id_path,
        ),
        1,
        "event_count",
    );

    // The untouched archive still verifies.
    assert!(check(&sandbox, &archive, &id_path).status.success());
}

#[test]
fn plaintext_needs_a_file_and_a_confirmation() {
    let sandbox = Sandbox::new();
    captured(&sandbox);
    let out = sandbox.path("history.jsonl");
    let out_arg = out.to_str().unwrap();
    refused(
        &sandbox.run(&["export", "--plaintext", "--yes"]),
        2,
        "--out FILE",
    );
    refused(
        &sandbox.run(&["export", "--plaintext", "--out", out_arg]),
        2,
        "--yes",
    );
    assert!(!out.exists());
    refused(
        &sandbox.run(&["export", "--out", out_arg]),
        2,
        "--recipient",
    );
    refused(
        &sandbox.run(&["export", "--recipient", "age1nope", "--out", out_arg]),
        2,
        "--recipient",
    );
    assert!(!out.exists());
    // Nothing half-written beside it either.
    let beside: Vec<_> = std::fs::read_dir(sandbox.root.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(beside.is_empty());

    sandbox.ok(&["export", "--plaintext", "--out", out_arg, "--yes"]);
    let content = std::fs::read(&out).unwrap();
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let all = lines(&content);
    assert_eq!(all[0], b"{\"annal_export\":1}\n");
    assert_eq!(manifest(&content)["event_count"], all.len() - 2);
    // An existing file is not replaced by a refused export; a session filter narrows.
    let session = sandbox.path("session.jsonl");
    sandbox.ok(&[
        "export",
        "--plaintext",
        "--yes",
        "--session",
        "export-1",
        "--out",
        session.to_str().unwrap(),
    ]);
    let narrowed = std::fs::read(&session).unwrap();
    let m = manifest(&narrowed);
    assert_eq!(m["filtered"], true);
    assert_eq!(m["event_count"], 2 * ACTIONS + 1);
}

#[test]
fn import_without_check_is_not_available_yet_and_writes_nothing() {
    let sandbox = Sandbox::new();
    let (_, id_path, recipient) = identity(&sandbox, "id.txt");
    let target = Sandbox::new();
    let archive = sandbox.path("a.age");
    captured(&sandbox);
    export(&sandbox, &archive, &recipient);
    let output = target.run(&[
        "import",
        archive.to_str().unwrap(),
        "--identity",
        id_path.to_str().unwrap(),
    ]);
    refused(&output, 2, "--check");
    assert!(
        !target
            .path("state")
            .join("annal")
            .join(&target.namespace)
            .exists()
    );
}
