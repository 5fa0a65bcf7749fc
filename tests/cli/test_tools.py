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
    err = capsys.readouterr().err
    assert "Invalid value for '--format'" in err and "'yaml' is not one of" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run(["tools", "show", str(bad)]) == 2
    assert "not a JSON file" in capsys.readouterr().err


def test_nothing_imported_is_an_error(
    tmp_path: Path, external_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "t.json"
    tau = external_dir / "tau-bench/airline/tools_openai.json"
    assert run(["tools", "import", str(tau), "--format", "bfcl", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no tools imported" in err and "14 records read, 14 failed" in err
    assert "14× not a BFCL record" in err and "Traceback" not in err and not out.exists()
    answers = external_dir / "bfcl/possible_answer/BFCL_v4_simple_python.json"
    assert run(["tools", "import", str(answers), "-f", "openai", "-o", str(out)]) == 2
    assert "400 records read, 400 failed: 400× not a function" in capsys.readouterr().err
    assert run(["tools", "graph", str(answers), "-f", "openai"]) == 2


def test_strict_fails_on_any_dropped_spec(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lines = [json.dumps({"name": f"t{i}", "parameters": {"type": "object"}}) for i in range(6)]
    src = tmp_path / "tools.jsonl"
    src.write_text("\n".join(lines)[:-10])
    out = tmp_path / "t.json"
    assert run(["tools", "import", str(src), "-f", "openai", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "5 tools from 6 records" in text and "1 failed" in text and "truncated" in text
    out.unlink()
    assert run(["tools", "import", str(src), "-f", "openai", "-o", str(out), "--strict"]) == 2
    err = capsys.readouterr().err
    assert "--strict: 1 of the specs" in err and "truncated" in err and not out.exists()


def test_altered_specs_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = tmp_path / "tools.json"
    src.write_text(json.dumps([{"name": "f", "parameters": {"type": "object", "required": ["a"]}}]))
    out = tmp_path / "t.json"
    assert run(["tools", "import", str(src), "-f", "openai", "-o", str(out), "--strict"]) == 0
    text = capsys.readouterr().out
    assert "1 altered" in text and "imported with a change" in text and "declared untyped" in text
    assert Toolset.load(out).altered[0].name == "f"
