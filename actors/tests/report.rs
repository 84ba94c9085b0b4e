//! `annal report` and `annal stats` against a store with known content, built through the real
//! binary and daemon: three sessions over four applications (one session's raw label a planted
//! value), a capture flood that leaves a drop marker, a pause, an agent that read and one the
//! owner revoked and which was then denied.
//!
//! Always: `annal stats --json` totals equal what `history_query` (`annal query`, paged by
//! `--until-sequence`) returns; the report file is 0600 and never holds the planted label.
//! With chromium (Debian's `chromium`; `.ci/test` installs it and sets
//! `ANNAL_REQUIRE_CHROMIUM=1`, so there a missing browser fails instead of skipping): the DOM
//! `--dump-dom` returns has one lane per session with the known event counts, the gap and drop
//! marks the events imply, and the access table; a `--screenshot` is not blank (pixel
//! variance); chromium's NetLog (`--log-net-log`) shows no request from the page and its log
//! (`--enable-logging=stderr`) no console message, both checks first shown to catch a planted
//! request and a planted console error on a control page. `ANNAL_REPORT_PNG=PATH` also runs
//! `annal demo --report` and keeps the same kind of screenshot of the demo's report there (how
//! `docs/report.png` is made).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Raw, Sandbox, env_is_one, flood};

/// Set to `1` by `.ci/test`: no chromium fails the test instead of skipping its browser part.
const REQUIRE_CHROMIUM: &str = "ANNAL_REQUIRE_CHROMIUM";

/// A raw session label that must never reach the report.
const PLANTED_LABEL: &str = "planted-session-label-7f3a91";

/// The known sessions: (label, [(application, actions)]), four applications in all.
const SESSIONS: [(&str, &[(&str, usize)]); 3] = [
    (PLANTED_LABEL, &[("Firefox", 3), ("Text Editor", 2)]),
    ("session-b", &[("Terminal", 2), ("Firefox", 1)]),
    ("session-c", &[("Files", 4)]),
];

/// Captures per flooding connection (under the daemon's open-action bound per connection).
const FLOOD_CAPTURES: usize = 3_000;
/// Connections flooding at once.
const FLOOD_CONNECTIONS: usize = 4;
/// Floods before the test gives up on seeing a drop.
const FLOOD_ROUNDS_MAX: usize = 20;

/// Lowest variance of the screenshot's grey levels (0..=255) that counts as not blank: a
/// blank page is 0; the report's text and charts are far above it.
const SCREENSHOT_VARIANCE_MIN: f64 = 50.0;

/// Where to keep a screenshot of the demo's report (`docs/report.png`); unset: none is made.
const REPORT_PNG: &str = "ANNAL_REPORT_PNG";

/// The browser window of that screenshot (width,height in px).
const DOCS_SCREENSHOT_SIZE: &str = "1060,1400";

/// Longest chromium may take for one page, in seconds.
const CHROMIUM_TIMEOUT_SECS: u64 = 60;

/// The known store (its daemon running).
fn known_store() -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    let socket = sandbox.socket();
    let mut rounds = 0;
    while sandbox.json(&["status"])["status"]["dropped_events"] == 0 {
        assert!(rounds < FLOOD_ROUNDS_MAX, "no capture was ever dropped");
        flood(&socket, FLOOD_CONNECTIONS, FLOOD_CAPTURES);
        rounds += 1;
    }
    sandbox.ok(&["flush"]);
    let mut raw = Raw::connect(&socket);
    for (label, apps) in SESSIONS {
        let started = raw.ask(json!({"op": "session_started", "session": label}));
        assert!(started["ok"].is_object(), "{started}");
        for (app, actions) in apps {
            for _ in 0..*actions {
                raw.action(json!({
                    "capability": "ui.click",
                    "application": {"display_name": app},
                    "session": label
                }));
            }
        }
        let ended = raw.ask(json!({"op": "session_ended", "session": label}));
        assert!(ended["ok"].is_object(), "{ended}");
    }
    sandbox.ok(&["pause"]);
    sandbox.ok(&["resume"]);
    sandbox.ok(&["grant", "reader-agent", "query"]);
    sandbox.ok(&["grant", "revoked-agent", "query"]);
    for actor in ["reader-agent", "revoked-agent"] {
        let read = raw.ask(json!({"op": "call_tool", "actor": actor,
            "tool": "history_query", "arguments": {"limit": 5}}));
        assert!(read["ok"]["answer"].is_object(), "{read}");
    }
    sandbox.ok(&["revoke", "revoked-agent"]);
    let denied = raw.ask(json!({"op": "call_tool", "actor": "revoked-agent",
        "tool": "history_query", "arguments": {"limit": 5}}));
    assert!(denied["ok"]["refusal"].is_object(), "{denied}");
    sandbox.ok(&["flush"]);
    // From here on the owner's reads append nothing, so every read sees the same events.
    sandbox.ok(&["owner-access", "off"]);
    sandbox
}

/// Every event `history_query` returns to the owner (`annal query`, newest first by pages).
fn all_events(sandbox: &Sandbox, session: Option<&str>) -> Vec<Value> {
    let mut events = Vec::new();
    let mut until: Option<u64> = None;
    loop {
        let mut args = vec!["query".to_owned(), "--limit".into(), "200".into()];
        if let Some(until) = until {
            args.extend(["--until-sequence".into(), until.to_string()]);
        }
        if let Some(session) = session {
            args.extend(["--session".into(), session.to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let page = sandbox.json(&args)["events"].as_array().unwrap().clone();
        let lowest = page
            .iter()
            .filter_map(|e| e["data"]["sequence"].as_u64())
            .min();
        let full = page.len() == 200;
        events.extend(page);
        match lowest {
            Some(lowest) if full && lowest > 1 => until = Some(lowest - 1),
            _ => return events,
        }
    }
}

fn kind_count(events: &[Value], kind: &str) -> u64 {
    events
        .iter()
        .filter(|e| e["data"]["payload"]["kind"] == kind)
        .count() as u64
}

/// Runs of missing sequence numbers among `events`.
fn gap_count(events: &[Value]) -> usize {
    let mut sequences: Vec<u64> = events
        .iter()
        .filter_map(|e| e["data"]["sequence"].as_u64())
        .collect();
    sequences.sort_unstable();
    sequences.dedup();
    sequences.windows(2).filter(|w| w[1] > w[0] + 1).count()
}

/// The opening tags of `html` that start with `prefix` (for example `<g class="lane"`).
fn tags<'a>(html: &'a str, prefix: &str) -> Vec<&'a str> {
    html.match_indices(prefix)
        .filter_map(|(at, _)| html[at..].find('>').map(|end| &html[at..at + end]))
        .collect()
}

/// The value of `name="..."` in `tag`.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Chromium headless on `page` with `extra` arguments, in a fresh profile under `dir`:
/// (stdout, stderr, the NetLog's JSON).
fn browse(chromium: &Path, dir: &Path, page: &Path, extra: &[String]) -> (String, String, Value) {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let net_log = profile.path().join("net-log.json");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--log-net-log={}", net_log.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = {
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        (text, errors.join().unwrap())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(CHROMIUM_TIMEOUT_SECS);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish in {CHROMIUM_TIMEOUT_SECS} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let log: Value = serde_json::from_slice(&std::fs::read(&net_log).unwrap())
        .unwrap_or_else(|e| panic!("chromium's NetLog is not JSON: {e}"));
    (out, err, log)
}

/// Requests the page itself made, as the NetLog records them: every event whose network
/// isolation key is the page's (`file://`), with its URL when it has one.
fn page_requests(net_log: &Value) -> Vec<String> {
    net_log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["params"]["network_isolation_key"]
                .as_str()
                .is_some_and(|key| key.contains("file://"))
        })
        .map(|e| e["params"]["url"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Console messages in chromium's log.
fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

/// The grey levels' variance of a PNG.
fn variance(png_path: &Path) -> f64 {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buffer).unwrap();
    let channels = info.color_type.samples();
    let pixels = &buffer[..info.buffer_size()];
    let greys: Vec<f64> = pixels
        .chunks(channels)
        .map(|p| p.iter().take(3).map(|&c| f64::from(c)).sum::<f64>() / p.len().min(3) as f64)
        .collect();
    let mean = greys.iter().sum::<f64>() / greys.len() as f64;
    greys.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / greys.len() as f64
}

#[test]
fn the_report_of_a_known_store_shows_what_history_query_returns_and_fetches_nothing() {
    let sandbox = known_store();
    let events = all_events(&sandbox, None);

    // stats --json totals are history_query's counts.
    let stats = sandbox.json(&["stats"]);
    let totals = &stats["totals"];
    assert_eq!(totals["events"], events.len() as u64, "{stats}");
    assert_eq!(
        totals["actions_started"],
        kind_count(&events, "action_started")
    );
    assert_eq!(
        totals["actions_completed"],
        kind_count(&events, "action_completed")
    );
    assert_eq!(totals["sessions"], SESSIONS.len() as u64);
    assert_eq!(totals["applications"], 4);
    assert_eq!(totals["gaps"], gap_count(&events) as u64);
    let drops: Vec<&Value> = events
        .iter()
        .filter(|e| e["data"]["payload"]["category"] == "events_dropped")
        .collect();
    assert!(!drops.is_empty(), "the flood left no drop marker");
    assert_eq!(totals["drop_markers"], drops.len() as u64);
    let text = sandbox.ok(&["stats"]);
    assert!(!text.contains('\u{1b}'), "colour written to a pipe: {text}");

    // The report: 0600, the planted label nowhere, even when it is the --session argument.
    let page = sandbox.path("report.html");
    let page_text = page.to_str().unwrap();
    sandbox.ok(&["report", "--out", page_text]);
    let mode = std::fs::metadata(&page).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains(PLANTED_LABEL));
    let one = sandbox.path("one-session.html");
    sandbox.ok(&[
        "report",
        "--session",
        PLANTED_LABEL,
        "--out",
        one.to_str().unwrap(),
    ]);
    let one_html = std::fs::read_to_string(&one).unwrap();
    assert!(!one_html.contains(PLANTED_LABEL));
    assert_eq!(tags(&one_html, "<g class=\"lane\"").len(), 1);
    // Bad input names the flag (exit 2).
    let bad = sandbox.run(&["report", "--since", "yesterday-ish", "--out", page_text]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since"));

    let Some(chromium) = chromium() else {
        assert!(
            !env_is_one(REQUIRE_CHROMIUM),
            "{REQUIRE_CHROMIUM}=1 and no chromium (apt-get install chromium)"
        );
        println!("SKIPPED the browser part: no chromium (apt-get install chromium)");
        return;
    };
    let dir = sandbox.path("browser");
    std::fs::create_dir(&dir).unwrap();

    // The checks catch what they look for: a control page that fetches and logs an error.
    let control = dir.join("control.html");
    std::fs::write(
        &control,
        "<!DOCTYPE html><html><body><img src=\"http://127.0.0.1:9/planted.png\">\
         <script>console.error('planted-console-error')</script></body></html>",
    )
    .unwrap();
    let (_, control_err, control_log) = browse(&chromium, &dir, &control, &["--dump-dom".into()]);
    assert!(
        page_requests(&control_log)
            .iter()
            .any(|u| u.contains("planted.png")),
        "the NetLog check missed the control page's request"
    );
    assert!(
        console_lines(&control_err)
            .iter()
            .any(|l| l.contains("planted-console-error")),
        "the console check missed the control page's error: {control_err}"
    );

    // The DOM.
    let (dom, err, net_log) = browse(&chromium, &dir, &page, &["--dump-dom".into()]);
    assert_eq!(
        page_requests(&net_log),
        Vec::<String>::new(),
        "the page fetched"
    );
    assert_eq!(console_lines(&err), Vec::<&str>::new(), "the page logged");
    assert!(!dom.contains(PLANTED_LABEL));
    let lanes = tags(&dom, "<g class=\"lane\"");
    let named: Vec<&&str> = lanes
        .iter()
        .filter(|t| attribute(t, "data-session") != Some("(no session)"))
        .collect();
    assert_eq!(named.len(), SESSIONS.len(), "{lanes:?}");
    for (label, apps) in SESSIONS {
        let expected = all_events(&sandbox, Some(label));
        let actions: usize = apps.iter().map(|(_, n)| n).sum();
        assert_eq!(expected.len(), 2 * actions + 2, "session {label}");
        let id = expected[0]["data"]["session_id"].as_str().unwrap();
        let lane = lanes
            .iter()
            .find(|t| attribute(t, "data-session") == Some(id))
            .unwrap_or_else(|| panic!("no lane for session {label}"));
        assert_eq!(
            attribute(lane, "data-events"),
            Some(expected.len().to_string().as_str())
        );
    }
    assert_eq!(tags(&dom, "<line class=\"gap\"").len(), gap_count(&events));
    let drop_marks = tags(&dom, "<g class=\"drop\"");
    assert_eq!(drop_marks.len(), drops.len());
    for drop in &drops {
        let sequence = drop["data"]["sequence"].to_string();
        let mark = drop_marks
            .iter()
            .find(|t| attribute(t, "data-sequence") == Some(sequence.as_str()))
            .unwrap_or_else(|| panic!("no drop mark for marker {sequence}"));
        assert_eq!(
            attribute(mark, "data-count"),
            Some(drop["data"]["payload"]["count"].to_string().as_str())
        );
    }
    assert_eq!(tags(&dom, "<table id=\"access\"").len(), 1);
    let readers = tags(&dom, "<tr class=\"reader\"");
    let reader = |actor: &str| {
        *readers
            .iter()
            .find(|t| attribute(t, "data-actor") == Some(actor))
            .unwrap_or_else(|| panic!("no access row for {actor}: {readers:?}"))
    };
    assert_eq!(attribute(reader("reader-agent"), "data-denied"), Some("0"));
    assert_eq!(
        attribute(reader("reader-agent"), "data-revoked"),
        Some("false")
    );
    assert_eq!(
        attribute(reader("revoked-agent"), "data-revoked"),
        Some("true")
    );
    assert_ne!(attribute(reader("revoked-agent"), "data-denied"), Some("0"));

    // A screenshot that is not blank.
    let shot = dir.join("report.png");
    let (_, err, net_log) = browse(
        &chromium,
        &dir,
        &page,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1100,1900".into(),
        ],
    );
    assert_eq!(page_requests(&net_log), Vec::<String>::new());
    assert_eq!(console_lines(&err), Vec::<&str>::new());
    let spread = variance(&shot);
    println!("FIGURE report.screenshot_variance {spread:.0} grey_levels_squared");
    assert!(
        spread > SCREENSHOT_VARIANCE_MIN,
        "blank screenshot ({spread})"
    );

    // docs/report.png: the demo's store, reported by `annal demo --report` and shot the same way.
    if let Some(keep) = std::env::var_os(REPORT_PNG) {
        let demo_page = dir.join("demo.html");
        let demo = Command::new(env!("CARGO_BIN_EXE_annal"))
            .args(["demo", "--report", demo_page.to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            demo.status.success(),
            "{}",
            String::from_utf8_lossy(&demo.stderr)
        );
        let demo_shot = dir.join("demo.png");
        let (_, err, net_log) = browse(
            &chromium,
            &dir,
            &demo_page,
            &[
                format!("--screenshot={}", demo_shot.display()),
                format!("--window-size={DOCS_SCREENSHOT_SIZE}"),
            ],
        );
        assert_eq!(page_requests(&net_log), Vec::<String>::new());
        assert_eq!(console_lines(&err), Vec::<&str>::new());
        assert!(variance(&demo_shot) > SCREENSHOT_VARIANCE_MIN);
        std::fs::copy(&demo_shot, keep).unwrap();
    }
}

/// The reference fixture's folder (`../shared/fixtures/cua-reference`).
fn reference_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/cua-reference")
}

/// The fixture's namespace root key (its README).
const REFERENCE_KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// Events the reference wrote into the fixture (its README).
const REFERENCE_EVENTS: u64 = 16;

/// The newest reference event's time plus the default 7-day retention, in seconds since the
/// epoch (2026-11-30T22:14Z + 7 d): later, queries no longer see the fixture's events.
const REFERENCE_VISIBLE_UNTIL_SECS: u64 = 1_796_681_640;

#[test]
fn a_store_the_reference_wrote_reports_with_its_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("fixture");
    std::fs::create_dir(&store).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).unwrap();
    let history = store.join("computer-history");
    support::copy_tree(&reference_fixture().join("store"), &history);
    let _ = std::fs::remove_file(history.join("writer.lock"));
    let key = dir.path().join("key.hex");
    std::fs::write(&key, format!("{REFERENCE_KEY_HEX}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    for dir_name in ["home", "run"] {
        std::fs::create_dir(dir.path().join(dir_name)).unwrap();
    }
    let annal = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_annal"))
            .env_clear()
            .env("HOME", dir.path().join("home"))
            .env("XDG_RUNTIME_DIR", dir.path().join("run"))
            .args(["--store", store.to_str().unwrap(), "--namespace", "fixture"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let page = dir.path().join("reference.html");
    let out = annal(&[
        "report",
        "--key-file",
        key.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Content-Security-Policy"));
    let stats = annal(&["stats", "--key-file", key.to_str().unwrap(), "--json"]);
    assert!(
        stats.status.success(),
        "{}",
        String::from_utf8_lossy(&stats.stderr)
    );
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if now_secs < REFERENCE_VISIBLE_UNTIL_SECS {
        // The reference's 16 events (and what annal's reads appended since).
        assert!(
            stats["totals"]["events"].as_u64().unwrap() > REFERENCE_EVENTS,
            "{stats}"
        );
        assert_eq!(stats["totals"]["drop_markers"], 1, "{stats}");
        assert_eq!(stats["totals"]["actions_completed"], 5, "{stats}");
        assert!(html.contains("data-session=\"b11ddce8dbd1872c9250e3f67dad2d9d\""));
    } else {
        println!("the fixture's events are past the default retention: only rendering is checked");
    }
    // The raw session label the reference was given never reaches the page.
    assert!(!html.contains("fixture-session-1"));
    // A wrong key file is bad input naming the flag.
    let loose = dir.path().join("loose.hex");
    std::fs::write(&loose, format!("{REFERENCE_KEY_HEX}\n")).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = annal(&[
        "report",
        "--key-file",
        loose.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--key-file"));
    if let Some(chromium) = chromium() {
        let (dom, err, net_log) = browse(&chromium, dir.path(), &page, &["--dump-dom".into()]);
        assert!(dom.contains("<table id=\"access\""));
        assert_eq!(page_requests(&net_log), Vec::<String>::new());
        assert_eq!(console_lines(&err), Vec::<&str>::new());
    }
}
