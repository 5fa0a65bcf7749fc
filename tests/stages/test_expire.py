"""``expire``: rows record their environment's version; when the code behind a toolset
changes, ``trajsynth expire`` replays the rows played in the old version, keeps (restamped)
those that still hold, and drops, or with --relabel marks failed, those that do not. Rows of
an unchanged environment pass without a replay.

Run: python -m pytest tests/stages/test_expire.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from trajsynth.core.schema import Message, ToolCall, Trajectory
from trajsynth.envs.factory import EnvFactory
from trajsynth.store import ShardWriter, read_records

REPO = Path(__file__).resolve().parents[2]

V1 = """
from typing import Annotated


class Calc:
    def add(self, a: Annotated[int, "First."], b: Annotated[int, "Second."]) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b

    def echo(self, text: Annotated[str, "Text."]) -> str:
        \"\"\"Send the text back.\"\"\"
        return text
"""


def _env(module_dir: Path) -> dict:
    """The env settings of a toolset run by the class in ``module_dir/calctools.py``."""
    return {"toolsets": {"calc": {"backend": "code", "code": ["calctools:Calc"]}}}


def _row(env: EnvFactory, rid: str, name: str, args: dict) -> Trajectory:
    live = env.make("calc")
    call = ToolCall(id="c0", name=name, arguments=json.dumps(args))
    observed = live.format_observation(live.execute(call))
    return Trajectory(
        id=rid,
        task_id=rid,
        domain="calc",
        env_version=env.version("calc"),
        tools=env.toolset("calc").to_openai(),
        messages=[
            Message(role="user", content="go"),
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id="c0", name=name, content=observed),
            Message(role="assistant", content="done"),
        ],
        success=True,
    )


def _expire(src: Path, out: Path, module_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env_json = json.dumps(_env(module_dir))
    return subprocess.run(
        [sys.executable, "-m", "trajsynth", "expire", str(src), "--out", str(out), "-q",
         "--set", f"defaults.env={env_json}", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": f"{module_dir}{os.pathsep}{REPO}"},
    )  # fmt: skip


def test_rows_of_a_changed_environment_are_replayed_and_expired(tmp_path: Path) -> None:
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "calctools.py").write_text(textwrap.dedent(V1))
    sys.path.insert(0, str(module_dir))
    try:
        env = EnvFactory(_env(module_dir))
        rows = [
            _row(env, "adds", "add", {"a": 2, "b": 3}),
            _row(env, "echoes", "echo", {"text": "hi"}),
        ]
        old_version = env.version("calc")
    finally:
        sys.path.remove(str(module_dir))
        sys.modules.pop("calctools", None)
    with ShardWriter(tmp_path / "rows") as w:
        w.write(rows)
    # unchanged environment: nothing replayed, both rows pass as they were
    same = _expire(tmp_path / "rows", tmp_path / "same", module_dir)
    assert same.returncode == 0, same.stderr
    assert [r.id for r in read_records(tmp_path / "same")] == ["adds", "echoes"]
    counts = json.loads((tmp_path / "same" / "manifest.json").read_text())["stages"]["expire"]
    assert counts["metrics"]["counters"] == {"rows": 2, "current": 2}
    # `add` now multiplies: its recorded result no longer holds; `echo` still does
    (module_dir / "calctools.py").write_text(textwrap.dedent(V1).replace("a + b", "a * b"))
    res = _expire(tmp_path / "rows", tmp_path / "new", module_dir)
    assert res.returncode == 0, res.stderr
    kept = read_records(tmp_path / "new")
    assert [r.id for r in kept] == ["echoes"]
    assert kept[0].env_version not in ("", old_version)
    assert kept[0].extra["expire"]["from"] == old_version
    expired = read_records(tmp_path / "new" / "expired")
    assert [r.id for r in expired] == ["adds"]
    assert expired[0].failure_layer == "expired" and "differs" in expired[0].failure_reason
    # --relabel keeps it, marked failed
    res = _expire(tmp_path / "rows", tmp_path / "relabel", module_dir, "--relabel")
    assert res.returncode == 0, res.stderr
    relabelled = {r.id: r for r in read_records(tmp_path / "relabel")}
    assert relabelled["adds"].success is False and relabelled["echoes"].success is True
