"""The sandbox escape suite: every case of ``escapekit`` attacks the default (strongest
available) sandbox and must be held: the host's /tmp, the project and the home folder are not
visible, nothing outside the private /tmp is writable, /etc/shadow is hidden, host UNIX
sockets (path and abstract) are unreachable, no user namespace can be nested and no tmpfs
mounted, 4 children of 400 MB each cannot all live under ``memory_mb=512``, a fork bomb is
stopped, there is no network or DNS, and the parent's environment does not leak.

Skipped, with the reason, only where this machine has no Linux namespaces for the sandbox.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from escapekit import CASES, escape_sandbox

from trajsynth.core.errors import ConfigError, SandboxError
from trajsynth.envs.sandbox import Sandbox


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    try:
        with escape_sandbox("namespace") as box:
            yield box
    except SandboxError as exc:
        pytest.skip(f"no Linux namespaces for the sandbox here: {exc}")


def test_the_default_is_the_namespace_sandbox(sb: Sandbox) -> None:
    info = sb.info()
    assert info["isolation"] == "namespace"
    assert info["filesystem"].startswith("private root")
    assert info["nested_userns"].startswith("blocked")
    assert info["network"].startswith("none")
    assert "whole execution" in info["memory"]
    with Sandbox(pool_size=1) as auto:
        assert auto.info()["isolation"] == "namespace"


@pytest.mark.parametrize("name", list(CASES))
def test_escape_is_held(sb: Sandbox, name: str) -> None:
    escaped, detail = CASES[name](sb)
    assert not escaped, f"{name} got out: {detail}"


def test_mounted_on_purpose_is_visible_read_only() -> None:
    shared = Path(tempfile.mkdtemp(prefix="trajsynth-mount-", dir="/var/tmp"))
    shared.chmod(0o755)
    (shared / "data.txt").write_text("payload")
    try:
        try:
            box = Sandbox(kind="namespace", pool_size=1, mounts=[str(shared)]).start()
        except SandboxError as exc:
            pytest.skip(f"no Linux namespaces for the sandbox here: {exc}")
        try:
            r = box.run(f"print(open({str(shared / 'data.txt')!r}).read())\n"
                        f"open({str(shared / 'new.txt')!r}, 'w')")  # fmt: skip
            assert r.stdout == "payload\n" and "Read-only file system" in r.stderr
            assert not (shared / "new.txt").exists()
            assert box.run("print(open('/var/tmp/x', 'w'))").exit_code == 1
        finally:
            box.close()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    with pytest.raises(ConfigError, match="/tmp inside the sandbox is its own"):
        Sandbox(mounts=["/tmp/data"])
