//! The PolicyGate actor: decides every gated call through the engine's one rule
//! (`PolicyState::decide`), makes its pre-execution audit record durable before anything runs,
//! records how it ended, and owns the paging cursors.
//!
//! A tool call comes here straight from the front-end ([`GateMsg::Call`]; the supervisor is
//! never in its path) and is owned by the gate end to end:
//!
//! 1. In the gate's handler: decide, redeem the cursor (if any) and apply the pre-execution
//!    record to the gate's policy. That is all the handler does, so calls from many agents are
//!    decided one after another in microseconds and then proceed concurrently.
//! 2. In a task of the call's own ([`crate::call`]): make the pre-execution record durable
//!    (fail closed: if that fails, nothing runs and the caller gets
//!    `history_storage_unavailable`; a denial's record holds the refusal too). Concurrent
//!    calls' records share one group commit in the journal (`JournalMsg::SyncCommits`). Then
//!    run the operation (status from the writer, a page from the query with the
//!    [`ReadGrant`]), append the contract's `access` event for a non-empty read (when the
//!    decision said so, `PolicyState::appends_access`: always for an agent's read, the owner's
//!    setting for the owner's own), and ask the gate to [`GateMsg::Finish`]: journal the
//!    outcome and the returned count, and issue the next page's cursor when more matches
//!    remain.
//!
//! Both steps run inside the call's `annal.gate.call` span, which ends with its decision (and
//! refusal code) and the count returned; the call is then counted and timed
//! (`annal.tool.calls`, `annal.tool.duration`; `crate::telemetry`).
//!
//! Policy changes (grants, revocation, the agents switch, the owner's access setting) come
//! here too, so one actor holds the policy every decision reads; each is durable before it
//! answers and takes effect on the next call. Audit records carry principal, operation,
//! verdict, outcome and count, never an argument, filter value, label or content (the
//! journal's closed schema cannot hold one).

use std::sync::Arc;

use annal_engine::clock::Clock;
use annal_engine::entropy::{Entropy, OsEntropy};
use annal_engine::journal::JournalEvent;
use annal_engine::policy::cursor::{CursorBook, GENERATION_LEN_BYTES};
use annal_engine::policy::{
    ActorId, Admission, AuditOutcome, CursorRefusal, GrantSource, GrantTerms, Operation,
    PolicyEvent, PolicyState, Principal, ReadGrant, Refusal, Verdict,
};
use annal_engine::query::OwnerFilter;
use annal_schema::ErrorCode;
use annal_schema::tools::QueryRequest;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;

use crate::journal::{JournalMsg, JournalUnavailable};
use crate::key_custody::KeyCustodyMsg;

/// The refusal of a call whose audit record could not be made durable, or whose gate could
/// not read the policy.
const UNAVAILABLE: Refusal = Refusal::Contract(ErrorCode::HistoryStorageUnavailable);

/// Longest the gate waits for the journal or key custody, in milliseconds.
const CHILD_CALL_DEADLINE_MS: u64 = crate::config::CONTROL_DEADLINE_MS;

/// What an allowed call may go on with.
#[derive(Debug)]
pub struct Admitted {
    /// The proof the Query actor requires.
    pub grant: ReadGrant,
    /// The exclusive upper sequence bound of the page the cursor stood for (`None`: the first
    /// page).
    pub before_sequence: Option<u64>,
    /// A read that returns events appends the contract's `access` event
    /// (`PolicyState::appends_access`: always for an agent's, the owner's setting for theirs).
    pub appends_access: bool,
}

/// An owner's change to the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyChange {
    /// Grant `operation` to `actor` under `terms` (standard mode).
    Grant {
        /// To whom.
        actor: ActorId,
        /// What.
        operation: Operation,
        /// For how long.
        terms: GrantTerms,
    },
    /// Approve a bounded-mode manifest for `actor`: a grant for each operation it names. For
    /// an actor the owner revoked, nothing, unless `reapprove` (the owner approves it again
    /// explicitly): a revocation sticks whatever manifest a later start presents
    /// (`PolicyState::manifest_approval`).
    ApproveManifest {
        /// For whom.
        actor: ActorId,
        /// The approved manifest.
        manifest: annal_engine::policy::manifest::Manifest,
        /// The owner lifts a revocation of `actor` on purpose.
        reapprove: bool,
    },
    /// Revoke every grant of `actor`.
    Revoke {
        /// Whom.
        actor: ActorId,
    },
    /// Turn every agent off (`false`) or back on (`true`).
    SwitchAgents {
        /// Agents may be allowed again.
        enabled: bool,
    },
    /// Whether the owner's own reads append the contract's `access` event (default `true`).
    OwnerAccess {
        /// They do.
        enabled: bool,
    },
    /// Record an export the owner made (`annal export`): `PolicyEvent::OwnerExported`, with
    /// the next audit id.
    Exported {
        /// Events in the archive.
        events: u64,
        /// The first event's sequence (0: none).
        first_sequence: u64,
        /// The last event's sequence (0: none).
        last_sequence: u64,
        /// Encrypted to age recipients.
        encrypted: bool,
    },
}

/// What the gate can be asked.
pub enum GateMsg {
    /// One tool call: decided here, run by a task of its own, answered by that task.
    Call {
        /// Who calls.
        principal: Principal,
        /// The call.
        call: ToolCall,
        /// How a non-empty read is recorded (`agent_query`, `local_cli`).
        access: annal_schema::AccessOperation,
        /// The answer, or the refusal's code.
        reply: RpcReplyPort<Result<ToolAnswer, Refusal>>,
    },
    /// A call's record could not be made durable: the gate's copy of the policy (which had
    /// it applied) is dropped and read again from the journal (`journal::Widenings`).
    CommitFailed,
    /// Record how an admitted call ended (step 2); replies with the next page's cursor.
    Finish {
        /// The call's audit id ([`ReadGrant::audit`]).
        audit: u64,
        /// Who called.
        principal: Principal,
        /// How it ended.
        outcome: AuditOutcome,
        /// How many events it returned.
        returned_events: u16,
        /// The request and the first sequence returned, when more matches remain.
        next_page: Option<(QueryRequest, u64)>,
        /// The journal to record in.
        journal: ActorRef<JournalMsg>,
        /// The cursor of the next page, when one was asked for and could be made.
        reply: RpcReplyPort<Option<String>>,
    },
    /// An owner's change, durable before the reply.
    Change {
        /// The change.
        change: PolicyChange,
        /// The journal to record in.
        journal: ActorRef<JournalMsg>,
        /// `Ok` once durable.
        reply: RpcReplyPort<Result<(), JournalUnavailable>>,
    },
    /// The tools `principal` may call now.
    ToolsFor {
        /// Who asks.
        principal: Principal,
        /// Whether agents may be admitted at all.
        admission: Admission,
        /// The journal (the policy is read from it on first use).
        journal: ActorRef<JournalMsg>,
        /// The operations, in listing order.
        reply: RpcReplyPort<Vec<Operation>>,
    },
    /// Test-only: panic inside the handler, as a bug would.
    #[cfg(feature = "testing")]
    InjectPanic,
}

/// What the gate starts with.
pub struct GateArgs {
    /// Key custody (the cursor key).
    pub keys: ActorRef<KeyCustodyMsg>,
    /// The clock (expiry, idle timeouts, cursor lifetimes).
    pub clock: Arc<dyn Clock>,
    /// Whether agents may be admitted at all, and whether they need grants.
    pub admission: Admission,
    /// Where a call's task finds the journal, the query and the writer.
    pub children: crate::children::Children,
    /// Counts and times each call (`annal.tool.calls`, `annal.tool.duration`).
    pub telemetry: crate::telemetry::Telemetry,
}

/// The gate's state.
pub struct GateState {
    /// The arguments.
    args: GateArgs,
    /// The policy, once read from the journal; then kept current by the events this actor
    /// journals (it is the only one that journals policy facts), and read again after a
    /// commit that failed.
    policy: Option<PolicyState>,
    /// The outstanding cursors, once the cursor key is loaded.
    cursors: Option<CursorBook>,
    /// This run's cursor generation (cursors of an earlier run are stale).
    generation: [u8; GENERATION_LEN_BYTES],
}

/// The PolicyGate actor.
pub struct GateActor;

impl GateState {
    /// The policy, read from the journal's projection on first use.
    async fn policy(&mut self, journal: &ActorRef<JournalMsg>) -> Option<&mut PolicyState> {
        if self.policy.is_none() {
            let policy = ractor::call_t!(
                journal,
                |reply| JournalMsg::Policy { reply },
                CHILD_CALL_DEADLINE_MS
            )
            .ok()?;
            self.policy = Some(policy);
        }
        self.policy.as_mut()
    }

    /// The cursor book, once the key is loaded.
    async fn cursors(&mut self) -> Option<&mut CursorBook> {
        if self.cursors.is_none() {
            let keys = ractor::call_t!(
                self.args.keys,
                |reply| KeyCustodyMsg::Open {
                    create: false,
                    reply
                },
                CHILD_CALL_DEADLINE_MS
            )
            .ok()?
            .ok()?;
            self.cursors = Some(CursorBook::new(keys.cursor, self.generation));
        }
        self.cursors.as_mut()
    }

    /// Journals `events` durably and applies them to the policy.
    async fn commit(
        &mut self,
        journal: &ActorRef<JournalMsg>,
        events: Vec<PolicyEvent>,
    ) -> Result<(), JournalUnavailable> {
        // Applied as the journal applies them when the commit succeeds. When it fails, the
        // journal keeps what narrows the policy and withdraws what widens it (`Widenings`):
        // the copy is dropped and read again from the journal, so the two never disagree (and
        // with no journal to read, every call is refused).
        self.apply(&events);
        let journaled = events.iter().cloned().map(JournalEvent::Policy).collect();
        let committed = ractor::call_t!(
            journal,
            |reply| JournalMsg::Commit {
                events: journaled,
                reply
            },
            CHILD_CALL_DEADLINE_MS
        )
        .map_err(|_| JournalUnavailable)
        .and_then(|committed| committed);
        if committed.is_err() {
            self.policy = None;
        }
        committed
    }

    /// Journals `events` with the next group commit (a completion record).
    fn record(&mut self, journal: &ActorRef<JournalMsg>, events: Vec<PolicyEvent>) {
        self.apply(&events);
        let _ = journal.cast(JournalMsg::Record(
            events.into_iter().map(JournalEvent::Policy).collect(),
        ));
    }

    /// Step 1 of a call (module doc): the decision, the cursor, and the records the call's
    /// task must make durable before anything runs, applied to the policy copy here. A call
    /// of an unknown tool (`operation` `None`) is not decided: its one record is the refusal.
    async fn decide_call(
        &mut self,
        principal: &Principal,
        call: &ToolCall,
        access: annal_schema::AccessOperation,
        journal: &ActorRef<JournalMsg>,
    ) -> crate::call::Decided {
        let (operation, cursor) = (call.operation(), call.cursor());
        use crate::call::Decided;
        let now_ms = self.args.clock.now_ms();
        let admission = self.args.admission;
        let Some(policy) = self.policy(journal).await else {
            return Decided::Unavailable;
        };
        let audit = policy.next_audit();
        let Some(operation) = operation else {
            let refused = PolicyEvent::UnknownToolRefused {
                audit,
                at_ms: now_ms,
                principal: principal.clone(),
            };
            self.apply(std::slice::from_ref(&refused));
            return Decided::Refuse {
                records: vec![JournalEvent::Policy(refused)],
                refusal: Refusal::Contract(ErrorCode::UnknownTool),
            };
        };
        let decision = policy.decide(principal, operation, admission, now_ms, audit);
        let appends_access = policy.appends_access(principal, access);
        let verdict = match &decision {
            Ok(_) => Verdict::Allowed,
            Err(reason) => Verdict::Denied(*reason),
        };
        let started = PolicyEvent::AuditStarted {
            audit,
            at_ms: now_ms,
            principal: principal.clone(),
            operation,
            verdict,
        };
        let grant = match decision {
            Ok(grant) => grant,
            Err(reason) => return self.refused(started, audit, Refusal::Denied(reason)),
        };
        // The cursor is checked after the decision (a denied caller learns nothing of it) and
        // before the pre-execution record, so a refused cursor is audited as such.
        let before_sequence = match cursor {
            None => None,
            Some((text, request)) => {
                let redeemed = match self.cursors().await {
                    Some(book) => book.redeem(&text, principal, &request, now_ms),
                    None => Err(CursorRefusal::Stale),
                };
                match redeemed {
                    Ok(before) => Some(before),
                    Err(refusal) => {
                        return self.refused(started, audit, Refusal::Cursor(refusal));
                    }
                }
            }
        };
        self.apply(std::slice::from_ref(&started));
        Decided::Run {
            record: JournalEvent::Policy(started),
            admitted: Admitted {
                grant,
                before_sequence,
                appends_access,
            },
        }
    }

    /// A call refused before it ran: its verdict and its refusal are to be made durable before
    /// the answer.
    fn refused(
        &mut self,
        started: PolicyEvent,
        audit: u64,
        refusal: Refusal,
    ) -> crate::call::Decided {
        let records = vec![started, finished(audit, AuditOutcome::Refused(refusal), 0)];
        self.apply(&records);
        crate::call::Decided::Refuse {
            records: records.into_iter().map(JournalEvent::Policy).collect(),
            refusal,
        }
    }

    /// Applies `events` to the policy copy, as the journal applies them when they commit.
    fn apply(&mut self, events: &[PolicyEvent]) {
        if let Some(policy) = self.policy.as_mut() {
            for event in events {
                policy.apply(event);
            }
        }
    }

    async fn finish(
        &mut self,
        audit: u64,
        principal: Principal,
        outcome: AuditOutcome,
        returned_events: u16,
        next_page: Option<(QueryRequest, u64)>,
        journal: &ActorRef<JournalMsg>,
    ) -> Option<String> {
        self.record(journal, vec![finished(audit, outcome, returned_events)]);
        let (request, before) = next_page?;
        let now_ms = self.args.clock.now_ms();
        let book = self.cursors().await?;
        book.issue(&principal, &request, before, now_ms, &mut OsEntropy)
            .ok()
    }

    async fn change(
        &mut self,
        change: PolicyChange,
        journal: &ActorRef<JournalMsg>,
    ) -> Result<(), JournalUnavailable> {
        let now_ms = self.args.clock.now_ms();
        if self.policy(journal).await.is_none() {
            return Err(JournalUnavailable);
        }
        let events = match change {
            PolicyChange::Grant {
                actor,
                operation,
                terms,
            } => vec![PolicyState::grant_event(
                &actor,
                operation,
                GrantSource::Owner,
                terms,
                now_ms,
            )],
            PolicyChange::ApproveManifest {
                actor,
                manifest,
                reapprove,
            } => match self.policy.as_ref() {
                Some(policy) => policy.manifest_approval(&actor, &manifest, reapprove, now_ms),
                None => return Err(JournalUnavailable),
            },
            PolicyChange::Revoke { actor } => vec![PolicyEvent::ActorRevoked { actor }],
            PolicyChange::SwitchAgents { enabled } => {
                vec![PolicyEvent::AgentsSwitched { enabled }]
            }
            PolicyChange::OwnerAccess { enabled } => {
                vec![PolicyEvent::OwnerAccessSwitched { enabled }]
            }
            PolicyChange::Exported {
                events,
                first_sequence,
                last_sequence,
                encrypted,
            } => match self.policy.as_ref() {
                Some(policy) => vec![PolicyEvent::OwnerExported {
                    audit: policy.next_audit(),
                    at_ms: now_ms,
                    events,
                    first_sequence,
                    last_sequence,
                    encrypted,
                }],
                None => return Err(JournalUnavailable),
            },
        };
        if events.is_empty() {
            return Ok(());
        }
        self.commit(journal, events).await
    }
}

/// The completion record of audit `audit`.
fn finished(audit: u64, outcome: AuditOutcome, returned_events: u16) -> PolicyEvent {
    PolicyEvent::AuditFinished {
        audit,
        outcome,
        returned_events,
    }
}

impl Actor for GateActor {
    type Msg = GateMsg;
    type State = GateState;
    type Arguments = GateArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: GateArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut generation = [0u8; GENERATION_LEN_BYTES];
        OsEntropy.fill(&mut generation)?;
        Ok(GateState {
            args,
            policy: None,
            cursors: None,
            generation,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            #[cfg(feature = "testing")]
            GateMsg::InjectPanic => panic!("injected gate panic (test)"),
            GateMsg::Call {
                principal,
                call,
                access,
                reply,
            } => {
                let started = std::time::Instant::now();
                let operation = call.operation().map_or("unknown", Operation::name);
                let span = crate::telemetry::span::gate_call(operation);
                let children = state.args.children.clone();
                let Some(journal) = children.journal() else {
                    let _ = reply.send(Err(UNAVAILABLE));
                    return Ok(());
                };
                let decided = state
                    .decide_call(&principal, &call, access, &journal)
                    .instrument(span.clone())
                    .await;
                let run = crate::call::Call {
                    principal,
                    call,
                    access,
                    children,
                    journal,
                    gate: myself,
                };
                let telemetry = state.args.telemetry.clone();
                tokio::spawn(
                    async move {
                        let answer = run.run(decided).await;
                        let refusal = answer.as_ref().err().map(|refusal| refusal.code());
                        let span = tracing::Span::current();
                        crate::telemetry::span::record_decision(&span, refusal);
                        if let Ok(ToolAnswer::Query { response, .. }) = &answer {
                            span.record("annal.events", response.events.len());
                        }
                        telemetry.tool_call(operation, refusal, started.elapsed());
                        let _ = reply.send(answer);
                    }
                    .instrument(span),
                );
            }
            GateMsg::CommitFailed => state.policy = None,
            GateMsg::Finish {
                audit,
                principal,
                outcome,
                returned_events,
                next_page,
                journal,
                reply,
            } => {
                let cursor = state
                    .finish(
                        audit,
                        principal,
                        outcome,
                        returned_events,
                        next_page,
                        &journal,
                    )
                    .await;
                let _ = reply.send(cursor);
            }
            GateMsg::Change {
                change,
                journal,
                reply,
            } => {
                let _ = reply.send(state.change(change, &journal).await);
            }
            GateMsg::ToolsFor {
                principal,
                admission,
                journal,
                reply,
            } => {
                let now_ms = state.args.clock.now_ms();
                let tools = match state.policy(&journal).await {
                    Some(policy) => policy.tools_for(&principal, admission, now_ms),
                    None => Vec::new(),
                };
                let _ = reply.send(tools);
            }
        }
        Ok(())
    }
}

/// One tool call, as the front-ends hand it over: the operation its tool names, with its
/// arguments as parsed, or the contract's code for arguments that did not parse (the call is
/// still decided and audited, and refused with that code only if it was allowed).
#[derive(Debug, Clone)]
pub enum ToolCall {
    /// `history_status`.
    Status {
        /// Its (empty) arguments.
        arguments: Result<(), ErrorCode>,
    },
    /// `history_query`.
    Query {
        /// The request and the paging cursor, if any.
        arguments: Result<(QueryRequest, Option<String>), ErrorCode>,
        /// The owner's filters ([`OwnerFilter::NONE`] for every agent's call: the tool takes
        /// exactly the contract's arguments, and the Query actor refuses a filter on any
        /// grant but the owner's).
        filter: OwnerFilter,
    },
    /// A tool that is neither: refused `unknown_tool` before any decision, and audited as that
    /// refusal (`PolicyEvent::UnknownToolRefused`). Its name and arguments are not kept.
    Unknown,
}

impl ToolCall {
    /// Parses a tool call from its MCP name and JSON arguments; a name that is neither tool is
    /// [`ToolCall::Unknown`] (the gate refuses and audits it).
    pub fn parse(tool: &str, arguments: &serde_json::Value) -> Self {
        match Operation::from_tool(tool) {
            Some(Operation::Status) => Self::Status {
                arguments: annal_schema::tools::parse_status_request(arguments),
            },
            Some(Operation::Query) => Self::Query {
                arguments: annal_engine::policy::parse_query_arguments(arguments),
                filter: OwnerFilter::NONE,
            },
            None => Self::Unknown,
        }
    }

    /// An owner's query (no cursor), narrowed by the owner's `filter`.
    pub fn owner_query(request: QueryRequest, filter: OwnerFilter) -> Self {
        Self::Query {
            arguments: Ok((request, None)),
            filter,
        }
    }

    /// The operation its tool names (`None`: an unknown tool).
    pub fn operation(&self) -> Option<Operation> {
        match self {
            Self::Status { .. } => Some(Operation::Status),
            Self::Query { .. } => Some(Operation::Query),
            Self::Unknown => None,
        }
    }

    /// The cursor and the request it must match, when the call pages.
    pub fn cursor(&self) -> Option<(String, QueryRequest)> {
        match self {
            Self::Query {
                arguments: Ok((request, Some(cursor))),
                ..
            } => Some((cursor.clone(), request.clone())),
            _ => None,
        }
    }
}

/// What an allowed tool call answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolAnswer {
    /// `history_status`.
    Status(annal_schema::tools::StatusResponse),
    /// `history_query`, with the next page's cursor when more matches remain.
    Query {
        /// The contract's response.
        response: annal_schema::tools::QueryResponse,
        /// The next page's cursor (the paging extension).
        cursor: Option<String>,
    },
}

impl ToolAnswer {
    /// The structured result: exactly the contract's fields, plus `has_more: true` and
    /// `cursor` when another page exists (a client that ignores them sees the contract).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Status(status) => serde_json::to_value(status).unwrap_or_default(),
            Self::Query { response, cursor } => {
                let mut value = serde_json::to_value(response).unwrap_or_default();
                if let (Some(cursor), Some(object)) = (cursor, value.as_object_mut()) {
                    object.insert("has_more".into(), serde_json::Value::Bool(true));
                    object.insert("cursor".into(), serde_json::Value::String(cursor.clone()));
                }
                value
            }
        }
    }
}
