//! The real crash loop: `annal serve` killed with SIGKILL at random points, again and again,
//! while this process streams capture through its socket and notes which events a `flush`
//! acknowledged as durable. Afterwards every acknowledged event is there, no sequence repeats,
//! none is missing (every kill is a crash in the same boot, whose reservation the next writer
//! releases), and `verify` reports no damage but torn tails of the generations that were
//! killed.
//!
//! A `harness = false` target so that its figure reaches `.ci/run`'s output:
//! `FIGURE crash.kills_survived N`. `ANNAL_CRASH_KILLS` sets N (default `CRASH_KILLS`),
//! `ANNAL_CRASH_SEED` replays a run (the seed is printed first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use annal_engine::entropy::SeededEntropy;
use std::collections::{BTreeSet, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::{Raw, Sandbox};

/// Kills in one CI run (the issue asks for at least 50).
const CRASH_KILLS: u64 = 50;

/// Longest a generation lives before its kill, in milliseconds (the kill lands anywhere in it).
const GENERATION_MAX_MS: u64 = 250;

/// Most actions one batch captures before its flush.
const BATCH_MAX_ACTIONS: u64 = 24;

fn main() {
    // `cargo test -- <filter>`: run only when the filter names this suite.
    if !annal_engine::test_support::suite_selected("crash_loop") {
        return;
    }
    let seed = annal_engine::test_support::env_parsed("ANNAL_CRASH_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    });
    let kills = annal_engine::test_support::env_parsed("ANNAL_CRASH_KILLS").unwrap_or(CRASH_KILLS);
    println!("crash loop: seed {seed} (ANNAL_CRASH_SEED={seed} replays it), {kills} kills");
    let started = Instant::now();
    let outcome = std::panic::catch_unwind(|| run(seed, kills));
    match outcome {
        Ok(acknowledged) => {
            println!(
                "crash loop: {kills} kills survived, {acknowledged} acknowledged actions all \
                 present, in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            println!("FIGURE crash.kills_survived {kills} kills");
            println!("FIGURE crash.acknowledged_actions {acknowledged} actions");
        }
        Err(_) => {
            eprintln!("crash loop FAILED with seed {seed}: rerun with ANNAL_CRASH_SEED={seed}");
            std::process::exit(1);
        }
    }
}

/// One generation's outcome.
#[derive(Default)]
struct Generation {
    /// Bundle ids of the actions a flush acknowledged, each one admitted when it started.
    acknowledged: Vec<String>,
    /// Actions the daemon answered but did not admit (`not_admitted`: the store reached its
    /// quota; `dropped`: the capture queue was full): never stored, so never expected back.
    not_admitted: u64,
}

/// One generation: a daemon, a stream of batches each closed by a flush, a SIGKILL at a random
/// moment.
fn generation(sandbox: &Sandbox, rng: &mut SeededEntropy, next_action: &mut u64) -> Generation {
    let mut child = Killed(
        sandbox
            .annal(&["serve"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut raw = sandbox.connect_when_up();
    let pid = child.0.id().to_string();
    let kill_after = Duration::from_millis(rng.below(GENERATION_MAX_MS));
    let killer = std::thread::spawn(move || {
        std::thread::sleep(kill_after);
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    });
    let mut outcome = Generation::default();
    'stream: loop {
        let batch = 1 + rng.below(BATCH_MAX_ACTIONS);
        let mut pending = Vec::new();
        for _ in 0..batch {
            let id = format!("org.crash.a{next_action}");
            *next_action += 1;
            let Some(started) = ask(
                &mut raw,
                json!({
                    "op": "action_started",
                    "capability": "input.pointer.click",
                    "application": {"bundle_id": id},
                }),
            ) else {
                break 'stream;
            };
            let Some(action) = started["ok"]["action"].as_u64() else {
                break 'stream;
            };
            let completed = ask(
                &mut raw,
                json!({
                    "op": "action_completed",
                    "action": action,
                    "outcome": {"effect": "confirmed", "route": "accessibility"}
                }),
            );
            if completed.is_none() {
                break 'stream;
            }
            if started["ok"]["admission"] == "accepted" {
                pending.push(id);
            } else {
                outcome.not_admitted += 1;
            }
        }
        match ask(&mut raw, json!({"op": "flush"})) {
            Some(reply) if reply["ok"]["status"].is_object() => {
                outcome.acknowledged.extend(pending);
            }
            _ => break 'stream,
        }
    }
    killer.join().unwrap();
    let _ = child.0.wait();
    outcome
}

/// A daemon child that is killed and reaped on drop, so a failing generation leaves none.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A request, or `None` once the daemon is gone.
fn ask(raw: &mut Raw, request: Value) -> Option<Value> {
    use std::io::Write;
    let body = request.to_string();
    let len = u32::try_from(body.len()).ok()?.to_be_bytes();
    raw.stream.write_all(&len).ok()?;
    raw.stream.write_all(body.as_bytes()).ok()?;
    raw.reply()
}

/// Every event of the store, newest pages first, through the owner's reads.
fn all_events(sandbox: &Sandbox) -> Vec<Value> {
    let mut events = Vec::new();
    let mut until: Option<u64> = None;
    loop {
        let mut args = vec!["query".to_owned(), "--limit".into(), "200".into()];
        if let Some(until) = until {
            args.extend(["--until-sequence".into(), until.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let page = sandbox.json(&args);
        let page = page["events"].as_array().unwrap().clone();
        let Some(lowest) = page.first().and_then(|e| e["data"]["sequence"].as_u64()) else {
            break;
        };
        events.extend(page);
        if lowest <= 1 {
            break;
        }
        until = Some(lowest - 1);
    }
    events
}

fn run(seed: u64, kills: u64) -> usize {
    let sandbox = Sandbox::new();
    sandbox.ok(&["enable"]);
    sandbox.ok(&["stop"]);
    let mut rng = SeededEntropy::new(seed);
    let mut next_action = 1;
    let mut acknowledged = Vec::new();
    let mut not_admitted = 0;
    for _ in 0..kills {
        let outcome = generation(&sandbox, &mut rng, &mut next_action);
        acknowledged.extend(outcome.acknowledged);
        not_admitted += outcome.not_admitted;
    }
    if not_admitted > 0 {
        // Only the quota stops admission in this loop (long runs reach the default 100 MiB).
        let status = sandbox.json(&["status"]);
        assert_eq!(
            status["status"]["health"], "quota_reached",
            "{not_admitted} not admitted: {status}"
        );
        println!("crash loop: {not_admitted} actions not admitted (the store reached its quota)");
    }
    // Read everything back (a daemon is started on demand for the reads).
    let events = all_events(&sandbox);
    let sequences: Vec<u64> = events
        .iter()
        .map(|e| e["data"]["sequence"].as_u64().unwrap())
        .collect();
    let unique: HashSet<u64> = sequences.iter().copied().collect();
    assert_eq!(unique.len(), sequences.len(), "a sequence number repeated");
    // Every kill was in this boot: each next writer released the reservation its killed
    // predecessor left (the page cache kept what it wrote), so no kill left a gap.
    let mut sorted = sequences.clone();
    sorted.sort_unstable();
    let gaps: Vec<(u64, u64)> = sorted
        .windows(2)
        .filter(|w| w[1] > w[0] + 1)
        .map(|w| (w[0] + 1, w[1] - 1))
        .collect();
    assert!(gaps.is_empty(), "kills in one boot left gaps: {gaps:?}");
    assert_eq!(sorted.first(), Some(&1), "the history starts at 1");
    let completed: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["data"]["payload"]["kind"] == "action_completed")
        .filter_map(|e| e["data"]["application"]["bundle_id"].as_str())
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|id| !completed.contains(id.as_str()))
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let output = sandbox.run(&["verify", "--json"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut damage = Vec::new();
    for chunk in report["chunks"].as_array().unwrap() {
        for finding in chunk["findings"].as_array().unwrap() {
            let finding = finding.as_str().unwrap();
            if finding != "ok" && finding != "torn_tail" {
                damage.push(format!("{} {finding}", chunk["file"]));
            }
        }
    }
    assert!(
        damage.is_empty(),
        "verify found more than torn tails: {damage:?}"
    );
    assert!(report["store"].as_array().unwrap().is_empty(), "{report}");
    acknowledged.len()
}
