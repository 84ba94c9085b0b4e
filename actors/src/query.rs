//! The message interface of the Query actor (the query-path issue implements it).
//!
//! Reads never block capture or the writer: the Query actor reads completed, synced records
//! by location from the append-only files and a hot cache. Every read carries a proof from the
//! policy gate (a later issue); this interface fixes only the shape of the conversation.

use annal_schema::ErrorCode;
use annal_schema::tools::{QueryRequest, QueryResponse};
use ractor::RpcReplyPort;

/// What the Query actor will be asked.
pub enum QueryMsg {
    /// Serve one `history_query`.
    Query {
        /// The validated request.
        request: QueryRequest,
        /// The response, or the contract's error code.
        reply: RpcReplyPort<Result<QueryResponse, ErrorCode>>,
    },
}
