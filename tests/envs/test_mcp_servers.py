"""Real MCP servers nobody here wrote (tests/envs/mcp_servers.py; ``make install`` installs
them): mcp-server-time (read-only, answers from the clock), mcp-server-git and the
filesystem and memory servers (state on disk), mcp-server-sqlite (state on disk, errors
returned as text), the protocol's "everything" server. For each, as a user brings it, with no
spec written by hand: Magnet tasks → rejection sampling → verify give verified rows; a second
run gives the same rows but for volatile parts; the user's folder is byte for byte what it
was. The npm servers skip when npm itself is absent.

Run: PYTHONPATH=. python -m pytest tests/envs/test_mcp_servers.py -q
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.envs.mcp_servers import NAMES, NPM, folder_hash, mcp_config, missing, user_folder
from trajsynth.core.ids import canonical_json
from trajsynth.core.task import GroundTruth
from trajsynth.core.volatile import mask

pytest.importorskip("mcp")


def _need(name: str) -> None:
    why = missing(name)
    if why is None:
        return
    if name in NPM and shutil.which("npm") is None:
        pytest.skip(why)
    pytest.fail(why)  # the Python servers come with `make install`


def _run(name: str, home: Path, out: Path, tasks: int) -> dict[str, list[Any]]:
    from trajsynth.pipeline import run_pipeline
    from trajsynth.store import read_records

    server = json.dumps(mcp_config(name, home))
    result = run_pipeline(
        "rejection",
        out=out,
        overrides=[
            f"defaults.env.toolsets={{{name}: {{backend: mcp, mcp: {server}}}}}",
            "defaults.env.domains=[]",
            f"stages.tasks.with.tasks_per_domain={tasks}",
            "stages.tasks.with.graph.similarity=lexical",
            "stages.rollouts.with.n=4",  # a seeded teacher errs: 3 tasks × 2 can all fail
        ],
    )
    return {s: read_records(result.output(s)) for s in ("tasks", "rollouts", "verified")}


def _rows(records: list[Any]) -> list[Any]:
    return [mask(r.model_dump(mode="json", exclude={"created_at", "run_id"})) for r in records]


@pytest.mark.parametrize("name", NAMES)
def test_a_real_server_gives_verified_rows_twice_and_leaves_the_user_folder(
    name: str, tmp_path: Path
) -> None:
    _need(name)
    home = user_folder(tmp_path)
    before = folder_hash(home)
    first = _run(name, home, tmp_path / "a", tasks=3)
    assert len(first["tasks"]) == 3
    assert first["verified"] and all(r.success for r in first["verified"])
    assert len(first["verified"]) == len(first["rollouts"])
    for task in first["tasks"]:  # gold calls are never failures, whatever shape they take
        for call in GroundTruth.from_json(task.ground_truth).flat_calls():
            out = call.output
            assert not (isinstance(out, str) and out.lower().startswith("error")), out
    second = _run(name, home, tmp_path / "b", tasks=3)
    for stage, records in first.items():
        assert _rows(records) == _rows(second[stage]), stage
    assert folder_hash(home) == before


def test_errors_returned_as_text_are_failures(tmp_path: Path) -> None:
    _need("sqlite")
    from trajsynth.envs import EnvFactory

    home = user_folder(tmp_path)
    config = {"backend": "mcp", "mcp": mcp_config("sqlite", home)}
    f = EnvFactory({"domains": [], "toolsets": {"sqlite": config}})
    try:
        env = f.make("sqlite")
        env.reset()
        wrong_verb = env.call("create_table", query="SELECT 1")
        assert wrong_verb.category == "invalid_value"
        assert "Only CREATE TABLE statements are allowed" in wrong_verb.error["message"]
        syntax = env.call("read_query", query="SELECT nme FROM items")
        assert syntax.category == "invalid_value" and "no such column" in syntax.error["message"]
        assert env.call("read_query", query="SELECT name FROM items WHERE id = 1").ok
        assert env.calls == ()  # failures and reads change nothing
        assert env.call("write_query", query="DELETE FROM items WHERE id = 3").ok
        assert len(env.calls) == 1
    finally:
        f.close()


def test_cli_lists_imports_and_validates_real_servers(tmp_path: Path) -> None:
    _need("git")
    _need("time")
    from trajsynth.cli import app
    from trajsynth.envs import Toolset

    home = user_folder(tmp_path)
    runner = CliRunner()
    git = " ".join(mcp_config("git", home)["command"])
    listed = runner.invoke(app, ["tools", "list", f"mcp:{git}"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert "git_create_branch" in listed.output and str(home / "repo") in listed.output
    out = tmp_path / "git.json"
    imported = runner.invoke(app, ["tools", "import", f"mcp:{git}", "--out", str(out)])
    assert imported.exit_code == 0, imported.output
    ts = Toolset.load(out)
    assert ts["git_status"].extra["read_only"] and not ts["git_commit"].extra["read_only"]
    pipeline = tmp_path / "p.yaml"
    time_server = mcp_config("time", home)["command"][0]
    pipeline.write_text(
        "name: p\ndefaults:\n  env:\n    domains: []\n    toolsets:\n"
        f"      clock: {{backend: mcp, mcp: {{command: {time_server}}}}}\n"
        "stages:\n  - {id: tasks, uses: magnet_tasks, with: {tasks_per_domain: 1}}\n"
    )
    checked = runner.invoke(app, ["validate", str(pipeline)], env={"COLUMNS": "200"})
    assert checked.exit_code == 0, checked.output
    assert "get_current_time" in checked.output and "2 read-only" in checked.output
    broken = subprocess.run(  # one message and exit 2, through the real entry point
        [sys.executable, "-m", "trajsynth", "tools", "list",
         f"mcp:{sys.executable} -c 'raise SystemExit(4)'"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert broken.returncode == 2, broken.stderr
    assert "cannot connect to the MCP server" in broken.stderr and "Traceback" not in broken.stderr


def test_a_toolset_file_keeps_the_servers_read_only_hints(tmp_path: Path) -> None:
    """A spec file + a `tools:` map to the server (the way round hand-written specs): the
    server's annotations still decide what changes state, so reads never reset it."""
    _need("git")
    from trajsynth.envs import EnvFactory

    home = user_folder(tmp_path)
    plain = tmp_path / "git.json"  # OpenAI tools only: no annotations in the file
    config = {"backend": "mcp", "mcp": mcp_config("git", home)}
    f = EnvFactory({"domains": [], "toolsets": {"git": config}})
    try:
        plain.write_text(json.dumps(f.toolset("git").to_openai()))
    finally:
        f.close()
    served = {t: "mcp" for t in ("git_status", "git_log", "git_create_branch")}
    mixed = {"file": str(plain), "backend": "simulated", "mcp": config["mcp"], "tools": served}
    g = EnvFactory({"domains": [], "toolsets": {"git": mixed}})
    try:
        env = g.make("git")
        env.reset()
        repo = str(home / "repo")
        assert env.call("git_status", repo_path=repo).ok
        assert env.call("git_log", repo_path=repo).ok
        assert env.call("git_create_branch", repo_path=repo, branch_name="x").ok
        made = canonical_json({"branch_name": "x", "repo_path": repo})
        assert env.parts["mcp"].calls == (("git_create_branch", made),)  # type: ignore[attr-defined]
        assert g.mcp_server("git").restarts == 1
    finally:
        g.close()
