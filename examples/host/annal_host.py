#!/usr/bin/env python3
"""A scripted agent host that consults annal's history the way seed 000 describes, through the
official MCP Python SDK (pinned in requirements.txt). No model is called: the model step is a
stub that prints, as one JSON object on stdout, the context the host would hand the model.

    python3 annal_host.py --config CONFIG.json [--server NAME] [--preflight]
                          [--limit N] [--session SESSION_ID] REQUEST...

CONFIG.json is the block `annal mcp-config --actor A --client claude` prints (a vscode block,
`servers`, is read too). What the host does:

1. It consults history only for a request to resume, recall or explain earlier work (the
   RESUME_RECALL_EXPLAIN pattern). Any other request goes to the model without history.
2. Tool path (the default): it starts the configured server as a client does, lists the tools
   (absent: go on without history), calls history_status and keeps its flags (enabled, paused,
   health, dropped events), and, when history is usable and history_query is offered, reads the
   newest LIMIT events. It renders them as a compact evidence card: metadata only (sequence,
   time, kind, capability, application id, outcome), with missing sequence numbers named as
   gaps, and an event of a schema it does not know left uninterpreted.
3. Preflight path (--preflight): instead of the tools, it runs the configured binary's
   `annal preflight --json` for the same actor and store, and hands on its verdict.
4. On absence, a denial, an empty slice or any failure it goes on without history and says
   why, with one of the preflight's fixed reasons (docs/protocol.md, `preflight`).

It never reads annal's store, never changes a grant or a permission, and never tries to rebuild
a slice it was denied by other means.

Exit status: 0 whatever history did (history never fails the host); 2 for bad usage.

For tests only: --hold-after {tools,status} --hold-file PATH makes the host stop after that
step, create PATH.ready, and wait (at most HOLD_DEADLINE_SECS) until PATH.go exists, so a test
can change the world between two calls (kill the daemon, let a grant expire).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

# The event schema this host understands (docs/event-contract.md); events of another schema
# are counted, never interpreted.
EVENT_SCHEMA = "urn:cua-driver:schema:history-event:v0"
# Prefix of every event type of that schema.
EVENT_TYPE_PREFIX = "cua-driver.history."
# Requests that consult history (seed 000: continue, resume, recall, explain a prior run, find
# where a workflow stopped).
RESUME_RECALL_EXPLAIN = re.compile(
    r"\b(resume|resuming|continue|continuing|pick up|left off|recall|remind me|what did i|"
    r"what have i|already done|explain|why did|what happened|where did .* stop|stopped)\b",
    re.IGNORECASE,
)
# Default and bounds of the slice read, in events (history_query's limit).
DEFAULT_LIMIT_EVENTS = 20
MAX_LIMIT_EVENTS = 200
# Longest one history step (start, list, one call) may take, in seconds; past it the host goes
# on without history.
STEP_DEADLINE_SECS = 60.0
# Longest the preflight command may run, in seconds.
PREFLIGHT_DEADLINE_SECS = 90.0
# Longest a test hold waits for its go file, in seconds, and how often it looks.
HOLD_DEADLINE_SECS = 120.0
HOLD_POLL_SECS = 0.02
# Health categories under which nothing can be read (annal_engine::consultation).
UNREADABLE_HEALTH = {
    "key_unavailable", "key_locked", "key_corrupt", "storage_unavailable", "storage_corrupt",
}
# Health categories under which capture is not recording now: newer actions are missing.
NOT_RECORDING_HEALTH = {"quota_reached", "writer_stopped"}
# The gate's denial codes (docs/policy.md): anything else a call fails with is a failure.
DENIALS = {"not_admitted", "agents_disabled", "not_granted", "expired", "idle_timeout", "revoked"}
# The status fields a host keeps (seed 000: disabled, paused, unhealthy, dropped events).
KEPT_STATUS_FIELDS = ("admitted", "enabled", "paused", "health", "dropped_events")
# What the host tells the model for each reason it goes on without history.
WITHOUT_NOTES = {
    "not_requested": "The request is not about earlier work; history was not consulted.",
    "history_absent": "No history tools are available here; continue without history.",
    "not_admitted": "This machine does not admit history; continue without history.",
    "disabled": "History is disabled: nothing is recorded; continue without history.",
    "status_denied": "The owner has not allowed this agent to read history status; say so "
                     "and continue without history.",
    "query_not_granted": "This agent may read history status but not query it; say so and "
                         "continue without history.",
    "query_denied": "The history query was refused; say so and continue without history.",
    "history_failed": "History could not be read (a failure); continue without history.",
    "history_unreadable": "History is unhealthy and cannot be read now; continue without "
                          "history.",
    "empty": "History holds nothing for this request; continue without history.",
}


class Hold:
    """The test seam: stop after a named step until the test says go."""

    def __init__(self, step, path):
        self.step = step
        self.path = path

    def at(self, step):
        if self.step != step or not self.path:
            return
        with open(self.path + ".ready", "w", encoding="utf-8") as ready:
            ready.write(step)
        deadline = time.monotonic() + HOLD_DEADLINE_SECS
        while not os.path.exists(self.path + ".go") and time.monotonic() < deadline:
            time.sleep(HOLD_POLL_SECS)


def load_server(config_path, name):
    """(command, args, env) of the configured server, or None when there is none."""
    try:
        with open(config_path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError):
        return None
    servers = config.get("mcpServers") or config.get("servers") or {}
    if not isinstance(servers, dict) or not servers:
        return None
    entry = servers.get(name) if name else next(iter(servers.values()))
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return None
    args = entry.get("args") or []
    env = entry.get("env") or None
    if not all(isinstance(a, str) for a in args):
        return None
    return entry["command"], args, env


def kept_status(status):
    """The flags a host keeps, nothing else."""
    return {field: status.get(field) for field in KEPT_STATUS_FIELDS}


def without(reason, status=None, code=None, path=None):
    history = {
        "decision": "continue_without_history",
        "reason": reason,
        "caveats": [],
        "status": kept_status(status) if status else None,
        "evidence_card": None,
        "note": WITHOUT_NOTES[reason],
    }
    if code:
        history["code"] = code
    if path:
        history["path"] = path
    return history


def gaps(sequences):
    """Missing sequence numbers between the lowest and highest returned, as [first, last]."""
    ordered = sorted(set(sequences))
    return [[a + 1, b - 1] for a, b in zip(ordered, ordered[1:]) if b > a + 1]


def card_line(event):
    """One event as metadata: sequence, time, kind, capability, application id, outcome."""
    data = event.get("data") or {}
    payload = data.get("payload") or {}
    parts = [f"#{data.get('sequence')}", str(event.get("time", "-")), str(payload.get("kind"))]
    if data.get("capability"):
        parts.append(data["capability"])
    application = data.get("application") or {}
    if application.get("bundle_id"):
        parts.append(f"app={application['bundle_id']}")
    if payload.get("effect"):
        parts.append(f"effect={payload['effect']}")
    if payload.get("route"):
        parts.append(f"route={payload['route']}")
    if payload.get("phase"):
        parts.append(f"phase={payload['phase']}")
    if payload.get("operation"):
        parts.append(f"operation={payload['operation']}")
    if payload.get("category"):
        parts.append(f"category={payload['category']}")
    return " ".join(parts)


def evidence(status, events, path):
    """The decision and evidence card for a non-empty slice read under `status`."""
    supported = [
        e for e in events
        if e.get("dataschema") == EVENT_SCHEMA
        and str(e.get("type", "")).startswith(EVENT_TYPE_PREFIX)
    ]
    sequences = [e["data"]["sequence"] for e in supported
                 if isinstance((e.get("data") or {}).get("sequence"), int)]
    missing = gaps(sequences)
    caveats = []
    if status.get("paused") or status.get("health") == "paused":
        caveats.append("paused")
    if (status.get("dropped_events") or 0) > 0 or status.get("health") == "events_dropped":
        caveats.append("events_dropped")
    if missing:
        caveats.append("gaps")
    if status.get("health") in NOT_RECORDING_HEALTH:
        caveats.append("not_recording")
    caveats.sort()
    card = [f"history: {len(supported)} events (metadata only, not a transcript)"]
    card.extend(card_line(e) for e in supported)
    for first, last in missing:
        card.append(f"gap: sequence {first}-{last} missing from this slice (not recorded, "
                    "dropped, or outside the filter): unknown")
    unsupported = len(events) - len(supported)
    if unsupported:
        card.append(f"{unsupported} events of an unsupported schema, not interpreted")
    if "paused" in caveats:
        card.append("capture is paused: the newest actions were not recorded")
    if "events_dropped" in caveats:
        card.append(f"capture dropped {status.get('dropped_events', 0)} events: some actions "
                    "were never recorded")
    card.append("verify the current state through the least intrusive source before acting")
    return {
        "decision": "use_with_caveats" if caveats else "use",
        "reason": None,
        "caveats": caveats,
        "status": kept_status(status),
        "evidence_card": card,
        "gaps": missing,
        "note": "History is metadata evidence, not a transcript: anything omitted stays "
                "unknown. Use an application or capability as a lead and verify it.",
        "path": path,
    }


def status_gate(status, path):
    """The decision the status alone makes, or None when history is usable."""
    if not status.get("admitted", True):
        return without("not_admitted", status, path=path)
    if not status.get("enabled"):
        return without("disabled", status, path=path)
    if status.get("health") in UNREADABLE_HEALTH:
        return without("history_unreadable", status, path=path)
    return None


def failure_reason(code, denied):
    return denied if code in DENIALS else "history_failed"


async def consult_tools(server, limit, session, hold):
    """The tool path (module doc). Every failure is a decision, never an exception."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    command, args, env = server
    params = StdioServerParameters(command=command, args=args, env=env)
    stage = {"name": "start"}
    try:
        with anyio.fail_after(STEP_DEADLINE_SECS * 4):
            async with stdio_client(params, errlog=sys.stderr) as (read, write):
                async with ClientSession(read, write) as session_:
                    await session_.initialize()
                    stage["name"] = "tools"
                    listed = await session_.list_tools()
                    names = {tool.name for tool in listed.tools}
                    hold.at("tools")
                    if not names & {"history_status", "history_query"}:
                        return without("history_absent", path="tools")
                    stage["name"] = "status"
                    result = await session_.call_tool("history_status", {})
                    content = result.structured_content or {}
                    if result.is_error:
                        code = content.get("code")
                        return without(failure_reason(code, "status_denied"), code=code,
                                       path="tools")
                    status = content
                    decided = status_gate(status, "tools")
                    if decided:
                        return decided
                    if "history_query" not in names:
                        return without("query_not_granted", status, path="tools")
                    hold.at("status")
                    stage["name"] = "query"
                    arguments = {"limit": limit}
                    if session:
                        arguments["session_id"] = session
                    result = await session_.call_tool("history_query", arguments)
                    content = result.structured_content or {}
                    if result.is_error:
                        code = content.get("code")
                        return without(failure_reason(code, "query_denied"), status, code=code,
                                       path="tools")
                    events = content.get("events") or []
                    if not events:
                        return without("empty", status, path="tools")
                    return evidence(status, events, "tools")
    except Exception as error:  # noqa: BLE001 - every failure goes on without history
        reason = "history_absent" if stage["name"] == "start" else "history_failed"
        decided = without(reason, path="tools")
        decided["failure"] = f"{stage['name']}: {type(error).__name__}"
        return decided


def preflight_args(args):
    """`annal preflight --json` for the configured server's actor and store options."""
    if not args or args[0] != "mcp":
        return None
    out, rest, skip = ["preflight"], args[1:], False
    for i, arg in enumerate(rest):
        if skip:
            skip = False
            continue
        if arg == "--manifest":
            skip = True
            continue
        if arg == "--reapprove":
            continue
        out.append(arg)
    return out


def consult_preflight(server, limit, session):
    """The preflight path: one command, its verdict handed on as it is."""
    command, args, env = server
    run_args = preflight_args(args)
    if run_args is None:
        return without("history_absent", path="preflight")
    run_args += ["--limit", str(limit), "--json"]
    if session:
        run_args += ["--session", session]
    environment = {k: os.environ[k] for k in ("HOME", "PATH", "USER", "SHELL", "TERM", "LOGNAME")
                   if k in os.environ}
    environment.update(env or {})
    try:
        ran = subprocess.run([command, *run_args], capture_output=True, text=True,
                             timeout=PREFLIGHT_DEADLINE_SECS, env=environment,
                             stdin=subprocess.DEVNULL, check=False)
        answer = json.loads(ran.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as error:
        decided = without("history_absent", path="preflight")
        decided["failure"] = type(error).__name__
        return decided
    consultation = answer.get("consultation") or {}
    status = answer.get("status")
    verdict = consultation.get("verdict")
    if verdict not in ("use", "use_with_caveats"):
        reason = consultation.get("reason")
        if reason not in WITHOUT_NOTES:
            reason = "history_failed"
        return without(reason, status, path="preflight")
    decided = evidence(status or {}, answer.get("events") or [], "preflight")
    # The preflight's own verdict is the one a deterministic host acts on.
    decided["decision"] = verdict
    decided["caveats"] = sorted(consultation.get("caveats") or [])
    return decided


def model_step(request, history):
    """The stub: prints the context the model would be given, and calls no model."""
    context = {"request": request, "history": history}
    json.dump(context, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the MCP client configuration (JSON)")
    parser.add_argument("--server", help="the server's name in it (default: the first)")
    parser.add_argument("--preflight", action="store_true",
                        help="run `annal preflight` instead of calling the tools")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT_EVENTS)
    parser.add_argument("--session", help="only this session's events")
    parser.add_argument("--hold-after", choices=("tools", "status"), help=argparse.SUPPRESS)
    parser.add_argument("--hold-file", help=argparse.SUPPRESS)
    parser.add_argument("request", nargs="+")
    options = parser.parse_args()
    if not 1 <= options.limit <= MAX_LIMIT_EVENTS:
        parser.error(f"--limit: 1..={MAX_LIMIT_EVENTS}")
    request = " ".join(options.request)
    if not RESUME_RECALL_EXPLAIN.search(request):
        history = without("not_requested")
        history["consulted"] = False
        model_step(request, history)
        return 0
    server = load_server(options.config, options.server)
    if server is None:
        history = without("history_absent", path="preflight" if options.preflight else "tools")
    elif options.preflight:
        history = consult_preflight(server, options.limit, options.session)
    else:
        import anyio
        hold = Hold(options.hold_after, options.hold_file)
        history = anyio.run(consult_tools, server, options.limit, options.session, hold)
    history["consulted"] = True
    model_step(request, history)
    return 0


if __name__ == "__main__":
    sys.exit(main())
