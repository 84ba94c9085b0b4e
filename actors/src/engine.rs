//! [`Engine`]: the embeddable handle.
//!
//! An engine owns its runtime: one OS thread runs a small tokio runtime with the actor tree on
//! it, so `Engine::start` works the same from plain synchronous code and from inside an
//! embedder's tokio runtime, and nothing of annal ever runs on the embedder's workers. The
//! capture hook ([`Engine::capture`]) is synchronous and never blocks. Control operations come
//! in two forms: blocking (`enable`, `flush`, ...: for synchronous code; refused with
//! [`EngineError::InAsyncContext`] inside a tokio runtime rather than stalling a worker) and
//! `async` (`enable_async`, ...). Each returns after its change is durable.

use std::sync::Arc;
use std::time::Duration;

use annal_engine::capture::{CaptureHandle, capture_channel};
use annal_engine::clock::{Clock, SystemClock};
use annal_engine::entropy::{Entropy, OsEntropy};
use annal_engine::journal::CallerKind;
use annal_engine::keys::KeyProvider;
use annal_engine::query::OwnerFilter;
use annal_engine::storage::Storage;
use annal_schema::ControlOperation;
use annal_schema::tools::StatusResponse;
use ractor::{Actor, ActorRef, RpcReplyPort};

use crate::config::{CONTROL_DEADLINE_MS, EngineConfig};
use crate::gate::{GateMsg, PolicyChange, ToolAnswer, ToolCall};
use crate::journal::JournalMsg;
use crate::supervisor::{SupervisorActor, SupervisorArgs, SupervisorMsg};
use crate::writer::{ControlError, Setting};
use annal_engine::policy::views::{AuditEntry, AuditFilter, GrantView};
use annal_engine::policy::{Operation, Principal, Refusal};

/// Worker threads of the engine's own runtime: one for the writer's blocking file I/O, one so
/// the ingress and the rest keep running meanwhile.
pub const ENGINE_WORKER_THREADS: usize = 2;

/// Longest `Engine::start` waits for the actor tree to come up, in milliseconds (it reads the
/// journal and may load the key).
pub const START_DEADLINE_MS: u64 = CONTROL_DEADLINE_MS;

/// Why an engine call failed. Carries no content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A blocking call was made from inside a tokio runtime; use the `_async` form there.
    #[error("a blocking engine call was made inside an async runtime; use the _async form")]
    InAsyncContext,
    /// The engine could not start (its thread, runtime or actor tree).
    #[error("the engine could not start")]
    Start,
    /// Another writer (another engine or annal daemon, or the reference) holds the store's
    /// writer lock: two writers never run at once.
    #[error("another writer holds the store's writer lock")]
    StoreLocked,
    /// The operation failed, with why.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The engine did not answer in time, or was shut down.
    #[error("the engine did not answer in time")]
    Unavailable,
    /// The engine journal (the policy and the audit trail) cannot be read now: its key or its
    /// storage is failing. Never shown as an empty answer.
    #[error(
        "the engine journal cannot be read now: its key or its storage is failing (`annal status` \
         says which; `annal doctor` checks the credential stores)"
    )]
    JournalUnreadable,
}

/// Why a query returned no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The engine did not answer (see [`EngineError`]).
    #[error(transparent)]
    Engine(EngineError),
    /// The store refused with the contract's code (`history_storage_corrupt`, ...).
    #[error("the query was refused: {0}")]
    Refused(annal_schema::ErrorCode),
}

/// What `shutdown` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The queue was drained and the writer synced within the deadline.
    pub drained: bool,
    /// How long shutdown took.
    pub took: Duration,
}

/// The running engine.
pub struct Engine {
    /// The engine's own runtime (its thread runs it).
    pub(crate) runtime: tokio::runtime::Handle,
    /// The root of the actor tree.
    supervisor: ActorRef<SupervisorMsg>,
    /// The capture hook handed to the embedder.
    capture: CaptureHandle,
    /// Status readings of the capture queue.
    capture_control: annal_engine::capture::CaptureControl,
    /// Tells the runtime thread to wind down.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Signalled when the runtime thread has ended. Behind a lock only so the engine is `Sync`
    /// (a `Receiver` is not): one `Arc<Engine>` may serve control calls from several threads.
    ended: Option<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
    /// The configuration (for deadlines).
    config: EngineConfig,
    /// Where the gate is found: tool calls go to it, not through the supervisor.
    children: crate::children::Children,
    /// The engine's clock (whether a grant is live now).
    clock: Arc<dyn annal_engine::clock::Clock>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("layout", &self.config.layout)
            .finish_non_exhaustive()
    }
}

/// The parts `start` hands to the runtime thread.
struct Startup {
    config: EngineConfig,
    provider: Arc<dyn KeyProvider>,
    clock: Arc<dyn Clock>,
    storage: Option<Arc<dyn Storage>>,
}

impl Engine {
    /// Starts an engine on the store of `config` with the credential store `key_store`. Capture
    /// starts only when the embedder admitted history (`config.admitted`) and the owner enabled
    /// it (persisted; see [`Engine::enable`]). A store whose writer lock another process holds
    /// is refused ([`EngineError::StoreLocked`]): two writers never run at once.
    pub fn start(
        config: EngineConfig,
        key_store: Arc<dyn KeyProvider>,
    ) -> Result<Self, EngineError> {
        Self::start_inner(Startup {
            config,
            provider: key_store,
            clock: Arc::new(SystemClock),
            storage: None,
        })
    }

    /// [`Engine::start`] with an injected clock and storage, for tests (a `FaultyStorage`, a
    /// manual clock).
    #[cfg(feature = "testing")]
    pub fn start_with(
        config: EngineConfig,
        key_store: Arc<dyn KeyProvider>,
        clock: Arc<dyn Clock>,
        storage: Option<Arc<dyn Storage>>,
    ) -> Result<Self, EngineError> {
        Self::start_inner(Startup {
            config,
            provider: key_store,
            clock,
            storage,
        })
    }

    /// [`Engine::start`] for async callers: the start-up (journal replay, key load) runs on the
    /// engine's own thread while the caller's runtime only awaits.
    pub async fn start_async(
        config: EngineConfig,
        key_store: Arc<dyn KeyProvider>,
    ) -> Result<Self, EngineError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("annal-engine-start".into())
            .spawn(move || {
                let _ = tx.send(Self::start(config, key_store));
            })
            .map_err(|_| EngineError::Start)?;
        rx.await.map_err(|_| EngineError::Start)?
    }

    fn start_inner(startup: Startup) -> Result<Self, EngineError> {
        let mut seed = [0u8; 32];
        OsEntropy.fill(&mut seed).map_err(|_| EngineError::Start)?;
        let mut instance = [0u8; 8];
        OsEntropy
            .fill(&mut instance)
            .map_err(|_| EngineError::Start)?;
        let instance = format!("annal-{:016x}", u64::from_be_bytes(instance));
        let children = crate::children::Children::new(&instance);
        let (capture, drain) = capture_channel(
            startup.config.capture_capacity_events,
            Arc::clone(&startup.clock),
        )
        .map_err(|_| EngineError::Start)?;
        let control = drain.control();
        let capture_control = control.clone();
        let storage = match startup.storage {
            Some(injected) => Some(injected),
            None => open_existing_store(&startup.config.layout)?,
        };
        let clock = Arc::clone(&startup.clock);
        let args = SupervisorArgs {
            config: startup.config.clone(),
            clock: startup.clock,
            provider: startup.provider,
            capture: control,
            drain,
            action_seed: seed,
            storage,
            instance: instance.clone(),
        };
        type Ready = Result<(ActorRef<SupervisorMsg>, tokio::runtime::Handle), EngineError>;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Ready>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("annal-engine".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(ENGINE_WORKER_THREADS)
                    .thread_name("annal-worker")
                    .enable_all()
                    .build();
                let Ok(runtime) = runtime else {
                    let _ = ready_tx.send(Err(EngineError::Start));
                    return;
                };
                runtime.block_on(async move {
                    match Actor::spawn(Some(instance), SupervisorActor, args).await {
                        Ok((supervisor, join)) => {
                            let _ = ready_tx
                                .send(Ok((supervisor.clone(), tokio::runtime::Handle::current())));
                            let _ = stop_rx.await;
                            supervisor.stop(None);
                            let _ = join.await;
                        }
                        Err(_) => {
                            let _ = ready_tx.send(Err(EngineError::Start));
                        }
                    }
                });
                runtime.shutdown_timeout(Duration::from_millis(500));
                let _ = ended_tx.send(());
            })
            .map_err(|_| EngineError::Start)?;
        let (supervisor, runtime) = ready_rx
            .recv_timeout(Duration::from_millis(START_DEADLINE_MS))
            .map_err(|_| EngineError::Start)??;
        Ok(Self {
            runtime,
            supervisor,
            capture,
            capture_control,
            stop: Some(stop_tx),
            ended: Some(std::sync::Mutex::new(ended_rx)),
            config: startup.config,
            children,
            clock,
        })
    }

    /// The capture hook: clone it into every thread that dispatches tools.
    pub fn capture(&self) -> CaptureHandle {
        self.capture.clone()
    }

    /// How many captured events wait in the queue for the ingress (a reading for embedders that
    /// want back-pressure, such as a bulk import or a bench; the hook itself never waits).
    pub fn queued_events(&self) -> usize {
        self.capture_control.queued_events()
    }

    /// Sends `make(reply)` to the supervisor from this thread and waits for the answer,
    /// blocking, for at most [`CONTROL_DEADLINE_MS`]. No task is spawned for the ask: the
    /// supervisor's mailbox wakes it, and the answer wakes this thread, so a flush under load
    /// waits for no idle worker to pick up a go-between.
    fn ask_blocking<T: Send + 'static>(
        &self,
        make: impl FnOnce(RpcReplyPort<T>) -> SupervisorMsg,
    ) -> Result<T, EngineError> {
        self.ask_blocking_to(&self.supervisor, make)
    }

    /// [`Engine::ask_blocking`] of any child (the gate, for a tool call).
    fn ask_blocking_to<M: ractor::Message, T: Send + 'static>(
        &self,
        actor: &ActorRef<M>,
        make: impl FnOnce(RpcReplyPort<T>) -> M,
    ) -> Result<T, EngineError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(EngineError::InAsyncContext);
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        actor
            .send_message(make(reply.into()))
            .map_err(|_| EngineError::Unavailable)?;
        // The engine's runtime lives as long as `self` (its thread ends at shutdown, which
        // consumes the engine), so its timer is there to bound the wait.
        let deadline = Duration::from_millis(CONTROL_DEADLINE_MS);
        match self
            .runtime
            .block_on(async { tokio::time::timeout(deadline, answer).await })
        {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) | Err(_) => Err(EngineError::Unavailable),
        }
    }

    /// Runs `make(reply)` on the supervisor and awaits the answer (on the engine's runtime, so
    /// the caller's runtime only awaits).
    async fn ask_async<T: Send + 'static>(
        &self,
        make: impl FnOnce(RpcReplyPort<T>) -> SupervisorMsg + Send + 'static,
    ) -> Result<T, EngineError> {
        Self::ask_async_to(&self.runtime, self.supervisor.clone(), make).await
    }

    /// [`Engine::ask_async`] of any child (the gate, for a tool call).
    async fn ask_async_to<M: ractor::Message, T: Send + 'static>(
        runtime: &tokio::runtime::Handle,
        actor: ActorRef<M>,
        make: impl FnOnce(RpcReplyPort<T>) -> M + Send + 'static,
    ) -> Result<T, EngineError> {
        let task =
            runtime.spawn(async move { ractor::call_t!(actor, make, CONTROL_DEADLINE_MS).ok() });
        task.await.ok().flatten().ok_or(EngineError::Unavailable)
    }

    /// A tool call, sent straight to the gate that runs now (never through the supervisor).
    fn tool_blocking(&self, make: ToolMessage) -> Result<Result<ToolAnswer, Refusal>, EngineError> {
        let gate = self.children.gate().ok_or(EngineError::Unavailable)?;
        self.ask_blocking_to(&gate, make)
    }

    /// [`Engine::tool_blocking`], for async callers.
    async fn tool_async(
        &self,
        make: ToolMessage,
    ) -> Result<Result<ToolAnswer, Refusal>, EngineError> {
        let gate = self.children.gate().ok_or(EngineError::Unavailable)?;
        Self::ask_async_to(&self.runtime, gate, make).await
    }

    fn control(&self, operation: ControlOperation) -> Result<StatusResponse, EngineError> {
        Ok(self.ask_blocking(move |reply| SupervisorMsg::Control {
            operation,
            caller: CallerKind::Embedder,
            reply,
        })??)
    }

    async fn control_async(
        &self,
        operation: ControlOperation,
    ) -> Result<StatusResponse, EngineError> {
        Ok(self
            .ask_async(move |reply| SupervisorMsg::Control {
                operation,
                caller: CallerKind::Embedder,
                reply,
            })
            .await??)
    }

    /// The owner opts in: creates the key on first use and starts capture (if admitted).
    pub fn enable(&self) -> Result<StatusResponse, EngineError> {
        self.control(ControlOperation::Enable)
    }

    /// The owner opts out: capture stops; history stays.
    pub fn disable(&self) -> Result<StatusResponse, EngineError> {
        self.control(ControlOperation::Disable)
    }

    /// New capture pauses (completions of admitted actions are still recorded).
    pub fn pause(&self) -> Result<StatusResponse, EngineError> {
        self.control(ControlOperation::Pause)
    }

    /// Capture resumes after a pause.
    pub fn resume(&self) -> Result<StatusResponse, EngineError> {
        self.control(ControlOperation::Resume)
    }

    /// The owner sets the encrypted-byte quota (default 100 MiB) and what capture does at it.
    /// At the quota capture stops (`quota_reached`), or with `evict_oldest` the oldest sealed
    /// chunks go; reads and their access records keep working.
    pub fn set_quota(
        &self,
        bytes: u64,
        on_quota: annal_engine::journal::OnQuota,
    ) -> Result<StatusResponse, EngineError> {
        self.set(Setting::Quota { bytes, on_quota })
    }

    /// The owner sets query-visible retention in days (default 7): no query returns an older
    /// event from then on, and pruning removes the chunks that hold only such events.
    pub fn set_retention(&self, days: u32) -> Result<StatusResponse, EngineError> {
        self.set(Setting::Retention { days })
    }

    /// The owner changes a setting; returns once it is durable. A value outside its bounds is
    /// refused (`ControlError::OutOfBounds`), never clamped, and nothing is sent.
    pub fn set(&self, setting: Setting) -> Result<StatusResponse, EngineError> {
        if !setting.in_bounds() {
            return Err(ControlError::OutOfBounds.into());
        }
        Ok(self.ask_blocking(move |reply| SupervisorMsg::Set {
            setting,
            caller: CallerKind::Embedder,
            reply,
        })??)
    }

    /// [`Engine::set`] from inside an async runtime.
    pub async fn set_async(&self, setting: Setting) -> Result<StatusResponse, EngineError> {
        if !setting.in_bounds() {
            return Err(ControlError::OutOfBounds.into());
        }
        Ok(self
            .ask_async(move |reply| SupervisorMsg::Set {
                setting,
                caller: CallerKind::Embedder,
                reply,
            })
            .await??)
    }

    /// The contract's `flush`: everything captured before this call is durable when it
    /// returns, and while history is enabled the flush's `control` event is written after it,
    /// as the reference writes one ([`Engine::sync`] makes it durable with no record).
    pub fn flush(&self) -> Result<StatusResponse, EngineError> {
        Ok(self.ask_blocking(|reply| SupervisorMsg::Flush {
            record: true,
            reply,
        })??)
    }

    /// Everything captured before this call is durable when it returns, with no record: the
    /// embedder's own checkpoint (before it reads the store's files, say). [`Engine::flush`]
    /// is the contract's operation, which writes its `control` event.
    pub fn sync(&self) -> Result<StatusResponse, EngineError> {
        Ok(self.ask_blocking(|reply| SupervisorMsg::Flush {
            record: false,
            reply,
        })??)
    }

    /// The contract's status (always the 11-field shape).
    pub fn status(&self) -> Result<StatusResponse, EngineError> {
        self.ask_blocking(|reply| SupervisorMsg::Status { reply })
    }

    /// Serves one `history_query` for the owner (`operation` says how the read is recorded:
    /// `local_cli`, or `agent_query` for an embedder reading on an agent's behalf). It goes
    /// through the policy gate as the owner, so it is audited like every read; a non-empty
    /// answer appends the contract's `access` event, which is not part of it.
    pub fn query(
        &self,
        request: annal_schema::tools::QueryRequest,
        operation: annal_schema::AccessOperation,
    ) -> Result<annal_schema::tools::QueryResponse, QueryError> {
        let call = ToolCall::owner_query(request, OwnerFilter::NONE);
        query_response(self.tool_blocking(tool_message(Principal::Owner, call, operation)))
    }

    /// [`Engine::query`], for async callers.
    pub async fn query_async(
        &self,
        request: annal_schema::tools::QueryRequest,
        operation: annal_schema::AccessOperation,
    ) -> Result<annal_schema::tools::QueryResponse, QueryError> {
        self.owner_query_async(request, OwnerFilter::NONE, operation)
            .await
    }

    /// [`Engine::query_async`] narrowed by the owner's `filter` (`annal list`, `query` and
    /// `search`; `annal_engine::query::filter` has its rules). The same gate and audit.
    pub async fn owner_query_async(
        &self,
        request: annal_schema::tools::QueryRequest,
        filter: OwnerFilter,
        operation: annal_schema::AccessOperation,
    ) -> Result<annal_schema::tools::QueryResponse, QueryError> {
        let call = ToolCall::owner_query(request, filter);
        query_response(
            self.tool_async(tool_message(Principal::Owner, call, operation))
                .await,
        )
    }

    /// One MCP tool call by `principal`: `tool` is the tool's name, `arguments` its JSON
    /// arguments. Decided by the policy gate, audited before it runs and after; the answer is
    /// the structured result (the contract's fields, plus `has_more` and `cursor` when another
    /// page exists), the refusal its fixed code (`{"code": ...}`).
    pub fn call_tool(
        &self,
        principal: &Principal,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> Result<ToolAnswer, Refusal> {
        let message = agent_tool_message(principal, tool, arguments);
        self.tool_blocking(message).map_err(|_| UNAVAILABLE)?
    }

    /// [`Engine::call_tool`], for async callers.
    pub async fn call_tool_async(
        &self,
        principal: &Principal,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> Result<ToolAnswer, Refusal> {
        let message = agent_tool_message(principal, tool, arguments);
        self.tool_async(message).await.map_err(|_| UNAVAILABLE)?
    }

    /// The tools `principal` may call right now (what an MCP server lists): none when history
    /// is not admitted, agents are disabled, or the actor holds no live grant.
    pub fn tools_for(&self, principal: &Principal) -> Vec<Operation> {
        let principal = principal.clone();
        self.ask_blocking(move |reply| SupervisorMsg::ToolsFor { principal, reply })
            .unwrap_or_default()
    }

    /// The grants in force and the revoked actors, as the owner sees them (`annal grants`):
    /// each grant's source, expiry, idle deadline, last use and whether it is live now. Read
    /// from the journal's projection, which the gate keeps its policy from.
    pub fn grants(&self) -> Result<Grants, EngineError> {
        let journal = self.children.journal().ok_or(EngineError::Unavailable)?;
        let policy = self
            .ask_blocking_to(&journal, |reply| JournalMsg::OwnerPolicy { reply })?
            .map_err(|_| EngineError::JournalUnreadable)?;
        Ok(Grants::of(&policy, self.clock.now_ms()))
    }

    /// [`Engine::grants`], for async callers.
    pub async fn grants_async(&self) -> Result<Grants, EngineError> {
        let journal = self.children.journal().ok_or(EngineError::Unavailable)?;
        let policy = Self::ask_async_to(&self.runtime, journal, |reply| JournalMsg::OwnerPolicy {
            reply,
        })
        .await?
        .map_err(|_| EngineError::JournalUnreadable)?;
        Ok(Grants::of(&policy, self.clock.now_ms()))
    }

    /// Who read my history (`annal audit`): every gated call, its verdict, outcome and returned
    /// count, oldest first, filtered. Read from the journal's own records.
    pub fn audit(&self, filter: AuditFilter) -> Result<Vec<AuditEntry>, EngineError> {
        let journal = self.children.journal().ok_or(EngineError::Unavailable)?;
        self.ask_blocking_to(&journal, |reply| JournalMsg::Audit { filter, reply })?
            .map_err(|_| EngineError::JournalUnreadable)
    }

    /// [`Engine::audit`], for async callers.
    pub async fn audit_async(&self, filter: AuditFilter) -> Result<Vec<AuditEntry>, EngineError> {
        let journal = self.children.journal().ok_or(EngineError::Unavailable)?;
        Self::ask_async_to(&self.runtime, journal, |reply| JournalMsg::Audit {
            filter,
            reply,
        })
        .await?
        .map_err(|_| EngineError::JournalUnreadable)
    }

    /// [`Engine::tools_for`], for async callers.
    pub async fn tools_for_async(&self, principal: &Principal) -> Vec<Operation> {
        let principal = principal.clone();
        self.ask_async(move |reply| SupervisorMsg::ToolsFor { principal, reply })
            .await
            .unwrap_or_default()
    }

    /// The owner changes the policy (a grant, a manifest approval, a revocation, the agents
    /// switch): durable when this returns, in effect from the next call.
    pub fn change_policy(&self, change: PolicyChange) -> Result<(), EngineError> {
        Ok(self.ask_blocking(move |reply| SupervisorMsg::Policy { change, reply })??)
    }

    /// [`Engine::change_policy`], for async callers.
    pub async fn change_policy_async(&self, change: PolicyChange) -> Result<(), EngineError> {
        Ok(self
            .ask_async(move |reply| SupervisorMsg::Policy { change, reply })
            .await??)
    }

    /// [`Engine::enable`], for async callers.
    pub async fn enable_async(&self) -> Result<StatusResponse, EngineError> {
        self.control_async(ControlOperation::Enable).await
    }

    /// [`Engine::disable`], for async callers.
    pub async fn disable_async(&self) -> Result<StatusResponse, EngineError> {
        self.control_async(ControlOperation::Disable).await
    }

    /// [`Engine::pause`], for async callers.
    pub async fn pause_async(&self) -> Result<StatusResponse, EngineError> {
        self.control_async(ControlOperation::Pause).await
    }

    /// [`Engine::resume`], for async callers.
    pub async fn resume_async(&self) -> Result<StatusResponse, EngineError> {
        self.control_async(ControlOperation::Resume).await
    }

    /// [`Engine::flush`], for async callers.
    pub async fn flush_async(&self) -> Result<StatusResponse, EngineError> {
        Ok(self
            .ask_async(|reply| SupervisorMsg::Flush {
                record: true,
                reply,
            })
            .await??)
    }

    /// [`Engine::sync`], for async callers.
    pub async fn sync_async(&self) -> Result<StatusResponse, EngineError> {
        Ok(self
            .ask_async(|reply| SupervisorMsg::Flush {
                record: false,
                reply,
            })
            .await??)
    }

    /// [`Engine::status`], for async callers.
    pub async fn status_async(&self) -> Result<StatusResponse, EngineError> {
        self.ask_async(|reply| SupervisorMsg::Status { reply })
            .await
    }

    /// The store's encrypted bytes as annal counts them ([`crate::writer::StoreUsage`]): the
    /// contract's `bytes_used` (the history's chunks) and annal's journal beside it, whose sum
    /// the quota counts. As the writer last read or wrote them; unavailable while no writer
    /// runs.
    pub fn usage(&self) -> Result<crate::writer::StoreUsage, EngineError> {
        let writer = self.children.writer().ok_or(EngineError::Unavailable)?;
        self.ask_blocking_to(&writer, |reply| crate::writer::WriterMsg::Usage { reply })
    }

    /// [`Engine::usage`], for async callers.
    pub async fn usage_async(&self) -> Result<crate::writer::StoreUsage, EngineError> {
        let writer = self.children.writer().ok_or(EngineError::Unavailable)?;
        Self::ask_async_to(&self.runtime, writer, |reply| {
            crate::writer::WriterMsg::Usage { reply }
        })
        .await
    }

    /// Test-only: the writer panics inside its handler, as a bug would.
    #[cfg(feature = "testing")]
    pub fn inject_writer_panic(&self) {
        self.inject_failure(
            annal_engine::health::Child::Writer,
            crate::supervisor::InjectedFailure::Panic,
        );
    }

    /// Test-only: how often `child` was restarted after a failure in this engine's life (the
    /// supervisor's count; the journal keeps the same as `child_restarted` signals).
    #[cfg(feature = "testing")]
    pub fn restarts(&self, child: annal_engine::health::Child) -> Result<usize, EngineError> {
        self.ask_blocking(|reply| SupervisorMsg::Restarts { child, reply })
    }

    /// Test-only: `child` panics inside its handler or stops unasked, as `failure` says; the
    /// supervisor then treats it as any failure of that child.
    #[cfg(feature = "testing")]
    pub fn inject_failure(
        &self,
        child: annal_engine::health::Child,
        failure: crate::supervisor::InjectedFailure,
    ) {
        let _ = self
            .supervisor
            .cast(SupervisorMsg::InjectFailure { child, failure });
    }

    /// Test-only: the writer runs its periodic rotation check (rotation by age, retention) now
    /// rather than at its next `ROTATION_CHECK_SECS` tick.
    #[cfg(feature = "testing")]
    pub fn check_rotation_now(&self) {
        let _ = self.supervisor.cast(SupervisorMsg::CheckRotationNow);
    }

    /// Drains the capture queue, syncs, stops every actor and the runtime, within
    /// `config.shutdown_deadline`. Always returns; from inside an async runtime it does not
    /// wait for the drain (use [`Engine::shutdown_async`] there).
    pub fn shutdown(mut self) -> ShutdownReport {
        let started = std::time::Instant::now();
        let deadline = self.config.shutdown_deadline;
        let drained = if tokio::runtime::Handle::try_current().is_ok() {
            false
        } else {
            let (tx, rx) = std::sync::mpsc::channel();
            let supervisor = self.supervisor.clone();
            let deadline_ms = annal_engine::clock::millis(deadline);
            self.runtime.spawn(async move {
                let done = ractor::call_t!(
                    supervisor,
                    |reply| SupervisorMsg::Shutdown { reply },
                    deadline_ms
                );
                let _ = tx.send(done.is_ok());
            });
            rx.recv_timeout(deadline).unwrap_or(false)
        };
        self.wind_down(started, deadline);
        ShutdownReport {
            drained,
            took: started.elapsed(),
        }
    }

    /// [`Engine::shutdown`], for async callers.
    pub async fn shutdown_async(mut self) -> ShutdownReport {
        let started = std::time::Instant::now();
        let deadline = self.config.shutdown_deadline;
        let supervisor = self.supervisor.clone();
        let deadline_ms = annal_engine::clock::millis(deadline);
        let task = self.runtime.spawn(async move {
            ractor::call_t!(
                supervisor,
                |reply| SupervisorMsg::Shutdown { reply },
                deadline_ms
            )
            .is_ok()
        });
        let drained = tokio::time::timeout(deadline, task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false);
        // The runtime thread ends on its own; do not block this runtime waiting for it.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.ended = None;
        ShutdownReport {
            drained,
            took: started.elapsed(),
        }
    }

    /// Stops the runtime thread and waits for it, within what is left of the deadline.
    fn wind_down(&mut self, started: std::time::Instant, deadline: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(ended) = self.ended.take() {
            let ended = ended
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let left = deadline.saturating_sub(started.elapsed()) + Duration::from_millis(500);
            let _ = ended.recv_timeout(left);
        }
    }
}

/// What a tool call answers when the engine itself does not.
/// The store's storage, opened for writing, when the store exists; `None` when it does not yet
/// (the writer creates it on enable) or cannot be opened for another reason (the engine then
/// reports it through its health). A store whose writer lock another process holds is refused.
fn open_existing_store(
    layout: &annal_engine::storage::StoreLayout,
) -> Result<Option<Arc<dyn Storage>>, EngineError> {
    use annal_engine::storage::{Access, OpenStorageError};
    use annal_engine::store::{OpenStoreError, open_store};
    match open_store(layout, Access::Write) {
        Ok(opened) => Ok(Some(Arc::new(opened))),
        Err(OpenStoreError::Storage(OpenStorageError::Locked)) => Err(EngineError::StoreLocked),
        Err(_) => Ok(None),
    }
}

/// The grants in force, as the owner sees them ([`Engine::grants`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    /// Each grant, by actor and operation.
    pub grants: Vec<GrantView>,
    /// The actors revoked since their last grant.
    pub revoked: Vec<annal_engine::policy::ActorId>,
    /// The owner's own reads append the contract's `access` event (the owner's setting).
    pub owner_access_events: bool,
}

impl Grants {
    /// The owner's view of `policy` at `now_ms`.
    fn of(policy: &annal_engine::policy::PolicyState, now_ms: u64) -> Self {
        Self {
            grants: policy.grant_views(now_ms),
            revoked: policy.revoked_actors(),
            owner_access_events: policy.owner_access_events(),
        }
    }
}

const UNAVAILABLE: Refusal = Refusal::Contract(annal_schema::ErrorCode::HistoryStorageUnavailable);

/// The gate message of one tool call, given its reply port.
type ToolMessage = Box<dyn FnOnce(RpcReplyPort<Result<ToolAnswer, Refusal>>) -> GateMsg + Send>;

/// The gate message of one tool call.
fn tool_message(
    principal: Principal,
    call: ToolCall,
    access: annal_schema::AccessOperation,
) -> ToolMessage {
    Box::new(move |reply| GateMsg::Call {
        principal,
        call,
        access,
        reply,
    })
}

/// The gate message of a tool call by name, recorded as the principal's kind of read
/// (`local_cli` for the owner, `agent_query` for an agent); the gate refuses and audits an
/// unknown tool.
fn agent_tool_message(
    principal: &Principal,
    tool: &str,
    arguments: &serde_json::Value,
) -> ToolMessage {
    let call = ToolCall::parse(tool, arguments);
    let access = match principal {
        Principal::Owner => annal_schema::AccessOperation::LocalCli,
        Principal::Agent(_) => annal_schema::AccessOperation::AgentQuery,
    };
    tool_message(principal.clone(), call, access)
}

/// An owner's query answer as the contract's response or code.
fn query_response(
    answer: Result<Result<ToolAnswer, Refusal>, EngineError>,
) -> Result<annal_schema::tools::QueryResponse, QueryError> {
    match answer.map_err(QueryError::Engine)? {
        Ok(ToolAnswer::Query { response, .. }) => Ok(response),
        Ok(ToolAnswer::Status(_)) => Err(QueryError::Refused(
            annal_schema::ErrorCode::HistoryStorageUnavailable,
        )),
        Err(Refusal::Contract(code)) => Err(QueryError::Refused(code)),
        // The owner is never denied and passes no cursor; anything else is the store's fault.
        Err(_) => Err(QueryError::Refused(
            annal_schema::ErrorCode::HistoryStorageUnavailable,
        )),
    }
}

// An embedder shares one engine between its threads (capture hooks are cloned; control calls
// go through `&Engine`).
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Engine>();
};

impl Drop for Engine {
    fn drop(&mut self) {
        // Without `shutdown` the actors still stop (and the writer syncs in its `post_stop`);
        // nothing here waits.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
