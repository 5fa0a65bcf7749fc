"""The ``mcp`` environment with a server whose state is a file on disk (tests/envs/
mcp_kv_server.py, no reset or state tool): the state is found in the command, every episode
runs on its own copy in a private view (the user's file is never written), a warm process is
brought from one episode's state to another's by restoring copies, read-only calls restart
nothing; and operations: the server's own error text, its stderr in a log with a tail in the
message, a hung call or a killed trajsynth leaves no process behind, the command runs as
written.

Run: PYTHONPATH=. python -m pytest tests/envs/test_mcp_isolation.py -q
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from trajsynth.core.errors import ConfigError
from trajsynth.envs import EnvFactory
from trajsynth.envs.mcp import MCPConfig, MCPServer
from trajsynth.envs.sandbox.view import namespace_view

pytest.importorskip("mcp")

SERVER = Path(__file__).resolve().parent / "mcp_kv_server.py"


def _factory(store: Path, **mcp: object) -> EnvFactory:
    config = {"command": [sys.executable, str(SERVER), str(store)], **mcp}
    return EnvFactory({"domains": [], "toolsets": {"kv": {"backend": "mcp", "mcp": config}}})


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "user"
    folder.mkdir()
    path = folder / "store.json"
    path.write_text(json.dumps({"color": "blue"}))
    return path


def _processes(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmd:
                found.append(int(pid))
    return found


def _gone(marker: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _processes(marker):
            return True
        time.sleep(0.2)
    return False


def test_episodes_run_on_private_copies_of_the_state(store: Path) -> None:
    before = store.read_bytes()
    f = _factory(store)
    try:
        server = f.mcp_server("kv")
        assert server.state_paths() == [store]  # found in the command
        a = f.make("kv")
        a.reset()
        assert a.call("put", key="size", value="L").ok
        assert a.call("get", key="size").output == {"key": "size", "value": "L"}
        b = f.make("kv")  # another episode starts from the user's state
        b.reset()
        assert b.call("get", key="size").category == "invalid_value"
        assert b.call("put", key="shape", value="round").ok
        assert a.call("keys").output == {"keys": ["color", "size"]}  # a's state is back
        assert b.call("keys").output == {"keys": ["color", "shape"]}
        snap = a.snapshot()
        a.call("put", key="x", value="1")
        a.restore(snap)
        assert a.call("keys").output == {"keys": ["color", "size"]}
        assert len(a.calls) == 1 and a.calls[0][0] == "put"  # reads never enter the log
        assert server.reset_mode() == "state"
        assert server.restarts == 1  # one warm process for every switch above
        assert store.read_bytes() == before  # the user's file was never written
        assert sorted(p.name for p in store.parent.iterdir()) == ["store.json"]
    finally:
        f.close()


@pytest.mark.skipif(not namespace_view()[0], reason="no namespace view on this machine")
def test_nothing_outside_the_state_is_writable_and_a_write_there_becomes_state(
    store: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log_file = logs / "kv.log"
    log_file.write_text("")
    f = _factory(store, env={"KV_LOG": str(log_file)}, state=[str(store)])
    try:
        env = f.make("kv")
        env.reset()
        refused = env.call("log", text="hello")  # declared state: the rest is read-only
        assert refused.category == "invalid_value"
        assert "Read-only file system" in refused.error["message"]
    finally:
        f.close()
    g = _factory(store, env={"KV_LOG": str(log_file)})  # found: KV_LOG names a file
    try:
        assert sorted(g.mcp_server("kv").state_paths()) == sorted([store, log_file])
        env = g.make("kv")
        env.reset()
        assert env.call("log", text="hello").ok
    finally:
        g.close()
    assert log_file.read_text() == ""


def test_a_write_the_command_does_not_name_is_found_and_isolated(
    store: Path, tmp_path: Path
) -> None:
    if not namespace_view()[0]:
        pytest.skip("no namespace view on this machine")
    hidden = tmp_path / "elsewhere"
    hidden.mkdir()
    log_file = hidden / "kv.log"
    log_file.write_text("")
    wrapper = tmp_path / "run.sh"  # the path reaches the server by a route trajsynth cannot see
    wrapper.write_text(f"#!/bin/sh\nKV_LOG={log_file} exec {sys.executable} {SERVER} {store}\n")
    wrapper.chmod(0o755)
    f = EnvFactory(
        {"domains": [], "toolsets": {"kv": {"backend": "mcp", "mcp": {"command": str(wrapper)}}}}
    )
    try:
        env = f.make("kv")
        env.reset()
        assert env.call("log", text="hello").ok  # refused, found, restarted, made again
        assert log_file in f.mcp_server("kv").state_paths()
    finally:
        f.close()
    assert log_file.read_text() == ""


def test_without_namespaces_the_server_gets_copies_at_their_own_paths(store: Path) -> None:
    """``isolate: copy`` (what ``auto`` falls back to where no namespace can be made): the
    command and env name the copies, results name the user's paths again."""
    log_file = store.parent / "kv.log"
    log_file.write_text("")
    f = _factory(store, isolate="copy", env={"KV_LOG": str(log_file)})
    try:
        server = f.mcp_server("kv")
        env = f.make("kv")
        env.reset()
        assert env.call("put", key="size", value="L").ok
        assert env.call("log", text="hello").ok
        assert server.isolation == "copy"
        missing = env.call("get", key=str(store)).error["message"]
        assert missing.endswith(f"no key {store}")  # the copy's path translated back
    finally:
        f.close()
    assert json.loads(store.read_text()) == {"color": "blue"} and log_file.read_text() == ""


def test_the_servers_own_error_text_names_the_tool(store: Path) -> None:
    f = _factory(store)
    try:
        env = f.make("kv")
        env.reset()
        env.validate_arguments = False  # the server itself checks the arguments
        wrong = env.call("add", a="x", b=2)
        assert wrong.category == "invalid_value"
        message = wrong.error["message"]
        assert message.startswith("add: ") and "TaskGroup" not in message
        assert "a" in message and ("float" in message or "number" in message)
        missing = env.call("get", key="nope").error["message"]
        assert missing.startswith("get: ") and missing.endswith("no key nope")
    finally:
        f.close()


def test_a_server_that_fails_to_start_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sys\nprint('missing setting: API_TOKEN', file=sys.stderr)\nsys.exit(3)\n"
    )
    config = MCPConfig(command=[sys.executable, str(bad)], stderr_log=str(tmp_path / "err.log"))
    server = MCPServer(config, "bad")
    try:
        with pytest.raises(ConfigError) as info:
            server.tools()
    finally:
        server.close()
    text = str(info.value)
    assert "missing setting: API_TOKEN" in text and str(tmp_path / "err.log") in text
    assert "TaskGroup" not in text
    assert "missing setting" in (tmp_path / "err.log").read_text()


def test_the_command_runs_as_written(tmp_path: Path) -> None:
    shim = tmp_path / "bin"
    shim.mkdir()
    python = shim / "python"
    python.write_text(f'#!/bin/sh\necho this is the shim >&2\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    config = MCPConfig(
        command=f"python {SERVER} {tmp_path / 's.json'}",
        env={"PATH": f"{shim}:{os.environ['PATH']}"},
        stderr_log=str(tmp_path / "err.log"),
    )
    assert config.argv()[0] == str(python)  # found on the server's PATH, not replaced
    server = MCPServer(config, "kv")
    try:
        assert "put" in [t.name for t in server.tools()]
    finally:
        server.close()
    assert "this is the shim" in (tmp_path / "err.log").read_text()
    assert MCPConfig(command="{python} x.py").argv()[0] == sys.executable


def test_a_hung_call_stops_the_server_and_its_children(store: Path) -> None:
    marker = str(int(time.time() * 1000) % 10**9)
    f = _factory(store, timeout_s=10)
    try:
        env = f.make("kv")
        env.reset()
        hung = env.call("spawn_and_wait", marker=marker, seconds=60)
        assert hung.category == "invalid_value" and "no answer in 10s" in hung.error["message"]
        assert _gone(marker), "the hung server's child outlived it"
        assert env.call("keys").output == {"keys": ["color"]}  # the next call starts it again
        assert f.mcp_server("kv").restarts == 2
    finally:
        f.close()


def test_a_server_that_crashes_fails_the_call_and_starts_again(store: Path) -> None:
    f = _factory(store)
    try:
        env = f.make("kv")
        env.reset()
        assert env.call("put", key="size", value="L").ok
        started = time.monotonic()
        crashed = env.call("crash")
        assert crashed.category == "invalid_value"
        assert (
            crashed.error["message"]
            == "crash: the server exited: fatal: the kv server lost its mind"
        )
        assert time.monotonic() - started < 30  # not the whole request timeout
        assert env.call("get", key="size").output == {"key": "size", "value": "L"}
        assert f.mcp_server("kv").restarts == 2
    finally:
        f.close()


def test_a_killed_trajsynth_leaves_no_server_and_no_copy_behind(
    store: Path, tmp_path: Path
) -> None:
    marker = str(int(time.time() * 1000) % 10**9 + 7)
    (store.parent / f"sentinel-{marker}").write_text("")
    copy_of_sentinel = Path("state", "live", "0", f"sentinel-{marker}")
    script = tmp_path / "host.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, threading, time
            from trajsynth.envs import EnvFactory
            f = EnvFactory({{"domains": [], "toolsets": {{"kv": {{"backend": "mcp", "mcp":
                {{"command": [sys.executable, {str(SERVER)!r}, {str(store)!r}]}}}}}}}})
            env = f.make("kv"); env.reset()
            threading.Thread(target=env.call, args=("spawn_and_wait",),
                             kwargs={{"marker": "{marker}", "seconds": 600}}, daemon=True).start()
            print("ready", flush=True)
            time.sleep(600)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while not _processes(f"300.{marker}") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes(f"300.{marker}"), "the server never started its child"
        tmp = Path(tempfile.gettempdir())  # this server's copies: they hold the sentinel
        scratch = [p for p in tmp.glob("trajsynth-mcp-kv-*") if (p / copy_of_sentinel).exists()]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _gone(marker), "a server (or its child) outlived the trajsynth that started it"
    deadline = time.monotonic() + 10
    while any(p.exists() for p in scratch) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert scratch and not any(p.exists() for p in scratch), "its copies were left behind"
