"""The verl, OpenAI fine-tuning and HF dataset-folder exports of a small real run, each read
back by what consumes it: pyarrow with verl's column names and types, the OpenAI fine-tuning
format checks, ``datasets`` (``load_dataset`` and ``load_from_disk``) and the dataset card's
YAML header, whose figures must be the rows' and the run's own.

Run: PYTHONPATH=. python -m pytest tests/store/test_export_consumers.py -q
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from trajsynth.cli import main
from trajsynth.core import Trajectory
from trajsynth.pipeline import run_pipeline
from trajsynth.store import RunManifest, read_records
from trajsynth.store.export import export
from trajsynth.store.openai_ft import check_example, check_file, to_openai_ft_row

datasets = pytest.importorskip("datasets")

PIPELINE = {
    "name": "exports",
    "defaults": {
        "seed": 0,
        "shard_rows": 50,
        "llm": {
            "teacher": {
                "backend": "sim",
                "prices": {"prompt_per_mtok": 0.5, "completion_per_mtok": 1.5},
                # malformed calls often (2% by default): a failed row openai-ft cannot
                # express, whatever the values drawn (one draw of them had none)
                "sim": {"profile": {"malformed_json": 0.15}},
            }
        },
    },
    "stages": [
        {
            "id": "tasks",
            "uses": "magnet_tasks",
            "with": {
                "tasks_per_domain": 4,
                "domains": ["travel", "commerce"],
                "graph": {"similarity": "lexical"},
            },
        },
        {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 4}},
        {"id": "dedup", "uses": "dedup", "from": "rollouts"},
        {"id": "difficulty", "uses": "difficulty", "from": "dedup"},
    ],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exports")
    spec = root / "exports.yaml"
    spec.write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    run_pipeline(str(spec), out=root / "run")
    return root / "run"


def cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


# ---------------------------------------------------------------------------------------- verl


def test_verl_parquet_has_verls_columns_and_one_row_per_task(run: Path, tmp_path: Path) -> None:
    rows = read_records(run / "rollouts")
    n, path = export(run / "rollouts", "verl", tmp_path / "verl", split="train")
    table = pq.read_table(path)
    assert path.name == "train.parquet"
    assert table.column_names == [
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
        "agent_name",
    ]
    s = table.schema
    # prompt: a list of {role, content}; reward_model and extra_info: structs (dicts)
    assert pa.types.is_list(s.field("prompt").type)
    assert {f.name for f in s.field("prompt").type.value_type} == {"role", "content"}
    assert pa.types.is_struct(s.field("reward_model").type)
    assert {f.name for f in s.field("reward_model").type} == {"style", "ground_truth"}
    assert pa.types.is_struct(s.field("extra_info").type)
    tasks = {r.task_id: r for r in rows}
    assert n == table.num_rows == len(tasks)  # rollouts of one task collapse to one prompt
    by_task = {r.task_id: r for r in reversed(rows)}  # the first row of each task
    offered = sorted({t["function"]["name"] for r in rows for t in r.tools})
    for i, rec in enumerate(table.to_pylist()):
        info = rec["extra_info"]
        src = by_task[info["task_id"]]
        assert info["index"] == i and info["split"] == "train"
        assert rec["data_source"] == f"trajsynth/{src.domain}" and info["domain"] == src.domain
        assert rec["agent_name"] == "tool_agent" and rec["ability"] == "tool_use"
        # the prompt is everything before the first assistant turn: system + user
        first = next(k for k, m in enumerate(src.messages) if m.role == "assistant")
        assert (
            [m["role"] for m in rec["prompt"]]
            == ["system", "user"]
            == [m.role for m in src.messages[:first]]
        )
        assert rec["prompt"][1]["content"] == src.messages[1].content
        # the executable ground truth, as JSON text
        assert rec["reward_model"]["style"] == "rule"
        assert json.loads(rec["reward_model"]["ground_truth"]) == src.ground_truth.model_dump(
            mode="json"
        )
        assert json.loads(info["tools"]) == src.tools
        assert info["need_tools_kwargs"] is True
        assert sorted(info["tools_kwargs"]) == offered
        assert all(
            v == {"create_kwargs": {"domain": src.domain, "task_id": src.task_id}}
            for v in info["tools_kwargs"].values()
        )
        inter = info["interaction_kwargs"]
        assert inter["name"] == src.domain and inter["query"] == src.messages[1].content
        assert inter["ground_truth"] == rec["reward_model"]["ground_truth"]
    # verl reads it with datasets.load_dataset("parquet"): dicts and lists come back as such
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert isinstance(ds[0]["prompt"], list) and isinstance(ds[0]["reward_model"], dict)
    assert ds[0]["extra_info"]["tools_kwargs"][offered[0]]["create_kwargs"]["task_id"]


def test_verl_export_of_task_rows_and_rows_without_ground_truth(run: Path, tmp_path: Path) -> None:
    tasks = read_records(run / "tasks")
    n, path = export(run / "tasks", "verl", tmp_path / "t.parquet", split="test")
    assert n == len(tasks) and path == tmp_path / "t.parquet"
    assert {r["extra_info"]["split"] for r in pq.read_table(path).to_pylist()} == {"test"}
    bare = tmp_path / "bare"
    from trajsynth.store import ShardWriter

    with ShardWriter(bare) as w:
        w.write([Trajectory(id="x", task_id="x", goal="hi", domain="travel")])
    with pytest.raises(Exception, match="no task with ground truth"):
        export(bare, "verl", tmp_path / "none")


# ----------------------------------------------------------------------------------- openai-ft


def test_openai_ft_lines_pass_the_format_checks(run: Path, tmp_path: Path) -> None:
    rows = read_records(run / "dedup")
    result = export(run / "dedup", "openai-ft", tmp_path / "ft")
    n, errors = check_file(result.path)
    assert n == result.rows == len(rows) and not result.skipped and not errors
    lines = [json.loads(x) for x in result.path.read_text().splitlines()]
    for ex, src in zip(lines, rows, strict=True):
        assert set(ex) == {"messages", "tools", "parallel_tool_calls"}
        calls = [c for m in src.messages for c in m.tool_calls]
        assert ex["parallel_tool_calls"] == any(len(m.tool_calls) > 1 for m in src.messages)
        got = [c for m in ex["messages"] for c in m.get("tool_calls", [])]
        assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in got] == [
            (c.id, c.name, c.arguments) for c in calls
        ]
        assert all(c["type"] == "function" for c in got)
        assert {t["function"]["name"] for t in ex["tools"]} >= {c.name for c in calls}
        assert all(set(t["function"]) == {"name", "description", "parameters"} for t in ex["tools"])
        tool_msgs = [m for m in ex["messages"] if m["role"] == "tool"]
        assert all(set(m) == {"role", "tool_call_id", "content"} for m in tool_msgs)


def test_openai_ft_skips_and_counts_rows_it_cannot_express(run: Path, tmp_path: Path) -> None:
    failed = read_records(run / "rollouts" / "failed")
    expected: Counter[str] = Counter()
    for r in failed:
        errors = check_example(to_openai_ft_row(r))
        if errors:
            expected[errors[0].split(":", 1)[0]] += 1
    assert expected["arguments_invalid_json"] > 0  # the teacher's malformed calls
    result = export(run / "rollouts" / "failed", "openai-ft", tmp_path / "f.jsonl")
    assert result.skipped == dict(expected)
    assert result.rows + sum(expected.values()) == len(failed)
    assert check_file(result.path) == (result.rows, Counter())


def _ok() -> dict:
    return {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
            {"role": "assistant", "content": "done"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "parallel_tool_calls": True,
    }


def _codes(example: object) -> set[str]:
    return {e.split(":", 1)[0] for e in check_example(example)}


def test_format_checker_catches_what_the_api_rejects(tmp_path: Path) -> None:
    assert check_example(_ok()) == []
    cases: list[tuple[str, object]] = []
    ex = _ok()
    ex["messages"][1]["role"] = "human"
    cases.append(("unrecognized_role", ex))
    ex = _ok()
    ex["messages"][3]["tool_call_id"] = "zzz"
    cases.append(("tool_message_without_call", ex))
    ex = _ok()
    ex["messages"][2]["tool_calls"][0]["function"]["name"] = "g"
    cases.append(("function_not_in_tools", ex))
    ex = _ok()
    ex["messages"][2]["tool_calls"][1]["function"]["arguments"] = "{oops"
    cases.append(("arguments_invalid_json", ex))
    ex = _ok()
    ex["parallel_tool_calls"] = False
    cases.append(("parallel_calls_not_allowed", ex))
    ex = _ok()
    del ex["messages"][4]
    cases.append(("tool_calls_unanswered", ex))
    ex = _ok()
    ex["messages"][5] = {"role": "assistant"}
    cases.append(("missing_content", ex))
    ex = _ok()
    ex["messages"] = ex["messages"][:2]
    cases.append(("example_missing_assistant_message", ex))
    ex = _ok()
    ex["messages"][1]["speaker"] = "x"
    cases.append(("message_unrecognized_key", ex))
    ex = _ok()
    ex["tools"][0]["function"]["name"] = "fs.read"
    cases.append(("tool_name_invalid", ex))
    cases.append(("missing_messages_list", {"tools": []}))
    cases.append(("data_type", ["not", "a", "dict"]))
    for code, example in cases:
        assert code in _codes(example), (code, check_example(example))
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps(_ok()) + "\n{not json\n" + json.dumps(cases[0][1]) + "\n")
    assert check_file(f) == (3, Counter({"invalid_json": 1, "unrecognized_role": 1}))


# ------------------------------------------------------------------------------------------ hf


def _card(folder: Path) -> tuple[dict, str]:
    text = (folder / "README.md").read_text()
    _, header, body = text.split("---\n", 2)
    return yaml.safe_load(header), body


def _table_rows(body: str, heading: str) -> dict[str, str]:
    part = body.split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
    cells = [line.strip("|").split("|") for line in part.splitlines() if line.startswith("| ")]
    return {c[0].strip(): c[1].strip() for c in cells[1:]}


def test_hf_folder_loads_and_its_card_carries_the_runs_figures(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    assert cli("export", str(run / "difficulty"), "--format", "hf", "--out", str(out)) == 0
    rows = read_records(run / "difficulty")
    # both loaders read the folder
    ds = datasets.load_dataset(str(out), split="train")
    assert len(ds) == len(rows) and ds[0]["id"] == rows[0].id
    assert datasets.load_from_disk(str(out))["train"]["id"] == [r.id for r in rows]
    header, body = _card(out)
    assert header["license"] == "other" and header["task_categories"] == ["text-generation"]
    assert "tool-use" in header["tags"]
    assert header["configs"][0]["data_files"][0]["split"] == "train"
    info = header["dataset_info"]
    assert info["splits"] == [
        {"name": "train", "num_bytes": info["splits"][0]["num_bytes"], "num_examples": len(rows)}
    ]
    names = [f["name"] for f in info["features"]]
    assert names == list(ds.features)
    assert {f["name"]: f.get("dtype") for f in info["features"]}["quality_score"] == "float64"
    # the figures are the rows' own
    for heading, key in (("method", "method"), ("domain", "domain"), ("difficulty", "difficulty")):
        got = _table_rows(body, f"Rows by {heading}")
        want = Counter(getattr(r, key) or "(none)" for r in rows)
        assert {k: int(v.replace(",", "")) for k, v in got.items()} == dict(want), heading
    per_task = {r.task_id: f"{r.rollouts_passed}/{r.rollouts_total}" for r in rows}
    hist = {k: int(v) for k, v in _table_rows(body, "pass@k").items()}
    assert hist == dict(Counter(per_task.values()))
    # the dedup rate and the cost come from the run: the dedup stage read every rollout
    rolled, deduped = len(read_records(run / "rollouts")), len(read_records(run / "dedup"))
    assert f"Dedup rate: {(rolled - deduped) / rolled:.1%}" in body
    assert f"`dedup` {rolled:,} → {deduped:,}" in body
    manifest = RunManifest.load(run / "manifest.json")
    cost = sum(
        v
        for st in manifest.stages.values()
        for k, v in st.metrics.get("counters", {}).items()
        if k.startswith("llm.") and k.endswith(".cost_usd")
    )
    assert cost > 0
    assert f"Cost per accepted trajectory: ${cost / len(rows):.6f}" in body


def test_hf_card_of_bare_shards_says_what_was_not_recorded(run: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in (run / "dedup").glob("*.parquet"):
        shutil.copy(f, bare / f.name)
    out = tmp_path / "hf"
    assert cli("export", str(bare), "-f", "hf", "-o", str(out), "--license", "cc-by-4.0") == 0
    header, body = _card(out)
    assert header["license"] == "cc-by-4.0"
    assert "without a run manifest" in body
    assert "Dedup rate: not recorded" in body
    assert "Cost per accepted trajectory: not recorded" in body
    rows = read_records(bare)
    got = _table_rows(body, "Rows by domain")
    assert {k: int(v) for k, v in got.items()} == dict(Counter(r.domain for r in rows))


# -------------------------------------------------------------------------------------- errors


def test_user_errors_are_one_message_and_a_nonzero_exit(
    run: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from trajsynth.store import ShardWriter

    empty = tmp_path / "empty"
    with ShardWriter(empty) as w:
        w.write([Trajectory(id="x", task_id="x")])
    # a shard folder whose only shard holds no rows
    table = pq.read_table(next(empty.glob("*.parquet")))
    shutil.rmtree(empty)
    empty.mkdir()
    pq.write_table(table.slice(0, 0), empty / "part-00000.parquet")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args, needle in (
        ([str(run / "dedup"), "-f", "csv", "-o", str(tmp_path / "o")], "'csv' is not one of"),
        ([str(empty), "-f", "openai-ft", "-o", str(tmp_path / "o")], "holds no rows"),
        ([str(run / "dedup"), "-f", "verl", "-o", str(blocker / "sub")], "cannot write"),
        ([str(run / "dedup"), "-f", "hf", "-o", str(blocker / "sub")], "cannot write"),
        ([str(run / "dedup"), "-f", "verl", "-o", str(tmp_path / "v"), "--split", "a/b"], "split"),
    ):
        code = cli("export", *args)
        err = capfd.readouterr().err
        assert code == 2, (args, err)
        assert needle in err and "internal error" not in err and "Traceback" not in err


def test_the_run_manifest_of_exported_shards_is_found(run: Path, tmp_path: Path) -> None:
    from trajsynth.store.manifest import locate_manifest

    manifest = run / "manifest.json"
    assert locate_manifest(run / "dedup") == (manifest, "dedup")
    assert locate_manifest(f"{run}/dedup/*.parquet") == (manifest, "dedup")
    side = next((run / "rollouts" / "failed").glob("*.parquet"))
    assert locate_manifest(side) == (manifest, "rollouts")
    assert locate_manifest(tmp_path) is None
    assert RunManifest.load(manifest).upstream("difficulty") == [
        "tasks",
        "rollouts",
        "dedup",
        "difficulty",
    ]
