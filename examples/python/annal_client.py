#!/usr/bin/env python3
"""A minimal client of annal's daemon socket (docs/protocol.md), for agent runtimes not
written in Rust: capture a session with one action, then read the status.

    python3 examples/python/annal_client.py SOCKET

SOCKET is the daemon's socket (`annal status --json` runs one on demand; the socket lives
under $XDG_RUNTIME_DIR/annal/). Standard library only.
"""

import json
import socket
import struct
import sys

# The protocol's bound on one frame body, in bytes (annal_actors::daemon::MAX_FRAME_BYTES).
MAX_FRAME_BYTES = 512 * 1024


class DaemonError(Exception):
    """The daemon answered {"error": {"code": ..., "message": ...}}."""

    def __init__(self, code, message):
        super().__init__(f"{message} ({code})")
        self.code = code


class AnnalClient:
    """One connection: each request frame gets one reply frame, in order."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)

    def _read_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            data += chunk
        return data

    def request(self, op, **fields):
        body = json.dumps({"op": op, **fields}).encode()
        if not 1 <= len(body) <= MAX_FRAME_BYTES:
            raise ValueError("request too large for one frame")
        self.sock.sendall(struct.pack(">I", len(body)) + body)
        (length,) = struct.unpack(">I", self._read_exact(4))
        reply = json.loads(self._read_exact(length))
        if "error" in reply:
            raise DaemonError(reply["error"]["code"], reply["error"]["message"])
        return reply["ok"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    client = AnnalClient(sys.argv[1])
    print("daemon:", client.request("hello"))
    # The raw session label stays in the daemon's memory; only a keyed id is written.
    client.request("session_started", session="python example session")
    started = client.request(
        "action_started",
        capability="input.pointer.click",
        application={"bundle_id": "org.example.Editor", "display_name": "Editor"},
        session="python example session",
    )
    client.request(
        "action_completed",
        action=started["action"],
        outcome={"effect": "confirmed", "route": "accessibility",
                 "evidence_kinds": ["accessibility_readback"]},
    )
    client.request("session_ended", session="python example session")
    status = client.request("flush")["status"]
    print("captured: admission", started["admission"], "- bytes used", status["bytes_used"])
    try:
        client.request("action_completed", action=12345,
                       outcome={"effect": "confirmed", "route": "accessibility"})
    except DaemonError as error:
        print("as expected, a typed error:", error.code)


if __name__ == "__main__":
    main()
