//! How an [`Engine`](crate::Engine) is configured.

use std::time::Duration;

use crate::telemetry::Telemetry;

use annal_engine::boot::BootId;

use annal_engine::capture::CAPTURE_QUEUE_CAPACITY_EVENTS;
use annal_engine::keys::Namespace;
use annal_engine::storage::StoreLayout;
use annal_engine::supervision::RestartPolicy;
use annal_schema::Platform;

use crate::key_custody::KEY_CALL_DEADLINE_MS;

/// How often the writer syncs what it appended (group commit), in milliseconds. Capture to
/// durable takes at most this plus one drain tick plus one sync.
pub const SYNC_INTERVAL_MS: u64 = 5;

/// How often the ingress looks at the capture queue while events flow, in milliseconds. The
/// capture path never wakes anyone (a futex wake costs the caller ~7 us), so the drain side
/// polls, and backs off while idle (`DRAIN_IDLE_TICK_MS`).
pub const DRAIN_TICK_MS: u64 = 2;

/// How often the ingress first looks at the capture queue once it found it empty for
/// `DRAIN_IDLE_AFTER_MS`, in milliseconds; each look that still finds it empty doubles the
/// period, up to `DRAIN_IDLE_TICK_MAX_MS` (`annal_engine::capture::TickSchedule`).
pub const DRAIN_IDLE_TICK_MS: u64 = 20;

/// The longest period between two looks at an empty capture queue, in milliseconds: an idle
/// engine wakes about once a second. The first event after a long idle spell waits at most this
/// long to be drained (a flush drains at once).
pub const DRAIN_IDLE_TICK_MAX_MS: u64 = 1_000;

/// How long the queue must stay empty before the ingress backs off to `DRAIN_IDLE_TICK_MS`, in
/// milliseconds.
pub const DRAIN_IDLE_AFTER_MS: u64 = 100;

/// Longest a shutdown drains before it gives up and returns, in milliseconds.
pub const SHUTDOWN_DEADLINE_MS: u64 = 3_000;

/// Longest a control operation (enable, pause, flush, status ...) may take before the caller gets
/// a timeout, in milliseconds. Above the key call deadline: enabling may create a key.
pub const CONTROL_DEADLINE_MS: u64 = KEY_CALL_DEADLINE_MS + 5_000;

/// Everything an engine needs to start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where the store lives (`StoreLayout::in_namespace_dir` for the default layout).
    pub layout: StoreLayout,
    /// The namespace whose key protects the store.
    pub namespace: Namespace,
    /// Whether the embedder admits history at all (the daemon's admission). Without it nothing
    /// is captured, whatever the owner enabled.
    pub admitted: bool,
    /// Agents need no grant (unrestricted mode). Only an explicit choice turns it on; never a
    /// default. Admission and the agents switch still apply.
    pub unrestricted: bool,
    /// The platform written into every event.
    pub platform: Platform,
    /// Capacity of the capture queue, in events.
    pub capture_capacity_events: usize,
    /// Group-commit interval.
    pub sync_interval: Duration,
    /// Drain tick of the ingress while events flow.
    pub drain_tick: Duration,
    /// Drain tick of the ingress once idle.
    pub drain_idle_tick: Duration,
    /// The longest period between two looks at an empty capture queue
    /// ([`DRAIN_IDLE_TICK_MAX_MS`]); raised to `drain_idle_tick` when lower.
    pub drain_idle_tick_max: Duration,
    /// Deadline of one credential-store call.
    pub key_call_deadline: Duration,
    /// Which key a store without chunks takes at enable: the namespace's reference-named key
    /// (default), or a key of its own (`keys::KeyChoice`, docs/key-custody.md "One key per
    /// store").
    pub key_choice: annal_engine::keys::KeyChoice,
    /// Restart intensity of the supervisor.
    pub restart_policy: RestartPolicy,
    /// How long `shutdown` may drain.
    pub shutdown_deadline: Duration,
    /// The boot of the machine this engine runs in (read from
    /// [`annal_engine::boot::BOOT_ID_PATH`]; `None` when it cannot be read). Journaled with
    /// each sequence reservation, so after a crash in the same boot the next writer releases
    /// the reservation instead of skipping it (`docs/design.md`, "No gap without a cause").
    /// Tests that simulate a power loss give the restarted engine another boot.
    pub boot: Option<BootId>,
    /// The instruments annal's metrics are recorded with ([`Telemetry::from_global`]: the
    /// process's global `MeterProvider` when this config was made; docs/observability.md).
    pub telemetry: Telemetry,
}

impl EngineConfig {
    /// The defaults for a store at `layout` in `namespace`, admitted, on Linux.
    pub fn new(layout: StoreLayout, namespace: Namespace) -> Self {
        Self {
            layout,
            namespace,
            admitted: true,
            unrestricted: false,
            platform: Platform::Linux,
            capture_capacity_events: CAPTURE_QUEUE_CAPACITY_EVENTS,
            sync_interval: Duration::from_millis(SYNC_INTERVAL_MS),
            drain_tick: Duration::from_millis(DRAIN_TICK_MS),
            drain_idle_tick: Duration::from_millis(DRAIN_IDLE_TICK_MS),
            drain_idle_tick_max: Duration::from_millis(DRAIN_IDLE_TICK_MAX_MS),
            key_call_deadline: Duration::from_millis(KEY_CALL_DEADLINE_MS),
            key_choice: annal_engine::keys::KeyChoice::default(),
            restart_policy: RestartPolicy::default(),
            shutdown_deadline: Duration::from_millis(SHUTDOWN_DEADLINE_MS),
            boot: current_boot(),
            telemetry: Telemetry::from_global(),
        }
    }
}

/// The boot id Linux publishes (`None` when it cannot be read or parsed: then no crash's
/// reservation is released, and the skip stays as it was).
pub fn current_boot() -> Option<BootId> {
    let text = std::fs::read_to_string(annal_engine::boot::BOOT_ID_PATH).ok()?;
    BootId::parse(&text).ok()
}
