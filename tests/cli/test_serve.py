"""CLI: `trajsynth serve` option errors, and `trajsynth run` showing LLM usage per stage and
role (with `--no-cache`).

Run: PYTHONPATH=. python -m pytest tests/cli/test_serve.py -q
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli(
    *args: str, cwd: Path = REPO, extra_path: Path | None = None
) -> subprocess.CompletedProcess:
    import os

    path = [str(REPO)] + ([str(extra_path)] if extra_path else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run(
        [sys.executable, "-m", "trajsynth", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "local"], "--backend local needs --model PATH"),
        (["--backend", "vllm"], "Invalid value for '--backend': Value error, 'vllm' is not one"),
        (["--fault-rate", "2"], "--fault-rate 2.0: must be between 0 and 1"),
        (["--fault-mix", "429,boom"], "--fault-mix ['boom']"),
        (["--latency-ms", "fast"], "--latency-ms 'fast'"),
        (["--sim-config", '{"sede": 1}'], "--sim-config"),
        (["--backend", "local", "--model", "/no/such/folder"], "does not exist"),
    ],
)
def test_serve_rejects_bad_options_with_one_clear_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from trajsynth.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--port", "0", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err


PLUGIN = '''
"""Test plugin: one LLM call per row."""
from trajsynth.stages import RowStage, register


@register
class AskHelper(RowStage):
    """Ask the helper role something about each row."""

    name = "test_cli_ask_helper"

    async def aprocess_row(self, row, ctx):
        result = await ctx.llm("helper").chat([{"role": "user", "content": row.goal}])
        return [row.derive(extra={"reply": result.choices[0].message.content})]
'''


def test_run_summary_shows_llm_usage_per_stage_and_role(tmp_path: Path) -> None:
    (tmp_path / "llm_cli_plugin.py").write_text(PLUGIN)
    (tmp_path / "p.yaml").write_text(
        textwrap.dedent("""
        name: usage
        defaults:
          llm:
            helper: {backend: sim, cache: true, prices: {prompt_per_mtok: 1000}}
        plugins: [llm_cli_plugin]
        stages:
          - {id: rows, uses: synthetic, with: {rows: 20}}
          - {id: ask, uses: test_cli_ask_helper, from: rows}
    """)
    )
    r = _cli(
        "run",
        str(tmp_path / "p.yaml"),
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
        extra_path=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "LLM usage" in r.stdout
    line = next(x for x in r.stdout.splitlines() if "│ helper " in x)
    cells = [c.strip() for c in line.split("│") if c.strip()]
    assert cells[:6] == ["ask", "helper", "20", "0", "0", "0"]  # requests, cached, http, errors
    assert float(cells[-1]) > 0  # cost
    # forced rerun: answers from the cache; with --no-cache: asked again
    r = _cli(
        "run",
        str(tmp_path / "p.yaml"),
        "--out",
        str(tmp_path / "run"),
        "--force",
        cwd=tmp_path,
        extra_path=tmp_path,
    )
    line = next(x for x in r.stdout.splitlines() if "│ helper " in x)
    assert [c.strip() for c in line.split("│") if c.strip()][2:4] == ["20", "20"]
    r = _cli(
        "run",
        str(tmp_path / "p.yaml"),
        "--out",
        str(tmp_path / "run"),
        "--force",
        "--no-cache",
        cwd=tmp_path,
        extra_path=tmp_path,
    )
    line = next(x for x in r.stdout.splitlines() if "│ helper " in x)
    assert [c.strip() for c in line.split("│") if c.strip()][2:4] == ["20", "0"]
