#!/usr/bin/env python3
"""A minimal client of annal's daemon socket (docs/protocol.md), for agent runtimes not
written in Rust: capture a session with one action, then read the status.

    python3 examples/python/annal_client.py SOCKET

SOCKET is the daemon's socket (`annal socket` prints its path; the socket lives under
$XDG_RUNTIME_DIR/annal/). Standard library only.

Before it sends anything, the client checks who is at the other end, as annal's own client does
(docs/protocol.md, "Who is at the other end"): the socket's directory must belong to this user
and be closed to everyone else (0700), and the peer's uid (SO_PEERCRED) must be this user's.
Anything else may be another user's fake daemon, and gets nothing. Every wait for a reply has a
deadline, and a request too large for one frame is refused before it is sent.
"""

import json
import os
import socket
import stat
import struct
import sys

# The protocol's bound on one frame body, in bytes (annal_actors::daemon::MAX_FRAME_BYTES).
MAX_FRAME_BYTES = 512 * 1024
# Longest the client waits for a reply (or for the connection), in seconds.
REPLY_DEADLINE_SECS = 10.0
# Permission bits the socket's directory must not have: any for the group or for others.
SHARED_MODE_BITS = 0o077


class UntrustedDaemon(Exception):
    """The socket may not be the user's own daemon: nothing was sent to it."""


def check_private_dir(path):
    """The socket's directory exists, is this user's, and is closed to everyone else."""
    info = os.stat(path)
    own = os.geteuid()
    if not stat.S_ISDIR(info.st_mode):
        raise UntrustedDaemon(f"{path} is not a directory")
    if info.st_uid != own:
        raise UntrustedDaemon(
            f"{path} belongs to uid {info.st_uid}, not to this user (uid {own}); "
            "point XDG_RUNTIME_DIR at a directory of your own")
    mode = stat.S_IMODE(info.st_mode)
    if mode & SHARED_MODE_BITS:
        raise UntrustedDaemon(
            f"{path} can be entered by other users (mode {mode:o}): run `chmod 700 {path}`")


class DaemonError(Exception):
    """The daemon answered {"error": {"code": ..., "message": ...}}."""

    def __init__(self, code, message):
        super().__init__(f"{message} ({code})")
        self.code = code


class AnnalClient:
    """One connection: each request frame gets one reply frame, in order."""

    def __init__(self, path):
        check_private_dir(os.path.dirname(os.path.abspath(path)))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(REPLY_DEADLINE_SECS)
        self.sock.connect(path)
        creds = self.sock.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.geteuid():
            self.sock.close()
            raise UntrustedDaemon(
                f"{path} is served by uid {uid}, not by this user: it is not your daemon")

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
    try:
        client = AnnalClient(sys.argv[1])
    except UntrustedDaemon as error:
        sys.exit(f"annal_client: {error}")
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
