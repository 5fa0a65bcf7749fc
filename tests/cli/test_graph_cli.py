"""``trajsynth tools graph`` through the real CLI entry point: counts printed, the graph JSON
and the drawing written, foreign specs imported on the fly, bad options one clear error.

Run: PYTHONPATH=. python -m pytest tests/cli/test_graph_cli.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajsynth.cli import main


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_graph_of_a_domain(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, png = tmp_path / "g.json", tmp_path / "g.png"
    argv = [
        "tools",
        "graph",
        "travel",
        "--similarity",
        "lexical",
        "--out",
        str(out),
        "--plot",
        str(png),
    ]
    assert run(argv) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "12 functions, 35 parameters, 109 return fields" in text
    assert "dependent function pairs" in text and "components" in text
    assert "find_user" in text and "function edges" in text
    data = json.loads(out.read_text())
    assert data["stats"]["functions"] == 12 and data["stats"]["similarity"] == "lexical"
    assert {"nodes", "edges"} <= set(data["graph"])
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_graph_of_a_foreign_spec_and_errors(
    external_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    src = external_dir / "tau-bench" / "retail"
    assert (
        run(
            [
                "tools",
                "graph",
                str(src),
                "--format",
                "tau",
                "--similarity",
                "lexical",
                "--edges",
                "3",
            ]
        )
        == 0
    )
    text = " ".join(capsys.readouterr().out.split())
    assert "16 functions" in text and "more" in text
    assert run(["tools", "graph", "travel", "--similarity", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--similarity'" in err and "Traceback" not in err
    assert run(["tools", "graph", "travel", "--threshold", "-1"]) == 2
    err = capsys.readouterr().err
    assert "invalid graph option" in err and "Traceback" not in err
    assert run(["tools", "graph", "no-such-domain"]) == 2
    assert "neither a toolset file nor a built-in domain" in capsys.readouterr().err
