//! Every event of a report's scope, read as pages of the owner's `history_query` (newest
//! first, each page's `until_sequence` below the previous page's oldest event) through the
//! policy gate as `local_cli`.
//!
//! Over the daemon a page is the `query` request and its answer, read straight from the frame
//! as typed events (no JSON tree in between), and the next page's request is written before
//! the current page is turned into rows, so the daemon reads it meanwhile. With the store
//! opened in this process (`--no-daemon`, `--key-file`, `annal demo --report`) a page is the
//! same call the daemon makes for that request (`daemon::owner_query`), asked for as a task
//! ahead of the rows in the same way: the same gate, audit and `access` event, without the
//! socket.

use std::sync::Arc;

use annal_actors::daemon::{DaemonErrorCode, Request, ToolReply, owner_query};
use annal_schema::tools::QUERY_LIMIT_MAX_EVENTS;

use super::REPORT_EVENTS_MAX;
use super::model::Row;
use crate::CliError;
use crate::link::{Link, from_client};

/// Every event `base` (an owner's `query` request of [`QUERY_LIMIT_MAX_EVENTS`]) matches, at
/// most [`REPORT_EVENTS_MAX`]; `true` with them when more were left unread.
pub async fn read_all(link: &mut Link, base: &Request) -> Result<(Vec<Row>, bool), CliError> {
    if let Some(engine) = link.engine() {
        return read_all_typed(engine, base).await;
    }
    let Some(client) = link.daemon() else {
        return Err(CliError::unavailable(
            "the store is neither open here nor served",
        ));
    };
    let mut rows = Vec::new();
    client.send(&below(base, None)).await.map_err(from_client)?;
    loop {
        let page = match client
            .receive_as::<ToolReply<PageAnswer>>()
            .await
            .map_err(from_client)?
        {
            ToolReply::Answer(answer) => TypedPage::of(answer.events),
            ToolReply::Refusal(refusal) => return Err(crate::reads::refused(refusal)),
        };
        let next = page.next(rows.len());
        if let Next::Below(until) = next {
            client
                .send(&below(base, Some(until)))
                .await
                .map_err(from_client)?;
        }
        rows.extend(page.events.iter().filter_map(Row::from_typed));
        match next {
            Next::Below(_) => {}
            Next::Done => return Ok((rows, false)),
            Next::Truncated => return Ok((rows, true)),
        }
    }
}

/// What a page's answer holds that a report reads: its events, typed (the contract's fields
/// beside them are not needed).
#[derive(serde::Deserialize)]
struct PageAnswer {
    events: Vec<annal_schema::Event>,
}

/// What comes after a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The page below this sequence.
    Below(u64),
    /// Nothing: the page was the last.
    Done,
    /// Nothing more is read: [`REPORT_EVENTS_MAX`] is reached with more left unread.
    Truncated,
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
        match page.next(rows.len()) {
            Next::Below(until) => {
                pending = Some(ask(below(base, Some(until))));
                // Let the new read reach the gate before this thread turns to the rows.
                tokio::task::yield_now().await;
            }
            Next::Done => {}
            Next::Truncated => truncated = true,
        }
        rows.extend(page.events.iter().filter_map(Row::from_typed));
    }
    Ok((rows, truncated))
}

/// A page an engine in this process answered: its events as they came.
struct TypedPage {
    events: Vec<annal_schema::Event>,
    returned: usize,
    lowest: Option<u64>,
}

/// The page of `request` from an engine in this process: the daemon's own `query` answer
/// (`daemon::owner_query`), its refusal answered as the daemon's refusal is.
async fn typed(
    engine: &Arc<annal_actors::Engine>,
    request: Request,
) -> Result<TypedPage, CliError> {
    let Ok((arguments, filter)) = request.into_owner_query() else {
        return Err(CliError::usage("a report reads with query requests only"));
    };
    match owner_query(engine, arguments, filter).await {
        Ok(ToolReply::Answer(response)) => Ok(TypedPage::of(response.events)),
        Ok(ToolReply::Refusal(refusal)) => Err(crate::reads::refused(refusal)),
        Err(error) if error.code == DaemonErrorCode::InvalidRequest => {
            Err(CliError::usage(error.message))
        }
        Err(error) => Err(CliError::unavailable(format!(
            "the engine did not answer the read: {}",
            error.message
        ))),
    }
}

impl TypedPage {
    fn of(events: Vec<annal_schema::Event>) -> Self {
        Self {
            returned: events.len(),
            lowest: events.iter().map(|e| e.data.sequence.get()).min(),
            events,
        }
    }

    /// What comes after this page, when `read` events were read before it: the page below its
    /// oldest event when it was full and that is not the store's first, unless that would
    /// pass [`REPORT_EVENTS_MAX`].
    fn next(&self, read: usize) -> Next {
        match self.lowest {
            Some(lowest) if self.returned >= usize::from(QUERY_LIMIT_MAX_EVENTS) && lowest > 1 => {
                if read + self.returned >= REPORT_EVENTS_MAX {
                    Next::Truncated
                } else {
                    Next::Below(lowest - 1)
                }
            }
            _ => Next::Done,
        }
    }
}
