//! A seeded simulation of the whole engine against a simple in-memory model of what a correct
//! history holds and returns.
//!
//! Each seed drives the real actor tree (`Engine::start_with`: an in-memory credential store,
//! a manual virtual clock) through a seeded schedule of steps: capture in and out of sessions,
//! flushes, enable/disable/pause/resume, owner reads (newest N, by raw session label), grants
//! with expiry and idle timeouts, agent calls, revocations, the agents switch, virtual time
//! passing, child failures (any of the six supervised children panics, or stops unasked, and
//! the supervisor restarts it with its dependents) and whole-engine restarts.
//! After every read the answer is compared with the model's: the same events (kind, capability,
//! application, control and access operation, returned count) in the same order, every denial
//! with the model's reason code.
//!
//! What is seeded is the schedule of operations and the clock; the actor tree's own thread
//! interleavings are not (it runs on tokio's multi-thread runtime). Every step waits for its
//! answer (reads after a flush), so the observable history does not depend on them.
//!
//! A `harness = false` target: it prints `FIGURE sim.steps N`. `ANNAL_SIM_SEEDS` and
//! `ANNAL_SIM_STEPS` change the run; a failure prints its seed and step
//! (`ANNAL_SIM_SEED` replays one seed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};

use std::sync::Arc;
use std::time::Duration;

use annal_actors::gate::{PolicyChange, ToolAnswer};
use annal_actors::supervisor::InjectedFailure;
use annal_actors::{Engine, EngineConfig};
use annal_engine::capture::CaptureSession;
use annal_engine::clock::{Clock, ManualClock};
use annal_engine::entropy::SeededEntropy;
use annal_engine::health::Child;
use annal_engine::keys::{InMemoryProvider, KeyProvider, Namespace};
use annal_engine::policy::{ActorId, GrantTerms, Operation, Principal};
use annal_engine::storage::StoreLayout;
use annal_engine::supervision::MAX_RESTARTS;
use annal_schema::tools::QueryRequest;
use annal_schema::{
    AccessOperation, ActionOutcome, Application, BundleId, Capability, Effect, Route,
};
use serde_json::{Value, json};

/// Seeds in one CI run.
const SIM_SEEDS: u64 = 16;

/// Steps per seed.
const SIM_STEPS: u64 = 200;

/// 2026-12-01T00:00:00Z.
const START: Duration = Duration::from_secs(1_796_083_200);

/// Agents of the simulation.
const AGENTS: [&str; 2] = ["sim-a", "sim-b"];

/// Session labels (raw; the engine stores only keyed ids).
const LABELS: [&str; 3] = ["sim session one", "sim session two", "sim session three"];

/// What the model expects one event to look like (no ids, sequences or times).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: String,
    detail: String,
}

/// The model: what a correct engine holds and decides.
#[derive(Default)]
struct Model {
    enabled: bool,
    /// Enabled at least once (the store exists: flush works even while disabled).
    ever_enabled: bool,
    paused: bool,
    /// Every event, with the session (label index) it belongs to.
    events: Vec<(Seen, Option<usize>)>,
    /// (agent, operation) -> (expires_at_ms, idle_timeout_ms, last_used_ms).
    grants: HashMap<(usize, Operation), (u64, u64, u64)>,
    revoked: HashSet<usize>,
    agents_disabled: bool,
    /// How each agent call was decided ("allowed" or the reason), for the run's figures.
    decisions: HashMap<&'static str, u64>,
}

impl Model {
    fn capturing(&self) -> bool {
        self.enabled && !self.paused
    }

    fn push(&mut self, kind: &str, detail: &str, session: Option<usize>) {
        self.events.push((
            Seen {
                kind: kind.into(),
                detail: detail.into(),
            },
            session,
        ));
    }

    fn control(&mut self, operation: &str, applied: bool) {
        if applied {
            self.push("control", operation, None);
        }
    }

    /// The denial code for `agent` calling `operation` at `now_ms`, or `None` (and the use is
    /// recorded).
    fn decide(&mut self, agent: usize, operation: Operation, now_ms: u64) -> Option<&'static str> {
        let decision = self.decision(agent, operation, now_ms);
        *self
            .decisions
            .entry(decision.unwrap_or("allowed"))
            .or_default() += 1;
        decision
    }

    fn decision(
        &mut self,
        agent: usize,
        operation: Operation,
        now_ms: u64,
    ) -> Option<&'static str> {
        if self.agents_disabled {
            return Some("agents_disabled");
        }
        let Some((expires, idle, last)) = self.grants.get_mut(&(agent, operation)) else {
            return Some(if self.revoked.contains(&agent) {
                "revoked"
            } else {
                "not_granted"
            });
        };
        if now_ms >= *expires {
            return Some("expired");
        }
        if now_ms.saturating_sub(*last) >= *idle {
            return Some("idle_timeout");
        }
        *last = (*last).max(now_ms);
        None
    }

    /// The newest `limit` events (of `session`, if given), oldest first.
    fn newest(&self, limit: usize, session: Option<usize>) -> Vec<Seen> {
        let matching: Vec<&Seen> = self
            .events
            .iter()
            .filter(|(_, s)| session.is_none() || *s == session)
            .map(|(e, _)| e)
            .collect();
        let start = matching.len().saturating_sub(limit);
        matching[start..].iter().map(|e| (*e).clone()).collect()
    }

    fn access(&mut self, operation: &str, returned: usize) {
        if returned > 0 {
            self.push("access", &format!("{operation}:{returned}"), None);
        }
    }
}

/// What the engine returned, as the model sees events. Control `flush` records and health
/// records are the engine's own bookkeeping, which the model does not predict: they are left
/// out of both sides (the model never holds them).
fn seen(events: &[Value]) -> Vec<Seen> {
    events
        .iter()
        .filter_map(|event| {
            let data = &event["data"];
            let payload = &data["payload"];
            let kind = payload["kind"].as_str().unwrap_or_default().to_owned();
            let detail = match kind.as_str() {
                "control" => {
                    let operation = payload["operation"].as_str().unwrap_or_default();
                    if operation == "flush" {
                        return None;
                    }
                    operation.to_owned()
                }
                "health" => return None,
                "access" => format!(
                    "{}:{}",
                    payload["operation"].as_str().unwrap_or_default(),
                    payload["returned_events"]
                ),
                "session" => payload["phase"].as_str().unwrap_or_default().to_owned(),
                _ => format!(
                    "{}@{}",
                    data["capability"].as_str().unwrap_or_default(),
                    data["application"]["bundle_id"]
                        .as_str()
                        .unwrap_or_default()
                ),
            };
            Some(Seen { kind, detail })
        })
        .collect()
}

struct Sim {
    dir: tempfile::TempDir,
    provider: Arc<InMemoryProvider>,
    clock: ManualClock,
    engine: Option<Engine>,
    open_sessions: Vec<Option<CaptureSession>>,
}

impl Sim {
    fn start(&mut self) {
        let layout = StoreLayout::in_namespace_dir(&self.dir.path().join("sim"));
        let config = EngineConfig::new(layout, Namespace::new("sim").unwrap());
        self.engine = Some(
            Engine::start_with(
                config,
                Arc::clone(&self.provider) as Arc<dyn KeyProvider>,
                Arc::new(self.clock.clone()) as Arc<dyn Clock>,
                None,
            )
            .unwrap(),
        );
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }
}

fn outcome() -> ActionOutcome {
    ActionOutcome::new(Effect::Confirmed, Route::Accessibility)
}

fn now_ms(clock: &ManualClock) -> u64 {
    clock.now_since_epoch().as_millis() as u64
}

/// Runs one seed; panics with the step on a divergence. Returns how its agent calls were
/// decided.
fn simulate(seed: u64, steps: u64) -> HashMap<&'static str, u64> {
    let mut rng = SeededEntropy::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut sim = Sim {
        dir: tempfile::tempdir().unwrap(),
        provider: Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(seed))).unwrap()),
        clock: ManualClock::new(START),
        engine: None,
        open_sessions: vec![None, None, None],
    };
    sim.start();
    let mut model = Model::default();
    // The owner's opt-in comes first: before it there is no journal to audit a call in, and a
    // gated call fails closed (`history_storage_unavailable`; tested in tests/gate.rs).
    sim.engine().enable().unwrap();
    model.enabled = true;
    model.ever_enabled = true;
    model.control("enable", true);
    // Failures injected per child in this engine's life (within the restart intensity).
    let mut crashes: HashMap<Child, usize> = HashMap::new();
    for step in 0..steps {
        let choice = rng.below(100);
        let at = format!("seed {seed} step {step}");
        match choice {
            // Capture: an action, in a session or not.
            0..=29 => {
                let capture = sim.engine().capture();
                let which = rng.below(4) as usize;
                let bundle = format!("org.sim.app{}", rng.below(5));
                let capability = ["input.pointer.click", "input.keyboard.type", "window.focus"]
                    [rng.below(3) as usize];
                let session = sim.open_sessions.get(which).and_then(|s| s.as_ref());
                let token = capture.action_started(
                    Capability::new(capability).unwrap(),
                    Application::new(Some(BundleId::new(bundle.as_str()).unwrap()), None),
                    session,
                );
                capture.action_completed(token, outcome());
                if model.capturing() {
                    let session = session.map(|_| which);
                    for kind in ["action_started", "action_completed"] {
                        model.push(kind, &format!("{capability}@{bundle}"), session);
                    }
                }
            }
            // A session starts or ends.
            30..=35 => {
                let which = rng.below(3) as usize;
                let capture = sim.engine().capture();
                let phase = match sim.open_sessions[which].take() {
                    Some(session) => {
                        capture.session_ended(session);
                        "ended"
                    }
                    None => {
                        sim.open_sessions[which] = Some(capture.session_started(LABELS[which]));
                        "started"
                    }
                };
                if model.capturing() {
                    model.push("session", phase, Some(which));
                }
            }
            // Control operations.
            36..=47 => {
                // Whatever was captured reaches the writer before the control operation.
                if model.ever_enabled {
                    sim.engine().flush().unwrap();
                }
                let engine = sim.engine();
                let (operation, result) = match rng.below(5) {
                    0 => ("enable", engine.enable()),
                    1 => ("disable", engine.disable()),
                    2 => ("pause", engine.pause()),
                    3 => ("resume", engine.resume()),
                    _ => ("flush", engine.flush()),
                };
                let expected_ok = match operation {
                    "pause" | "resume" => model.enabled,
                    "flush" => model.ever_enabled,
                    _ => true,
                };
                assert_eq!(result.is_ok(), expected_ok, "{at}: {operation} {result:?}");
                let applied = match operation {
                    "enable" => !model.enabled,
                    "disable" => model.enabled,
                    "pause" => model.enabled && !model.paused,
                    "resume" => model.enabled && model.paused,
                    _ => false,
                };
                match operation {
                    "enable" => {
                        model.enabled = true;
                        model.ever_enabled = true;
                    }
                    // Disabling clears the pause too.
                    "disable" => {
                        model.enabled = false;
                        model.paused = false;
                    }
                    "pause" if model.enabled => model.paused = true,
                    "resume" if model.enabled => model.paused = false,
                    _ => {}
                }
                model.control(operation, applied);
                if let Ok(status) = result {
                    assert_eq!(status.enabled, model.enabled, "{at}: enabled");
                    if model.enabled {
                        assert_eq!(status.paused, model.paused, "{at}: paused");
                    }
                    assert_eq!(status.dropped_events, 0, "{at}: drops");
                }
            }
            // The owner reads (after a flush, so every capture is in).
            48..=59 => {
                if !model.enabled {
                    continue;
                }
                sim.engine().flush().unwrap();
                let limit = 1 + rng.below(40) as usize;
                let by_session = rng.below(3) == 0;
                let session = by_session.then(|| rng.below(3) as usize);
                let mut arguments = json!({"limit": limit});
                if let Some(which) = session {
                    arguments["session_id"] = json!(LABELS[which]);
                }
                let request = QueryRequest::parse(&arguments).unwrap();
                let response = sim
                    .engine()
                    .query(request, AccessOperation::LocalCli)
                    .unwrap();
                let events: Vec<Value> = response
                    .events
                    .iter()
                    .map(|e| serde_json::to_value(e).unwrap())
                    .collect();
                assert!(events.len() <= limit, "{at}: more than the limit");
                let got = seen(&events);
                let expected = model.newest(got.len(), session);
                assert_eq!(
                    got, expected,
                    "{at}: owner read (limit {limit}, session {session:?})"
                );
                model.access("local_cli", events.len());
            }
            // The owner grants an agent an operation.
            60..=69 => {
                let agent = rng.below(2) as usize;
                let operation = if rng.below(2) == 0 {
                    Operation::Status
                } else {
                    Operation::Query
                };
                let expires = 60 * (5 + rng.below(120));
                let idle = 60 * (1 + rng.below(30));
                let terms = GrantTerms::new(expires, idle.min(expires)).unwrap();
                sim.engine()
                    .change_policy(PolicyChange::Grant {
                        actor: ActorId::new(AGENTS[agent]).unwrap(),
                        operation,
                        terms,
                    })
                    .unwrap();
                let now = now_ms(&sim.clock);
                model.revoked.remove(&agent);
                model.grants.insert(
                    (agent, operation),
                    (now + expires * 1_000, idle.min(expires) * 1_000, now),
                );
            }
            // An agent calls a tool.
            70..=83 => {
                if model.ever_enabled {
                    sim.engine().flush().unwrap();
                }
                // Mostly a call some grant covers (so grants are used, and used again), sometimes
                // any call.
                let mut granted: Vec<(usize, Operation)> = model.grants.keys().copied().collect();
                granted.sort_unstable_by_key(|(agent, op)| (*agent, op.tool()));
                let (agent, operation) = if !granted.is_empty() && rng.below(4) != 0 {
                    granted[rng.below(granted.len() as u64) as usize]
                } else {
                    let agent = rng.below(2) as usize;
                    let op = if rng.below(3) == 0 {
                        Operation::Status
                    } else {
                        Operation::Query
                    };
                    (agent, op)
                };
                let principal = Principal::Agent(ActorId::new(AGENTS[agent]).unwrap());
                let tool = operation.tool();
                let limit = 1 + rng.below(20) as usize;
                let arguments = if operation == Operation::Query {
                    json!({"limit": limit})
                } else {
                    json!({})
                };
                let answer = sim.engine().call_tool(&principal, tool, &arguments);
                let expected = model.decide(agent, operation, now_ms(&sim.clock));
                match (expected, answer) {
                    (Some(code), Err(refusal)) => {
                        assert_eq!(refusal.code(), code, "{at}: {tool} by {agent}")
                    }
                    (None, Ok(ToolAnswer::Status(status))) => {
                        assert_eq!(status.enabled, model.enabled, "{at}: agent status")
                    }
                    (None, Ok(ToolAnswer::Query { response, .. })) => {
                        let events: Vec<Value> = response
                            .events
                            .iter()
                            .map(|e| serde_json::to_value(e).unwrap())
                            .collect();
                        let got = seen(&events);
                        assert_eq!(got, model.newest(got.len(), None), "{at}: agent read");
                        model.access("agent_query", events.len());
                    }
                    (expected, answer) => {
                        panic!("{at}: {tool} by {agent}: expected {expected:?}, got {answer:?}")
                    }
                }
            }
            // Revocation and the agents switch.
            84..=85 => {
                let agent = rng.below(2) as usize;
                sim.engine()
                    .change_policy(PolicyChange::Revoke {
                        actor: ActorId::new(AGENTS[agent]).unwrap(),
                    })
                    .unwrap();
                model.grants.retain(|(a, _), _| *a != agent);
                model.revoked.insert(agent);
            }
            86..=87 => {
                // Disabled spells are short: the next switch turns agents back on.
                let enabled = model.agents_disabled || rng.below(3) != 0;
                sim.engine()
                    .change_policy(PolicyChange::SwitchAgents { enabled })
                    .unwrap();
                model.agents_disabled = !enabled;
            }
            // Virtual time passes (up to 8 minutes: idle timeouts are 1 to 30).
            88..=95 => sim.clock.advance(Duration::from_secs(rng.below(8 * 60))),
            // A child fails (after a flush: nothing is in flight) and is restarted with the
            // children that depend on it; no step runs before the tree is back.
            96..=97 => {
                let child = Child::ALL[rng.below(6) as usize];
                let failure = if rng.below(2) == 0 {
                    InjectedFailure::Panic
                } else {
                    InjectedFailure::Stop
                };
                let count = crashes.entry(child).or_default();
                // Within the supervisor's restart intensity (more is a child given up on,
                // tested in tests/supervision.rs).
                if model.ever_enabled && *count < MAX_RESTARTS as usize {
                    *count += 1;
                    let expected = *count;
                    sim.engine().flush().unwrap();
                    sim.engine().inject_failure(child, failure);
                    // A control call during the restart is refused (`Unavailable`), never
                    // blocked on: the caller retries until the tree answers again.
                    let deadline = std::time::Instant::now() + Duration::from_secs(30);
                    while sim.engine().restarts(child).unwrap_or(0) < expected
                        || sim.engine().flush().is_err()
                    {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "{at}: {child:?} did not come back after {failure:?}"
                        );
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            }
            // The whole engine restarts (a new process on the same store).
            _ => {
                // Open sessions end with their process.
                for which in 0..sim.open_sessions.len() {
                    if let Some(session) = sim.open_sessions[which].take() {
                        sim.engine().capture().session_ended(session);
                        if model.capturing() {
                            model.push("session", "ended", Some(which));
                        }
                    }
                }
                if model.ever_enabled {
                    sim.engine().flush().unwrap();
                }
                let report = sim.engine.take().unwrap().shutdown();
                assert!(report.drained, "{at}: the drain did not finish");
                sim.start();
                crashes.clear();
            }
        }
    }
    if let Some(engine) = sim.engine.take() {
        assert!(engine.shutdown().drained);
    }
    model.decisions
}

fn main() {
    if !annal_engine::test_support::suite_selected("simulation") {
        return;
    }
    let parse = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let steps = parse("ANNAL_SIM_STEPS", SIM_STEPS);
    // The child panics the schedule injects are expected: keep their panic messages out of the
    // output, and every other panic in it.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let injected = info
            .payload()
            .downcast_ref::<&str>()
            .is_some_and(|m| m.contains("injected ") && m.contains(" panic (test)"))
            || info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m.contains("injected ") && m.contains(" panic (test)"));
        if !injected {
            default_hook(info);
        }
    }));
    let seeds: Vec<u64> = match annal_engine::test_support::env_parsed("ANNAL_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (1..=parse("ANNAL_SIM_SEEDS", SIM_SEEDS)).collect(),
    };
    let mut decisions: std::collections::BTreeMap<&str, u64> = Default::default();
    for seed in &seeds {
        match std::panic::catch_unwind(|| simulate(*seed, steps)) {
            Ok(seen) => {
                for (decision, count) in seen {
                    *decisions.entry(decision).or_default() += count;
                }
            }
            Err(_) => {
                eprintln!("simulation FAILED at seed {seed}: rerun with ANNAL_SIM_SEED={seed}");
                std::process::exit(1);
            }
        }
    }
    println!("simulation: agent calls decided {decisions:?}");
    println!(
        "simulation: {} seeds x {steps} steps agree with the model",
        seeds.len()
    );
    println!("FIGURE sim.steps {} steps", seeds.len() as u64 * steps);
}
