"""Requests people wrote, imported as rows: API-Bank's level-1 dialogues and ToolAlpaca's
instructions with their golden answers' first decision. Every count and value is checked
against what this test reads from the raw files with plain JSON, not with the importers.

Run: python -m pytest tests/store/test_dialogue_importers.py -q
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trajsynth.cli import main
from trajsynth.core.errors import InputNotFoundError
from trajsynth.core.surface import stated
from trajsynth.envs.importers import import_apibank, import_toolalpaca
from trajsynth.store.apibank_dialogues import apibank_dialogues, find_apis
from trajsynth.store.shards import read_table
from trajsynth.store.toolalpaca_answers import toolalpaca_answers

DIALOGUES = "api-bank/lv1-lv2-samples/level-1-given-desc"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def apis(external_dir: Path) -> dict[str, dict]:
    toolset = import_apibank(find_apis(external_dir / DIALOGUES))
    return {spec.original_name(): spec.to_openai() for spec in toolset.tools}


@pytest.fixture(scope="module")
def dialogues(external_dir: Path, apis):
    return apibank_dialogues(external_dir / DIALOGUES, apis)


def _raw_dialogues(folder: Path) -> dict[str, list[dict]]:
    return {
        f.name: [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        for f in sorted(folder.glob("*.jsonl"))
    }


def test_every_dialogue_with_known_calls_becomes_a_row(external_dir: Path, apis, dialogues):
    raw = _raw_dialogues(external_dir / DIALOGUES)
    rows, skipped = dialogues
    with_calls = {n: d for n, d in raw.items() if any(x["role"] == "API" for x in d)}
    known = {
        n
        for n, d in with_calls.items()
        if all(x["api_name"] in apis for x in d if x["role"] == "API")
    }
    assert len(rows) == len(known) > 200
    assert skipped["no_call"] == len(raw) - len(with_calls)
    assert sum(skipped.values()) == len(raw) - len(rows)
    by_file = {r.extra["source"].rsplit("/", 1)[1]: r for r in rows}
    assert set(by_file) == known
    for name, row in by_file.items():
        lines = raw[name]
        api_lines = [x for x in lines if x["role"] == "API"]
        calls = [c for m in row.messages if m.role == "assistant" for c in m.tool_calls]
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [
            (x["api_name"], x["param_dict"]) for x in api_lines
        ]
        steps = row.ground_truth.turns[0].steps
        assert [(s[0].name, s[0].arguments) for s in steps] == [
            (x["api_name"], x["param_dict"]) for x in api_lines
        ]
        assert [m.content for m in row.messages if m.role == "user"] == [
            x["text"] for x in lines if x["role"] == "User"
        ]
        tools = [t["function"]["name"] for t in row.tools]
        assert tools == list(dict.fromkeys(x["api_name"] for x in api_lines))
        failed = any(x["result"].get("exception") for x in api_lines)
        assert row.success is (not failed)


def test_a_dialogue_reads_as_it_was_written(external_dir: Path, dialogues):
    rows, _ = dialogues
    row = next(r for r in rows if r.extra["source"].endswith("/AddAgenda-level-1-1.jsonl"))
    roles = [m.role for m in row.messages]
    # 5 user lines, 4 questions; "Thank you, ... let me add the agenda" carries the second call
    assert roles == ["user", "assistant"] * 4 + ["user", "assistant", "tool", "assistant"] + [
        "tool",
        "assistant",
    ]
    token_call = row.messages[9]
    assert token_call.content == "" and token_call.tool_calls[0].name == "GetUserToken"
    agenda = row.messages[11]
    assert agenda.content.startswith("Thank you, I have retrieved your token")
    assert agenda.tool_calls[0].name == "AddAgenda"
    assert json.loads(agenda.tool_calls[0].arguments)["time"] == "2021-09-28 14:00:00"
    assert row.messages[10].content == json.dumps({"token": "z9x8c7v6b5n4m3q2w1"})
    assert row.messages[12].content == '"success"'
    assert row.messages[12].tool_call_id == agenda.tool_calls[0].id
    assert row.goal.startswith("Hi, can you help me add a new schedule")
    assert row.method == "import:api-bank" and row.success is True


def test_reimporting_gives_identical_rows(external_dir: Path, apis, dialogues):
    again, _ = apibank_dialogues(external_dir / DIALOGUES, apis)
    assert [r.id for r in again] == [r.id for r in dialogues[0]]
    assert [r.messages for r in again] == [r.messages for r in dialogues[0]]


def test_a_dialogue_calling_an_unknown_api_is_passed_over(tmp_path: Path, external_dir: Path, apis):
    src = tmp_path / "d"
    src.mkdir()
    shutil.copy(external_dir / DIALOGUES / "AddAgenda-level-1-1.jsonl", src)
    (src / "searcher.jsonl").write_text(
        json.dumps({"role": "User", "text": "find a tool"})
        + "\n"
        + json.dumps({"role": "API", "api_name": "ToolSearcher", "param_dict": {}, "result": {}})
    )
    (src / "broken.jsonl").write_text("{not json")
    rows, skipped = apibank_dialogues(src, apis)
    assert len(rows) == 1 and dict(skipped) == {"unknown_api": 1, "bad_line": 1}


def test_toolalpaca_first_decisions(external_dir: Path):
    src = external_dir / "toolalpaca/data"
    toolset = import_toolalpaca(src)
    tools: dict[str, dict[str, dict]] = {}
    for spec in toolset.tools:
        tools.setdefault(spec.extra["api"], {})[spec.original_name()] = spec.to_openai()
    rows, skipped = toolalpaca_answers(src, tools)
    records = [r for f in sorted(src.glob("*.json")) for r in json.loads(f.read_text())]
    total = sum(len(r["Instructions"]) for r in records)
    dropped = skipped.pop("unstated_optional")  # arguments, not instructions
    assert len(rows) + sum(skipped.values()) == total
    assert len(rows) > 150
    by_key = {(r.extra["api"], r.extra["instruction"], r.extra["source"]): r for r in rows}
    for rec in records:
        for k, (text, actions) in enumerate(
            zip(rec["Instructions"], rec["Golden_Answers"], strict=False)
        ):
            found = [r for (api, i, _), r in by_key.items() if api == rec["Name"] and i == k]
            if not found:
                continue
            row = found[0]
            first = row.messages[1].tool_calls
            assert row.messages[0].content == text
            assert first[0].name == actions[0]["Action"]
            args, raw = json.loads(first[0].arguments), json.loads(actions[0]["Action_Input"])
            # the answer's arguments, less optional ones the instruction does not state
            schema = params_of(tools, rec["Name"], first[0].name)
            assert args == {k: v for k, v in raw.items() if k in args}
            for k in raw.keys() - args.keys():
                assert k not in schema.get("required", []) and k in schema["properties"]
                assert not stated(raw[k], text, k)
            steps = row.ground_truth.turns[0].steps[0]
            assert [json.loads(c.arguments) for c in first] == [g.arguments for g in steps]
            # the decision never holds a call that waits on an earlier result
            assert all("${" not in c.arguments for c in first)
            assert row.success is None and row.extra["first_decision"] is True
            assert len(row.ground_truth.extra["later_actions"]) == len(actions) - len(first)
            offered = {t["function"]["name"] for t in row.tools}
            assert {c.name for c in first} <= offered
    # the answers fill optional parameters the instructions never state ("page": 1); every
    # optional argument kept is stated: in a surface form, or in one of the few other ways
    # step 6 reads (comma-separated codes, "true", a code by its description's label)
    assert dropped > 30
    other = []
    for row in rows:
        for call in row.messages[1].tool_calls:
            schema = params_of(tools, row.extra["api"], call.name)
            for k, v in json.loads(call.arguments).items():
                optional = k in schema["properties"] and k not in schema.get("required", [])
                if optional and not stated(v, row.goal, k):
                    other.append((k, v))
    assert sorted(other, key=str) == sorted(
        [
            ("group", 1), ("type", "L"), ("units", "f"), ("units", "f"), ("units", "s"),
            ("json", "true"), ("symbols", "NZD,USD,EUR,GBP"), ("symbols", "USD,EUR,JPY"),
            ("symbols", "NOK,USD,EUR,GBP"),
        ],
        key=str,
    )  # fmt: skip
    airport = next(
        r for r in rows if r.extra["api"] == "airportsapi" and r.extra["instruction"] == 0
    )
    call = airport.messages[1].tool_calls[0]
    assert (call.name, json.loads(call.arguments)) == (
        "AirportApi_getAirport",
        {"icao_code": "EDDF"},
    )


def params_of(tools: dict[str, dict[str, dict]], api: str, function: str) -> dict:
    """The JSON schema of ``function``'s parameters."""
    return tools[api][function]["function"]["parameters"]


def test_toolalpaca_drops_unstated_optional_arguments(tmp_path: Path):
    text = "Find flights to Paris on March 5, 2024 for two people, priced in USD and EUR."
    answer = {
        "airport": "CDG",  # required, not stated: kept as the answer wrote it
        "date": "2024-03-05",  # optional, stated as "March 5, 2024"
        "seats": 2,  # optional, stated as "two"
        "currencies": "USD,EUR",  # optional, each item stated
        "page": 1,  # optional, not stated: dropped
        "nonstop": "false",  # optional, the parameter not named: dropped
    }
    record = {
        "Name": "Trips",
        "Instructions": [text],
        "Golden_Answers": [[{"Action": "searchFlights", "Action_Input": json.dumps(answer)}]],
    }
    (tmp_path / "eval_real.json").write_text(json.dumps([record]))
    props = {k: {"type": "integer" if k in ("seats", "page") else "string"} for k in answer}
    tool = {
        "type": "function",
        "function": {
            "name": "searchFlights",
            "parameters": {"type": "object", "properties": props, "required": ["airport"]},
        },
    }
    rows, skipped = toolalpaca_answers(tmp_path, {"Trips": {"searchFlights": tool}})
    kept = {k: v for k, v in answer.items() if k not in ("page", "nonstop")}
    assert dict(skipped) == {"unstated_optional": 2}
    assert json.loads(rows[0].messages[1].tool_calls[0].arguments) == kept
    assert rows[0].ground_truth.turns[0].steps[0][0].arguments == kept
    rows, skipped = toolalpaca_answers(
        tmp_path, {"Trips": {"searchFlights": tool}}, keep_unstated=True
    )
    assert not skipped
    assert json.loads(rows[0].messages[1].tool_calls[0].arguments) == answer


def test_import_commands(external_dir: Path, tmp_path: Path, capsys):
    code, out, _ = cli(
        capsys, "import", "apibank-dialogues", str(external_dir / DIALOGUES), "--out",
        str(tmp_path / "ab"),
    )  # fmt: skip
    assert code == 0 and "dialogues →" in out
    table = read_table(tmp_path / "ab")
    assert table.num_rows > 200 and set(table.column("method").to_pylist()) == {"import:api-bank"}
    code, out, _ = cli(
        capsys, "import", "toolalpaca-answers", str(external_dir / "toolalpaca/data"), "--out",
        str(tmp_path / "ta"),
    )  # fmt: skip
    assert code == 0 and "instructions →" in out
    assert read_table(tmp_path / "ta").num_rows > 150


def test_import_errors_are_one_message(tmp_path: Path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cli(
        capsys, "import", "apibank-dialogues", str(empty), "--out", str(tmp_path / "o")
    )
    assert code != 0 and "level-1-api.json" in err and "Traceback" not in err
    with pytest.raises(InputNotFoundError):
        apibank_dialogues(tmp_path / "missing", {})
    code, _, err = cli(
        capsys, "import", "toolalpaca-answers", str(empty), "--out", str(tmp_path / "o")
    )
    assert code != 0 and "Traceback" not in err
