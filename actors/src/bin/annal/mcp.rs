//! `annal mcp --actor ID [--manifest FILE]`: an MCP server on stdio for one agent, over the
//! policy gate of the store's daemon.
//!
//! - `tools/list` asks the gate each time which tools this actor may call now: none when history
//!   is not admitted, agents are disabled, or the actor holds no live grant. Each tool has its
//!   closed input schema (`additionalProperties: false`; `history_query` with the paging
//!   `cursor`), its `outputSchema`, and annotations (read only, closed world; status
//!   idempotent). The server declares `listChanged` and sends `notifications/tools/list_changed`
//!   when the gate's answer differs from what the client was last listed (polled over the open
//!   link every `TOOLS_WATCH_INTERVAL_MS`).
//! - `tools/call` hands the name and the raw arguments to the gate, which validates them (rmcp
//!   does not), decides, audits and answers (a name that is neither tool: `unknown_tool`).
//!   Results come back as `structuredContent` with the contract's fields and the same JSON as
//!   text; failures as a result with `isError: true`, the fixed `code` and its fixed short
//!   `message` (never a value the caller chose).
//! - `--manifest FILE` approves a bounded-mode manifest for this actor when the server starts
//!   (passing it is the owner's approval: the owner writes the agent's MCP configuration).
//! - A call whose request would not fit one socket frame is answered `invalid_history_query`
//!   at once, without sending anything; every wait on the daemon has the client's deadlines
//!   (`annal_actors::daemon::client`), so no call holds the link for longer. A daemon that
//!   closed the link (stopped, restarted, idle exit) is reconnected to once per call, started
//!   again if it is gone.
//!
//! Logs go to stderr only; the end of stdin ends the server: in-flight calls get rmcp's drain
//! (5 s), then the process exits; a daemon link still held by a stuck call is simply dropped,
//! an in-process engine (`--no-daemon`) drains first once free (waiting at most
//! [`BRIDGE_LINK_RELEASE_DEADLINE_MS`] for it).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use annal_actors::daemon::client::REPLY_DEADLINE_MS;
use annal_actors::daemon::{Request, ToolReply, check_request_size};
use annal_engine::policy::manifest::MANIFEST_MAX_LEN_BYTES;
use annal_engine::policy::{ActorId, Operation, Refusal};
use annal_schema::ErrorCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tracing::Instrument;

use crate::link::{Link, Lost};
use crate::location::Location;
use crate::{CliError, report_error};

/// How an agent should use `history_status` (seed 000's consultation policy; the rules it
/// shares with the bundled skill are checked by `skill::CONSULTATION_RULES`).
pub(crate) const STATUS_DESCRIPTION: &str = "Reports whether this machine keeps a local \
     history of computer-use agent actions, and whether it is enabled, paused, encrypted and \
     healthy. Call it before history_query when you need to know whether history can help, and \
     keep what it says: disabled, paused, unhealthy or dropped events mean history is \
     incomplete or unusable. Its result enters your context. If history is absent, disabled, \
     denied or failing, continue without history.";

/// How an agent should use `history_query` (seed 000's consultation policy; the rules it
/// shares with the bundled skill are checked by `skill::CONSULTATION_RULES`).
pub(crate) const QUERY_DESCRIPTION: &str = "Reads metadata about earlier computer-use actions \
     on this machine: which capability ran, in which application and session, and what effect \
     was confirmed. Consult it when resuming interrupted work, recalling what was already done, \
     explaining a prior run, or finding where a workflow stopped; not otherwise. Events are \
     metadata evidence, not a transcript: no screenshots, typed text, window titles, URLs or \
     tool arguments are kept, and anything omitted stays unknown: do not guess it. Use a \
     returned application or capability as a lead and verify the current state through the \
     least intrusive source. The result enters your context. Filters: limit (1-200, newest \
     kept, returned oldest first), session_id, since_sequence, until_sequence (inclusive); pass \
     the result's cursor to read the next page. On absence or failure, continue without \
     history; surface a denial to the user and continue without history.";

/// What the server tells a host at initialization (the consultation policy in brief).
pub(crate) const SERVER_INSTRUCTIONS: &str = "Local computer-use history (metadata only). Use \
     history_status, then history_query, only when earlier actions on this machine matter; \
     continue without history when it is absent, denied or failing.";

/// Longest a `--no-daemon` bridge waits, once stdin has closed, for a call still holding its
/// in-process engine before it exits without draining it, in milliseconds: the longest one
/// request may hold the link.
const BRIDGE_LINK_RELEASE_DEADLINE_MS: u64 = REPLY_DEADLINE_MS;

/// Arguments of `annal mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The agent this server speaks for (grants are per actor).
    #[arg(long)]
    pub actor: String,
    /// A bounded-mode manifest (YAML or JSON, version 3) to approve for this actor at start.
    /// For an actor the owner revoked it grants nothing (a revocation sticks) unless
    /// `--reapprove`.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Approve the manifest again for an actor the owner revoked (the owner's explicit choice;
    /// journaled as a re-approval).
    #[arg(long, requires = "manifest")]
    pub reapprove: bool,
}

/// How often the bridge asks the gate, over its open link, which tools this actor may call,
/// to send `notifications/tools/list_changed` when that differs from what the client was last
/// listed, in milliseconds. The poll never opens a link (or starts a daemon) itself.
const TOOLS_WATCH_INTERVAL_MS: u64 = 1_000;

/// The MCP server of one actor.
#[derive(Clone)]
struct HistoryServer {
    /// The actor's id, as the gate knows it.
    actor: String,
    /// The store.
    location: Location,
    /// Open the store in-process instead of through the daemon.
    no_daemon: bool,
    /// The way to the store, opened on first use and again after it failed.
    link: Arc<tokio::sync::Mutex<Option<Link>>>,
    /// The tools the client was last listed (`None`: not listed yet).
    listed: Arc<std::sync::Mutex<Option<Vec<Operation>>>>,
}

impl HistoryServer {
    /// One request to the store. A link found lost (the daemon stopped or restarted since the
    /// last call) is opened again and the request sent once more (starting the daemon again
    /// if it is gone); any other unavailable link is dropped so the next call reconnects.
    async fn ask(&self, request: Request) -> Result<Value, CliError> {
        let mut link = self.link.lock().await;
        let reused = link.is_some();
        for attempt in 0..2 {
            if link.is_none() {
                *link = Some(Link::open(&self.location, self.no_daemon).await?);
            }
            let Some(open) = link.as_mut() else {
                return Err(CliError::unavailable("no link to the store"));
            };
            let answer = open.request_or_lost(request.clone()).await;
            let (lost, error) = match answer {
                Ok(value) => return Ok(value),
                Err(failed) => failed,
            };
            if error.exit == crate::EXIT_UNAVAILABLE
                && let Some(failed) = link.take()
            {
                failed.close().await;
            }
            if !(reused && attempt == 0 && lost == Lost::Yes) {
                return Err(error);
            }
        }
        Err(CliError::unavailable("no link to the store"))
    }

    /// The tools this actor may call now, from the gate; none when the gate does not answer
    /// (fail closed).
    async fn allowed_tools(&self) -> Vec<Operation> {
        let answer = self
            .ask(Request::ToolsFor {
                actor: self.actor.clone(),
            })
            .await;
        answer
            .ok()
            .map(|value| tools_in(&value))
            .unwrap_or_default()
    }

    /// The tools this actor may call now, asked over the link only if one is open (never
    /// opening one); `None` without an open link or an answer (a lost link is dropped, so the
    /// next call reconnects).
    async fn allowed_tools_if_linked(&self) -> Option<Vec<Operation>> {
        let mut link = self.link.lock().await;
        let open = link.as_mut()?;
        let request = Request::ToolsFor {
            actor: self.actor.clone(),
        };
        match open.request_or_lost(request).await {
            Ok(value) => Some(tools_in(&value)),
            Err((_, error)) => {
                if error.exit == crate::EXIT_UNAVAILABLE
                    && let Some(failed) = link.take()
                {
                    failed.close().await;
                }
                None
            }
        }
    }

    /// Records what the client was listed.
    fn remember_listed(&self, tools: &[Operation]) {
        let mut listed = self
            .listed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *listed = Some(tools.to_vec());
    }

    /// Whether `now` differs from what the client was last listed (then remembered as listed:
    /// the client lists again on the notification).
    fn listing_changed(&self, now: &[Operation]) -> bool {
        let mut listed = self
            .listed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match listed.as_deref() {
            Some(before) if before != now => {
                *listed = Some(now.to_vec());
                true
            }
            _ => false,
        }
    }
}

/// The operations a `tools_for` answer names, in its order.
fn tools_in(value: &Value) -> Vec<Operation> {
    value["tools"]
        .as_array()
        .map(|names| {
            names
                .iter()
                .filter_map(|name| name.as_str().and_then(Operation::from_tool))
                .collect()
        })
        .unwrap_or_default()
}

/// Tells the client when the tools this actor may call change (a grant, a revocation, the
/// agents switch, an expiry), by polling the gate every [`TOOLS_WATCH_INTERVAL_MS`]; ends when
/// the client is gone.
async fn watch_tools(server: HistoryServer, peer: rmcp::Peer<RoleServer>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(TOOLS_WATCH_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let Some(now) = server.allowed_tools_if_linked().await else {
            continue;
        };
        if server.listing_changed(&now) && peer.notify_tool_list_changed().await.is_err() {
            return;
        }
    }
}

/// A JSON Schema value as the object MCP carries.
fn schema_object(schema: Value) -> Arc<serde_json::Map<String, Value>> {
    Arc::new(match schema {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    })
}

/// A tool as `tools/list` shows it: its closed input schema, its output schema (what a
/// successful result's `structuredContent` holds) and its annotations: both read only and
/// closed world (they read this machine's history and nothing else); status is idempotent
/// (a query is not: each page it returns is recorded by an `access` event).
fn tool(operation: Operation) -> Tool {
    let (input, output, description, annotations) = match operation {
        Operation::Status => (
            annal_schema::tools::history_status_input_schema(),
            annal_schema::tools::history_status_output_schema(),
            STATUS_DESCRIPTION,
            ToolAnnotations::new().idempotent(true),
        ),
        Operation::Query => (
            annal_engine::policy::query_input_schema(),
            annal_engine::policy::query_output_schema(),
            QUERY_DESCRIPTION,
            ToolAnnotations::new(),
        ),
    };
    let mut tool = Tool::new(operation.tool(), description, schema_object(input));
    tool.output_schema = Some(schema_object(output));
    tool.annotations = Some(annotations.read_only(true).open_world(false));
    tool
}

/// A structured result: `value` as `structuredContent` and as text.
fn result(value: Value, is_error: bool) -> CallToolResult {
    let text = ContentBlock::text(value.to_string());
    let mut result = if is_error {
        CallToolResult::error(vec![text])
    } else {
        CallToolResult::success(vec![text])
    };
    result.structured_content = Some(value);
    result
}

/// A failed call: the fixed code and its fixed short message (never a value the caller chose).
fn refused(refusal: Refusal) -> CallToolResult {
    result(
        json!({"code": refusal.code(), "message": refusal.message()}),
        true,
    )
}

fn failure(code: ErrorCode) -> CallToolResult {
    refused(Refusal::Contract(code))
}

impl ServerHandler for HistoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("annal", env!("CARGO_PKG_VERSION")))
        .with_instructions(SERVER_INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Fail closed: no answer from the gate lists nothing.
        let allowed = self.allowed_tools().await;
        self.remember_listed(&allowed);
        Ok(ListToolsResult::with_all_items(
            allowed.into_iter().map(tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let operation = Operation::from_tool(&request.name).map_or("unknown", Operation::name);
        let call = Request::CallTool {
            actor: self.actor.clone(),
            tool: request.name.to_string(),
            arguments: request.arguments.unwrap_or_default(),
        };
        // Arguments too large for one frame cannot be the tool's (its schema is small and
        // closed): refused here, never sent.
        if check_request_size(&call).is_err() {
            return Ok(failure(ErrorCode::InvalidHistoryQuery).into());
        }
        let span = annal_actors::telemetry::span::mcp_call(operation);
        let answer = self.ask(call).instrument(span.clone()).await;
        let (result, refusal) = match answer.ok().and_then(ToolReply::from_value) {
            Some(ToolReply::Answer(answer)) => (result(answer, false), None),
            Some(ToolReply::Refusal(refusal)) => (refused(refusal), Some(refusal.code())),
            None => (
                failure(ErrorCode::HistoryStorageUnavailable),
                Some(ErrorCode::HistoryStorageUnavailable.as_str()),
            ),
        };
        annal_actors::telemetry::span::record_decision(&span, refusal);
        Ok(result.into())
    }
}

fn read_manifest(path: &PathBuf) -> Result<String, CliError> {
    let file = std::fs::File::open(path)
        .map_err(|e| CliError::usage(format!("--manifest {}: {e}", path.display())))?;
    let mut text = String::new();
    file.take(MANIFEST_MAX_LEN_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| CliError::usage(format!("--manifest {}: {e}", path.display())))?;
    if text.len() > MANIFEST_MAX_LEN_BYTES {
        return Err(CliError::usage(format!(
            "--manifest {}: longer than {MANIFEST_MAX_LEN_BYTES} bytes",
            path.display()
        )));
    }
    Ok(text)
}

async fn serve_mcp(location: &Location, no_daemon: bool, args: &McpArgs) -> Result<(), CliError> {
    ActorId::new(&args.actor).map_err(|_| {
        CliError::usage(format!(
            "--actor: 1..={} characters of letters, digits, '.', '_' or '-'",
            annal_engine::policy::ACTOR_ID_MAX_LEN_CHARS
        ))
    })?;
    let link = Arc::new(tokio::sync::Mutex::new(None));
    let server = HistoryServer {
        actor: args.actor.clone(),
        location: location.clone(),
        no_daemon,
        link: Arc::clone(&link),
        listed: Arc::new(std::sync::Mutex::new(None)),
    };
    if let Some(path) = &args.manifest {
        let manifest = read_manifest(path)?;
        server
            .ask(Request::ApproveManifest {
                actor: args.actor.clone(),
                manifest,
                reapprove: args.reapprove,
            })
            .await?;
    }
    let watched = server.clone();
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CliError::unavailable(format!("MCP initialization failed: {e}")))?;
    let watcher = tokio::spawn(watch_tools(watched, running.peer().clone()));
    let _ = running.waiting().await;
    watcher.abort();
    // Only an in-process engine has anything to drain: it waits for a call still holding the
    // link, at most the deadline. A daemon link is let go at once, even by a call stuck on it
    // (dropped with the runtime; nothing could carry its answer any more).
    let wait_ms = if no_daemon {
        BRIDGE_LINK_RELEASE_DEADLINE_MS
    } else {
        0
    };
    let released =
        tokio::time::timeout(std::time::Duration::from_millis(wait_ms), link.lock()).await;
    if let Ok(mut held) = released
        && let Some(open) = held.take()
    {
        open.close().await;
    }
    Ok(())
}

/// Runs `annal mcp`.
pub fn run(location: &Location, no_daemon: bool, args: &McpArgs) -> ExitCode {
    let runtime = match crate::runtime() {
        Ok(runtime) => runtime,
        Err(error) => return report_error(&error),
    };
    match runtime.block_on(serve_mcp(location, no_daemon, args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => report_error(&error),
    }
}
