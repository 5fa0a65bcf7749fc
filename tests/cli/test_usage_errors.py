"""A command line the parser refuses is a usage error, for every command: the command's usage
line, ``error:`` naming the option or argument, exit 2; never ``internal error`` nor a
traceback. Walks every command of the app: each with its required parameters left out, each
choice option given a value it does not offer, each number option given a word, each input
path that does not exist. Also: ``--format`` of ``tools import`` is told from the files, and
Ctrl-C exits 130 with a note.

Run: python -m pytest tests/cli/test_usage_errors.py -q
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import typer.main

from trajsynth.cli import app, main

#: options naming a file or folder that is written, not read
OUTPUTS = {"out", "plot", "episodes", "directory"}
#: values for required text parameters that let a command go on to read its input paths
VALUES = {"model": "tiny"}
#: what else a command needs with an input path, so that it goes on to read that path
NEEDS = {
    "eval --tasks": ["--model", "tiny"],
    "eval --data-dir": ["--benchmark", "bfcl", "--base-url", "http://127.0.0.1:9"],
    "eval --baseline": ["--benchmark", "bfcl", "--base-url", "http://127.0.0.1:9"],
}


def _commands() -> Iterator[tuple[list[str], Any]]:
    def walk(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        for name, command in sorted(group.commands.items()):
            if hasattr(command, "commands"):
                yield from walk(command, [*path, name])
            else:
                yield [*path, name], command

    return walk(typer.main.get_command(app), [])


COMMANDS = list(_commands())
IDS = [" ".join(path) for path, _ in COMMANDS]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _kind(param: Any) -> Any:
    return param.type_descriptor.annotation


def _is_path(param: Any) -> bool:
    return bool(param.type_descriptor.is_path)


def _filled(command: Any, tmp: Path, *, skip: str | None = None) -> list[str]:
    """Arguments for ``command``'s required parameters (input paths that do not exist)."""
    argv: list[str] = []
    for param in command.params:
        if not param.required or param.name == skip:
            continue
        if _is_path(param):
            value = str(tmp / ("out" if param.name in OUTPUTS else "does-not-exist"))
        else:
            value = VALUES.get(param.name, "no-such-thing")
        argv += [value] if not param.opts[0].startswith("-") else [param.opts[0], value]
    return argv


def _assert_usage_error(code: int, text: str, path: list[str], needle: str) -> None:
    assert code == 2, text
    assert "internal error" not in text and "Traceback" not in text, text
    assert f"Usage: trajsynth {' '.join(path)}" in text, text
    assert needle in text, text


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_missing_required_parameters(
    path: list[str], command: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    required = [p for p in command.params if p.required]
    if not required:
        pytest.skip("nothing required")
    for param in required:
        code, text = run(capsys, [*path, *_filled(command, tmp_path, skip=param.name)])
        name = [o for o in param.opts if o.startswith("--")] or [param.metavar]
        _assert_usage_error(code, text, path, f"error: Missing {param.param_type_name} '{name[0]}")


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_bad_choices_and_numbers(
    path: list[str], command: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    checked = 0
    for param in command.params:
        if not param.opts[0].startswith("--") or getattr(param, "is_flag", False):
            continue
        kind = _kind(param)
        if param.type_descriptor.is_choice:
            value = "no-such-choice"
        elif kind in (int, float) or set(get_args(kind)) & {int, float}:
            value = "many"
        else:
            continue
        argv = [*path, *_filled(command, tmp_path), param.opts[0], value]
        code, text = run(capsys, argv)
        _assert_usage_error(code, text, path, f"error: Invalid value for '{param.opts[0]}'")
        checked += 1
    if not checked:
        pytest.skip("no choice or number options")


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_input_paths_that_do_not_exist(
    path: list[str], command: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inputs = [p for p in command.params if _is_path(p) and p.name not in OUTPUTS]
    if not inputs:
        pytest.skip("reads no path")
    for param in inputs:
        needs = NEEDS.get(" ".join([*path, param.opts[0]]), [])
        argv = [*path, *_filled(command, tmp_path), *needs]
        if not param.required:
            argv += [param.opts[0], str(tmp_path / "does-not-exist")]
        code, text = run(capsys, argv)
        assert code == 2, text
        assert "internal error" not in text and "Traceback" not in text, text
        assert "error:" in text and "does-not-exist" in text, text


def test_the_reported_missing_option_is_named_with_the_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: an option left out is a usage error, not an internal one."""
    src = tmp_path / "specs.json"
    src.write_text("[]")
    code, text = run(capsys, ["tools", "import", str(src)])
    assert code == 2 and "internal error" not in text and "TRAJSYNTH_DEBUG" not in text
    assert "Usage: trajsynth tools import [OPTIONS] {SRC}" in text
    assert "error: Missing option '--out' / '-o'." in text
    assert "`trajsynth tools import --help` lists the options" in text
    code, text = run(capsys, ["no-such-command"])
    assert code == 2 and "error: No such command 'no-such-command'." in text


OPENAI = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


def test_the_format_is_told_from_the_files_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "specs.json", tmp_path / "t.json"
    src.write_text(json.dumps(OPENAI))
    code, text = run(capsys, ["tools", "import", str(src), "--out", str(out)])
    assert code == 0, text
    assert 'format: openai (detected: OpenAI tools ({"type": "function", ' in text
    assert "--format chooses another" in text and "2 tools from 2 records" in text
    src.write_text(json.dumps({"rows": [1, 2]}))
    code, text = run(capsys, ["tools", "import", str(src), "--out", str(out)])
    assert code == 2 and f"cannot tell the format of the specs in {src}" in text
    assert "pass --format" in text


def test_the_cli_choices_are_the_libraries() -> None:
    from trajsynth.cli.data import ExportFormat
    from trajsynth.cli.tools import ToolFormat
    from trajsynth.envs.importers import FORMATS
    from trajsynth.store.export import EXPORT_FORMATS

    assert get_args(ToolFormat) == FORMATS and get_args(ExportFormat) == EXPORT_FORMATS


def test_ctrl_c_exits_130_with_a_note(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import trajsynth.pipeline.spec as spec

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(spec, "load_pipeline", interrupted)
    code, text = run(capsys, ["validate", "tiny"])
    assert code == 130 and "interrupted; run the same command again to resume" in text
