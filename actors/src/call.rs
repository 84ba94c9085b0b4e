//! A tool call after the gate decided it: the task each call runs in, so calls proceed
//! concurrently and none waits behind another's sync or read (the gate's module doc has the
//! whole path).
//!
//! The task makes the call's pre-execution records durable through the journal (the journal
//! groups the commits that arrive together under one sync) and runs nothing unless that
//! succeeded; then it runs the operation with the gate's [`ReadGrant`](annal_engine::policy::ReadGrant)
//! (status from the writer; a page from the query), appends the contract's `access` event after
//! a non-empty read (never part of that read's answer), and has the gate journal the outcome
//! and issue the next page's cursor. Each child it talks to is looked up when it is needed
//! ([`Children`]), so a call that meets a restart fails closed (`history_storage_unavailable`)
//! instead of waiting on a generation that is gone.

use annal_engine::journal::JournalEvent;
use annal_engine::policy::{AuditOutcome, Principal, Refusal};
use annal_schema::tools::{QueryRequest, QueryResponse, StatusResponse};
use annal_schema::{AccessOperation, ErrorCode};
use ractor::ActorRef;
use tracing::Instrument;

use crate::children::Children;
use crate::gate::{Admitted, GateMsg, ToolAnswer, ToolCall};
use crate::journal::JournalMsg;
use crate::query::QueryMsg;
use crate::supervisor::SupervisorMsg;
use crate::writer::WriterMsg;

/// Longest a call's task waits for one child's answer, in milliseconds.
const CHILD_CALL_DEADLINE_MS: u64 = crate::config::CONTROL_DEADLINE_MS;

/// The refusal of a call whose records could not be made durable, or whose child is gone.
const UNAVAILABLE: Refusal = Refusal::Contract(ErrorCode::HistoryStorageUnavailable);

/// What the gate decided, and what must be durable before anything follows.
#[derive(Debug)]
pub enum Decided {
    /// The policy could not be read: nothing was decided or recorded.
    Unavailable,
    /// Refused: `records` (the verdict and the refusal) are made durable, then `refusal` is the
    /// answer.
    Refuse {
        /// The verdict and the refusal.
        records: Vec<JournalEvent>,
        /// The answer.
        refusal: Refusal,
    },
    /// Allowed: `record` (the pre-execution record) is made durable, then the call runs.
    Run {
        /// The pre-execution record.
        record: JournalEvent,
        /// The grant and the cursor's page bound.
        admitted: Admitted,
    },
}

/// One call's task.
pub struct Call {
    /// Who calls.
    pub principal: Principal,
    /// The call.
    pub call: ToolCall,
    /// How a non-empty read is recorded.
    pub access: AccessOperation,
    /// Where the query and the writer are found.
    pub children: Children,
    /// The journal the gate decided with.
    pub journal: ActorRef<JournalMsg>,
    /// The gate (the outcome, the cursor, a failed commit).
    pub gate: ActorRef<GateMsg>,
}

impl Call {
    /// Runs the call as `decided` says and returns its answer.
    pub async fn run(self, decided: Decided) -> Result<ToolAnswer, Refusal> {
        match decided {
            Decided::Unavailable => Err(UNAVAILABLE),
            Decided::Refuse { records, refusal } => {
                self.commit(records).await?;
                Err(refusal)
            }
            Decided::Run { record, admitted } => {
                self.commit(vec![record]).await?;
                self.run_admitted(admitted).await
            }
        }
    }

    /// Makes `records` durable; on a failure the gate reads the policy again and the caller
    /// gets `history_storage_unavailable` (fail closed).
    async fn commit(&self, records: Vec<JournalEvent>) -> Result<(), Refusal> {
        let committed = ractor::call_t!(
            self.journal,
            |reply| JournalMsg::Commit {
                events: records,
                reply
            },
            CHILD_CALL_DEADLINE_MS
        );
        if matches!(committed, Ok(Ok(()))) {
            Ok(())
        } else {
            let _ = self.gate.cast(GateMsg::CommitFailed);
            Err(UNAVAILABLE)
        }
    }

    /// The operation of an admitted call, then its outcome recorded and its next cursor.
    async fn run_admitted(self, admitted: Admitted) -> Result<ToolAnswer, Refusal> {
        let audit = admitted.grant.audit();
        let (mut answer, next_page) = match &self.call {
            ToolCall::Status { arguments: Ok(()) } => {
                (self.status().await.map(ToolAnswer::Status), None)
            }
            ToolCall::Query {
                arguments: Ok((request, _)),
                filter,
            } => match self.read(admitted, request.clone(), filter.clone()).await {
                Ok((response, next_page)) => (
                    Ok(ToolAnswer::Query {
                        response,
                        cursor: None,
                    }),
                    next_page,
                ),
                Err(refusal) => (Err(refusal), None),
            },
            ToolCall::Status {
                arguments: Err(code),
            }
            | ToolCall::Query {
                arguments: Err(code),
                ..
            } => (Err(Refusal::Contract(*code)), None),
            // Never admitted (the gate refuses it undecided); answered as refused all the same.
            ToolCall::Unknown => (Err(Refusal::Contract(ErrorCode::UnknownTool)), None),
        };
        let (outcome, returned_events) = match &answer {
            Ok(ToolAnswer::Query { response, .. }) => (
                AuditOutcome::Completed,
                u16::try_from(response.events.len()).unwrap_or(u16::MAX),
            ),
            Ok(ToolAnswer::Status(_)) => (AuditOutcome::Completed, 0),
            Err(refusal) => (AuditOutcome::Refused(*refusal), 0),
        };
        let principal = self.principal;
        let journal = self.journal;
        let next_cursor = ractor::call_t!(
            self.gate,
            |reply| GateMsg::Finish {
                audit,
                principal,
                outcome,
                returned_events,
                next_page,
                journal,
                reply,
            },
            CHILD_CALL_DEADLINE_MS
        )
        .ok()
        .flatten();
        if let Ok(ToolAnswer::Query { cursor, .. }) = &mut answer {
            *cursor = next_cursor;
        }
        answer
    }

    /// The contract's status: the writer's; while no writer answers, the supervisor's (from
    /// the journal's projection), which is the one place that knows which parts are down.
    async fn status(&self) -> Result<StatusResponse, Refusal> {
        if let Some(writer) = self.children.writer()
            && let Ok(status) = ractor::call_t!(
                writer,
                |reply| WriterMsg::Status { reply },
                CHILD_CALL_DEADLINE_MS
            )
        {
            return Ok(status);
        }
        let supervisor = self.children.supervisor().ok_or(UNAVAILABLE)?;
        ractor::call_t!(
            supervisor,
            |reply| SupervisorMsg::Status { reply },
            CHILD_CALL_DEADLINE_MS
        )
        .map_err(|_| UNAVAILABLE)
    }

    /// An allowed query: the page, the `access` event when it returned events (and the gate
    /// said a read of this principal appends one), and the next page's request and bound when
    /// more remain (never for an owner's filtered read: a cursor stands for the request alone).
    async fn read(
        &self,
        admitted: Admitted,
        request: QueryRequest,
        filter: annal_engine::query::OwnerFilter,
    ) -> Result<(QueryResponse, Option<(QueryRequest, u64)>), Refusal> {
        let query: ActorRef<QueryMsg> = self.children.query().ok_or(UNAVAILABLE)?;
        let appends_access = admitted.appends_access;
        let filtered = !filter.is_empty();
        let span = crate::telemetry::span::query_read();
        let page = async {
            ractor::call_t!(
                query,
                |reply| QueryMsg::Query {
                    grant: admitted.grant,
                    request: request.clone(),
                    filter: Box::new(filter),
                    before_sequence: admitted.before_sequence,
                    reply,
                },
                CHILD_CALL_DEADLINE_MS
            )
        }
        .instrument(span.clone())
        .await
        .unwrap_or(Err(ErrorCode::HistoryStorageUnavailable))
        .map_err(Refusal::Contract)?;
        span.record("annal.events", page.response.events.len());
        // The contract: a read that returns at least one event appends one `access` event,
        // which is not part of that answer (the owner may switch theirs off; the audit records
        // the read either way).
        if let Some(returned_events) = annal_schema::ReturnedEvents::new(page.response.events.len())
            && returned_events.get() > 0
            && appends_access
            && let Some(writer) = self.children.writer()
        {
            let _ = writer.cast(WriterMsg::Access {
                operation: self.access,
                returned_events,
            });
        }
        let next_page = match (page.has_more, page.response.events.first()) {
            (true, Some(first)) if !filtered => Some((request, first.data.sequence.get())),
            _ => None,
        };
        Ok((page.response, next_page))
    }
}
