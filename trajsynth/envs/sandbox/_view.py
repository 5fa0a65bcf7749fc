"""Launcher of a long-lived command (an MCP server) in a private view of the host.

Standard library only, run by path: ``python -I -S _view.py SPEC`` (SPEC: JSON). Unlike
:mod:`._worker`, which isolates short executions from everything, this keeps the host's
filesystem (the command's interpreter, packages and the user's data stay where they are) and
only takes away the right to change it:

1) the launcher asks to be told when the thread that started it ends (``PR_SET_PDEATHSIG``,
   as SIGUSR1, apart from the SIGTERM of a normal stop), so a server never outlives
   trajsynth, even one killed by SIGKILL;
2) with ``"namespace": true``: a new PID namespace (plus a user namespace that maps the
   caller to itself when not root);
3) the launcher forks: the child is PID 1 of the new PID namespace (it dies with the
   launcher, and every process the command starts dies with it: the kernel empties a PID
   namespace whose first process ends); the launcher relays SIGTERM/SIGINT/SIGHUP as a
   SIGKILL to it and exits with its status. Without namespaces the child leads a process
   group of its own, which the launcher kills (when told to stop, and when the command
   exits, for what it left behind). A launcher whose trajsynth is gone (killed) also
   removes ``scratch``, the folder of the private copies. "Gone" is read from the kernel,
   not from ``getppid()`` alone: the thread that started the launcher can end (and the
   command see its stdin close) while the rest of the killed trajsynth is still exiting, its
   PID unchanged; so the parent counts as gone when the launcher was reparented, or when it
   is exiting (a zombie, or ``PF_EXITING`` in ``/proc/PID/stat``), and after the death
   signal the launcher waits a few seconds for that;
4) in the child (``"namespace": true``), in a mount namespace of its own: ``writable``
   folders (a private temporary folder, ``/dev/shm``) become mounts of their own; each
   ``bind`` ``[source, target]`` (the private copy of a state folder or file) is mounted
   over the target; each ``overlay`` folder gets a
   copy-on-write layer in a private tmpfs (for the journals a database writes beside its
   file); then every mount is made read-only but ``/proc``, ``/dev``, the writable folders,
   the binds and the overlays. So the command sees its state at the paths the user gave,
   writes only its private copies, and cannot change anything the user owns;
5) ``chdir`` to ``cwd`` and ``execvpe`` the command with ``env``.

``{"probe": true}`` does steps 2 and 4 on nothing and exits 0: whether a view can be made here.
"""

# ruff: noqa: SIM105 - try/except/pass, not contextlib: the launcher imports as little as it can
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _worker import (  # found next to this file
    CLONE_NEWNS,
    MS_BIND,
    MS_PRIVATE,
    MS_REC,
    PR_SET_PDEATHSIG,
    _check,
    libc,
    make_readonly,
    mount,
    unshare_namespaces,
)


def build_view(spec):
    """Step 4, in a mount namespace of the child's own (the launcher keeps the host's, to
    remove the copies when trajsynth is gone)."""
    _check(libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep = ["/proc", "/dev"]
    try:  # the PID namespace's own /proc (a host whose /proc has locked parts refuses: keep it)
        mount("proc", "/proc", "proc", 2 | 4 | 8)
    except OSError:
        pass
    for path in spec.get("writable", ()):
        if os.path.isdir(path):
            mount(path, path, None, MS_BIND | MS_REC)
            keep.append(path)
    overlays = [o.rstrip("/") for o in spec.get("overlays", ())]

    def inside_overlay(target):
        return any(target.startswith(o + "/") for o in overlays)

    for source, target in spec.get("binds", ()):
        if not inside_overlay(target):
            mount(source, target, None, MS_BIND | MS_REC)
            keep.append(target)
    if overlays:
        layers = spec["layers"]  # an empty folder of ours: a private tmpfs for the upper layers
        mount("tmpfs", layers, "tmpfs", 0, "mode=0700")
        for i, lower in enumerate(overlays):
            upper, work = f"{layers}/{i}/upper", f"{layers}/{i}/work"
            os.makedirs(upper)
            os.makedirs(work)
            options = f"lowerdir={lower},upperdir={upper},workdir={work}"
            mount("overlay", lower, "overlay", 0, options)
            keep.append(lower)
        for source, target in spec.get("binds", ()):  # a file shown inside an overlay
            if inside_overlay(target):
                mount(source, target, None, MS_BIND | MS_REC)
                keep.append(target)
    for pts in ("/dev/pts", "/dev/shm", "/dev/mqueue"):
        if os.path.ismount(pts):
            keep.append(pts)
    make_readonly(tuple(keep))


PF_EXITING = 0x4  # /proc/PID/stat's flags: the process has begun to exit
#: seconds a launcher told that its starting thread ended waits for trajsynth to be gone
ORPHAN_WAIT_S = 5.0


def parent_gone(parent):
    """Whether trajsynth (``parent``, the launcher's parent at start) is gone or exiting."""
    if os.getppid() != parent:
        return True
    try:
        with open(f"/proc/{parent}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return True
    try:  # fields after the name: state, ppid, pgrp, session, tty, tpgid, flags, ...
        return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & PF_EXITING)
    except (IndexError, ValueError):
        return False


def main():
    spec = json.loads(sys.argv[1])
    parent = os.getppid()
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)  # 1 (handled in step 3)
    if os.getppid() != parent:  # the parent ended before the request took
        os._exit(1)
    namespace = bool(spec.get("namespace"))
    if namespace:
        unshare_namespaces(network=False, inside_uid=None, mount_ns=False)  # 2
    if spec.get("probe"):
        pid = os.fork()
        if pid == 0:
            try:
                build_view({})
                os._exit(0)
            except Exception as exc:
                sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    pid = os.fork()  # 3
    if pid:

        def stop(signum=None, frame=None):
            for kill in (os.killpg, os.kill):  # the child's group (without namespaces), or it
                try:
                    kill(pid, signal.SIGKILL)
                    return
                except OSError:
                    pass

        orphaned = []

        def orphan(signum=None, frame=None):  # the thread that started the launcher ended
            orphaned.append(True)
            stop()

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, stop)
        signal.signal(signal.SIGUSR1, orphan)
        code = 1
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status) & 0xFF
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        stop()  # whatever the command left behind in its group
        gone = parent_gone(parent)
        if not gone and orphaned:  # a killed trajsynth's other threads may still be exiting
            import time

            deadline = time.monotonic() + ORPHAN_WAIT_S
            while not gone and time.monotonic() < deadline:
                time.sleep(0.05)
                gone = parent_gone(parent)
        if gone and spec.get("scratch"):  # trajsynth is gone: its copies too
            import shutil

            shutil.rmtree(spec["scratch"], ignore_errors=True)
        os._exit(code)
    try:
        libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        if not namespace:
            os.setpgid(0, 0)  # a group of its own, which the launcher kills when told to stop
        if namespace:
            build_view(spec)  # 4
        os.chdir(spec.get("cwd") or "/")  # 5
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec.get("env") or dict(os.environ))
    except Exception as exc:
        sys.stderr.write(
            f"trajsynth: cannot start {spec.get('argv')}: {type(exc).__name__}: {exc}\n"
        )
        sys.stderr.flush()
        os._exit(127)


if __name__ == "__main__":
    main()
