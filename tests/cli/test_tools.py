"""``trajsynth tools import`` / ``tools show`` through the real CLI entry point.

Run: PYTHONPATH=. python -m pytest tests/cli/test_tools.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajsynth.cli import main
from trajsynth.envs.spec import Toolset


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_import_then_show(
    tmp_path: Path, external_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "toolset.json"
    src = external_dir / "bfcl/BFCL_v4_simple_javascript.json"
    assert run(["tools", "import", str(src), "--format", "bfcl", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "49 tools from 50 records" in text and "1 failed" in text and "createAuthToken" in text
    ts = Toolset.load(out)
    assert len(ts) == 49 and [f.name for f in ts.failures] == ["createAuthToken"]
    assert run(["tools", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "49 tools" in text and "not imported" in text and "createAuthToken" in text
    assert run(["tools", "show", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ts.to_openai()


def test_show_a_builtin_domain_and_one_tool(capsys: pytest.CaptureFixture) -> None:
    assert run(["tools", "show", "travel"]) == 0
    text = capsys.readouterr().out
    assert "travel: 12 tools" in text and "search_flights" in text
    assert run(["tools", "show", "travel", "--tool", "book_flight"]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["name"] == "book_flight" and "booking_id" in spec["response"]["properties"]


def test_user_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert run(["tools", "show", "casino"]) == 2
    err = capsys.readouterr().err
    assert "neither a toolset file nor a built-in domain" in err and "Traceback" not in err
    assert run(["tools", "import", str(tmp_path / "x.json"), "-f", "bfcl", "-o", "o.json"]) == 2
    assert run(["tools", "import", str(tmp_path), "--format", "yaml", "--out", "o.json"]) == 2
    assert "unknown tool format 'yaml'" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run(["tools", "show", str(bad)]) == 2
    assert "not a JSON file" in capsys.readouterr().err
