"""The sandbox and its escape suite: no network, no writes outside the private folder, no
parent secrets, fork/memory bombs and infinite loops stopped within their limits, the host
unharmed and the next execution fine. Also: limits, stdin/files/argv, concurrency, worker
death, the rlimit fallback, a non-root (user-namespace) worker, bwrap and Docker when present.

Run: PYTHONPATH=. python -m pytest tests/envs/test_sandbox.py -q
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trajsynth.core.errors import ConfigError, SandboxError
from trajsynth.envs.sandbox import Sandbox

from ..reliability.escapekit import escape_network

SECRET_NAME = "TRAJSYNTH_TEST_SECRET"
SECRET = "s3cr3t-" + secrets.token_hex(8)
os.environ[SECRET_NAME] = SECRET  # set before any worker starts


def _uid_processes(uid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.stat().st_uid == uid:
                    out.append(int(d.name))
            except FileNotFoundError:
                pass
    return out


#: the escape suite runs under every namespace isolation available here
KINDS = ["namespace"] + (["bwrap"] if shutil.which("bwrap") else [])


@pytest.fixture(scope="module", params=KINDS)
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    box = Sandbox(kind=request.param, pool_size=2, timeout_s=5)
    box.start()
    yield box
    box.close()


def test_auto_picks_the_best_isolation() -> None:
    with Sandbox(pool_size=1) as box:
        assert box.isolation == "namespace"
        info = box.info()
        assert info["filesystem"].startswith("private root")
        assert info["nested_userns"].startswith("blocked")


def test_runs_code_and_reports(sb: Sandbox) -> None:
    r = sb.run("print(1 + 1)")
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out, r.killed_by) == (
        "2\n",
        "",
        0,
        False,
        None,
    )
    assert r.ok and r.isolation in ("namespace", "bwrap") and r.duration_s < 5
    r = sb.run("import sys; sys.exit(3)")
    assert r.exit_code == 3 and not r.ok
    r = sb.run("raise KeyError('k')")
    assert r.exit_code == 1 and r.stderr.splitlines()[-1] == "KeyError: 'k'"
    assert "_worker.py" not in r.stderr  # the worker's own frames are not shown
    r = sb.run("print(1 +")  # compiled by the worker: the error reads as Python's own
    assert r.exit_code == 1 and r.stderr.startswith('  File "<sandbox>", line 1')
    assert "SyntaxError" in r.stderr.splitlines()[-1]
    long = "x = 1\n" * 5000 + "print(x +"  # long code is compiled in the child
    r = sb.run(long)
    assert r.exit_code == 1 and "SyntaxError" in r.stderr.splitlines()[-1]
    assert sb.run("x = 0\n" * 5000 + "print(x)").stdout == "0\n"


def test_stdin_files_env_and_argv(sb: Sandbox) -> None:
    r = sb.run("import sys; print(sys.stdin.read().upper())", stdin="hello")
    assert r.stdout == "HELLO\n"
    r = sb.run("print(open('data/in.txt').read())", files={"data/in.txt": "payload"})
    assert r.stdout == "payload\n"
    r = sb.run("import os; print(os.environ['MODE'])", env={"MODE": "test"})
    assert r.stdout == "test\n"
    r = sb.run(["sh", "-c", "echo $((6 * 7)); echo oops >&2; exit 4"])
    assert (r.stdout, r.stderr, r.exit_code) == ("42\n", "oops\n", 4)
    assert sb.run(["/no/such/binary"]).exit_code == 127


def test_each_run_gets_a_fresh_private_folder(sb: Sandbox) -> None:
    for _ in range(2):  # whatever one run leaves, the next does not see
        r = sb.run("import os; print(sorted(os.listdir('.'))); open('left.txt', 'w').write('x')")
        assert r.stdout == "[]\n"
    r = sb.run("import os; print(os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])")
    assert r.stdout == "True\n"


# --------------------------------------------------------------------------------------
# the escape suite
# --------------------------------------------------------------------------------------


def test_escape_network(sb: Sandbox) -> None:
    """A host listener on 127.0.0.1, public addresses and DNS: the reliability suite's case,
    run here on every sandbox kind; each of the three connections blocked."""
    escaped, output = escape_network(sb)
    assert not escaped, output
    assert output.count("blocked") == 3, output


def test_escape_write_outside_the_temp_folder(sb: Sandbox, tmp_path: Path) -> None:
    targets = [tmp_path / "pwned.txt", Path("/usr/pwned_by_sandbox.txt"),
               Path(__file__).with_name("pwned.txt"), Path("/root/pwned.txt")]  # fmt: skip
    code = "\n".join(
        f"try:\n    open({str(t)!r}, 'w').write('x')\n    print('WROTE')\nexcept OSError as e:\n"
        f"    print('denied', e.errno)"
        for t in targets
    )
    code += "\nopen('inside.txt', 'w').write('fine'); print('inside ok')"
    r = sb.run(code)
    assert "WROTE" not in r.stdout and r.stdout.count("denied") == len(targets), r.stdout
    assert "inside ok" in r.stdout
    assert not any(t.exists() for t in targets)


def test_escape_parent_secrets(sb: Sandbox) -> None:
    code = f"""
import os, glob
found = []
if {SECRET!r} in repr(dict(os.environ)):
    found.append("os.environ")
paths = glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline")
for path in paths + ["/proc/{os.getpid()}/environ"]:
    try:
        if {SECRET!r}.encode() in open(path, "rb").read():
            found.append(path)
    except OSError:
        pass
print("FOUND" if found else "nothing", found)
print(sorted(os.environ))
"""
    r = sb.run(code)
    assert r.stdout.startswith("nothing"), r.stdout
    assert SECRET_NAME not in r.stdout


def test_escape_fork_bomb(sb: Sandbox) -> None:
    code = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
    start = time.monotonic()
    r = sb.run(code, timeout=2, limits={"max_processes": 32})
    assert r.timed_out and r.killed_by == "timeout"
    assert time.monotonic() - start < 2 + 5  # stopped within its limit (plus clean-up)
    uid = sb.isolation_info.get("uid")
    if uid is not None:  # nothing the bomb forked survives on the host
        time.sleep(0.2)
        assert _uid_processes(uid) == []
    assert sb.run("print('alive')").stdout == "alive\n"


def test_escape_memory_bomb(sb: Sandbox) -> None:
    r = sb.run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))",
               limits={"memory_mb": 256}, timeout=10)  # fmt: skip
    assert r.killed_by == "memory" and r.exit_code != 0 and r.duration_s < 10
    r = sb.run("x = bytearray(4 * 2**30)", limits={"memory_mb": 256})
    assert r.killed_by == "memory"
    assert sb.run("print(sum(range(10)))").stdout == "45\n"


def test_escape_infinite_loop_wall_and_cpu(sb: Sandbox) -> None:
    start = time.monotonic()
    r = sb.run("while True:\n    pass", timeout=1)
    assert r.timed_out and r.killed_by == "timeout" and 0.9 < r.duration_s < 2
    assert time.monotonic() - start < 4
    # a CPU limit below the wall-clock timeout stops it first
    r = sb.run("while True:\n    pass", timeout=10, limits={"cpu_seconds": 1})
    assert r.killed_by == "cpu" and not r.timed_out and r.duration_s < 5
    # sleeping past the timeout is stopped too (no CPU used)
    r = sb.run("import time; time.sleep(30)", timeout=0.5)
    assert r.timed_out and r.duration_s < 2


def test_file_size_and_output_limits(sb: Sandbox) -> None:
    r = sb.run("open('big', 'wb').write(b'x' * 3 * 2**20)", limits={"file_size_mb": 1})
    assert r.killed_by == "file_size"
    r = sb.run("print('y' * 5000)", limits={"output_bytes": 1000})
    assert len(r.stdout) == 1000 and r.stdout_truncated


def test_host_survives_and_runs_concurrently(sb: Sandbox) -> None:
    results: list[str] = []

    def work(i: int) -> None:
        results.append(sb.run(f"print({i} * 2)").stdout.strip())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=int) == [str(i * 2) for i in range(12)]


def test_a_killed_worker_is_replaced() -> None:
    with Sandbox(pool_size=1) as box:
        pid = box._pool._idle.queue[0].pid  # the warm worker's host pid
        assert pid > 1
        os.killpg(pid, signal.SIGKILL)
        time.sleep(0.1)
        r = box.run("print('after')")
        if r.killed_by == "worker_died":  # the dead worker answered first: the next is new
            r = box.run("print('after')")
        assert r.stdout == "after\n"


def test_one_shot_workers() -> None:
    with Sandbox(pool_size=0) as box:
        assert [box.run(f"print({i})").stdout for i in range(3)] == ["0\n", "1\n", "2\n"]


def test_config_errors_are_user_errors() -> None:
    with pytest.raises(ConfigError):
        Sandbox(kind="chroot")
    with pytest.raises(ConfigError):
        Sandbox(pool_size=-1)


# --------------------------------------------------------------------------------------
# other isolation kinds
# --------------------------------------------------------------------------------------


def test_rlimit_fallback_still_limits() -> None:
    with Sandbox(kind="rlimit", pool_size=1) as box:
        assert box.isolation == "rlimit"
        r = box.run("while True:\n    pass", timeout=0.5)
        assert r.timed_out
        r = box.run("x = bytearray(4 * 2**30)", limits={"memory_mb": 256})
        assert r.killed_by == "memory"
        r = box.run("import os; print(sorted(os.environ))")
        assert SECRET_NAME not in r.stdout
        if os.geteuid() == 0:  # a uid of its own: cannot write root's files
            target = Path(__file__).with_name("pwned_rlimit.txt")
            r = box.run(f"open({str(target)!r}, 'w')")
            assert r.exit_code == 1 and "Permission denied" in r.stderr
            assert not target.exists()


def test_auto_falls_back_to_rlimits_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import trajsynth.envs.sandbox as sandbox_mod
    from trajsynth.envs.sandbox import pool

    real = pool.Worker.__init__

    def no_namespaces(self, kind, config, zygote=None):  # type: ignore[no-untyped-def]
        if kind in ("namespace", "bwrap"):
            raise SandboxError(f"{kind} sandbox unavailable: unshare: Operation not permitted")
        real(self, kind, config, zygote)

    monkeypatch.setattr(pool.Worker, "__init__", no_namespaces)
    monkeypatch.setattr(sandbox_mod, "_warned", threading.Event())
    with pytest.warns(RuntimeWarning, match="rlimits only"):
        box = Sandbox(pool_size=1).start()
    try:
        assert box.isolation == "rlimit" and box.run("print(7)").stdout == "7\n"
        assert any("Operation not permitted" in r for r in box.fallback_reasons)
    finally:
        box.close()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_unprivileged_user_namespace_worker() -> None:
    """As a normal user the worker maps itself to root in a user namespace and drops every
    capability before running code."""
    folder = Path(tempfile.mkdtemp(prefix="trajsynth-userns-"))
    script = folder / "probe.py"
    pid_list = folder / "pids" / "list"
    daemons = (  # five double-forked, session-leading sleepers; their pids go to pid_list
        "import os, time\n"
        "for i in range(5):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(60)\n"
        f"        open({str(pid_list)!r}, 'a').write(str(pid) + chr(10))\n"
        "        os._exit(0)\n"
        "    os.wait()\n"
        "print('spawned')\n"
    )
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from trajsynth.envs.sandbox import Sandbox\n"
        "import os, shutil\n"
        "ok = os.access(sys.executable, os.X_OK)\n"
        "python = sys.executable if ok else shutil.which('python3')\n"
        "with Sandbox(kind='namespace', pool_size=1, python=python) as sb:\n"
        "    r = sb.run(\"import socket\\ntry:\\n    socket.create_connection(('1.1.1.1', 53),"
        " timeout=1)\\n    print('net')\\nexcept OSError:\\n    print('nonet')\\n"
        "try:\\n    open('/etc/pwned', 'w')\\nexcept OSError:\\n    print('ro')\\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\")\n"
        "    print(sb.isolation, r.stdout.split())\n"
        # rlimit mode as a normal user: no uid switch, so the daemonized grandchildren must be
        # found and killed as descendants; their pids are written down so that the check
        # counts them only (not other processes of this uid that come and go meanwhile)
        "import time\n"
        "with Sandbox(kind='rlimit', pool_size=1, python=python) as sb:\n"
        f"    r = sb.run({daemons!r})\n"
        "    time.sleep(0.3)\n"
        f"    pids = open({str(pid_list)!r}).read().split()\n"
        "    def alive(pid):\n"
        "        try:\n"
        "            return open(f'/proc/{pid}/stat').read().split(') ')[1][0] != 'Z'\n"
        "        except OSError:\n"
        "            return False\n"
        "    print(r.stdout.strip(), len(pids), sum(alive(p) for p in pids))\n"
    )
    os.chmod(folder, 0o755)
    os.chmod(script, 0o644)
    (folder / "pids").mkdir()
    os.chmod(folder / "pids", 0o777)
    try:
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             str(script)],
            capture_output=True, text=True, timeout=60, cwd="/",
        )  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if "sandbox unavailable: OSError" in out.stderr and "unshare" in out.stderr:
        pytest.skip(f"user namespaces not permitted here: {out.stderr[-200:]}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == [
        "namespace ['nonet', 'ro', '0000000000000000']",
        "spawned 5 0",  # five daemonized grandchildren, all gone
    ]


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")
def test_bwrap_isolation() -> None:
    with Sandbox(kind="bwrap", pool_size=1) as box:
        r = box.run("import os, socket\nprint(os.getpid())\ntry:\n"
                    "    socket.create_connection(('1.1.1.1', 53), timeout=1)\nexcept OSError:\n"
                    "    print('nonet')\ntry:\n    open('/usr/pwned', 'w')\nexcept OSError:\n"
                    "    print('ro')")  # fmt: skip
        assert r.stdout.split()[1:] == ["nonet", "ro"], r
        assert box.run("while True: pass", timeout=0.5).timed_out
        assert box.run("print(1)").stdout == "1\n"


def test_docker_without_a_daemon_is_a_sandbox_error() -> None:
    try:
        box = Sandbox(kind="docker").start()
    except SandboxError as exc:
        assert "docker" in str(exc).lower()
        return
    box.close()  # a daemon answered: the docker-marked test covers it


@pytest.mark.docker
def test_docker_sandbox() -> None:
    try:
        box = Sandbox(kind="docker", pool_size=1, timeout_s=20).start()
    except SandboxError as exc:
        pytest.skip(f"no Docker daemon: {exc}")
    try:
        r = box.run("print(1 + 1)")
        assert r.stdout == "2\n" and r.isolation == "docker"
        r = box.run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)")
        assert r.exit_code != 0
        assert box.run("while True: pass", timeout=1).timed_out
    finally:
        box.close()


def test_a_worker_that_dies_silently_during_set_up_is_started_once_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A set-up that dies without a word (a fork refused on a loaded machine) gets a second
    worker; a set-up that says what is wrong does not, and two silent deaths are reported."""
    from trajsynth.envs.sandbox import pool
    from trajsynth.envs.sandbox.base import SandboxConfig

    started: list[str] = []

    def fake(outcomes: list[str]) -> object:
        def worker(kind: str, config: object, zygote: object = None) -> str:
            started.append(kind)
            outcome = outcomes[len(started) - 1]
            if outcome != "ok":
                raise SandboxError(f"{kind} sandbox unavailable: {outcome}")
            return "worker"

        return worker

    class NoZygote:
        def __init__(self, config: object) -> None: ...

        def alive(self) -> bool:
            return True

    monkeypatch.setattr(pool, "Zygote", NoZygote)
    workers = pool.WorkerPool("namespace", SandboxConfig())
    monkeypatch.setattr(pool, "Worker", fake([pool._SILENT_EXIT, "ok"]))
    assert workers._new_worker() == "worker" and len(started) == 2
    started.clear()
    monkeypatch.setattr(pool, "Worker", fake(["OSError: unshare refused", "ok"]))
    with pytest.raises(SandboxError, match="unshare refused"):
        workers._new_worker()
    assert len(started) == 1
    started.clear()
    monkeypatch.setattr(pool, "Worker", fake([pool._SILENT_EXIT, pool._SILENT_EXIT, "ok"]))
    with pytest.raises(SandboxError, match="exited during set-up"):
        workers._new_worker()
    assert len(started) == 2
