//! Every exit code `docs/cli.md` documents, each clause of its table provoked through the real
//! binary: 0 success, 1 found a problem or refused, 2 bad usage or input (nothing changed), 3
//! history unavailable. (141, a closed pipe, has its own test over every printing command:
//! `a_closed_pipe_ends_every_printing_command_quietly`.) A bad-input case also checks that
//! stderr names the field or the value's bounds, and that nothing was changed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;

use support::Sandbox;

/// Runs `args` and asserts its exit code; returns stderr.
fn exits(sandbox: &Sandbox, args: &[&str], code: i32) -> String {
    let output = sandbox.run(args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(code),
        "annal {args:?}: stdout {} stderr {stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    stderr
}

#[test]
fn bad_usage_and_input_exit_2_and_name_what_is_wrong_and_change_nothing() {
    let sandbox = Sandbox::new();
    // Before the first enable: a grant and the agents switch say to enable, and grant nothing.
    let said = exits(&sandbox, &["grant", "agent-a", "query"], 2);
    assert!(said.contains("annal enable"), "{said}");
    exits(&sandbox, &["agents", "enable"], 2);
    let said = exits(&sandbox, &["owner-access", "on"], 2);
    assert!(said.contains("annal enable"), "{said}");
    sandbox.ok(&["enable"]);
    // (arguments, what stderr must name)
    let cases: [(&[&str], &str); 25] = [
        (&["list", "--bogus"], "--bogus"),
        (
            &["grant", "agent-a", "query", "--expires-after", "1.5s"],
            "--expires-after",
        ),
        (&["audit", "--since", "soon"], "--since"),
        (&["list", "0"], "1..=200"),
        (&["list", "201"], "1..=200"),
        (
            &["query", "--since-sequence", "5", "--until-sequence", "2"],
            "until",
        ),
        (
            &["grant", "agent-a", "query", "--expires-after", "31d"],
            "expires",
        ),
        (
            &["grant", "agent-a", "query", "--idle-timeout", "2h"],
            "idle",
        ),
        (&["grant", "agent a", "query"], "actor"),
        (&["grant", "agent-a", "delete"], "operation"),
        (&["retention", "0"], "1..=3650"),
        (&["retention", "3651"], "1..=3650"),
        (&["quota", "1KiB"], "quota"),
        (&["revoke", "nobody-ever"], "annal grants"),
        (&["demo", "--actions", "10"], "--actions"),
        (&["delete"], "--yes"),
        // The owner's filters: reversed bounds, what is not a duration or a time, an unknown
        // outcome, empty or overlong texts.
        (
            &["list", "--since", "1h", "--until", "2h"],
            "--since is after --until",
        ),
        (
            &[
                "query",
                "--since",
                "2026-12-04T10:00:00Z",
                "--until",
                "2026-12-03",
            ],
            "--since is after --until",
        ),
        (&["list", "--since", "soonish"], "--since"),
        (&["search", "x", "--until", "1.5s"], "--until"),
        (&["list", "--outcome", "great"], "--outcome"),
        (&["list", "--app", ""], "--app"),
        (&["query", "--capability", "\u{7}"], "--capability"),
        (&["search", ""], "TEXT"),
        (&["search", "x", "--limit", "201"], "1..=200"),
    ];
    for (args, named) in cases {
        let said = exits(&sandbox, args, 2);
        assert!(
            said.to_lowercase().contains(&named.to_lowercase()),
            "annal {args:?} does not name {named:?}: {said}"
        );
    }
    // The errors give the fix: the forms --since takes, and every allowed outcome.
    let said = exits(&sandbox, &["list", "--since", "soonish"], 2);
    assert!(
        said.contains("30m") && said.contains("2026-12-04"),
        "{said}"
    );
    let said = exits(&sandbox, &["list", "--outcome", "great"], 2);
    for outcome in annal_schema::Effect::ALL {
        assert!(said.contains(outcome.as_str()), "{said}");
    }
    // Nothing above changed anything: no grant, the default retention and quota, the store
    // still there.
    let grants = sandbox.json(&["grants"]);
    assert_eq!(grants["grants"], serde_json::json!([]), "{grants}");
    let status = sandbox.json(&["status"]);
    assert_eq!(status["status"]["retention_days"], 7, "{status}");
    assert_eq!(status["status"]["enabled"], true, "{status}");
    assert_eq!(status["owner_access_events"], true, "{status}");

    // Offline: not a store, and a key file others may read.
    let empty = sandbox.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let key = sandbox.path("key.hex");
    std::fs::write(&key, "00".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (empty, key) = (empty.to_str().unwrap(), key.to_str().unwrap());
    exits(&sandbox, &["inspect", empty, "--key-hex-file", key], 2);
    let store = sandbox.path("state").join("annal").join(&sandbox.namespace);
    let store = store.to_str().unwrap();
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let said = exits(&sandbox, &["verify", store, "--key-hex-file", key], 2);
    assert!(said.contains(key), "{said}");
}

#[test]
fn a_found_problem_or_a_refusal_exits_1_and_success_exits_0() {
    let sandbox = Sandbox::new();
    exits(&sandbox, &["enable"], 0);
    exits(&sandbox, &["status"], 0);
    exits(&sandbox, &["list", "5"], 0);
    // No event with that sequence.
    let said = exits(&sandbox, &["show", "999999"], 1);
    assert!(said.contains("999999"), "{said}");
    // A verify finding: one flipped byte in a chunk.
    sandbox.ok(&["stop"]);
    let chunks = sandbox
        .path("state")
        .join("annal")
        .join(&sandbox.namespace)
        .join("computer-history")
        .join("chunks");
    let chunk = std::fs::read_dir(&chunks)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 200))
        .expect("a chunk with records");
    let mut bytes = std::fs::read(&chunk).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&chunk, bytes).unwrap();
    exits(&sandbox, &["verify"], 1);
}

#[test]
fn unavailable_history_exits_3() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    // The store is locked by the running daemon: an in-process engine is refused.
    let said = exits(&sandbox, &["--no-daemon", "status"], 3);
    assert!(!said.is_empty());
    // The socket's directory is open to others: not the user's daemon, nothing is sent.
    sandbox.ok(&["stop"]);
    let run = sandbox.path("run").join("annal");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    let said = exits(&sandbox, &["status"], 3);
    assert!(said.contains("chmod 700"), "{said}");
}

/// `annal completions SHELL` and `annal man` come from the same clap definition the command
/// line is parsed with: bash accepts the completion script (`bash -n`), it completes the
/// subcommands, the manual page is roff that names them, and `--help` opens with what annal is
/// (not the actor crate's description). An unknown shell is bad usage.
#[test]
fn completions_and_the_manual_page_are_generated_from_the_command_line() {
    let sandbox = Sandbox::new();
    let script = sandbox.ok(&["completions", "bash"]);
    for subcommand in ["enable", "grants", "preflight", "completions"] {
        assert!(script.contains(subcommand), "{subcommand}");
    }
    let file = sandbox.path("annal.bash");
    std::fs::write(&file, &script).unwrap();
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output();
    match checked {
        Ok(output) => assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(_) => println!("bash -n: SKIPPED: no bash on PATH"),
    }
    for shell in ["zsh", "fish"] {
        assert!(!sandbox.ok(&["completions", shell]).is_empty(), "{shell}");
    }
    exits(&sandbox, &["completions", "tcsh"], 2);
    let page = sandbox.ok(&["man"]);
    assert!(page.contains(".TH annal 1"), "{page}");
    assert!(page.contains("preflight"), "the subcommands are listed");
    let help = sandbox.ok(&["--help"]);
    assert!(
        help.starts_with("An encrypted, append-only local history"),
        "{help}"
    );
    assert!(!help.contains("imperative shell"), "{help}");
}

/// `annal service`: the unit starts this store's daemon with the store options pinned and
/// quoted for systemd (a store path with a space, `%` and `$` in it), `systemd-analyze verify`
/// accepts it where systemd is installed, it is written 0600 and installed once (the same unit
/// again changes nothing, a different one is refused without --force), and `uninstall` removes
/// only a unit annal wrote.
#[test]
fn the_systemd_user_unit_starts_this_stores_daemon() {
    let sandbox = Sandbox::new();
    let store = sandbox.path("my store %h $HOME");
    let store = store.to_str().unwrap();
    let unit = sandbox.ok(&["--store", store, "service", "show"]);
    assert!(
        unit.starts_with("# Written by `annal service install`"),
        "{unit}"
    );
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    assert!(
        exec.starts_with(&format!("\"{}\"", env!("CARGO_BIN_EXE_annal"))),
        "{exec}"
    );
    assert!(
        exec.contains(&format!("\"--namespace\" \"{}\"", sandbox.namespace)),
        "{exec}"
    );
    let escaped = store.replace('%', "%%").replace('$', "$$");
    assert!(
        exec.contains(&format!("\"--store\" \"{escaped}\"")),
        "{exec}"
    );
    assert!(exec.ends_with("\"serve\""), "{exec}");

    let installed = sandbox.json(&["--store", store, "service", "install"]);
    assert_eq!(installed["changed"], true, "{installed}");
    let path = std::path::PathBuf::from(installed["path"].as_str().unwrap());
    assert_eq!(
        path,
        sandbox
            .path("home")
            .join(".config/systemd/user")
            .join(format!("annal-{}.service", sandbox.namespace))
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), unit);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    match std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
    {
        Ok(output) => assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(_) => println!("systemd-analyze verify: SKIPPED: not installed"),
    }
    let again = sandbox.json(&["--store", store, "service", "install"]);
    assert_eq!(again["changed"], false);
    // Another store's unit under the same name is the user's now: refused, then forced.
    let said = exits(&sandbox, &["service", "install"], 2);
    assert!(said.contains("--force"), "{said}");
    sandbox.ok(&["service", "install", "--force"]);
    // A unit the user wrote is never removed.
    std::fs::write(&path, "[Unit]\nDescription=mine\n").unwrap();
    exits(&sandbox, &["service", "uninstall"], 2);
    assert!(path.exists());
    sandbox.ok(&["service", "install", "--force"]);
    let removed = sandbox.json(&["service", "uninstall"]);
    assert_eq!(removed["removed"], true);
    assert!(!path.exists());
}

/// Durations as people write them (`90min`, `2 hours`, `2h 30m`) are read for the grant's
/// terms, exactly: the listed grant expires that many seconds after it was issued.
#[test]
fn grant_durations_are_read_as_people_write_them() {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    sandbox.ok(&[
        "grant",
        "agent-a",
        "query",
        "--expires-after",
        "2 hours",
        "--idle-timeout",
        "1h 30min",
    ]);
    let grants = sandbox.json(&["grants"]);
    let grant = &grants["grants"][0];
    let expires = grant["expires_at_ms"].as_u64().unwrap();
    let idle = grant["idle_deadline_ms"].as_u64().unwrap();
    let used = grant["last_used_ms"].as_u64().unwrap();
    assert_eq!(expires - used, 2 * 3_600_000, "{grants}");
    assert_eq!(idle - used, 90 * 60_000, "{grants}");
}
