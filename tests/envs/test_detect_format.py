"""``detect_format`` names the format of each kind of spec file in ../shared/external, and of
the common OpenAI layouts, when only one fits; a folder of several formats, or of none, is one
clear error. What it names imports.

Run: python -m pytest tests/envs/test_detect_format.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajsynth.core.errors import UserError
from trajsynth.envs.importers import detect_format, import_tools

REAL = [
    ("bfcl/BFCL_v4_simple_python.json", "bfcl", "BFCL question records"),
    ("bfcl/BFCL_v4_multi_turn_base.json", "bfcl", "BFCL question records"),
    ("bfcl/multi_turn_func_doc", "bfcl", "BFCL function docs (parameters of type 'dict')"),
    ("bfcl", "bfcl", "BFCL question records, in 31 files"),
    ("tau-bench/airline/tools_openai.json", "tau", "tau-bench tools (tools_openai.json)"),
    ("tau-bench", "tau", "a tau-bench folder (tools_openai.json)"),
    ("toolalpaca/data/eval_real.json", "toolalpaca", "ToolAlpaca records"),
    ("stabletoolbench", "stabletoolbench", "StableToolBench query records"),
    ("api-bank/test-data/level-1-api.json", "apibank", "API-Bank test records"),
    ("api-bank/lv1-lv2-samples", "apibank", "API-Bank dialogues"),
]


@pytest.mark.parametrize(("rel", "fmt", "why"), REAL, ids=[r[0] for r in REAL])
def test_real_files(external_dir: Path, rel: str, fmt: str, why: str) -> None:
    found, said = detect_format(external_dir / rel)
    assert found == fmt and said.startswith(why)
    if not rel.startswith("bfcl/BFCL_v4_multi") and rel != "bfcl":  # (those need the docs)
        assert len(import_tools(external_dir / rel, found)) > 0


FUNCTION = {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}
OPENAI = [
    ([{"type": "function", "function": FUNCTION}], 'OpenAI tools ({"type": "function", '),
    ({"type": "function", "function": FUNCTION}, 'OpenAI tools ({"type": "function", '),
    ([FUNCTION], "functions with JSON-schema parameters"),
    ({"tools": [{"type": "function", "function": FUNCTION}]}, "OpenAI tools (an object with"),
    ({"functions": [FUNCTION]}, "OpenAI tools (an object with a 'functions' list)"),
]


@pytest.mark.parametrize(("data", "why"), OPENAI)
def test_openai_layouts(tmp_path: Path, data: object, why: str) -> None:
    src = tmp_path / "specs.json"
    src.write_text(json.dumps(data))
    assert detect_format(src)[0] == "openai" and detect_format(src)[1].startswith(why)
    assert [t.name for t in import_tools(src, "openai").tools] == ["f"]
    lines = tmp_path / "specs.jsonl"
    lines.write_text(json.dumps(FUNCTION) + "\n" + json.dumps({**FUNCTION, "name": "g"}) + "\n")
    assert detect_format(lines)[0] == "openai"


def test_a_toolset_file_is_openai(tmp_path: Path, external_dir: Path) -> None:
    ts = import_tools(external_dir / "tau-bench/airline/tools_openai.json", "tau")
    ts.save(tmp_path / "toolset.json")
    assert detect_format(tmp_path / "toolset.json") == ("openai", "a trajsynth toolset")


def test_mixed_or_unknown_folders_are_one_error(tmp_path: Path, external_dir: Path) -> None:
    with pytest.raises(UserError, match="of several formats: apibank in api-bank/") as info:
        detect_format(external_dir)
    assert "bfcl in bfcl/" in info.value.message and info.value.hint.startswith("pass --format")
    (tmp_path / "rows.json").write_text(json.dumps([{"id": 1, "ground_truth": []}]))
    (tmp_path / "notes.txt").write_text("not json")
    with pytest.raises(UserError, match="cannot tell the format of the specs in"):
        detect_format(tmp_path)
    with pytest.raises(UserError, match="no such file or folder"):
        detect_format(tmp_path / "missing.json")
