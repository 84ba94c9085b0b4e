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
    // Audited as the owner's reads (at least two pages down and two up), then as the export
    // itself, with its count.
    assert!(owner_audits(&sandbox) >= audits_before + 5);

    let content = age::decrypt(&id, &std::fs::read(&archive).unwrap()).unwrap();
    let all = lines(&content);
    assert_eq!(all[0], b"{\"annal_export\":1}\n");
    let events = &all[1..all.len() - 1];
    assert!(events.len() > 2 * ACTIONS, "{} events", events.len());
    let m = manifest(&content);
    assert_eq!(m["event_count"], events.len());
    let audit = sandbox.json(&["audit"]);
    let exports: Vec<&Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["operation"] == "export")
        .collect();
    assert_eq!(exports.len(), 1, "{audit}");
    assert_eq!(exports[0]["actor"], "owner");
    assert_eq!(exports[0]["exported_events"], events.len());
    assert_eq!(exports[0]["outcome"], "completed");
    let text = sandbox.ok(&["audit"]);
    assert!(
        text.contains(&format!(
            "owner export: allowed, completed, {} events",
            events.len()
        )),
        "{text}"
    );
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

    // The export's record with counts that disagree is refused, and nothing is journaled.
    let mut raw = sandbox.connect_when_up();
    for (events, first, last) in [(5, 0, 0), (0, 1, 1), (2, 9, 3), (2, 0, 3)] {
        let reply = raw.ask(json!({
            "op": "record_export",
            "events": events,
            "first_sequence": first,
            "last_sequence": last,
            "encrypted": true,
        }));
        assert_eq!(reply["error"]["code"], "invalid_request", "{reply}");
    }
    let audit = sandbox.json(&["audit"]);
    assert!(!audit.to_string().contains("\"export\""), "{audit}");

    sandbox.ok(&["export", "--plaintext", "--out", out_arg, "--yes"]);
    let content = std::fs::read(&out).unwrap();
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let all = lines(&content);
    assert_eq!(all[0], b"{\"annal_export\":1}\n");
    assert_eq!(manifest(&content)["event_count"], all.len() - 2);
    // A session filter narrows the export to that session's events.
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

/// `annal import` without `--check` into the target sandbox's namespace.
fn import(target: &Sandbox, file: &Path, identity: &Path) -> std::process::Output {
    target.run(&[
        "import",
        file.to_str().unwrap(),
        "--identity",
        identity.to_str().unwrap(),
        "--json",
    ])
}

/// What the state directory of `sandbox` holds (the store's directory and anything aside).
fn state_entries(sandbox: &Sandbox) -> Vec<String> {
    match std::fs::read_dir(sandbox.path("state").join("annal")) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with(".run"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Export, import into a new namespace, export that: the event lines, and so the digest, are
/// byte for byte the same; the imported store verifies once its first writer sealed it, and
/// an import into an existing store is refused.
#[test]
fn export_then_import_round_trips_every_event_byte_for_byte() {
    let source = Sandbox::new();
    captured(&source);
    let (id, id_path, recipient) = identity(&source, "id.txt");
    let archive = source.path("history.age");
    export(&source, &archive, &recipient);
    let original = age::decrypt(&id, &std::fs::read(&archive).unwrap()).unwrap();

    let target = Sandbox::new();
    let output = import(&target, &archive, &id_path);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(reply["manifest"], manifest(&original));
    assert_eq!(reply["imported"]["namespace"], target.namespace.as_str());
    assert_eq!(state_entries(&target), vec![target.namespace.clone()]);

    let again = target.path("again.age");
    export(&target, &again, &recipient);
    let reexported = age::decrypt(&id, &std::fs::read(&again).unwrap()).unwrap();
    let text = |l: &[&[u8]]| String::from_utf8(l.concat()).unwrap();
    let (a, b) = (lines(&original), lines(&reexported));
    // Every archived event, byte for byte, in order.
    let events = a.len() - 2;
    assert_eq!(text(&b[..=events]), text(&a[..=events]));
    // Then only what the imported store's first writer added: its `disable` control event (the
    // archive's last lifecycle event is `enable`; the import is not enabled, and narrowing
    // wins: docs/design.md, "One truth about on and off"), in a stream of its own.
    let added: Vec<Value> = b[events + 1..b.len() - 1]
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(added.len(), 1, "{}", text(&b[events + 1..]));
    assert_eq!(added[0]["data"]["payload"]["operation"], "disable");
    let (ma, mb) = (manifest(&original), manifest(&reexported));
    assert_eq!(
        added[0]["data"]["sequence"].as_u64(),
        ma["last_sequence"].as_u64().map(|s| s + 1)
    );
    assert_eq!(mb["first_sequence"], ma["first_sequence"]);
    assert_eq!(mb["gaps"], ma["gaps"]);
    assert_eq!(
        ma["content_blake3"],
        blake3::hash(&a[1..=events].concat()).to_hex().as_str()
    );
    // Not enabled: capture waits for the owner's `enable`.
    assert_eq!(target.json(&["status"])["status"]["enabled"], false);
    target.ok(&["stop"]);
    let verify = target.run(&["verify", "--json"]);
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );

    // Into a store that exists: refused, naming the fix.
    refused(&import(&source, &archive, &id_path), 2, "--namespace NEW");
}

/// A damaged archive or a wrong identity imports nothing: no store, nothing aside.
#[test]
fn a_refused_import_leaves_nothing_behind() {
    let source = Sandbox::new();
    captured(&source);
    let (_, id_path, recipient) = identity(&source, "id.txt");
    let (_, other_path, _) = identity(&source, "other.txt");
    let archive = source.path("history.age");
    export(&source, &archive, &recipient);
    let bytes = std::fs::read(&archive).unwrap();
    let target = Sandbox::new();
    let flipped = source.path("flipped.age");
    let mut damaged = bytes.clone();
    let at = damaged.len() - 200;
    damaged[at] ^= 0x80;
    std::fs::write(&flipped, &damaged).unwrap();
    let truncated = source.path("truncated.age");
    std::fs::write(&truncated, &bytes[..bytes.len() * 3 / 4]).unwrap();
    for (file, identity, needle) in [
        (&flipped, &id_path, "tampered or truncated"),
        (&truncated, &id_path, "tampered or truncated"),
        (&archive, &other_path, "wrong identity"),
    ] {
        refused(&import(&target, file, identity), 1, needle);
        assert!(
            state_entries(&target).is_empty(),
            "{:?}",
            state_entries(&target)
        );
    }
    // The archive itself still imports.
    assert!(import(&target, &archive, &id_path).status.success());
}

/// An archive whose events are four years old: the import journals a retention that keeps
/// them visible (with the default 7 days the new store's first writer would hide, then prune
/// them), and `list` shows them.
#[test]
fn an_import_of_old_events_keeps_them_visible() {
    let source = Sandbox::new();
    captured(&source);
    let (id, id_path, recipient) = identity(&source, "id.txt");
    let archive = source.path("history.age");
    export(&source, &archive, &recipient);
    let content = age::decrypt(&id, &archive_bytes(&archive)).unwrap();
    let all = lines(&content);
    // Each event's year four back (a leap year stays one), the digest recomputed.
    let older: Vec<Vec<u8>> = all[1..all.len() - 1]
        .iter()
        .map(|line| {
            let text = std::str::from_utf8(line).unwrap();
            let at = text.find("\"time\":\"").unwrap() + 8;
            let year: u32 = text[at..at + 4].parse().unwrap();
            format!("{}{}{}", &text[..at], year - 4, &text[at + 4..]).into_bytes()
        })
        .collect();
    let mut m = manifest(&content);
    m["content_blake3"] = json!(blake3::hash(&older.concat()).to_hex().as_str());
    let mut edited = all[0].to_vec();
    edited.extend(older.concat());
    edited.extend(serde_json::to_vec(&json!({"annal_export_manifest": m})).unwrap());
    edited.push(b'\n');
    let recipient = age::x25519::Recipient::from_str(&recipient).unwrap();
    let old = source.path("old.age");
    std::fs::write(&old, age::encrypt(&recipient, &edited).unwrap()).unwrap();

    let target = Sandbox::new();
    let output = import(&target, &old, &id_path);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed = target.json(&["list", "200"]);
    assert_eq!(listed["events"].as_array().unwrap().len(), 200);
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    let days = reply["imported"]["retention_days_set"].as_u64().unwrap();
    assert!((4 * 365..=5 * 365).contains(&days), "{days}");
    assert_eq!(
        target.json(&["status"])["status"]["retention_days"].as_u64(),
        Some(days)
    );
    // A recent archive leaves the default retention alone.
    let recent = Sandbox::new();
    let output = import(&recent, &archive, &id_path);
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(reply["imported"]["retention_days_set"], Value::Null);
}

fn archive_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}
