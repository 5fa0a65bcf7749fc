"""Importers over the real files in ../shared/external: counts match FORMATS.md, every converted
tool is valid JSON Schema (draft 2020-12, checked with jsonschema), failures are listed.

Run: PYTHONPATH=. python -m pytest tests/envs/test_importers.py -q
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import pytest

from trajsynth.core.errors import ConfigError, InputNotFoundError
from trajsynth.core.ids import canonical_json
from trajsynth.envs.importers import import_tools
from trajsynth.envs.importers.bfcl import read_entries
from trajsynth.envs.importers.stabletoolbench import function_name
from trajsynth.envs.spec import Toolset

META = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)


@functools.cache
def _schema_error(text: str) -> str | None:
    error = next(META.iter_errors(json.loads(text)), None)
    return None if error is None else str(error)


def assert_valid_json_schema(ts: Toolset) -> None:
    """Every tool's parameters and response schema is valid draft 2020-12 JSON Schema
    (checked once per distinct schema: the BFCL files repeat many functions)."""
    for tool in ts.tools:
        assert tool.parameters["type"] == "object"
        for schema in (tool.parameters, tool.response):
            if schema is not None:
                error = _schema_error(canonical_json(schema))
                assert error is None, f"{tool.name}: {error}"


def test_openai_roundtrip_tau_airline(external_dir: Path) -> None:
    src = external_dir / "tau-bench/airline/tools_openai.json"
    ts = import_tools(src, "openai")
    assert (len(ts), ts.records, ts.failures) == (14, 14, [])
    assert ts.to_openai() == json.loads(src.read_text())  # lossless
    assert_valid_json_schema(ts)


def test_tau_domains_and_root(external_dir: Path) -> None:
    airline = import_tools(external_dir / "tau-bench/airline", "tau")
    retail = import_tools(external_dir / "tau-bench/retail", "tau")
    assert (len(airline), len(retail)) == (14, 16)  # FORMATS.md §1.2
    assert "return_delivered_order_items" in retail and "book_reservation" in airline
    both = import_tools(external_dir / "tau-bench", "tau")
    assert both.records == 30
    shared = set(airline.names()) & set(retail.names())
    # a name in both domains is kept once; if the two definitions differ it is listed
    assert len(both) == 30 - len(shared)
    differing = {
        n
        for n in shared
        if airline[n].model_dump(exclude={"source", "extra"})
        != retail[n].model_dump(exclude={"source", "extra"})
    }
    assert {d.name for d in both.duplicates} == differing
    assert all(both[n].extra["domain"] == "airline" for n in shared)
    assert_valid_json_schema(both)


BFCL_SINGLE = {  # FORMATS.md §1.1
    "simple_python": 400,
    "simple_java": 100,
    "simple_javascript": 50,
    "multiple": 200,
    "parallel": 200,
    "parallel_multiple": 200,
    "live_simple": 258,
    "live_multiple": 1053,
    "live_parallel": 16,
    "live_parallel_multiple": 24,
    "irrelevance": 240,
    "live_irrelevance": 884,
    "live_relevance": 16,
}


@pytest.mark.parametrize("category", sorted(BFCL_SINGLE))
def test_bfcl_single_turn_files(external_dir: Path, category: str) -> None:
    src = external_dir / f"bfcl/BFCL_v4_{category}.json"
    ts = import_tools(src, "bfcl")
    assert ts.records == BFCL_SINGLE[category]
    # every function doc is accounted for: kept, an identical copy, a listed duplicate name,
    # or a listed failure
    names = set()
    for line in src.read_text().splitlines():
        names |= {f["name"].replace(".", "_") for f in json.loads(line)["function"]}
    failed = {f.name.replace(".", "_") for f in ts.failures}
    assert set(ts.names()) | failed == names
    assert {d.name for d in ts.duplicates} <= set(ts.names())
    if category == "simple_javascript":
        assert [f.name for f in ts.failures] == ["createAuthToken"]
        assert "unknown parameter type ''" in ts.failures[0].reason
    else:
        assert ts.failures == []
    # the `.` → `_` renaming is reversible
    for tool in ts.tools:
        if tool.source_name is not None:
            assert tool.source_name.replace(".", "_") == tool.name
            assert ts.by_source_name(tool.source_name) is tool
    assert_valid_json_schema(ts)


def test_bfcl_types_are_cast(external_dir: Path) -> None:
    ts = import_tools(external_dir / "bfcl/BFCL_v4_simple_python.json", "bfcl")
    tool = ts["calculate_triangle_area"]
    assert tool.parameters["type"] == "object"
    assert tool.properties()["base"]["type"] == "integer"
    assert tool.required() == ["base", "height"]
    hypot = ts.by_source_name("math.hypot")
    assert hypot is not None and hypot.name == "math_hypot"
    kinds = {p.get("type") for t in ts.tools for p in t.properties().values()}
    assert kinds <= {"string", "integer", "number", "boolean", "array", "object"}
    java = import_tools(external_dir / "bfcl/BFCL_v4_simple_java.json", "bfcl")
    assert all(t.extra == {"language": "java"} for t in java.tools)


FUNC_DOCS = {  # FORMATS.md §1.1
    "gorilla_file_system.json": 18,
    "travel_booking.json": 18,
    "vehicle_control.json": 22,
    "trading_bot.json": 20,
    "math_api.json": 17,
    "posting_api.json": 14,
    "message_api.json": 10,
    "ticket_api.json": 9,
}


def test_bfcl_func_docs_with_response_schemas(external_dir: Path) -> None:
    for fname, count in FUNC_DOCS.items():
        ts = import_tools(external_dir / "bfcl/multi_turn_func_doc" / fname, "bfcl")
        assert (len(ts), ts.failures, ts.duplicates) == (count, [], []), fname
        assert all(t.response is not None and t.response["type"] == "object" for t in ts.tools)
        assert_valid_json_schema(ts)
    # the whole folder: memory_* files share names with different docs; those are listed
    whole = import_tools(external_dir / "bfcl/multi_turn_func_doc", "bfcl")
    assert whole.failures == []
    assert len(whole) + sum(int(d.reason.split()[0]) for d in whole.duplicates) == whole.records


def test_bfcl_multi_turn_question_file_uses_involved_classes(external_dir: Path) -> None:
    ts = import_tools(external_dir / "bfcl/BFCL_v4_multi_turn_base.json", "bfcl")
    assert ts.records == 200 and ts.failures == []
    assert len(ts) == sum(FUNC_DOCS.values())  # the 8 classes' docs, each once
    entries = list(read_entries(external_dir / "bfcl/BFCL_v4_multi_turn_base.json"))
    assert len(entries) == 200
    assert sum(len(t) for e in entries for t in e.gold or []) == 1142  # FORMATS.md §1.1
    # one gold list per turn (FORMATS.md says 2-6 turns; the data has 1-7: 3 entries have 1,
    # 2 have 7)
    assert all(len(e.gold or []) == len(e.turns) for e in entries)
    assert {len(e.turns) for e in entries} == {1, 2, 3, 4, 5, 6, 7}
    # positional arguments are named from the func doc ("sort('final_report.pdf')")
    calls = [c for e in entries for t in e.gold or [] for c in t if c.name == "sort"]
    assert calls and all(set(c.arguments) == {"file_name"} for c in calls)


def test_bfcl_memory_records_are_listed_not_raised(external_dir: Path) -> None:
    ts = import_tools(external_dir / "bfcl/BFCL_v4_memory.json", "bfcl")
    assert ts.records == 155 and len(ts) == 0
    assert len(ts.failures) == 1 and "memory backend" in ts.failures[0].reason


def test_toolalpaca(external_dir: Path) -> None:
    ts = import_tools(external_dir / "toolalpaca/data", "toolalpaca")
    records = [
        r
        for f in ("eval_real.json", "eval_simulated.json")
        for r in json.loads((external_dir / "toolalpaca/data" / f).read_text())
    ]
    assert ts.records == len(records) == 21  # 11 real + 10 simulated
    projected = {n for r in records for n in r["Function_Projection"]}
    # 94 projected functions, plus the 5 AviationAPI operations whose path items the source
    # nests inside /preferred-routes (repaired, named by ToolAlpaca's path_method convention)
    assert projected < set(ts.names()) and len(ts) == 99
    assert ts.failures == []
    assert sum(t.response is not None for t in ts.tools) == 94
    cc = ts["CountryCountryInfo"]
    assert cc.extra["method"] == "GET" and cc.extra["path"] == "/api/v3/CountryInfo/{countryCode}"
    assert cc.required() == ["countryCode"]
    assert ts["weather_taf_get"].required() == ["apt"]
    # every golden action names an imported function, except ToolAlpaca's own ask-the-user
    # action and one annotated "[Optional]" step
    actions = {a["Action"] for r in records for ans in r["Golden_Answers"] for a in ans}
    assert actions - set(ts.names()) == {"getDetails", "[Optional]updateUserProfile"}
    assert_valid_json_schema(ts)


def test_stabletoolbench(external_dir: Path) -> None:
    base = external_dir / "stabletoolbench/solvable_queries/test_instruction"
    g3 = import_tools(base / "G3_instruction.json", "stabletoolbench")
    assert g3.records == 61  # FORMATS.md §1.5
    ts = import_tools(external_dir / "stabletoolbench", "stabletoolbench")
    assert ts.records == 163 + 61 and ts.failures == []
    pairs = {
        (a["tool_name"], a["api_name"])
        for f in ("G1_instruction.json", "G3_instruction.json")
        for q in json.loads((base / f).read_text())
        for a in q["api_list"]
    }
    # ToolBench keeps the last 64 characters of a name, so a few endpoints collide; the
    # first is kept and the others are listed as duplicates
    assert len(pairs) == 846 and len(ts) == len({function_name(*p) for p in pairs}) == 839
    collided = {function_name(*p) for p in pairs} - set()
    assert {d.name for d in ts.duplicates} <= collided
    assert function_name("TheClique", "Songkick concert") == "songkick_concert_for_theclique"
    assert ts["songkick_concert_for_theclique"].source_name == "TheClique/Songkick concert"
    # the names match those in StableToolBench's own example answers
    answers = external_dir / "stabletoolbench/data_example/answer"
    for f in answers.rglob("*.json"):
        fns = json.loads(f.read_text())["answer_generation"]["function"]
        names = {fn["name"] for fn in fns if fn["name"] != "Finish"}
        assert names <= set(ts.names()), f.name
    assert_valid_json_schema(ts)


def test_apibank(external_dir: Path) -> None:
    ts = import_tools(external_dir / "api-bank/test-data/level-1-api.json", "apibank")
    assert ts.records == 399 and len(ts) == 49  # FORMATS.md §1.6: 49 distinct APIs
    assert ts.failures == []
    for tool in ts.tools:  # API-Bank has no optional inputs
        assert tool.required() == list(tool.properties())
        assert tool.response is not None
    whole = import_tools(external_dir / "api-bank", "apibank")
    assert set(whole.names()) >= set(ts.names()) and whole.failures == []
    assert_valid_json_schema(whole)


def test_bad_specs_are_listed_and_the_rest_import(tmp_path: Path) -> None:
    tools = [
        {"type": "function", "function": {"name": "good", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "bad name!", "parameters": {"type": "object"}}},
        {
            "type": "function",
            "function": {"name": "bad_schema", "parameters": {"type": "object", "required": "x"}},
        },
        {"type": "function", "function": {"description": "no name"}},
        "not a tool",
    ]
    src = tmp_path / "tools.json"
    src.write_text(json.dumps(tools))
    ts = import_tools(src, "openai")
    assert ts.names() == ["good"]
    reasons = {f.name: f.reason for f in ts.failures}
    assert "OpenAI-legal" in reasons["bad name!"]
    assert "parameters" in reasons["bad_schema"]
    assert len(ts.failures) == 4
    bfcl_src = tmp_path / "BFCL_v4_simple_python.json"
    bfcl_src.write_text(
        json.dumps(
            {
                "id": "a",
                "question": [],
                "function": [
                    {
                        "name": "ok.fn",
                        "description": "",
                        "parameters": {
                            "type": "dict",
                            "properties": {"x": {"type": "float"}},
                            "required": ["x"],
                        },
                    },
                    {
                        "name": "broken",
                        "description": "",
                        "parameters": {"type": "dict", "properties": {"x": {"type": "complex"}}},
                    },
                ],
            }
        )
        + "\nnot json\n"
    )
    ts = import_tools(bfcl_src, "bfcl")
    assert ts.names() == ["ok_fn"] and ts["ok_fn"].properties()["x"]["type"] == "number"
    assert sorted(f.reason for f in ts.failures) == [
        "broken.x: unknown parameter type 'complex'",
        "line 2 is not JSON (Expecting value)",
    ]


def test_whole_source_errors_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(InputNotFoundError):
        import_tools(tmp_path / "missing.json", "openai")
    with pytest.raises(ConfigError, match="unknown tool format"):
        import_tools(tmp_path, "yaml")


def test_toolset_save_load_roundtrip(tmp_path: Path, external_dir: Path) -> None:
    ts = import_tools(external_dir / "bfcl/BFCL_v4_simple_javascript.json", "bfcl")
    path = ts.save(tmp_path / "toolset.json")
    back = Toolset.load(path)
    assert back == ts and back.failures and back.records == 50
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(ts.to_openai()))
    assert Toolset.load(plain).names() == ts.names()


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_generic_reader_finds_parameters_under_the_usual_keys(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tools = [
        {"name": "openai_bare", "description": "d", "parameters": schema},
        {"name": "anthropic", "description": "d", "input_schema": schema},
        {"name": "catalogue", "description": "d", "query_parameters": schema},
        {"type": "function", "function": {"name": "wrapped", "parameters": schema}},
        {"function": {"name": "nested_no_type", "inputSchema": schema}},
    ]
    ts = import_tools(_write(tmp_path / "t.json", tools), "openai")
    assert ts.names() == [t.get("name", "") or t["function"]["name"] for t in tools]
    assert all(t.required() == ["q"] for t in ts.tools)
    assert (ts.failures, ts.altered) == ([], [])
    # an MCP tools/list result, read through its `tools` list, with its output schema
    mcp = {
        "tools": [
            {
                "name": "add",
                "description": "Add two numbers",
                "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}},
                "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
            }
        ]
    }
    ts = import_tools(_write(tmp_path / "mcp.json", mcp), "openai")
    assert list(ts["add"].response_fields()) == ["sum"] and list(ts["add"].properties()) == ["a"]


def test_altered_specs_are_reported(tmp_path: Path) -> None:
    tools = [
        {"name": "no_props", "parameters": {"type": "object", "required": ["a"]}},
        {"name": "no_type", "parameters": {"properties": {"x": {"type": "integer"}}}},
        {"name": "stray", "description": "", "args": {"type": "object", "properties": {}}},
        {"name": "fine", "description": "", "parameters": {"type": "object", "properties": {}}},
    ]
    ts = import_tools(_write(tmp_path / "t.json", tools), "openai")
    assert len(ts) == 4 and ts.failures == []
    reasons = {a.name: a.reason for a in ts.altered}
    assert set(reasons) == {"no_props", "no_type", "stray"}
    assert "required 'a' not declared in properties; declared untyped" in reasons["no_props"]
    assert ts["no_props"].properties() == {"a": {}} and ts["no_props"].required() == ["a"]
    assert "no 'type'" in reasons["no_type"] and ts["no_type"].parameters["type"] == "object"
    assert "'args' looks like one" in reasons["stray"]
    # other importers go through the same check (BFCL's own data has one such spec)
    bfcl = {
        "id": "x",
        "question": [],
        "function": [
            {
                "name": "f",
                "description": "",
                "parameters": {
                    "type": "dict",
                    "properties": {"o": {"type": "dict", "required": ["k"]}},
                },
            }
        ],
    }
    ts = import_tools(_write(tmp_path / "b.json", bfcl), "bfcl")
    assert ts["f"].properties()["o"]["properties"] == {"k": {}}
    assert [a.reason for a in ts.altered] == [
        "parameters.o: required 'k' not declared in properties; declared untyped"
    ]


def test_truncated_and_unrecognised_records_are_failures(tmp_path: Path) -> None:
    lines = [json.dumps({"name": f"t{i}", "parameters": {"type": "object"}}) for i in range(6)]
    src = tmp_path / "tools.jsonl"
    src.write_text("\n".join(lines)[:-10])
    ts = import_tools(src, "openai")
    assert len(ts) == 5 and ts.records == 6
    assert [f.source for f in ts.failures] == ["tools.jsonl:6"]
    assert "looks truncated" in ts.failures[0].reason
    # JSON Lines under a .json name are read as lines too
    (tmp_path / "l.json").write_text("\n".join(lines))
    assert len(import_tools(tmp_path / "l.json", "openai")) == 6
    # records --format bfcl does not know are each listed
    tau = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}]
    ts = import_tools(_write(tmp_path / "tau.json", tau), "bfcl")
    assert len(ts) == 0 and ts.records == 1
    assert "not a BFCL record" in ts.failures[0].reason


def test_generic_reader_on_real_files(external_dir: Path) -> None:
    # ToolBench answer files keep the functions under answer_generation.function
    ts = import_tools(external_dir / "stabletoolbench/data_example", "openai")
    assert (len(ts), ts.failures, ts.altered) == (14, [], [])
    assert sum(len(t.properties()) for t in ts.tools) > 0
    # BFCL answer files hold no functions: every record is listed, none imported in silence
    answers = external_dir / "bfcl/possible_answer/BFCL_v4_simple_python.json"
    ts = import_tools(answers, "openai")
    assert (len(ts), ts.records, len(ts.failures)) == (0, 400, 400)
    assert "not a function" in ts.failures[0].reason


def test_every_real_record_is_imported_or_listed(external_dir: Path) -> None:
    ts = import_tools(external_dir / "bfcl/BFCL_v4_parallel.json", "bfcl")
    assert (ts.records, len(ts.failures)) == (200, 0)
    # parallel_29 requires population.{adults, children, singles} without declaring them
    assert [(a.name, a.source) for a in ts.altered] == [
        ("waste_calculation_calculate", "BFCL_v4_parallel.json:30#parallel_29")
    ]
    assert ts["waste_calculation_calculate"].properties()["population"]["properties"] == {
        "adults": {},
        "children": {},
        "singles": {},
    }
    tau = import_tools(external_dir / "tau-bench/airline/tools_openai.json", "bfcl")
    assert (len(tau), len(tau.failures)) == (0, 14)


def test_an_mcp_tools_list_keeps_its_read_only_hints(tmp_path: Path) -> None:
    """A server's tools/list saved as JSON and imported as `openai`: the annotations survive,
    so the mcp backend (through a `file:` + `tools:` map) still knows which calls only read."""
    listing = {
        "tools": [
            {"name": "read_graph", "description": "Read the graph.",
             "inputSchema": {"type": "object", "properties": {}},
             "annotations": {"readOnlyHint": True, "idempotentHint": True}},
            {"name": "create_entities", "description": "Create entities.",
             "inputSchema": {"type": "object", "properties": {"names": {"type": "array"}}},
             "annotations": {"readOnlyHint": False}},
            {"name": "plain", "inputSchema": {"type": "object", "properties": {}}},
        ]
    }  # fmt: skip
    src = tmp_path / "tools.json"
    src.write_text(json.dumps(listing))
    ts = import_tools(src, "openai")
    assert ts["read_graph"].extra == {
        "annotations": {"readOnlyHint": True, "idempotentHint": True},
        "read_only": True,
    }
    assert ts["create_entities"].extra["read_only"] is False
    assert ts["plain"].extra == {}
    again = Toolset.load(ts.save(tmp_path / "toolset.json"))
    assert again["read_graph"].extra["read_only"] is True
