//! `annal demo` as a real subprocess: it runs the whole pipeline and its report says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn the_demo_runs_the_whole_pipeline_and_reports_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .args(["demo", "--json", "--actions", "400"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["passed"], true, "{report:#}");
    // 400 starts, 400 completions, 8 session starts and 8 session ends.
    assert_eq!(report["events_captured"], 816);
    assert_eq!(report["dropped_events"], 0);
    let checks = report["checks"].as_array().unwrap();
    assert!(checks.len() >= 12, "{checks:?}");
    assert!(checks.iter().all(|c| c["held"] == true), "{checks:?}");
    assert_eq!(report["audit"]["denied"]["not_granted"], 1);
    assert_eq!(report["audit"]["denied"]["revoked"], 1);
    assert_eq!(report["audit"]["refused"]["cursor_replayed"], 1);
    assert!(report["audit"]["allowed"].as_u64().unwrap() > 200);
    assert!(report["access_events"].as_u64().unwrap() > 200);
    for figure in [
        "capture_p99_ns",
        "durable_events_per_sec",
        "query_newest50_p99_us",
    ] {
        assert!(report[figure].as_u64().unwrap() > 0, "{figure}");
    }
    // No raw session label reaches the report.
    assert!(!stdout.contains("demo run"));
}

#[test]
fn the_human_report_names_what_it_measured() {
    let output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .args(["demo", "--actions", "100"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    for line in [
        "events captured",
        "capture hook",
        "durable throughput",
        "history_query",
        "audit journal",
        "every check held.",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    assert!(!stdout.contains("FAILED"));
}
