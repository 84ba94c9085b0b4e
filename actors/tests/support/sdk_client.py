#!/usr/bin/env python3
"""What an MCP host sees of `annal mcp`, through the official MCP Python SDK (the version pinned
in examples/host/requirements.txt). Run by actors/tests/mcp_sdk.rs; prints one JSON report on
stdout and leaves every judgement to the test.

    python3 sdk_client.py --command ANNAL --arg ARG ... [--limit N] [--ready PATH]

The server is started by the SDK's stdio launcher with its default environment (`env=None`:
only HOME, LOGNAME, PATH, SHELL, TERM and USER of this process, when set). The script:

1. initializes, keeps the server's `tools.listChanged` capability, lists the tools and keeps
   each one's input schema, output schema and annotations as the SDK parsed them;
2. calls history_status and history_query {limit} when they are listed; the SDK validates each
   successful result's structuredContent against the tool's outputSchema itself (mcp 2.x:
   `ClientSession.call_tool` raises on a mismatch), and the script checks that this validation
   is not a blank check: the query's result with one field added must be rejected;
3. with --ready PATH: writes PATH, then waits (at most NOTICE_DEADLINE_SECS) for a
   `notifications/tools/list_changed` seen by its message handler, lists the tools again and
   calls history_status once more (the test revokes the actor from another process meanwhile).

Exit status 0 when the report was printed; anything the SDK raised ends the script with 1.
"""

import argparse
import json
import sys

# Longest the script waits for a tools/list_changed notification, in seconds.
NOTICE_DEADLINE_SECS = 60.0
# Longest the whole run may take, in seconds (a daemon start may take 20 s on its own).
RUN_DEADLINE_SECS = 150.0


def tool_view(tool):
    """A listed tool as the SDK parsed it, in the wire's names."""
    hints = tool.annotations
    return {
        "input_schema": tool.input_schema,
        "output_schema": tool.output_schema,
        "annotations": None if hints is None else {
            "readOnlyHint": hints.read_only_hint,
            "destructiveHint": hints.destructive_hint,
            "idempotentHint": hints.idempotent_hint,
            "openWorldHint": hints.open_world_hint,
        },
    }


def result_view(result):
    return {"is_error": result.is_error, "structured_content": result.structured_content}


async def run(options):
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client, types

    changed = anyio.Event()
    notifications = []

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            notifications.append(message.method)
            changed.set()

    params = StdioServerParameters(command=options.command, args=options.arg)
    report = {"server_env": "default" if params.env is None else "given"}
    with anyio.fail_after(RUN_DEADLINE_SECS):
        async with stdio_client(params, errlog=sys.stderr) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                tools_capability = init.capabilities.tools
                report["list_changed_capability"] = (
                    None if tools_capability is None else tools_capability.list_changed
                )
                listed = await session.list_tools()
                report["tools"] = {tool.name: tool_view(tool) for tool in listed.tools}
                if "history_status" in report["tools"]:
                    report["status"] = result_view(await session.call_tool("history_status", {}))
                if "history_query" in report["tools"]:
                    query = await session.call_tool("history_query", {"limit": options.limit})
                    report["query"] = result_view(query)
                    forged = query.model_copy(
                        update={"structured_content": {**(query.structured_content or {}),
                                                       "window_title": "Inbox - Mail"}})
                    try:
                        await session.validate_tool_result("history_query", forged)
                        report["forged_result_rejected"] = False
                    except RuntimeError:
                        report["forged_result_rejected"] = True
                if options.ready:
                    with open(options.ready, "w", encoding="utf-8") as ready:
                        ready.write("listed\n")
                    with anyio.move_on_after(NOTICE_DEADLINE_SECS):
                        await changed.wait()
                    report["notifications"] = list(notifications)
                    after = await session.list_tools()
                    report["tools_after"] = sorted(tool.name for tool in after.tools)
                    report["status_after"] = result_view(
                        await session.call_tool("history_status", {}))
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", required=True, help="the server's executable")
    parser.add_argument("--arg", action="append", default=[], help="one argument (repeat)")
    parser.add_argument("--limit", type=int, default=50, help="history_query's limit")
    parser.add_argument("--ready", help="write this file, then wait for tools/list_changed")
    options = parser.parse_args()
    import anyio
    report = anyio.run(run, options)
    json.dump(report, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
