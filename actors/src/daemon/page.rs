//! The owner's `query` request: a page of `history_query` with the owner's filter, through the
//! policy gate as `local_cli`, and the [`Answer`] that carries it to the connection still typed,
//! so its events are written straight into the reply frame (a 200-event page never becomes a
//! JSON tree; `annal report` reads thousands of them).

use annal_engine::policy::Refusal;
use annal_engine::query::{OwnerFilter, OwnerFilterParts};
use annal_schema::AccessOperation;
use annal_schema::tools::{QueryRequest, QueryResponse};
use serde_json::Value;

use super::protocol::{DaemonError, ToolReply};
use super::server::{failed, invalid};
use crate::engine::{Engine, QueryError};

/// A request's result as the dispatcher made it; on the wire each is the value it holds.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(super) enum Answer {
    /// Any answer but an owner's query page, as JSON.
    Json(Value),
    /// An owner's query page, typed until the frame is written.
    Page(ToolReply<QueryResponse>),
}

/// The owner's `query`: the page `arguments` (the contract's `history_query` arguments) ask
/// for, narrowed by `filter`; a request the contract refuses is a refusal, a filter that is
/// not valid an `invalid_request` naming it. The daemon answers its `query` requests with it,
/// and `annal report` its pages when the engine runs in its own process.
pub async fn owner_query(
    engine: &Engine,
    arguments: serde_json::Map<String, Value>,
    filter: OwnerFilterParts,
) -> Result<ToolReply<QueryResponse>, DaemonError> {
    let refused = |code| Ok(ToolReply::Refusal(Refusal::Contract(code)));
    let filter = OwnerFilter::new(filter).map_err(|e| invalid(e.to_string()))?;
    let request = match QueryRequest::parse(&Value::Object(arguments)) {
        Ok(request) => request,
        Err(code) => return refused(code),
    };
    match engine
        .owner_query_async(request, filter, AccessOperation::LocalCli)
        .await
    {
        Ok(response) => Ok(ToolReply::Answer(response)),
        Err(QueryError::Refused(code)) => refused(code),
        Err(QueryError::Engine(error)) => Err(failed(&error)),
    }
}
