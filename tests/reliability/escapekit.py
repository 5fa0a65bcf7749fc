"""Sandbox escape cases, shared by ``tests/reliability/test_sandbox_escapes.py`` and
``bench/reliability.py`` (``sandbox_escapes``).

Each case sets up what it attacks on the host (a file in the host's ``/tmp``, a UNIX socket
listener, a TCP listener, a secret in the parent's environment), runs code in the sandbox,
checks from the host whether anything got out, and cleans up. A case returns
``(escaped, detail)``; ``escaped`` is judged on the host's side wherever it can be (the file
was created, the listener received bytes), otherwise on what the code printed.

    with escape_sandbox("namespace") as sb:
        results = run_escapes(sb)        # {name: (escaped, detail)}
"""

from __future__ import annotations

import ast
import contextlib
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from trajsynth.envs.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]
SECRET_ENV = "TRAJSYNTH_ESCAPE_SECRET"
SECRET = "escape-" + secrets.token_hex(8)

Case = Callable[[Sandbox], tuple[bool, str]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__.removeprefix("escape_")] = fn
    return fn


@contextlib.contextmanager
def escape_sandbox(kind: str = "auto", **config: object) -> Iterator[Sandbox]:
    """A sandbox started while the parent's environment holds a secret."""
    old = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET
    box = Sandbox(kind=kind, pool_size=config.pop("pool_size", 1), timeout_s=10, **config)
    try:
        box.start()
        yield box
    finally:
        box.close()
        if old is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = old


def run_escapes(sb: Sandbox, names: list[str] | None = None) -> dict[str, tuple[bool, str]]:
    out = {}
    for name in names or list(CASES):
        try:
            out[name] = CASES[name](sb)
        except Exception as exc:  # a case that cannot run counts as not held
            out[name] = (True, f"case failed: {type(exc).__name__}: {exc}")
    return out


def _tries(paths: list[str], op: str) -> str:
    """Code that tries ``op`` ('read', 'list' or 'write') on each path and prints a line per
    success."""
    return f"""
import os
for p in {paths!r}:
    try:
        if {op!r} == "read":
            print("READ", p, open(p, errors="replace").read()[:200].replace("\\n", " "))
        elif {op!r} == "list":
            print("LIST", p, sorted(os.listdir(p)))
        else:
            with open(p, "w") as f:
                f.write("x")
            print("WROTE", p)
    except OSError as e:
        print("denied", p, e.errno)
"""


def _listed(stdout: str) -> list[str]:
    """The names a ``_tries(..., "list")`` printed."""
    for line in stdout.splitlines():
        if line.startswith("LIST"):
            return list(ast.literal_eval(line.split(" ", 2)[2]))
    return []


def _unexpected(folder: Path, names: list[str]) -> list[str]:
    """Names listed in ``folder`` that are not on the way to the interpreter (which the
    sandbox shows on purpose, e.g. a virtual environment inside the project)."""
    allowed = set()
    for p in _interpreter_paths():
        for q in {Path(p), Path(p).resolve()}:
            if q.is_relative_to(folder) and q != folder:
                allowed.add(q.relative_to(folder).parts[0])
    return sorted(set(names) - allowed)


@case
def escape_read_host_tmp(sb: Sandbox) -> tuple[bool, str]:
    """Files in the host's /tmp (other runs, LLM caches) and the host's /tmp listing."""
    with tempfile.NamedTemporaryFile("w", prefix="trajsynth-escape-", dir="/tmp") as f:
        f.write(SECRET)
        f.flush()
        os.chmod(f.name, 0o644)
        r = sb.run(_tries([f.name], "read") + _tries(["/tmp"], "list"))
        name = os.path.basename(f.name)
    return (SECRET in r.stdout or name in _listed(r.stdout)), r.stdout.strip()[:300]


@case
def escape_read_repo(sb: Sandbox) -> tuple[bool, str]:
    """The project: its files and its folder."""
    r = sb.run(_tries([str(REPO / "pyproject.toml")], "read") + _tries([str(REPO)], "list"))
    extra = _unexpected(REPO, _listed(r.stdout))
    return ("READ" in r.stdout or bool(extra)), f"{r.stdout.strip()}; unexpected: {extra}"


@case
def escape_read_home(sb: Sandbox) -> tuple[bool, str]:
    """The host user's home: nothing of it but the folders leading to the interpreter."""
    home = Path.home()
    r = sb.run(_tries([str(home)], "list"))
    extra = _unexpected(home, _listed(r.stdout))
    return bool(extra), f"visible in {home}: {extra}"


def _interpreter_paths() -> list[str]:
    from trajsynth.envs.sandbox import _worker

    return _worker.interpreter_paths()


@case
def escape_write_outside(sb: Sandbox) -> tuple[bool, str]:
    """Writes to system folders, the project, and the host's /tmp (the sandbox's /tmp is its
    own: writing there must not reach the host's)."""
    tag = secrets.token_hex(4)
    targets = [f"/usr/escape-{tag}", f"/etc/escape-{tag}", str(REPO / f"escape-{tag}"),
               f"/tmp/escape-{tag}", f"/var/tmp/escape-{tag}", f"/root/escape-{tag}"]  # fmt: skip
    r = sb.run(_tries(targets, "write"))
    landed = [t for t in targets if os.path.exists(t)]
    for t in landed:
        os.unlink(t)
    wrote = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("WROTE")]
    # writing the private /tmp is allowed; any other write is an escape
    return bool(landed) or any(not w.startswith("/tmp/") for w in wrote), r.stdout.strip()


@case
def escape_etc_shadow(sb: Sandbox) -> tuple[bool, str]:
    r = sb.run(_tries(["/etc/shadow", "/etc/gshadow"], "read"))
    return ("root:" in r.stdout), r.stdout.strip()


@case
def escape_unix_socket(sb: Sandbox) -> tuple[bool, str]:
    """A host UNIX socket under /tmp (path) and an abstract one: neither is reachable."""
    path = f"/tmp/trajsynth-escape-{secrets.token_hex(4)}.sock"
    abstract = f"\0trajsynth-escape-{secrets.token_hex(4)}"
    got: list[bytes] = []
    servers = []
    for addr in (path, abstract):
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(addr)
        srv.listen()
        srv.settimeout(0.2)
        servers.append(srv)
    if os.path.exists(path):
        os.chmod(path, 0o777)
    stop = threading.Event()

    def accept(srv: socket.socket) -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.settimeout(1)
            with contextlib.suppress(OSError):
                got.append(conn.recv(100))
            conn.close()

    threads = [threading.Thread(target=accept, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    code = f"""
import socket
for addr in [{path!r}, {abstract!r}]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(addr)
        s.sendall(b"escaped")
        print("CONNECTED", repr(addr))
    except OSError as e:
        print("blocked", e.errno)
"""
    try:
        r = sb.run(code)
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(2)
        for s in servers:
            s.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return (bool(got) or "CONNECTED" in r.stdout), f"{r.stdout.strip()} received={got}"


_NS_CODE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
def attempt(what, flags):
    if libc.unshare(flags) == 0:
        print("UNSHARED", what, flush=True)
        return True
    print("blocked", what, os.strerror(ctypes.get_errno()), flush=True)
    return False
def mount_tmpfs(target):
    if libc.mount(b"tmpfs", target.encode(), b"tmpfs", 0, None) == 0:
        print("MOUNTED", target, flush=True)
    else:
        print("blocked mount", target, os.strerror(ctypes.get_errno()), flush=True)
mount_tmpfs("/tmp")
pid = os.fork()
if pid == 0:
    if attempt("user", CLONE_NEWUSER):
        attempt("user+mount", CLONE_NEWNS)
        mount_tmpfs("/tmp")
    os._exit(0)
os.waitpid(pid, 0)
attempt("mount", CLONE_NEWNS)
"""


@case
def escape_namespaces_and_mounts(sb: Sandbox) -> tuple[bool, str]:
    """A nested user namespace, a mount namespace, a tmpfs mount."""
    r = sb.run(_NS_CODE)
    return ("UNSHARED" in r.stdout or "MOUNTED" in r.stdout), r.stdout.strip()


_MEMORY_CODE = """
import os, select, time
r, w = os.pipe()
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        b = bytearray(400 << 20)
        b[::4096] = b"\\1" * len(range(0, len(b), 4096))  # touch every page
        os.write(w, b"h")
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
os.close(w)
held = 0
deadline = time.time() + 25
while held < 4 and time.time() < deadline:
    if not select.select([r], [], [], max(0.0, deadline - time.time()))[0]:
        break
    chunk = os.read(r, 4)
    if not chunk:
        break
    held += len(chunk)
print("HELD", held, flush=True)
time.sleep(1)  # everyone still holding?
alive = sum(1 for k in kids if os.waitpid(k, os.WNOHANG) == (0, 0))
print("ALIVE", alive, flush=True)
"""


@case
def escape_memory_whole_tree(sb: Sandbox) -> tuple[bool, str]:
    """4 children allocating 400 MB each under memory_mb=512: the tree must not keep more
    than one of them (1.6 GB held would be an escape)."""
    r = sb.run(_MEMORY_CODE, limits={"memory_mb": 512}, timeout=40)
    escaped = False
    for line in r.stdout.splitlines():
        if line.startswith("ALIVE"):
            escaped = int(line.split()[1]) >= 2
    after = sb.run("print('ok')").stdout == "ok\n"
    return escaped or not after, f"{r.stdout.strip()} killed_by={r.killed_by} next_ok={after}"


@case
def escape_fork_bomb(sb: Sandbox) -> tuple[bool, str]:
    start = time.monotonic()
    r = sb.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
               "        pass", timeout=2, limits={"max_processes": 32})  # fmt: skip
    took = time.monotonic() - start
    after = sb.run("print('alive')").stdout == "alive\n"
    return (took > 7 or not after), f"stopped by {r.killed_by} after {took:.1f} s, next ok={after}"


@case
def escape_network(sb: Sandbox) -> tuple[bool, str]:
    """TCP to a host listener on 127.0.0.1, public addresses, DNS."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = f"""
import socket
for addr in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
    try:
        socket.create_connection(addr, timeout=1).close()
        print("CONNECTED", addr)
    except OSError as e:
        print("blocked", e.errno)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("RESOLVED")
except OSError:
    print("no dns")
"""
    r = sb.run(code, timeout=10)
    try:
        server.accept()
        seen = True
    except OSError:
        seen = False
    server.close()
    return (seen or "CONNECTED" in r.stdout or "RESOLVED" in r.stdout), r.stdout.strip()


@case
def escape_parent_env(sb: Sandbox) -> tuple[bool, str]:
    """The parent's environment, directly or through any /proc/*/environ or cmdline."""
    code = f"""
import os, glob
found = [k for k, v in os.environ.items() if {SECRET!r} in v]
for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + \\
        ["/proc/{os.getpid()}/environ", "/proc/1/environ"]:
    try:
        if {SECRET!r}.encode() in open(path, "rb").read():
            found.append(path)
    except OSError:
        pass
print("FOUND" if found else "nothing", found)
"""
    r = sb.run(code)
    return ("FOUND" in r.stdout or SECRET_ENV in r.stdout), r.stdout.strip()


if __name__ == "__main__":  # a quick look: python tests/reliability/escapekit.py
    with escape_sandbox() as box:
        print(box.info())
        for name, (escaped, detail) in run_escapes(box, sys.argv[1:] or None).items():
            print(f"{'ESCAPED' if escaped else 'held':8} {name}: {detail[:200]}")
