//! Every event of a report's scope, read as pages of the owner's `history_query` (newest
//! first, each page's `until_sequence` below the previous page's oldest event) through the
//! policy gate as `local_cli`.
//!
//! Over the daemon a page is the `query` request and its JSON answer. With the store opened in
//! this process (`--no-daemon`, `--key-file`, `annal demo --report`) a page is the same call
//! the daemon makes for that request, `Engine::owner_query_async` with the same filter, read as
//! typed events: the same gate, audit and `access` event, without turning every event into JSON
//! and back (most of a large report's time otherwise).

use std::sync::Arc;

use annal_actors::QueryError;
use annal_actors::daemon::{Request, ToolReply};
use annal_engine::policy::Refusal;
use annal_engine::query::{OwnerFilter, OwnerFilterParts};
use annal_schema::AccessOperation;
use annal_schema::tools::{QUERY_LIMIT_MAX_EVENTS, QueryRequest};
use serde_json::Value;

use super::REPORT_EVENTS_MAX;
use super::model::Row;
use crate::CliError;
use crate::link::Link;

/// One page: its rows, how many events it returned, and the lowest sequence among them.
struct Page {
    rows: Vec<Row>,
    returned: usize,
    lowest: Option<u64>,
}

/// Every event `base` (an owner's `query` request of [`QUERY_LIMIT_MAX_EVENTS`]) matches, at
/// most [`REPORT_EVENTS_MAX`]; `true` with them when more were left unread.
pub async fn read_all(link: &mut Link, base: &Request) -> Result<(Vec<Row>, bool), CliError> {
    if let Some(engine) = link.engine() {
        return read_all_typed(engine, base).await;
    }
    let mut rows = Vec::new();
    let mut until_sequence: Option<u64> = None;
    loop {
        let page = page(link, below(base, until_sequence)).await?;
        rows.extend(page.rows);
        match page.lowest {
            Some(lowest) if page.returned >= usize::from(QUERY_LIMIT_MAX_EVENTS) && lowest > 1 => {
                if rows.len() >= REPORT_EVENTS_MAX {
                    return Ok((rows, true));
                }
                until_sequence = Some(lowest - 1);
            }
            _ => return Ok((rows, false)),
        }
    }
}

/// `base` with `until_sequence` set (or not).
fn below(base: &Request, until_sequence: Option<u64>) -> Request {
    let mut request = base.clone();
    if let (Request::Query { arguments, .. }, Some(until)) = (&mut request, until_sequence) {
        arguments.insert("until_sequence".into(), until.into());
    }
    request
}

/// [`read_all`] from an engine in this process: each next page is asked for as soon as the
/// previous one's oldest sequence is known, so the engine reads it while this thread turns the
/// previous one into rows.
async fn read_all_typed(
    engine: Arc<annal_actors::Engine>,
    base: &Request,
) -> Result<(Vec<Row>, bool), CliError> {
    let ask = |request: Request| {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move { typed(&engine, request).await })
    };
    let mut rows = Vec::new();
    let mut pending = Some(ask(below(base, None)));
    let mut truncated = false;
    while let Some(next) = pending.take() {
        let page = next
            .await
            .map_err(|e| CliError::unavailable(format!("a read did not finish: {e}")))??;
        match page.lowest {
            Some(lowest) if page.returned >= usize::from(QUERY_LIMIT_MAX_EVENTS) && lowest > 1 => {
                if rows.len() + page.returned >= REPORT_EVENTS_MAX {
                    truncated = true;
                } else {
                    pending = Some(ask(below(base, Some(lowest - 1))));
                    // Let the new read reach the gate before this thread turns to the rows.
                    tokio::task::yield_now().await;
                }
            }
            _ => {}
        }
        rows.extend(page.events.iter().filter_map(Row::from_typed));
    }
    Ok((rows, truncated))
}

async fn page(link: &mut Link, request: Request) -> Result<Page, CliError> {
    let mut value = link.request(request).await?;
    // The events taken out of the answer, not copied.
    let events = match value
        .get_mut("answer")
        .and_then(|answer| answer.get_mut("events"))
        .map(Value::take)
    {
        Some(Value::Array(events)) => events,
        _ => crate::reads::events(&value)?,
    };
    Ok(Page {
        returned: events.len(),
        lowest: events
            .iter()
            .filter_map(|e| e["data"]["sequence"].as_u64())
            .min(),
        rows: events.iter().filter_map(Row::from_event).collect(),
    })
}

/// A page an engine in this process answered: its events as they came.
struct TypedPage {
    events: Vec<annal_schema::Event>,
    returned: usize,
    lowest: Option<u64>,
}

/// The page of `request` from an engine in this process, as the daemon's `query` serves it.
async fn typed(
    engine: &Arc<annal_actors::Engine>,
    request: Request,
) -> Result<TypedPage, CliError> {
    let Request::Query {
        arguments,
        since_ms,
        until_ms,
        app,
        capability,
        outcome,
        text,
    } = request
    else {
        return Err(CliError::usage("a report reads with query requests only"));
    };
    // A refusal is answered exactly as the daemon's refusal would be (`reads::events`).
    let refused =
        |code| crate::reads::events(&ToolReply::Refusal(Refusal::Contract(code)).to_value());
    let filter = OwnerFilter::new(OwnerFilterParts {
        since_ms,
        until_ms,
        application: app,
        capability,
        outcome,
        text,
    })
    .map_err(|e| CliError::usage(e.to_string()))?;
    let request = match QueryRequest::parse(&Value::Object(arguments)) {
        Ok(request) => request,
        Err(code) => return refused(code).map(|_| TypedPage::empty()),
    };
    match engine
        .owner_query_async(request, filter, AccessOperation::LocalCli)
        .await
    {
        Ok(response) => Ok(TypedPage {
            returned: response.events.len(),
            lowest: response.events.iter().map(|e| e.data.sequence.get()).min(),
            events: response.events,
        }),
        Err(QueryError::Refused(code)) => refused(code).map(|_| TypedPage::empty()),
        Err(error) => Err(CliError::unavailable(format!(
            "the engine did not answer the read: {error}"
        ))),
    }
}

impl TypedPage {
    fn empty() -> Self {
        Self {
            events: Vec::new(),
            returned: 0,
            lowest: None,
        }
    }
}
