"""Sandbox worker: a pre-started process that isolates itself once, then forks one child per
execution. Standard library only, and run by path (``python -I -S _worker.py MODE SCRATCH``)
with an empty environment, so it starts in ~15 ms and holds no secret of the parent (a
forked child's ``/proc/self/environ`` is its exec-time environment: the worker's, not the
trajsynth process's).

Setup, once per worker (MODE ``namespace``):

0) join a memory cgroup of its own (:class:`MemoryCgroup`: v2 when the memory controller is
   delegated, else v1 when writable), so every process of an execution is charged to it;
1) ``unshare`` new network, mount and PID namespaces (plus a user namespace when not root,
   mapping the caller to uid 0 inside): the network namespace has only a loopback that is
   down, so nothing can be reached, and abstract UNIX sockets are per network namespace;
2) fork the serving process, PID 1 of the new PID namespace, which builds a private root on
   a tmpfs (:func:`build_root`: the host's system folders, /etc without its secrets, the
   interpreter and the configured mounts bound from the host; a minimal /dev; a fresh
   /proc), pivots into it and detaches the host's root, so nothing else of the host
   (its /tmp, runs, caches, home, project, UNIX sockets) is reachable;
3) make every mount read-only and nosuid (``mount_setattr(AT_RECURSIVE)``, or a remount of
   each mount point on older kernels) but /proc, and mount a private, size-limited /tmp:
   the run folder, the only writable place;
3a) set the namespace limits of the server's user namespace to 0 (``max_user_namespaces``
   and the others), so no run can nest a user namespace or get a mount namespace to mount
   in. As real root the server first enters a user namespace of its own (its parent, still
   privileged on the host, maps root and the runs' uid to themselves), so the limits bind
   the runs and not the host; without root, the user namespace of step 1 is that one.

MODE ``bwrap`` means bubblewrap already did 1-3 (the worker runs as PID 1, ``--as-pid-1``);
MODE ``rlimit`` means no isolation is available: only rlimits and the uid switch apply.

Per execution (a request on stdin: 4-byte big-endian length + JSON):

4) the run folder (/tmp, or in rlimit mode a folder under SCRATCH; emptied after each run)
   gets the request's files;
5) fork a child: new session (its own process group), stdin/stdout/stderr on pipes, every
   other file descriptor closed, cwd = the run folder, rlimits (CPU, address space, file
   size, processes, open files, no core dumps), a uid of its own when the worker is root,
   no capabilities at all (and, from 3a, no namespace of any kind can be created);
   ``no_new_privs`` (set once on the worker, and inherited), a scrubbed environment; the
   memory limit of the whole execution goes to the worker's cgroup (without one, the worker
   samples the execution's memory every 10 ms and kills it above the limit); then it runs
   the Python code in-process (no interpreter start-up; code up to 20,000 characters arrives
   compiled by the worker) or ``execve``s the argv;
6) collect output (capped) until the child exits or the wall-clock timeout, which kills the
   process group;
7) kill everything the execution left behind: as PID 1 of the namespace, ``kill(-1,
   SIGKILL)`` reaches every other process in it; in rlimit mode a reaper with the
   execution's uid does the same for that uid only; then reap, remove the run folder and
   answer with stdout, stderr, exit status, timing and which limit (if any) stopped it.
"""

# ruff: noqa: SIM105 - try/except/pass, not contextlib: the worker imports as little as it can
from __future__ import annotations

import ctypes
import errno
import gc
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

TYPE_CHECKING = False  # typing is not imported at run time: the worker starts in ~15 ms
if TYPE_CHECKING:
    from collections.abc import Container, Iterable, Sequence
    from types import CodeType
    from typing import Any

    #: a request's files, limits, ...: decoded JSON
    Json = dict[str, Any]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = -100, 0x8000, 0x1, 0x2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SYS_MOUNT_SETATTR = 442  # same number on x86_64 and aarch64 (generic syscall table)
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 38, 1, 24, 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
MNT_DETACH = 2
SECBIT_NOROOT_ALL = 0x3 | 0xC | 0x30  # noroot, no_setuid_fixup, keep_caps_locked
UID_BASE = 1_800_000_000
MEMORY_EXIT = 113  # the child's exit code after a MemoryError
COMPILE_IN_WORKER_CHARS = 20_000
_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    _check(
        libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {target}",
    )


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def make_readonly(keep_writable: Sequence[str] = ("/proc",)) -> None:
    """Every mount read-only and nosuid (one syscall on Linux >= 5.12, else mount by mount),
    except ``keep_writable`` (our own ``/proc``: a run writes its user namespace's maps and
    limits there)."""
    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    ret = libc().syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    if ret == 0:
        clear = MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
        for path in keep_writable:
            libc().syscall(
                SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), 0, ctypes.byref(clear),
                ctypes.sizeof(clear),
            )  # fmt: skip
        return
    locked = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in sorted(mounts, key=lambda x: len(x[4])):
        point, options = fields[4].replace("\\040", " "), fields[5].split(",")
        if point in keep_writable:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        for opt in options:
            flags |= locked.get(opt, 0)
        try:
            mount(None, point, None, flags)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.EINVAL):
                raise


def hidden_ancestors(paths: Iterable[str | None]) -> dict[str, list[str]]:
    """{ancestor: [paths]} for each path below a folder others cannot enter (e.g. a Python
    installed under /root): the run's uid could not read it."""
    plan: dict[str, list[str]] = {}
    tops: list[str] = []
    for p in sorted({os.path.realpath(p) for p in paths if p}):
        if not any(p == t or p.startswith(t + "/") for t in tops):
            tops.append(p)
    for p in tops:
        parts = p.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            anc = "/" + "/".join(parts[:depth])
            try:
                mode = os.stat(anc).st_mode
            except OSError:
                break
            if not mode & 0o001:
                if anc != p:
                    plan.setdefault(anc, []).append(p)
                break
    return plan


def interpreter_paths(executable: str | None = None) -> list[str]:
    """The interpreter's installation and, for a virtual environment's interpreter, that
    environment (its site-packages), so ``sys.executable`` works inside the sandbox too."""
    exe = executable or sys.executable
    paths = [os.path.dirname(os.path.realpath(exe)), os.path.dirname(os.path.abspath(exe))]
    if executable is None:
        paths += [sys.base_prefix, sys.prefix]
    else:
        paths.append(os.path.dirname(os.path.dirname(os.path.realpath(exe))))
    venv = os.path.dirname(os.path.dirname(os.path.abspath(exe)))
    if os.path.exists(os.path.join(venv, "pyvenv.cfg")):
        paths.append(venv)
    return paths


#: host paths every sandbox sees, read-only (the ones that exist here)
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: files and folders of /etc that hold secrets: hidden behind an empty file or folder
ETC_SECRETS = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
    "/etc/sudoers.d", "/etc/ssl/private", "/etc/security/opasswd", "/etc/.pwd.lock",
)  # fmt: skip
DEVICES = ("null", "zero", "full", "random", "urandom")


def root_plan(
    extra: Iterable[str | os.PathLike[str]] = (), executable: str | None = None
) -> list[tuple[str, str, Any]]:
    """What the private root holds: ``[(kind, path, target)]`` in creation order, kind one of
    ``bind`` (a host path at the same place), ``symlink`` (a host symlink on the way to a
    bound path, recreated), ``hide`` (an /etc secret, covered). Paths already inside a bound
    folder are skipped."""
    plan: list[tuple[str, str, Any]] = []  # target: str, or None for a bind
    bound: list[str] = []
    links: set[str] = set()

    def covered(p: str) -> bool:
        return any(p == b or p.startswith(b + "/") for b in bound)

    def place(path: str, depth: int = 0) -> None:
        path = os.path.normpath(path)
        if depth > 16 or covered(path) or not os.path.lexists(path):
            return
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            q = "/" + "/".join(parts[:i])
            if covered(q):
                return
            if os.path.islink(q):
                if q not in links:
                    links.add(q)
                    plan.append(("symlink", q, os.readlink(q)))
                rest = "/".join(parts[i:])
                target = os.path.realpath(q)
                place(os.path.join(target, rest) if rest else target, depth + 1)
                return
        bound.append(path)
        plan.append(("bind", path, None))

    for p in SYSTEM_PATHS:
        place(p)
    for p in list(interpreter_paths(executable)) + [str(x) for x in extra]:
        place(os.path.abspath(p))
    for p in ETC_SECRETS:
        if os.path.lexists(p) and not os.path.islink(p):
            plan.append(("hide", p, "dir" if os.path.isdir(p) else "file"))
    ssh = "/etc/ssh"
    if os.path.isdir(ssh) and not os.path.islink(ssh):
        for name in sorted(os.listdir(ssh)):
            if name.startswith("ssh_host_") and not name.endswith(".pub"):
                plan.append(("hide", os.path.join(ssh, name), "file"))
    return plan


def _mkdirs(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def build_root(new_root: str, extra: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Populate the private root (a tmpfs mounted on ``new_root``): system folders, /etc
    without its secrets, the interpreter, ``extra`` paths, all bound from the host (made
    read-only later); a minimal /dev; empty /proc and /tmp for their own mounts."""
    for kind, path, target in root_plan(extra):
        dest = new_root + path
        if kind == "symlink":
            _mkdirs(os.path.dirname(dest))
            if not os.path.lexists(dest):
                os.symlink(target, dest)
        elif kind == "bind":
            if os.path.isdir(path):
                _mkdirs(dest)
            else:
                _mkdirs(os.path.dirname(dest))
                open(dest, "a").close()
            mount(path, dest, None, MS_BIND | MS_REC)
        elif target == "dir":
            mount("tmpfs", dest, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
        else:
            mount(new_root + "/.empty", dest, None, MS_BIND)
    for d in ("dev", "proc", "tmp"):
        _mkdirs(os.path.join(new_root, d))
    for name in DEVICES:
        dest = os.path.join(new_root, "dev", name)
        open(dest, "a").close()
        mount("/dev/" + name, dest, None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"), ("shm", "/tmp"),
    ):  # fmt: skip
        os.symlink(target, os.path.join(new_root, "dev", name))


def pivot(new_root: str) -> None:
    """Make ``new_root`` the root and detach the host's: nothing of it stays reachable."""
    nr = SYS_PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown architecture {os.uname().machine}")
    os.chdir(new_root)
    _check(libc().syscall(nr, b".", b"."), "pivot_root")
    _check(libc().umount2(b".", MNT_DETACH), "umount the host root")
    os.chdir("/")


def unshare_namespaces(
    network: bool = True, inside_uid: int | None = 0, mount_ns: bool = True
) -> None:
    """Step 1: new network, mount and PID namespaces (plus a user namespace when not root,
    mapping the caller to ``inside_uid``; None: to itself). ``network=False`` keeps the
    host's network and ``mount_ns=False`` the caller's mounts (the launcher of long-lived
    servers, :mod:`._view`, whose child makes its own)."""
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWPID | (CLONE_NEWNS if mount_ns else 0) | (CLONE_NEWNET if network else 0)
    _check(libc().unshare(flags | (0 if root else CLONE_NEWUSER)), "unshare")
    if not root:
        inner_uid = uid if inside_uid is None else inside_uid
        inner_gid = gid if inside_uid is None else inside_uid
        for path, text in (
            ("/proc/self/setgroups", "deny"),
            ("/proc/self/uid_map", f"{inner_uid} {uid} 1"),
            ("/proc/self/gid_map", f"{inner_gid} {gid} 1"),
        ):
            with open(path, "w") as f:
                f.write(text)
    if mount_ns:
        mount(None, "/", None, MS_REC | MS_PRIVATE)


def setup_root(scratch: str, tmpfs_mb: int, extra: Iterable[str | os.PathLike[str]]) -> str:
    """Step 2, in PID 1 of the new namespace: a private root on a tmpfs mounted on SCRATCH
    (read-only host system paths, a fresh /proc), pivoted into, then everything read-only but
    a private, size-limited /tmp. Returns what /proc is."""
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    open(os.path.join(scratch, ".empty"), "w").close()
    os.chmod(os.path.join(scratch, ".empty"), 0o444)
    build_root(scratch, extra)
    try:  # while the host's /proc is still visible (required in a user namespace)
        mount("proc", scratch + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        proc = "private"
    except OSError as exc:
        proc = f"none ({exc.strerror})"
    pivot(scratch)
    make_readonly()
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,mode=1777")
    return proc


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("e", ctypes.c_uint32), ("p", ctypes.c_uint32), ("i", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """No capability survives, not even through execve of a uid-0 process."""
    lib = libc()
    for cap in range(64):
        lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    lib.prctl(PR_SET_SECUREBITS, SECBIT_NOROOT_ALL, 0, 0, 0)
    lib.capset(ctypes.byref(CapHeader(0x20080522, 0)), ctypes.byref((CapData * 2)()))


#: namespace kinds a run may not create (each user namespace has its own limits)
NS_LIMITS = ("user", "mnt", "net", "pid", "ipc", "uts", "cgroup")


def limit_namespaces() -> bool:
    """Step 3a: no process of our user namespace may create a namespace of any kind (each
    user namespace has its own ``max_*_namespaces``; ours become 0). Returns False when the
    limits cannot be written."""
    done = False
    for kind in NS_LIMITS:
        try:
            with open(f"/proc/sys/user/max_{kind}_namespaces", "w") as f:
                f.write("0")
            done = True
        except FileNotFoundError:
            pass
        except OSError:
            return False
    return done


def enter_own_userns(sync_w: int, go_r: int) -> None:
    """Step 3a as real root: a user namespace of our own, mapping root and the runs' uid to
    themselves (written by our parent, which still holds CAP_SETUID on the host), so the
    namespace limits we set in it bind the runs and nothing else of the host."""
    _check(libc().unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    os.write(sync_w, b"u")
    if os.read(go_r, 1) != b"k":
        raise OSError(errno.EPERM, "the user namespace maps could not be written")


def write_maps(proc_fd: int, exec_uid: int | None) -> None:
    """The parent's half of :func:`enter_own_userns`."""
    text = f"0 0 1\n{exec_uid} {exec_uid} 1\n"
    for name in ("uid_map", "gid_map"):
        fd = os.open(name, os.O_WRONLY, dir_fd=proc_fd)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


# --------------------------------------------------------------------------------------
# memory of the whole execution
# --------------------------------------------------------------------------------------

MEMORY_SLACK = 16 << 20  # the worker's own pages touched while it runs an execution
WATCH_INTERVAL_S = 0.01


def _mounts(fstype: str) -> list[tuple[str, list[str]]]:
    """[(mount point, super options)] of one file system type."""
    out: list[tuple[str, list[str]]] = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if rfields and rfields[0] == fstype:
                    out.append((fields[4].replace("\\040", " "), rfields[-1].split(",")))
    except OSError:
        pass
    return out


class MemoryCgroup:
    """A memory cgroup of the worker's own, created inside the cgroup it was started in and
    joined before the namespaces: every process of an execution is charged to it, so its
    limit holds for the whole process tree. cgroup v2 (``memory.max``) when the memory
    controller is delegated to us, else cgroup v1 (``memory.limit_in_bytes``) when its
    hierarchy is writable; :meth:`create` returns None when neither is. The files are opened
    before the root is pivoted, so the worker keeps using them without seeing /sys."""

    def __init__(self, version: str, path: str, limit_fds: list[int], events_fd: int) -> None:
        self.version, self.path = version, path
        self.limit_fds, self.events_fd = limit_fds, events_fd
        self.current: int | None = None

    @classmethod
    def create(cls) -> MemoryCgroup | None:
        try:
            with open("/proc/self/cgroup") as f:
                lines = [ln.rstrip("\n").split(":", 2) for ln in f]
        except OSError:
            return None
        v2 = [p for h, c, p in lines if h == "0" and c == ""]
        v1 = [p for h, c, p in lines if "memory" in c.split(",")]
        candidates: list[tuple[str, str]] = []
        if v2:
            candidates += [("v2", m + v2[0].rstrip("/")) for m, _ in _mounts("cgroup2")]
        if v1:
            candidates += [
                ("v1", m + v1[0].rstrip("/")) for m, opts in _mounts("cgroup") if "memory" in opts
            ]
        for version, parent in candidates:
            made = cls._make(version, parent)
            if made is not None:
                return made
        return None

    @classmethod
    def _make(cls, version: str, parent: str) -> MemoryCgroup | None:
        if version == "v2":
            try:
                with open(os.path.join(parent, "cgroup.controllers")) as f:
                    if "memory" not in f.read().split():
                        return None
            except OSError:
                return None
            try:  # works where the parent has no processes of its own, or is the root
                with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory")
            except OSError:
                pass
        cls._remove_stale(parent)
        path = os.path.join(parent, f"trajsynth-sandbox-{os.getpid()}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        limit_names = ["memory.max", "memory.swap.max"] if version == "v2" else [
            "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
        ]  # fmt: skip
        events = "memory.events" if version == "v2" else "memory.oom_control"
        try:
            fds: list[int] = []
            for name in limit_names:
                try:
                    fds.append(os.open(os.path.join(path, name), os.O_WRONLY))
                except FileNotFoundError:
                    if name == limit_names[0]:
                        raise
            events_fd = os.open(os.path.join(path, events), os.O_RDONLY)
            if version == "v2" and len(fds) > 1:
                os.write(fds.pop(), b"0")  # no swap: the limit is memory
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            try:
                os.rmdir(path)
            except OSError:
                pass
            return None
        return cls(version, path, fds, events_fd)

    @staticmethod
    def _remove_stale(parent: str) -> None:
        """Empty cgroups of workers that are gone (a killed run's leftovers)."""
        try:
            names = [n for n in os.listdir(parent) if n.startswith("trajsynth-sandbox-")]
        except OSError:
            return
        for name in names:
            pid = name.rsplit("-", 1)[-1]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                try:
                    os.rmdir(os.path.join(parent, name))
                except OSError:
                    pass

    def set_limit(self, nbytes: int) -> None:
        """The whole execution's limit (plus the worker's slack)."""
        if nbytes == self.current:
            return
        value = str(nbytes + MEMORY_SLACK).encode()
        fds = self.limit_fds
        # cgroup v1: memsw must stay >= the memory limit, so the order depends on the direction
        order = fds if self.current is None or nbytes < self.current else list(reversed(fds))
        for _ in range(2):
            for fd in order:
                try:
                    os.write(fd, value)
                except OSError:
                    pass
        self.current = nbytes

    def oom_kills(self) -> int:
        try:
            text = os.pread(self.events_fd, 4096, 0).decode()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def describe(self) -> str:
        name = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
        return f"cgroup {self.version} {name} on the whole execution"


def tree_pss_bytes(exclude: Container[int]) -> int:
    """Proportional set size of every process visible in our private /proc but ``exclude``:
    the watchdog's measure of the execution's memory (shared pages counted once)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude:
            continue
        try:
            with open(f"/proc/{name}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) << 10
                        break
        except (OSError, ValueError):
            pass
    return total


def _print_user_traceback() -> None:
    """The traceback of the sandboxed code, without the worker's own frame."""
    etype, value, tb = sys.exc_info()
    traceback.print_exception(etype, value, tb.tb_next if tb is not None else None)


# --------------------------------------------------------------------------------------
# protocol
# --------------------------------------------------------------------------------------


def read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv(fd: int) -> Any:
    head = read_exact(fd, 4)
    if head is None:
        return None
    body = read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def send(fd: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


# --------------------------------------------------------------------------------------
# one execution
# --------------------------------------------------------------------------------------


class Worker:
    fd_limit: int  # set by serve()
    tmp_options: str  # the mount options of /tmp (set by run_worker)

    def __init__(
        self,
        mode: str,
        scratch: str,
        ctl_in: int | None,
        ctl_out: int | None,
        exec_uid: int | None,
        memory: MemoryCgroup | None = None,
        proc: str = "",
    ) -> None:
        """``exec_uid``: the uid runs switch to (real root only), else None; ``memory``: the
        worker's :class:`MemoryCgroup`, if any; ``proc``: what /proc is (``private``: ours)."""
        self.mode = mode
        self.scratch = scratch
        self.ctl_in, self.ctl_out = ctl_in, ctl_out
        self.root = exec_uid is not None
        self.exec_uid = exec_uid
        self.pid1 = os.getpid() == 1
        self.runs = 0
        self.memory = memory
        # namespace and bwrap kinds: a private root whose /tmp is the run folder
        self.private_root = mode in ("namespace", "bwrap")
        self.run_dir: str | None = "/tmp" if self.private_root else None
        # without a cgroup, a watchdog samples the execution's memory (private /proc only)
        self.watch = memory is None and self.pid1 and proc == "private"
        self.ns_limits = False  # whether step 3a set our namespace limits to 0
        self.exit_after_answer = False

    def warm_up(self, preload: Iterable[str]) -> None:
        """Pay once, in the worker, the first-use costs every child would pay after fork:
        the compiler's first ``compile`` (~2.5 ms), ctypes symbol lookup, environ writes,
        and imports of commonly used modules."""
        exec(compile("_ = [i * 2 for i in range(3)]", "<warm-up>", "exec"), {})
        print("", end="", flush=True)  # sys.stdout's first write (fd 1 is /dev/null here)
        libc().prctl  # noqa: B018 - resolves the symbols
        libc().syscall  # noqa: B018
        os.environ["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
        for name in preload:
            try:
                __import__(name)
            except ImportError:
                pass
        gc.freeze()  # keep the collector from touching (and so copying) inherited objects

    def probe(self) -> dict[str, str]:
        """What this worker's runs get, checked from a run's own seat: a child confined as a
        run is tries to create a user namespace."""
        info = {"filesystem": "host (rlimit only)", "network": "host"}
        if self.private_root:
            info["filesystem"] = "private root: system paths read-only, own /tmp"
            info["network"] = "none (own network namespace)"
        if self.memory is not None:
            info["memory"] = self.memory.describe()
        elif self.watch:
            info["memory"] = (
                f"per process RLIMIT_AS; whole execution sampled every "
                f"{WATCH_INTERVAL_S * 1000:.0f} ms (PSS), killed above the limit"
            )
        else:
            info["memory"] = "per process RLIMIT_AS; whole execution <= max_processes x memory_mb"
        if not self.private_root:
            info["nested_userns"] = "not blocked (no namespaces)"
            return info
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            verdict = b"?"
            try:
                self.confine()
                nested = libc().unshare(CLONE_NEWUSER) == 0
                verdict = b"N" if nested else (b"B" if self.ns_limits else b"U")
            finally:
                os.write(w, verdict)
                os._exit(0)
        os.close(w)
        verdict = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
        info["nested_userns"] = {
            b"B": "blocked (own user namespace, namespace limits 0)",
            b"U": "blocked (user namespaces not permitted here)",
            b"N": "NOT blocked",
        }.get(verdict, "unknown (probe failed)")
        return info

    def confine(self) -> None:
        """Step 5 (after the rlimits): the run's uid (real root only) and no capabilities."""
        if self.exec_uid is not None:
            os.setgroups([])
            os.setresgid(self.exec_uid, self.exec_uid, self.exec_uid)
            os.setresuid(self.exec_uid, self.exec_uid, self.exec_uid)
            libc().prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc files stay readable
        elif self.private_root:  # uid 0 of a user namespace: drop what it holds
            drop_capabilities()
        # (a switch from uid 0 to another uid clears every capability, and no_new_privs
        # keeps execve from granting any: the 65 prctl calls would cost ~1 ms a run)

    def serve(self, info: Json, preload: Iterable[str] = ()) -> None:
        self.warm_up(preload)
        # no_new_privs is inherited and can never be unset: set once here, every run has it
        libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        # every descriptor a run must not inherit is below this (pipes reuse low numbers)
        try:
            self.fd_limit = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 32
        except OSError:  # no /proc
            self.fd_limit = 1024
        ctl_in, ctl_out = self.ctl_in, self.ctl_out
        assert ctl_in is not None and ctl_out is not None, "only the zygote's has none"
        send(ctl_out, {"ready": True, **info})
        while True:
            req = recv(ctl_in)
            if req is None:
                return
            resp: Json
            try:
                resp = self.execute(req)
            except Exception as exc:  # a worker bug: report it, keep serving
                resp = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            resp["id"] = req.get("id")
            send(ctl_out, resp)
            if self.exit_after_answer:  # its run folder is unusable: the pool starts another
                return

    # 4) run folder
    def prepare(self, req: Json) -> str:
        """The run folder: one per worker, emptied after every execution (so a run never
        sees another's files), recreated if a run left it unusable."""
        if self.run_dir is None:  # rlimit mode: a folder under SCRATCH
            self.runs += 1
            self.run_dir = os.path.join(self.scratch, f"run-{os.getpid()}-{self.runs}")
            os.mkdir(self.run_dir, 0o700)
            if self.exec_uid is not None:
                os.chown(self.run_dir, self.exec_uid, self.exec_uid)
        run_dir = self.run_dir
        for rel, content in (req.get("files") or {}).items():
            path = os.path.normpath(os.path.join(run_dir, rel))
            if not path.startswith(run_dir + os.sep):
                raise ValueError(f"file path {rel!r} leaves the run folder")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(content)
            if self.exec_uid is not None:
                for p in (path, os.path.dirname(path)):
                    os.chown(p, self.exec_uid, self.exec_uid)
        return run_dir

    def execute(self, req: Json) -> Json:
        run_dir = self.prepare(req)
        limits = req.get("limits") or {}
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe()
        self.set_environment(run_dir, req.get("env") or {})
        compiled: CodeType | BaseException | None = None
        code = req.get("code", "")
        # short code is compiled here, once, so the child only runs it (compiling in the child
        # costs copy-on-write faults); long code is compiled in the child, under its limits
        if not req.get("argv") and len(code) <= COMPILE_IN_WORKER_CHARS:
            try:
                compiled = compile(code, "<sandbox>", "exec")
            except (SyntaxError, ValueError) as exc:
                compiled = exc
        if self.memory is not None:
            self.memory.set_limit(int(limits.get("memory_mb", 512)) << 20)
            ooms = self.memory.oom_kills()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # 5) the child
            try:
                self.child(req, limits, run_dir, in_r, out_w, err_w, compiled)
            except BaseException:
                os.write(2, ("sandbox: set-up failed\n" + traceback.format_exc()).encode())
            finally:
                os._exit(127)
        for fd in (out_w, err_w, in_r):
            os.close(fd)
        result = self.collect(pid, req, limits, out_r, err_r, in_w, start)
        if self.memory is not None and self.memory.oom_kills() > ooms and not result["timed_out"]:
            result["killed_by"] = "memory"
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        result["cpu_s"] = round(
            (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 4
        )
        try:
            self.cleanup(run_dir)
        except OSError:
            if not self.private_root:  # a run made its folder unremovable: use a new one
                self.run_dir = None
            else:  # a fresh /tmp where we may still mount; else a fresh worker
                try:
                    _check(libc().umount2(b"/tmp", MNT_DETACH), "umount /tmp")
                    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, self.tmp_options)
                except OSError:
                    self.exit_after_answer = True
        return result

    def set_environment(self, run_dir: str, extra: Json) -> None:
        """The child's scrubbed environment, written here so the child inherits it (changing
        it after the fork would copy-on-write pages in every child)."""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": run_dir,
            "TMPDIR": run_dir,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **{str(k): str(v) for k, v in extra.items()},
        }
        for key in [k for k in os.environ if k not in env]:
            del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value

    def child(
        self,
        req: Json,
        limits: Json,
        run_dir: str,
        in_r: int,
        out_w: int,
        err_w: int,
        compiled: CodeType | BaseException | None,
    ) -> None:
        os.setsid()
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, self.fd_limit)  # every other descriptor
        os.chdir(run_dir)
        cpu = max(1, int(float(limits.get("cpu_seconds", 10)) + 0.999))
        mem = int(limits.get("memory_mb", 512)) << 20
        for res, value in (
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (mem, mem)),
            (resource.RLIMIT_FSIZE, ((int(limits.get("file_size_mb", 16)) << 20),) * 2),
            (resource.RLIMIT_NPROC, (int(limits.get("max_processes", 64)),) * 2),
            (resource.RLIMIT_NOFILE, (int(limits.get("max_open_files", 256)),) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
        ):
            resource.setrlimit(res, value)
        self.confine()
        env = dict(os.environ)  # set up by execute() before the fork
        argv = req.get("argv")
        if argv:
            path = argv[0]
            if "/" not in path:  # resolve on PATH here (os.execvpe imports modules)
                for d in env["PATH"].split(":"):
                    cand = os.path.join(d, path)
                    if os.access(cand, os.X_OK) and not os.path.isdir(cand):
                        path = cand
                        break
            try:
                os.execve(path, argv, env)
            except OSError as exc:
                os.write(2, f"sandbox: cannot execute {argv[0]}: {exc.strerror}\n".encode())
                os._exit(127)
        code = 0
        try:
            sys.argv = ["<sandbox>"]
            sys.path.insert(0, run_dir)
            if compiled is None:
                compiled = compile(req.get("code", ""), "<sandbox>", "exec")
            if isinstance(compiled, BaseException):  # a SyntaxError, shown as Python would
                traceback.print_exception(type(compiled), compiled, None)
                code = 1
            else:
                exec(compiled, {"__name__": "__main__"})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except MemoryError:
            code = MEMORY_EXIT
            _print_user_traceback()
        except BaseException:
            code = 1
            _print_user_traceback()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            os._exit(code)

    # 6) output and timeout
    def collect(
        self,
        pid: int,
        req: Json,
        limits: Json,
        out_r: int,
        err_r: int,
        in_w: int | None,
        start: float,
    ) -> Json:
        cap = int(limits.get("output_bytes", 1_000_000))
        timeout = float(req.get("timeout", 10))
        deadline = start + timeout
        bufs = {out_r: bytearray(), err_r: bytearray()}
        truncated = {out_r: False, err_r: False}
        stdin = (req.get("stdin") or "").encode()
        assert in_w is not None, "the caller gives the stdin pipe (None once it is closed)"
        if stdin:
            os.set_blocking(in_w, False)
        else:
            os.close(in_w)
            in_w = None
        open_fds = [out_r, err_r]
        timed_out = False
        status = None
        exited_at = None
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        usage = None
        mem_limit = int(limits.get("memory_mb", 512)) << 20
        next_watch = start + WATCH_INTERVAL_S if self.watch else float("inf")
        over_memory = False
        while True:
            now = time.monotonic()
            if status is None and now >= next_watch:
                next_watch = now + WATCH_INTERVAL_S
                if tree_pss_bytes({1}) > mem_limit:
                    over_memory = True
                    self.kill_group(pid)
                    os.kill(-1, signal.SIGKILL)
            if status is None:
                done, st, ru = os.wait4(pid, os.WNOHANG)
                if done:
                    status, exited_at, usage = st, now, ru
            if (
                status is not None
                and exited_at is not None  # (both are set together)
                and (not open_fds or now - exited_at > 0.05)
            ):
                break
            if status is None and now >= deadline:
                timed_out = True
                self.kill_group(pid)
                _, status, usage = os.wait4(pid, 0)
                exited_at = time.monotonic()
                continue
            idle = 1.0 if pidfd is not None else 0.002
            wait = min(deadline - now, 0.05 if status is not None else idle, next_watch - now)
            rlist = list(open_fds) + ([pidfd] if pidfd is not None and status is None else [])
            wlist = [in_w] if in_w is not None else []
            readable, writable, _ = select.select(rlist, wlist, [], max(wait, 0))
            for fd in readable:
                if fd == pidfd:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.remove(fd)
                    continue
                room = cap - len(bufs[fd])
                if room > 0:
                    bufs[fd] += chunk[:room]
                if len(chunk) > room:
                    truncated[fd] = True
            if writable and in_w is not None:  # (writable is only ever [in_w])
                try:
                    stdin = stdin[os.write(in_w, stdin) :]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    stdin = b""
                if not stdin:
                    os.close(in_w)
                    in_w = None
        duration = (exited_at or time.monotonic()) - start
        # 7) nothing outlives the execution
        self.kill_rest(pid)
        for left in (out_r, err_r, pidfd, in_w):
            if left is not None:
                os.close(left)
        result = self.describe(status, timed_out, duration, limits, bufs, truncated, out_r, err_r)
        result["max_rss_kb"] = usage.ru_maxrss if usage is not None else None
        if over_memory and not timed_out:
            result["killed_by"] = "memory"
        return result

    def describe(
        self,
        status: int,
        timed_out: bool,
        duration: float,
        limits: Json,
        bufs: dict[int, bytearray],
        truncated: dict[int, bool],
        out_r: int,
        err_r: int,
    ) -> Json:
        exit_code, sig = None, None
        if os.WIFEXITED(status):
            exit_code = os.WEXITSTATUS(status)
        elif os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            exit_code = -sig
        stderr = bufs[err_r].decode("utf-8", "replace")
        killed_by = None
        if timed_out:
            killed_by = "timeout"
        elif (
            sig in (signal.SIGXCPU, signal.SIGKILL)
            and duration >= float(limits.get("cpu_seconds", 10)) * 0.9
        ) or sig == signal.SIGXCPU:
            killed_by = "cpu"
        elif sig == signal.SIGXFSZ or "[Errno 27] File too large" in stderr[-2000:]:
            killed_by = "file_size"  # Python ignores SIGXFSZ: the write raises EFBIG instead
        elif exit_code == MEMORY_EXIT and "MemoryError" in stderr[-2000:]:
            killed_by = "memory"
        elif sig is not None:
            killed_by = "signal"
        return {
            "stdout": bufs[out_r].decode("utf-8", "replace"),
            "stderr": stderr,
            "exit_code": exit_code,
            "signal": sig,
            "timed_out": timed_out,
            "killed_by": killed_by,
            "duration_s": round(duration, 6),
            "stdout_truncated": truncated[out_r],
            "stderr_truncated": truncated[err_r],
        }

    def kill_group(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def kill_rest(self, pid: int) -> None:
        """Step 7."""
        self.kill_group(pid)
        if self.pid1:
            try:
                os.kill(-1, signal.SIGKILL)  # every other process of this PID namespace
            except ProcessLookupError:
                pass
        elif self.exec_uid is not None:  # rlimit mode as root: a reaper with the run's uid
            reaper = os.fork()
            if reaper == 0:
                try:
                    os.setresuid(self.exec_uid, self.exec_uid, self.exec_uid)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(reaper, 0)
        else:  # rlimit mode, not root: we are a child subreaper, so orphans come to us
            self.kill_descendants()
        while True:  # reap (orphans come to us: PID 1 or child subreaper)
            try:
                done, _ = os.waitpid(-1, 0 if self.pid1 else os.WNOHANG)
            except ChildProcessError:
                break
            if done == 0:
                break

    def kill_descendants(self, budget_s: float = 2.0) -> None:
        """Kill our children until none is left: each time a process dies, its own children
        are reparented to us (child subreaper), so the loop reaches every descendant."""
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/self/task/{os.getpid()}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                return  # no /proc children list: the process group kill is all we have
            if not kids:
                return
            for k in kids:
                try:
                    os.killpg(k, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    os.kill(k, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for k in kids:
                try:
                    os.waitpid(k, 0)
                except ChildProcessError:
                    pass

    def cleanup(self, run_dir: str) -> None:
        """Empty the run folder and restore its owner and mode."""
        st = os.stat(run_dir)
        if self.private_root:  # /tmp: root's, sticky, writable by all
            owner, mode = 0, 0o1777
        else:
            owner = self.exec_uid if self.exec_uid is not None else os.getuid()
            mode = 0o700
        if st.st_mode & 0o7777 != mode or st.st_uid != owner:
            os.chmod(run_dir, mode)
            if self.exec_uid is not None:
                os.chown(run_dir, owner, owner)
        with os.scandir(run_dir) as it:
            entries = [e.path for e in it]
        for path in entries:
            if os.path.isdir(path) and not os.path.islink(path):
                for base, dirs, names in os.walk(path, topdown=False):
                    for n in names:
                        os.unlink(os.path.join(base, n))
                    for d in dirs:
                        sub = os.path.join(base, d)
                        os.unlink(sub) if os.path.islink(sub) else os.rmdir(sub)
                os.rmdir(path)
            else:
                os.unlink(path)


def run_worker(mode: str, scratch: str, config: Json, ctl_in: int, ctl_out: int) -> None:
    """Set up one worker (steps 1-3) on the control descriptors and serve until EOF."""
    real_root = os.geteuid() == 0  # decided before a user namespace makes everyone uid 0
    exec_uid = None
    if real_root:  # unique while this worker lives: our host pid (or the manager's choice)
        exec_uid = int(config.get("uid") or UID_BASE + os.getpid() % 100_000_000)
    info = {"isolation": mode, "uid": exec_uid, "pid": os.getpid()}
    tmpfs_mb = int(config.get("tmpfs_mb", 64))
    memory = None
    proc = "host"
    try:
        if mode in ("namespace", "rlimit"):  # joined before the namespaces hide /sys
            memory = MemoryCgroup.create()
            if memory is not None:
                info["cgroup"] = memory.path
        if mode == "namespace":
            unshare_namespaces()  # 1
            sync_r, sync_w = os.pipe()
            go_r, go_w = os.pipe()
            pid = os.fork()  # the server is PID 1 of the new namespace
            if pid:
                os.close(ctl_in)
                if ctl_out != ctl_in:
                    os.close(ctl_out)
                os.close(sync_w)
                os.close(go_r)
                proc_fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
                if os.read(sync_r, 1) == b"u":  # 3a: map the server's own user namespace
                    try:
                        write_maps(proc_fd, exec_uid)
                        os.write(go_w, b"k")
                    except OSError:
                        os.write(go_w, b"x")
                _, status = os.waitpid(pid, 0)
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
            os.close(sync_r)
            os.close(go_w)
            libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            proc = setup_root(scratch, tmpfs_mb, config.get("mounts") or ())  # 2-3
            if real_root:
                try:
                    enter_own_userns(sync_w, go_r)
                except OSError as exc:
                    info["userns"] = f"none ({exc.strerror})"
            os.close(sync_w)
            os.close(go_r)
            info["ns_limits"] = limit_namespaces()
        elif mode == "bwrap":
            proc = "private"  # bubblewrap mounted it
        elif mode == "rlimit":
            libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception as exc:
        send(ctl_out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        os._exit(3)
    info["proc"] = proc
    try:
        worker = Worker(mode, scratch, ctl_in, ctl_out, exec_uid, memory, proc)
        worker.tmp_options = f"size={tmpfs_mb}m,mode=1777"
        worker.ns_limits = bool(info.pop("ns_limits", False))
        info.update(worker.probe())
    except Exception as exc:  # said, never a silent exit: the host retries or reports it
        send(ctl_out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        os._exit(3)
    worker.serve(info, config.get("preload", ()))
    os._exit(0)


def zygote(config: Json) -> None:
    """A clean, warmed-up process that forks new workers on request, so a new isolated
    worker costs a fork and the isolation set-up instead of an interpreter start.

    Requests arrive on a SOCK_SEQPACKET socket (fd 0): ``{"mode", "scratch", "config"}`` with
    the new worker's control socket attached (SCM_RIGHTS)."""
    import socket

    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    Worker("zygote", "/", None, None, None).warm_up(config.get("preload", ()))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped automatically
    sock.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 65536, 1)
        except OSError:
            return
        if not msg:
            return
        req = json.loads(msg)
        if not fds:
            continue
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setsid()
                sock.close()
                run_worker(req["mode"], req["scratch"], req.get("config") or {}, fds[0], fds[0])
            finally:
                os._exit(4)
        os.close(fds[0])


def main() -> None:
    if sys.argv[1] == "zygote":
        zygote(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
        return
    mode, scratch = sys.argv[1], sys.argv[2]
    config = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    ctl_in, ctl_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    run_worker(mode, scratch, config, ctl_in, ctl_out)


if __name__ == "__main__":
    main()
