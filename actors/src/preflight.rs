//! The host's preflight (seed 000): `history_status`, then, when the actor may query and
//! history is usable, one bounded `history_query`, then the consultation verdict
//! (`annal_engine::consultation::consult`). Each call goes through the gate exactly as the tool
//! call it stands for, so it is decided and audited the same way (status, then query); a query
//! the actor is not granted is not made, as a host that listed the tools would not make it.
//!
//! It never fails the host: an absent store, a refusal or a failure is a verdict
//! (`continue_without_history` with its fixed reason), not an error. Only a request that is
//! itself invalid (a limit out of range, a session id too long) is an error.

use std::ops::RangeInclusive;

use annal_engine::consultation::{self, Consultation, QuerySeen, StatusSeen};
use annal_engine::policy::{Operation, Principal, Refusal};
use annal_schema::tools::{QueryRequest, StatusResponse};
use annal_schema::{ErrorCode, Event};

use crate::Engine;
use crate::gate::ToolAnswer;

/// What a preflight asks for: the newest `limit` events, optionally of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreflightRequest {
    /// The query's bounded request, validated as `history_query` validates it.
    query: QueryRequest,
    /// The same as JSON arguments, as the tool call carries them.
    arguments: serde_json::Value,
}

impl PreflightRequest {
    /// Newest `limit` events (1..=200), of the session `session` when given (the keyed
    /// session id `history_query` takes). An invalid value is the contract's
    /// `invalid_history_query`.
    pub fn new(limit: u8, session: Option<&str>) -> Result<Self, ErrorCode> {
        let mut arguments = serde_json::json!({ "limit": limit });
        if let (Some(session), Some(object)) = (session, arguments.as_object_mut()) {
            object.insert("session_id".into(), session.into());
        }
        let query = QueryRequest::parse(&arguments)?;
        Ok(Self { query, arguments })
    }

    /// The validated request.
    pub fn query(&self) -> &QueryRequest {
        &self.query
    }
}

/// What a preflight returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Preflight {
    /// The status, when the status call answered.
    pub status: Option<StatusResponse>,
    /// The newest slice (newest first, as `history_query` returns it), when one was read.
    pub events: Vec<Event>,
    /// The missing sequence numbers within the slice (gap evidence).
    pub gaps: Vec<RangeInclusive<u64>>,
    /// What the host should do.
    pub consultation: Consultation,
}

impl Preflight {
    /// The JSON form `annal preflight --json` prints and the daemon's `preflight` request
    /// answers: `consultation` (`verdict`: `use`, `use_with_caveats` with `caveats`, or
    /// `continue_without_history` with `reason`), `status` (or `null`), `events` (the contract's
    /// form) and `gaps` (`first`, `last` of each missing range).
    pub fn to_json(&self) -> serde_json::Value {
        let consultation = match &self.consultation {
            Consultation::Use => serde_json::json!({ "verdict": "use" }),
            Consultation::UseWithCaveats(caveats) => serde_json::json!({
                "verdict": "use_with_caveats",
                "caveats": caveats.iter().map(|c| c.code()).collect::<Vec<_>>(),
            }),
            Consultation::ContinueWithoutHistory(reason) => serde_json::json!({
                "verdict": "continue_without_history",
                "reason": reason.code(),
            }),
        };
        let gaps: Vec<serde_json::Value> = self
            .gaps
            .iter()
            .map(|gap| serde_json::json!({ "first": gap.start(), "last": gap.end() }))
            .collect();
        serde_json::json!({
            "consultation": consultation,
            "status": self.status,
            "events": self.events,
            "gaps": gaps,
        })
    }

    /// The preflight of a host that found no history service at all (no store, no daemon):
    /// continue without history.
    pub fn absent() -> Self {
        Self {
            status: None,
            events: Vec::new(),
            gaps: Vec::new(),
            consultation: consultation::consult(&StatusSeen::Absent, QuerySeen::NotGranted),
        }
    }
}

impl Engine {
    /// The preflight for `principal` (module doc of `annal_actors::preflight`). From inside an
    /// async runtime, use [`Engine::preflight_async`]: here that continues without history.
    pub fn preflight(&self, principal: &Principal, request: &PreflightRequest) -> Preflight {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Preflight {
                consultation: consultation::consult(&StatusSeen::Failed, QuerySeen::NotGranted),
                ..Preflight::absent()
            };
        }
        self.runtime
            .block_on(self.preflight_async(principal, request))
    }

    /// [`Engine::preflight`], for async callers.
    pub async fn preflight_async(
        &self,
        principal: &Principal,
        request: &PreflightRequest,
    ) -> Preflight {
        let answer = self
            .call_tool_async(principal, "history_status", &serde_json::json!({}))
            .await;
        let (seen, status) = match answer {
            Ok(ToolAnswer::Status(status)) => {
                (StatusSeen::Answered(Box::new(status.clone())), Some(status))
            }
            Err(Refusal::Denied(_)) => (StatusSeen::Denied, None),
            // A store never enabled has no journal, so the gate refuses every call: the
            // engine's own state says which (it picks the reason, never an answer).
            // A key or storage failure also leaves no journal to audit in: said as such, not as
            // "disabled".
            Ok(ToolAnswer::Query { .. }) | Err(_) => match self.status_async().await {
                Ok(own) if annal_engine::consultation::is_unreadable(own.health) => {
                    (StatusSeen::Unreadable, None)
                }
                Ok(own) if !own.enabled => (StatusSeen::NeverEnabled, None),
                _ => (StatusSeen::Failed, None),
            },
        };
        let probe = QuerySeen::Returned {
            events: 1,
            missing: 0,
        };
        // No query when the status alone already decides (history off, unreadable, refused),
        // nor one the actor may not make (a host that listed the tools would not make it).
        let status_decides = matches!(
            consultation::consult(&seen, probe),
            Consultation::ContinueWithoutHistory(_)
        );
        let mut events = Vec::new();
        let query = if status_decides
            || !self
                .tools_for_async(principal)
                .await
                .contains(&Operation::Query)
        {
            QuerySeen::NotGranted
        } else {
            match self
                .call_tool_async(principal, "history_query", &request.arguments)
                .await
            {
                Ok(ToolAnswer::Query { response, .. }) => {
                    events = response.events;
                    let sequences: Vec<u64> =
                        events.iter().map(|e| e.data.sequence.get()).collect();
                    QuerySeen::Returned {
                        events: events.len(),
                        missing: consultation::missing(&sequences),
                    }
                }
                Err(Refusal::Denied(_)) => QuerySeen::Denied,
                Ok(ToolAnswer::Status(_)) | Err(_) => QuerySeen::Failed,
            }
        };
        let sequences: Vec<u64> = events.iter().map(|e| e.data.sequence.get()).collect();
        Preflight {
            consultation: consultation::consult(&seen, query),
            status,
            gaps: consultation::gaps(&sequences),
            events,
        }
    }
}
