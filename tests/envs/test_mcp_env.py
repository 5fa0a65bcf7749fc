"""The ``mcp`` environment: a small stateful MCP server of the test's own, over stdio and over
streamable HTTP on 127.0.0.1, executed for real; snapshot / restore / hash / diff through the
call log and the server's state tool; Magnet tasks → rejection sampling → verify on it give
verified trajectories, identical on a rerun.

Run: PYTHONPATH=. python -m pytest tests/envs/test_mcp_env.py -q
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trajsynth.envs import EnvFactory

pytest.importorskip("mcp")

SERVER = Path(__file__).resolve().parent / "mcp_notes_server.py"
STDIO = {"backend": "mcp", "mcp": {"command": [sys.executable, str(SERVER)]}}


def _semantics(f: EnvFactory) -> None:
    assert f.toolset("notes").names() == ["create_note", "get_note", "list_notes", "retag_note"]
    assert f.toolset("notes")["get_note"].response["required"] == [
        "note_id",
        "title",
        "body",
        "tag",
    ]
    env = f.make("notes")
    env.reset()
    start, h0 = env.snapshot(), env.state_hash()
    made = env.call("create_note", title="Trip", body="pack")
    assert made.ok and made.output == {"note_id": "n3", "title": "Trip"}
    assert env.call("get_note", note_id="n3").output["body"] == "pack"
    missing = env.call("get_note", note_id="n99")
    assert missing.category == "invalid_value" and "no note n99" in missing.error["message"]
    assert env.call("get_note").category == "missing_required"
    assert env.call("retag_note", note_id="n3", tag="travel").ok
    h1 = env.state_hash()
    assert h1 != h0 and "added notes/n3" in env.diff(start).describe()
    other = f.make("notes")  # another episode on the same server starts fresh
    other.reset()
    assert other.state_hash() == h0 and other.call("get_note", note_id="n3").category
    env.restore(start)
    assert env.state_hash() == h0
    env.call("create_note", title="Trip", body="pack")
    env.call("retag_note", note_id="n3", tag="travel")
    assert env.state_hash() == h1  # replayed to the same state


def test_stdio_server() -> None:
    f = EnvFactory({"domains": [], "toolsets": {"notes": STDIO}})
    try:
        _semantics(f)
    finally:
        f.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_server() -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        url = f"http://127.0.0.1:{port}/mcp"
        f = EnvFactory(
            {"domains": [], "toolsets": {"notes": {"backend": "mcp", "mcp": {"url": url}}}}
        )
        try:
            _semantics(f)
        finally:
            f.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_no_server_is_one_clear_error() -> None:
    f = EnvFactory(
        {
            "domains": [],
            "toolsets": {
                "x": {"backend": "mcp", "mcp": {"url": "http://127.0.0.1:9/mcp", "timeout_s": 5}}
            },
        }
    )
    with pytest.raises(Exception, match="cannot connect to the MCP server"):
        f.toolset("x")


def test_magnet_rejection_verify_on_mcp_tools(rejection_twice) -> None:
    rejection_twice(
        [
            f"defaults.env.toolsets={{notes: {{backend: mcp, mcp: {{command: ['{sys.executable}', "
            f"'{SERVER}']}}}}}}",
            "defaults.env.domains=[]",
            "stages.tasks.with.tasks_per_domain=3",
            "stages.tasks.with.graph.similarity=lexical",
            "stages.rollouts.with.n=3",
        ],
        tasks=3,
    )
