//! The daemon's socket server: one task per connection over one shared [`Engine`].
//!
//! Every connection is checked first: the peer's uid (`SO_PEERCRED`) must be the daemon's own,
//! else it gets `peer_not_owner` and is closed. Then each request frame gets one reply frame.
//! A connection's reads and writes touch only its own task, and a reply that the peer does not
//! read within [`PEER_WRITE_TIMEOUT_MS`] closes that connection: a slow or stuck peer stalls
//! nobody else, and capture (a non-blocking hook) never waits for any peer.
//!
//! # Bounds per connection
//!
//! - A connection is *pending* until its first frame is complete, which must be within
//!   [`FRAME_READ_DEADLINE_MS`] of its accept. At most [`MAX_PENDING_CONNECTIONS`] are pending;
//!   one more closes the oldest pending one. Pending connections hold no served slot, so peers
//!   that connect and stall keep nobody out.
//! - Its first request admits it to a *served* slot: at most [`MAX_CONNECTIONS`], of which
//!   [`OWNER_RESERVED_CONNECTIONS`] only a connection whose first request is an owner's
//!   operation may take ([`is_owner_operation`]: what the `annal` CLI sends; the socket
//!   authenticates the user, not the program, so any same-user process may claim it too).
//! - When no slot is free, the served connection idle longest (waiting for a frame, none begun)
//!   is closed to make room: for an owner's request any idle one, for any other one idle at
//!   least [`RECLAIM_IDLE_AFTER_MS`]. With none, the newcomer gets `too_many_connections`.
//! - A later frame must arrive whole within [`FRAME_READ_DEADLINE_MS`] of its first byte; a
//!   connection idle between frames is kept (a capture driver waits for its next action).
//! - A connection that misses a deadline, is displaced or is reclaimed is closed without a frame.
//! - A session label is 1..=[`SESSION_LABEL_MAX_BYTES`] bytes; a connection holds at most
//!   [`MAX_OPEN_SESSIONS_PER_CONNECTION`] open sessions and the daemon
//!   [`MAX_OPEN_SESSIONS_PER_DAEMON`], and a connection at most
//!   [`MAX_OPEN_ACTIONS_PER_CONNECTION`] open actions.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use annal_engine::capture::{ActionToken, Admission, CaptureHandle, CaptureSession};
use annal_engine::policy::manifest::Manifest;
use annal_engine::policy::{ActorId, GrantTerms, Operation, Principal};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::page::{Answer, owner_query};
use super::protocol::{
    DaemonError, DaemonErrorCode, FrameCodec, FrameError, FramedStream, PROTOCOL_VERSION, Reply,
    Request, ToolReply, decode_request, next_frame, send_frame,
};
use super::slots::{Registry, Slot, is_owner_operation};
use crate::engine::{Engine, EngineError};
use crate::gate::PolicyChange;
use crate::preflight::PreflightRequest;
use crate::writer::Setting;

/// Most connections served at once (those that completed a first frame); one more, when no
/// idle one can be reclaimed, gets `too_many_connections` and is closed.
pub const MAX_CONNECTIONS: usize = 64;

/// Of [`MAX_CONNECTIONS`], the slots only a connection whose first request is an owner's
/// operation may take, so that the owner's CLI gets in when other clients fill the rest.
pub const OWNER_RESERVED_CONNECTIONS: usize = 4;

/// Most connections that have not completed their first frame; one more closes the oldest.
pub const MAX_PENDING_CONNECTIONS: usize = 64;

/// Longest a frame may take to arrive whole, in milliseconds: a connection's first frame from
/// its accept, each later one from its first byte. Then the connection is closed.
pub const FRAME_READ_DEADLINE_MS: u64 = 5_000;

/// How long a served connection must have been idle before a newcomer that is not the owner's
/// may have it closed when no slot is free, in milliseconds.
pub const RECLAIM_IDLE_AFTER_MS: u64 = 10_000;

/// Longest session label `session_started` accepts, in bytes (at most as many characters as a
/// `history_query` `session_id` may hold, so every accepted label can be read back by).
pub const SESSION_LABEL_MAX_BYTES: usize = 128;

const _: () = assert!(
    SESSION_LABEL_MAX_BYTES <= annal_schema::tools::QUERY_SESSION_ID_MAX_LEN_CHARS,
    "every accepted label must be a valid session_id to query by"
);

/// Most sessions open at once over every connection of one daemon.
pub const MAX_OPEN_SESSIONS_PER_DAEMON: usize = 1_024;

/// Most actions one connection may hold open (started, not completed).
pub const MAX_OPEN_ACTIONS_PER_CONNECTION: usize = 4_096;

/// Most sessions one connection may hold open.
pub const MAX_OPEN_SESSIONS_PER_CONNECTION: usize = 256;

/// Longest a reply may wait for the peer to read it, in milliseconds; then the connection is
/// closed.
pub const PEER_WRITE_TIMEOUT_MS: u64 = 2_000;

/// How often the accept loop checks whether an on-demand daemon has been idle long enough to
/// exit, in milliseconds.
pub const IDLE_CHECK_INTERVAL_MS: u64 = 500;

/// Why [`serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeEnd {
    /// A client sent `stop`.
    Stopped,
    /// The shutdown future completed (SIGTERM, SIGINT).
    Signalled,
    /// No client and nothing to flush for the idle limit.
    Idle,
}

/// How [`serve`] runs.
#[derive(Clone)]
pub struct ServeOptions {
    /// Exit after this long with no client connected and nothing queued (an on-demand daemon);
    /// `None` serves until stopped.
    pub idle_exit: Option<Duration>,
    /// The credential store holding the key, as `status` and `hello` report it.
    pub key_store: String,
    /// Called after each successful `enable` (the binary records which credential store holds
    /// the key, once the key exists).
    pub on_enabled: Option<EnableHook>,
}

/// What runs after a successful `enable`.
pub type EnableHook = Arc<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("idle_exit", &self.idle_exit)
            .field("key_store", &self.key_store)
            .field("on_enabled", &self.on_enabled.is_some())
            .finish()
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("key_store", &self.key_store)
            .field("daemon", &self.stop.is_some())
            .finish_non_exhaustive()
    }
}

/// Answers requests over one engine: what the socket server runs for each frame, and what a
/// front-end runs in-process when it opens the store itself (`--no-daemon`).
#[derive(Clone)]
pub struct Dispatcher {
    /// The engine every request goes to.
    engine: Arc<Engine>,
    /// The credential store's name (reported, never chosen here).
    key_store: String,
    /// Where `stop` is signalled (the accept loop); `None` in-process.
    stop: Option<mpsc::Sender<()>>,
    /// Runs after each successful `enable`.
    on_enabled: Option<EnableHook>,
    /// Sessions open over every connection of this dispatcher.
    open_sessions: Arc<AtomicUsize>,
}

/// What one connection holds between its requests: its capture hook and the sessions and
/// actions it opened (dropped with the connection: an action left open is never completed).
pub struct ConnectionState {
    /// The engine's capture hook.
    capture: CaptureHandle,
    /// Open sessions, by raw label (memory only).
    sessions: HashMap<String, CaptureSession>,
    /// Open actions, by the handle answered to `action_started`.
    actions: HashMap<u64, ActionToken>,
    /// The next action handle.
    next_action: u64,
    /// Sessions open over every connection of the dispatcher (this one's are given back when
    /// it is dropped).
    open_sessions: Arc<AtomicUsize>,
}

impl Drop for ConnectionState {
    fn drop(&mut self) {
        let _ = self
            .open_sessions
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(self.sessions.len()))
            });
    }
}

impl std::fmt::Debug for ConnectionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionState")
            .field("open_sessions", &self.sessions.len())
            .field("open_actions", &self.actions.len())
            .finish_non_exhaustive()
    }
}

fn admission_name(admission: Admission) -> &'static str {
    match admission {
        Admission::Accepted => "accepted",
        Admission::Dropped => "dropped",
        Admission::NotAdmitted => "not_admitted",
    }
}

/// The `grants` answer: each grant with its deadlines (ms since the epoch), and the revoked.
fn grants_json(grants: &crate::engine::Grants) -> Value {
    let each: Vec<Value> = grants
        .grants
        .iter()
        .map(|g| {
            json!({
                "actor": g.actor.as_str(),
                "operation": g.operation.name(),
                "source": g.source,
                "expires_at_ms": g.expires_at_ms,
                "idle_deadline_ms": g.idle_deadline_ms,
                "last_used_ms": g.last_used_ms,
                "live": g.live,
            })
        })
        .collect();
    let revoked: Vec<&str> = grants.revoked.iter().map(ActorId::as_str).collect();
    json!({"grants": each, "revoked": revoked})
}

/// One `audit` entry: who (an agent's id, or `owner`), when, what, the verdict and outcome
/// codes, and the returned count (`operation` and `verdict` are null for a call of an unknown
/// tool, refused before any decision). No argument, tool name or content: the records hold none.
pub(super) fn invalid(message: impl Into<String>) -> DaemonError {
    DaemonError::new(DaemonErrorCode::InvalidRequest, message)
}

pub(super) fn failed(error: &EngineError) -> DaemonError {
    let fix = match error {
        EngineError::Control(crate::ControlError::Key(_)) => {
            "; run `annal doctor` to see which credential store is usable"
        }
        EngineError::Control(crate::ControlError::Refused) => {
            "; enable history first (`annal enable`)"
        }
        _ => "",
    };
    DaemonError::new(DaemonErrorCode::OperationFailed, format!("{error}{fix}"))
}

fn actor_id(text: &str) -> Result<ActorId, DaemonError> {
    ActorId::new(text).map_err(|_| {
        invalid(format!(
            "\"actor\" must be 1..={} characters of [A-Za-z0-9._-]",
            annal_engine::policy::ACTOR_ID_MAX_LEN_CHARS
        ))
    })
}

/// An agent principal (never the owner: `@owner` is not an actor id).
fn actor(text: &str) -> Result<Principal, DaemonError> {
    actor_id(text).map(Principal::Agent)
}

impl Dispatcher {
    /// A dispatcher over `engine`; `key_store` is what status reports as the key's store.
    pub fn new(engine: Arc<Engine>, key_store: String) -> Self {
        Self {
            engine,
            key_store,
            stop: None,
            on_enabled: None,
            open_sessions: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Runs `hook` after each successful `enable`.
    pub fn on_enabled(mut self, hook: EnableHook) -> Self {
        self.on_enabled = Some(hook);
        self
    }

    /// A fresh connection's state.
    pub fn connection(&self) -> ConnectionState {
        ConnectionState {
            capture: self.engine.capture(),
            sessions: HashMap::new(),
            actions: HashMap::new(),
            next_action: 1,
            open_sessions: Arc::clone(&self.open_sessions),
        }
    }

    /// Answers one request.
    pub async fn dispatch(&self, connection: &mut ConnectionState, request: Request) -> Reply {
        match self.dispatch_wire(connection, request).await {
            Reply::Ok(Answer::Json(value)) => Reply::Ok(value),
            Reply::Ok(Answer::Page(page)) => match serde_json::to_value(page) {
                Ok(value) => Reply::Ok(value),
                Err(error) => Reply::Error(DaemonError::new(
                    DaemonErrorCode::OperationFailed,
                    format!("the page could not be written as JSON: {error}"),
                )),
            },
            Reply::Error(error) => Reply::Error(error),
        }
    }

    /// Answers one request as the connection writes it: an owner's query page stays typed
    /// until it is written into the frame.
    async fn dispatch_wire(
        &self,
        connection: &mut ConnectionState,
        request: Request,
    ) -> Reply<Answer> {
        let span = if request.is_capture() {
            tracing::Span::none()
        } else {
            crate::telemetry::span::daemon_request(request.op())
        };
        match self.answer(connection, request).instrument(span).await {
            Ok(answer) => Reply::Ok(answer),
            Err(error) => Reply::Error(error),
        }
    }

    fn status_reply(
        &self,
        status: Result<annal_schema::tools::StatusResponse, EngineError>,
    ) -> Result<Value, DaemonError> {
        let status = status.map_err(|e| failed(&e))?;
        Ok(json!({"status": status, "key_store": self.key_store}))
    }

    /// An owner's setting; a value out of bounds (the engine's refusal) is an invalid request
    /// that names the bounds.
    async fn set(&self, setting: Setting) -> Result<Value, DaemonError> {
        use annal_engine::journal::{
            QUOTA_MAX_BYTES, QUOTA_MIN_BYTES, RETENTION_MAX_DAYS, RETENTION_MIN_DAYS,
        };
        match self.engine.set_async(setting).await {
            Err(EngineError::Control(crate::ControlError::OutOfBounds)) => {
                Err(invalid(match setting {
                    Setting::Retention { .. } => {
                        format!("\"days\" must be {RETENTION_MIN_DAYS}..={RETENTION_MAX_DAYS}")
                    }
                    _ => format!("\"bytes\" must be {QUOTA_MIN_BYTES}..={QUOTA_MAX_BYTES}"),
                }))
            }
            status => self.status_reply(status),
        }
    }

    async fn change(&self, change: PolicyChange) -> Result<Value, DaemonError> {
        self.engine
            .change_policy_async(change)
            .await
            .map_err(|e| failed(&e))?;
        Ok(json!({"changed": true}))
    }

    async fn answer(
        &self,
        connection: &mut ConnectionState,
        request: Request,
    ) -> Result<Answer, DaemonError> {
        let engine = &*self.engine;
        let json = match request {
            query @ Request::Query { .. } => {
                let Ok((arguments, filter)) = query.into_owner_query() else {
                    return Err(invalid("not an owner's query"));
                };
                return owner_query(engine, arguments, filter)
                    .await
                    .map(Answer::Page);
            }
            Request::Hello {} => Ok(json!({
                "protocol": PROTOCOL_VERSION,
                "version": env!("CARGO_PKG_VERSION"),
                "key_store": self.key_store,
            })),
            Request::Status {} => {
                let status = self.status_reply(engine.status_async().await);
                // annal's own byte total beside the contract's `bytes_used` (null while no
                // writer runs).
                let usage = engine.usage_async().await.ok().map(|usage| {
                    json!({
                        "history_bytes": usage.history_bytes,
                        "journal_bytes": usage.journal_bytes,
                        "quota_counted_bytes": usage.quota_counted_bytes(),
                    })
                });
                // The owner's setting (null while the journal cannot be read).
                let owner_access = engine.grants_async().await.ok();
                status.map(|mut reply| {
                    reply["usage"] = usage.unwrap_or(Value::Null);
                    reply["owner_access_events"] =
                        owner_access.map_or(Value::Null, |g| Value::Bool(g.owner_access_events));
                    reply
                })
            }
            Request::Enable {} => {
                let enabled = engine.enable_async().await;
                if enabled.is_ok()
                    && let Some(hook) = &self.on_enabled
                {
                    hook();
                }
                self.status_reply(enabled)
            }
            Request::Disable {} => self.status_reply(engine.disable_async().await),
            Request::Pause {} => self.status_reply(engine.pause_async().await),
            Request::Resume {} => self.status_reply(engine.resume_async().await),
            Request::Flush {} => self.status_reply(engine.flush_async().await),
            Request::SetRetention { days } => self.set(Setting::Retention { days }).await,
            Request::SetQuota { bytes, on_quota } => {
                self.set(Setting::Quota { bytes, on_quota }).await
            }
            Request::ToolsFor { actor: text } => {
                let principal = actor(&text)?;
                let tools: Vec<&str> = engine
                    .tools_for_async(&principal)
                    .await
                    .into_iter()
                    .map(Operation::tool)
                    .collect();
                Ok(json!({"tools": tools}))
            }
            Request::CallTool {
                actor: text,
                tool,
                arguments,
            } => {
                let principal = actor(&text)?;
                match engine
                    .call_tool_async(&principal, &tool, &Value::Object(arguments))
                    .await
                {
                    Ok(answer) => Ok(ToolReply::Answer(answer.to_json()).into_value()),
                    Err(refusal) => Ok(ToolReply::Refusal(refusal).to_value()),
                }
            }
            Request::Preflight {
                actor: text,
                limit,
                session_id,
            } => {
                let principal = actor(&text)?;
                let limit = limit.unwrap_or(super::protocol::PREFLIGHT_DEFAULT_LIMIT_EVENTS);
                let request =
                    PreflightRequest::new(limit, session_id.as_deref()).map_err(|_| {
                        invalid(
                            "\"limit\" must be 1..=200 and \"session_id\" a session id of at most 128 characters",
                        )
                    })?;
                Ok(engine.preflight_async(&principal, &request).await.to_json())
            }
            Request::Grant {
                actor: text,
                operation,
                expires_after_secs,
                idle_timeout_secs,
            } => {
                let actor = actor_id(&text)?;
                let operation = Operation::from_name(&operation)
                    .ok_or_else(|| invalid("\"operation\" must be \"status\" or \"query\""))?;
                let terms = GrantTerms::new(
                    expires_after_secs.unwrap_or(GrantTerms::DEFAULT.expires_after_secs()),
                    idle_timeout_secs.unwrap_or(GrantTerms::DEFAULT.idle_timeout_secs()),
                )
                .map_err(|e| invalid(e.to_string()))?;
                let mut answer = self
                    .change(PolicyChange::Grant {
                        actor: actor.clone(),
                        operation,
                        terms,
                    })
                    .await?;
                // The deadlines as the journal holds them (what `grants` lists).
                let grants = self.engine.grants_async().await.map_err(|e| failed(&e))?;
                if let Some(grant) = grants
                    .grants
                    .iter()
                    .find(|g| g.actor == actor && g.operation == operation)
                {
                    answer["expires_at_ms"] = json!(grant.expires_at_ms);
                    answer["idle_deadline_ms"] = json!(grant.idle_deadline_ms);
                }
                Ok(answer)
            }
            Request::ApproveManifest {
                actor: text,
                manifest,
                reapprove,
            } => {
                let actor = actor_id(&text)?;
                let manifest = Manifest::parse(&manifest)
                    .map_err(|e| invalid(format!("the manifest was refused: {e}")))?;
                self.change(PolicyChange::ApproveManifest {
                    actor,
                    manifest,
                    reapprove,
                })
                .await
            }
            Request::Grants => {
                let grants = engine.grants_async().await.map_err(|e| failed(&e))?;
                Ok(grants_json(&grants))
            }
            Request::Audit {
                actor: text,
                since_ms,
                denied,
            } => {
                let actor = text.as_deref().map(actor_id).transpose()?;
                let filter = annal_engine::policy::views::AuditFilter {
                    actor,
                    since_ms,
                    denied_only: denied,
                };
                let entries = engine.audit_async(filter).await.map_err(|e| failed(&e))?;
                Ok(super::summary::audit_reply(&entries))
            }
            Request::AuditSummary { since_ms } => {
                let filter = annal_engine::policy::views::AuditFilter {
                    since_ms,
                    ..Default::default()
                };
                let entries = engine.audit_async(filter).await.map_err(|e| failed(&e))?;
                let (actors, truncated) = super::summary::per_actor(&entries);
                Ok(json!({"actors": actors, "truncated": truncated}))
            }
            Request::Revoke { actor: text } => {
                let actor = actor_id(&text)?;
                // Revoking an actor that holds no grant and was never revoked does nothing:
                // say so (a mistyped name must not read as a revocation).
                let grants = engine.grants_async().await.map_err(|e| failed(&e))?;
                let known = grants.grants.iter().any(|g| g.actor == actor)
                    || grants.revoked.contains(&actor);
                if !known {
                    return Err(invalid(
                        "\"actor\" holds no grant and was never revoked: `annal grants` lists the actors",
                    ));
                }
                self.change(PolicyChange::Revoke { actor }).await
            }
            Request::SwitchAgents { enabled } => {
                self.change(PolicyChange::SwitchAgents { enabled }).await
            }
            Request::SetOwnerAccess { enabled } => {
                self.change(PolicyChange::OwnerAccess { enabled }).await
            }
            Request::RecordExport {
                events,
                first_sequence,
                last_sequence,
                encrypted,
            } => {
                if first_sequence > last_sequence
                    || (events == 0) != (last_sequence == 0)
                    || (events == 0) != (first_sequence == 0)
                {
                    return Err(invalid(
                        "\"first_sequence\", \"last_sequence\" and \"events\" disagree: an \
                         export of events names its first and last sequence, in order; an \
                         empty one names 0 for both",
                    ));
                }
                self.change(PolicyChange::Exported {
                    events,
                    first_sequence,
                    last_sequence,
                    encrypted,
                })
                .await
            }
            Request::SessionStarted { session } => {
                if session.is_empty() || session.len() > SESSION_LABEL_MAX_BYTES {
                    return Err(invalid(format!(
                        "\"session\" must be 1..={SESSION_LABEL_MAX_BYTES} bytes"
                    )));
                }
                if connection.sessions.contains_key(&session) {
                    return Err(invalid(
                        "this session was already started on this connection",
                    ));
                }
                if connection.sessions.len() >= MAX_OPEN_SESSIONS_PER_CONNECTION {
                    return Err(DaemonError::new(
                        DaemonErrorCode::TooManyOpen,
                        format!(
                            "a connection may hold {MAX_OPEN_SESSIONS_PER_CONNECTION} open sessions; end one first"
                        ),
                    ));
                }
                let room = connection.open_sessions.fetch_update(
                    Ordering::AcqRel,
                    Ordering::Acquire,
                    |n| (n < MAX_OPEN_SESSIONS_PER_DAEMON).then_some(n + 1),
                );
                if room.is_err() {
                    return Err(DaemonError::new(
                        DaemonErrorCode::TooManyOpen,
                        format!(
                            "the daemon holds {MAX_OPEN_SESSIONS_PER_DAEMON} open sessions over all connections; end one first"
                        ),
                    ));
                }
                let started = connection.capture.session_started(&session);
                let admission = admission_name(started.started());
                connection.sessions.insert(session, started);
                Ok(json!({"admission": admission}))
            }
            Request::SessionEnded { session } => {
                let started = connection.sessions.remove(&session).ok_or_else(|| {
                    DaemonError::new(
                        DaemonErrorCode::UnknownHandle,
                        "no session with that label was started on this connection",
                    )
                })?;
                let _ = connection.open_sessions.fetch_update(
                    Ordering::AcqRel,
                    Ordering::Acquire,
                    |n| Some(n.saturating_sub(1)),
                );
                connection.capture.session_ended(started);
                Ok(json!({}))
            }
            Request::ActionStarted {
                capability,
                application,
                session,
            } => {
                if connection.actions.len() >= MAX_OPEN_ACTIONS_PER_CONNECTION {
                    return Err(DaemonError::new(
                        DaemonErrorCode::TooManyOpen,
                        format!(
                            "a connection may hold {MAX_OPEN_ACTIONS_PER_CONNECTION} open actions; complete one first"
                        ),
                    ));
                }
                let refused = |field: &str| {
                    invalid(format!(
                        "\"{field}\" does not meet the contract's rules (see docs/protocol.md)"
                    ))
                };
                let capability = super::protocol::capability(capability).map_err(refused)?;
                let application = application
                    .map(super::protocol::WireApplication::into_application)
                    .transpose()
                    .map_err(refused)?;
                let session = match &session {
                    Some(label) => Some(connection.sessions.get(label).ok_or_else(|| {
                        DaemonError::new(
                            DaemonErrorCode::UnknownHandle,
                            "no session with that label was started on this connection",
                        )
                    })?),
                    None => None,
                };
                let token = connection
                    .capture
                    .action_started(capability, application, session);
                let admission = admission_name(token.admission());
                let handle = connection.next_action;
                connection.next_action += 1;
                connection.actions.insert(handle, token);
                Ok(json!({"action": handle, "admission": admission}))
            }
            Request::ActionCompleted { action, outcome } => {
                let outcome = outcome.into_outcome().ok_or_else(|| {
                    invalid(format!(
                        "\"evidence_kinds\" holds at most {} kinds",
                        annal_schema::event::EVIDENCE_KINDS_MAX_ITEMS
                    ))
                })?;
                let token = connection.actions.remove(&action).ok_or_else(|| {
                    DaemonError::new(
                        DaemonErrorCode::UnknownHandle,
                        "no open action of this connection has that handle",
                    )
                })?;
                connection.capture.action_completed(token, outcome);
                Ok(json!({}))
            }
            Request::Stop {} => match &self.stop {
                Some(stop) => {
                    let _ = stop.try_send(());
                    Ok(json!({"stopping": true}))
                }
                None => Err(invalid("there is no daemon to stop in this process")),
            },
        };
        json.map(Answer::Json)
    }
}

/// Serves `listener` over `engine` until a client sends `stop`, `shutdown` completes, or (with
/// `options.idle_exit`) the daemon has been idle that long. Connections still open are closed
/// when it returns; the caller then shuts the engine down (the bounded drain).
pub async fn serve(
    listener: UnixListener,
    engine: Arc<Engine>,
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> ServeEnd {
    let own_uid = rustix::process::geteuid().as_raw();
    let (stop_tx, mut stop_rx) = mpsc::channel::<()>(1);
    let (closing, _) = broadcast::channel::<()>(1);
    let dispatcher = Dispatcher {
        engine: Arc::clone(&engine),
        key_store: options.key_store.clone(),
        stop: Some(stop_tx),
        on_enabled: options.on_enabled.clone(),
        open_sessions: Arc::new(AtomicUsize::new(0)),
    };
    let registry = Arc::new(Registry::default());
    let mut connections = JoinSet::new();
    let mut idle_since = Instant::now();
    let mut idle_check = tokio::time::interval(Duration::from_millis(IDLE_CHECK_INTERVAL_MS));
    tokio::pin!(shutdown);
    let end = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors or a peer gone before accept: keep serving the others.
                    tokio::time::sleep(Duration::from_millis(IDLE_CHECK_INTERVAL_MS / 10)).await;
                    continue;
                };
                let slot = Registry::pending(&registry);
                connections.spawn(connection(stream, dispatcher.clone(), own_uid, closing.subscribe(), slot));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {
                if connections.is_empty() {
                    idle_since = Instant::now();
                }
            }
            _ = idle_check.tick() => {
                if let Some(limit) = options.idle_exit
                    && connections.is_empty()
                    && engine.queued_events() == 0
                    && idle_since.elapsed() >= limit
                {
                    break ServeEnd::Idle;
                }
            }
            _ = stop_rx.recv() => break ServeEnd::Stopped,
            () = &mut shutdown => break ServeEnd::Signalled,
        }
    };
    let _ = closing.send(());
    // Each connection ends at its next await on the closing signal; anything still running
    // after that (a reply stuck on a peer) is cut off.
    let _ = tokio::time::timeout(Duration::from_millis(PEER_WRITE_TIMEOUT_MS), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.shutdown().await;
    end
}

/// Answers `error` and closes.
async fn refuse(mut framed: FramedStream<UnixStream>, error: DaemonError) {
    let _ = tokio::time::timeout(
        Duration::from_millis(PEER_WRITE_TIMEOUT_MS),
        send_frame(&mut framed, &Reply::<Value>::Error(error)),
    )
    .await;
}

/// Serves one connection until the peer closes it, misbehaves past recovery, misses a frame
/// deadline, is displaced or reclaimed, or the daemon closes.
async fn connection(
    stream: UnixStream,
    dispatcher: Dispatcher,
    own_uid: u32,
    mut closing: broadcast::Receiver<()>,
    slot: Slot,
) {
    let same_user = stream.peer_cred().is_ok_and(|cred| cred.uid() == own_uid);
    let mut framed = FramedStream::new(stream, FrameCodec::new());
    if !same_user {
        drop(slot);
        refuse(
            framed,
            DaemonError::new(
                DaemonErrorCode::PeerNotOwner,
                "the daemon serves only the user it runs as",
            ),
        )
        .await;
        return;
    }
    let deadline = Duration::from_millis(FRAME_READ_DEADLINE_MS);
    let mut state = dispatcher.connection();
    let mut admitted = false;
    loop {
        let frame = if admitted {
            // Idle until a frame begins (no deadline, but reclaimable), unless the bytes of the
            // next one already came with the last.
            if framed.read_buffer().is_empty() {
                slot.idle();
                let mut first = [0u8; 1];
                let read = tokio::select! {
                    read = framed.get_mut().read(&mut first) => read,
                    () = slot.close.notified() => return,
                    _ = closing.recv() => return,
                };
                if !matches!(read, Ok(1)) || !slot.busy() {
                    return;
                }
                framed.read_buffer_mut().extend_from_slice(&first);
            }
            tokio::select! {
                frame = tokio::time::timeout(deadline, next_frame(&mut framed)) => frame,
                _ = closing.recv() => return,
            }
        } else {
            // The first frame, whole, within the deadline of the accept.
            tokio::select! {
                frame = tokio::time::timeout(deadline, next_frame(&mut framed)) => frame,
                () = slot.close.notified() => return,
                _ = closing.recv() => return,
            }
        };
        let Ok(frame) = frame else {
            // The deadline passed mid-frame: the next frame cannot be found.
            return;
        };
        let request = match frame {
            Ok(body) => decode_request(&body),
            Err(FrameError::TooLarge { declared_bytes }) => {
                refuse(
                    framed,
                    DaemonError::new(
                        DaemonErrorCode::FrameTooLarge,
                        format!(
                            "a frame of {declared_bytes} bytes is outside 1..={}; the connection is closed",
                            super::protocol::MAX_FRAME_BYTES
                        ),
                    ),
                )
                .await;
                return;
            }
            Err(_) => return,
        };
        if !admitted {
            let owner = request.as_ref().is_ok_and(is_owner_operation);
            if !slot.admit(owner) {
                refuse(
                    framed,
                    DaemonError::new(
                        DaemonErrorCode::TooManyConnections,
                        format!(
                            "the daemon serves at most {MAX_CONNECTIONS} connections and none is idle; try again later"
                        ),
                    ),
                )
                .await;
                return;
            }
            admitted = true;
        }
        let reply = match request {
            Ok(request) => dispatcher.dispatch_wire(&mut state, request).await,
            Err(error) => Reply::Error(error),
        };
        let written = tokio::time::timeout(
            Duration::from_millis(PEER_WRITE_TIMEOUT_MS),
            send_frame(&mut framed, &reply),
        )
        .await;
        if !matches!(written, Ok(Ok(()))) {
            return;
        }
    }
}
