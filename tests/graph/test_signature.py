"""The function-signature graph: data-flow edges on the built-in domains and on every toolset
in ../shared/external, no type-contradicting edge, prerequisites, the injected similarity and
the LLM edge check, and the files `trajsynth tools graph` writes.

Run: PYTHONPATH=. python -m pytest tests/graph/test_signature.py -q
"""

from __future__ import annotations

import doctest
import importlib
import json
from pathlib import Path

import numpy as np
import pytest

import trajsynth.graph.scorers as scorers
import trajsynth.graph.signature as sig
from trajsynth.envs.domains import BUILTIN_DOMAINS
from trajsynth.envs.importers import import_tools
from trajsynth.envs.spec import Toolset
from trajsynth.graph import GraphConfig, build_graph, resolve_field, types_compatible

LEX = GraphConfig(similarity="lexical")


def graph(domain: str, **kw):
    return build_graph(BUILTIN_DOMAINS[domain].toolset(), LEX, **kw)


def assert_no_type_mismatch(g) -> int:
    """Every feeds edge joins a field and a parameter whose JSON types agree; returns the
    number of edges checked."""
    n = 0
    for u, v, d in g.g.edges(data=True):
        if d["kind"] != "feeds":
            continue
        f, p = g.g.nodes[u], g.g.nodes[v]
        assert (f["kind"], p["kind"]) == ("field", "param")
        assert f["tool"] != p["tool"]  # no self loops by default
        field = next(x for x in g.fields[f["tool"]] if x.path == f["path"])
        schema = g.spec(p["tool"]).properties()[p["name"]]
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        ptypes = sig._types(schema)
        assert types_compatible(
            field.types, ptypes, field.item_types, sig._types(items) if items else ()
        )
        if "any" not in field.types and "any" not in ptypes:
            assert any(
                s == t or {s, t} == {"integer", "number"} for s in field.types for t in ptypes
            )
        n += 1
    return n


@pytest.mark.parametrize("module", ["scorers", "compat", "fields"])
def test_doctests(module: str) -> None:
    result = doctest.testmod(importlib.import_module(f"trajsynth.graph.{module}"))
    assert result.attempted > 0 and result.failed == 0


def test_travel_data_flow_and_prerequisites() -> None:
    g = graph("travel")
    s = g.stats()
    assert (s["functions"], s["parameters"]) == (12, 35)
    assert s["dependent_pairs"] >= 40 and s["prerequisite_pairs"] >= 25
    fields = {(f.field, f.param) for f in g.feeds("find_user", "get_user")}
    assert ("user_id", "user_id") in fields
    assert ("flights[].flight_id", "flight_id") in {
        (f.field, f.param) for f in g.feeds("search_flights", "book_flight")
    }
    assert ("payment_methods[].payment_id", "payment_id") in {
        (f.field, f.param) for f in g.feeds("get_user", "book_flight")
    }
    # a described airport code feeds origin and destination though the names differ
    assert {f.param for f in g.feeds("find_airports", "search_flights")} == {
        "origin",
        "destination",
    }
    # ids of different things never link
    assert not any(
        f.param == "booking_id" and f.field.endswith("user_id")
        for f in g.feeds_into("cancel_booking")
    )
    prereq = g.prerequisites("book_flight")
    assert set(prereq) == {"user_id", "flight_id", "payment_id"}
    assert "find_user" in prereq["user_id"] and "search_flights" in prereq["flight_id"]
    assert g.fg.edges["find_user", "book_flight"]["prerequisite"] is True
    # null-able fields (a flight booking's hotel_id) feed but never make a prerequisite
    hotel = next(f for f in g.feeds("book_flight", "book_hotel") if f.param == "hotel_id")
    assert hotel.nullable and hotel.required and hotel.id_like
    assert "book_flight" not in g.prerequisites("book_hotel").get("hotel_id", [])
    assert assert_no_type_mismatch(g) == s["feeds_edges"]


@pytest.mark.parametrize("domain", sorted(BUILTIN_DOMAINS))
def test_every_builtin_domain_has_dependent_pairs(domain: str) -> None:
    g = graph(domain)
    s = g.stats()
    assert s["dependent_pairs"] >= 10, s
    assert s["nodes"] == s["functions"] + s["parameters"] + s["return_fields"]
    assert assert_no_type_mismatch(g) == s["feeds_edges"] > 0


def test_known_pairs_in_the_other_domains() -> None:
    pairs = {
        "commerce": [("get_customer", "get_order", "order_ids[]", "order_id")],
        "messaging": [("list_messages", "read_message", "messages[].message_id", "message_id")],
        "files": [("find_files", "read_file", "matches[].path", "path")],
        "math": [("list_values", "recall_value", "values[].name", "name")],
    }
    for domain, wanted in pairs.items():
        g = graph(domain)
        for src, dst, field, param in wanted:
            assert (field, param) in {(f.field, f.param) for f in g.feeds(src, dst)}, (
                domain,
                src,
                dst,
            )


EXTERNAL = [
    ("tau-bench/airline", "tau", 14, 20),
    ("tau-bench/retail", "tau", 16, 30),
    ("toolalpaca/data", "toolalpaca", 99, 150),
    ("stabletoolbench", "stabletoolbench", 839, 1000),
    ("api-bank", "apibank", 49, 30),
    ("bfcl/multi_turn_func_doc", "bfcl", 153, 150),
]


@pytest.mark.slow
@pytest.mark.parametrize(("src", "fmt", "tools", "min_pairs"), EXTERNAL)
def test_graph_builds_on_external_toolsets(
    external_dir: Path, src: str, fmt: str, tools: int, min_pairs: int
) -> None:
    ts = import_tools(external_dir / src, fmt)
    assert len(ts) == tools
    g = build_graph(ts, LEX)
    s = g.stats()
    assert s["dependent_pairs"] >= min_pairs, s
    assert s["functions"] == tools
    assert assert_no_type_mismatch(g) == s["feeds_edges"]


@pytest.mark.slow
def test_graph_builds_on_every_bfcl_file(external_dir: Path) -> None:
    files = sorted((external_dir / "bfcl").glob("BFCL_v4_*.json"))
    assert len(files) == 20
    for src in files:
        ts = import_tools(src, "bfcl")
        g = build_graph(ts, LEX)
        s = g.stats()
        assert s["functions"] == len(ts)
        if len(ts) >= 20:  # toolsets of a few functions may share no data
            assert s["dependent_pairs"] >= len(ts) // 4, (src.name, s)
        assert assert_no_type_mismatch(g) == s["feeds_edges"]


def test_external_known_dependencies(external_dir: Path) -> None:
    retail = build_graph(import_tools(external_dir / "tau-bench/retail", "tau"), LEX)
    # a tool without a response schema feeds the ids its name names
    assert "user_id" in {f.param for f in retail.feeds("find_user_id_by_email", "get_user_details")}
    assert "get_order_details" in retail.successors("get_user_details")
    bank = build_graph(import_tools(external_dir / "api-bank", "apibank"), LEX)
    assert ("token", "token") in {
        (f.field, f.param) for f in bank.feeds("GetUserToken", "AddAgenda")
    }
    assert "token" in bank.prerequisites("AddAgenda")
    posting = build_graph(
        import_tools(external_dir / "bfcl/multi_turn_func_doc/posting_api.json", "bfcl"), LEX
    )
    assert posting.stats()["dependent_pairs"] >= 20


def test_injected_similarity_and_judge() -> None:
    ts = BUILTIN_DOMAINS["travel"].toolset()
    # a similarity that sees nothing leaves only exact-name edges at the 0.5 threshold
    zero = build_graph(ts, LEX, similarity=lambda a, b: np.zeros((len(a), len(b))))
    assert zero.similarity == "custom"
    assert all(f.field.split(".")[-1].strip("[]") == f.param or f.field.endswith("[]")
               for s, t in zero.fg.edges for f in zero.feeds(s, t))  # fmt: skip
    assert ("airports[].code", "origin") not in {
        (f.field, f.param) for f in zero.feeds("find_airports", "search_flights")
    }
    # a judge that rejects one pair removes exactly that edge
    asked = []

    def judge(questions):
        asked.extend((q.source.name, q.target.name) for q in questions)
        return [(q.source.name, q.target.name) != ("find_user", "get_user") for q in questions]

    full = graph("travel")
    judged = graph("travel", judge=judge)
    assert len(asked) == full.stats()["dependent_pairs"]
    assert set(full.fg.edges) - set(judged.fg.edges) == {("find_user", "get_user")}
    assert judged.stats()["judged"] == {"asked": len(asked), "rejected": 1}


def test_embedding_similarity_wiring() -> None:
    """Vectors from an injected embedder: texts sharing the word 'airport' are identical."""

    def embed(texts):
        return np.array([[1.0, 0.0] if "airport" in t.lower() else [0.0, 1.0] for t in texts])

    s = sig.embedding_similarity(embed)
    m = s(["IATA airport code", "a hotel"], ["departure airport", "price"])
    assert m.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    g = build_graph(BUILTIN_DOMAINS["travel"].toolset(), LEX, similarity=s)
    assert {f.param for f in g.feeds("find_airports", "search_flights")} == {
        "origin",
        "destination",
    }


@pytest.mark.slow
def test_real_embeddings_when_installed() -> None:
    pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
    g = build_graph(BUILTIN_DOMAINS["travel"].toolset(), GraphConfig(similarity="embedding"))
    assert g.similarity == "embedding"
    assert {f.param for f in g.feeds("find_airports", "search_flights")} == {
        "origin",
        "destination",
    }
    assert g.stats()["dependent_pairs"] >= 40


def test_remove_feed_resolve_and_files(tmp_path: Path) -> None:
    g = graph("travel")
    assert g.remove_feed("find_user", "user_id", "get_user", "user_id")
    assert not g.fg.has_edge("find_user", "get_user")
    assert not g.remove_feed("find_user", "user_id", "get_user", "user_id")
    out = {"flights": [{"flight_id": "A"}, {"flight_id": None}, {"flight_id": "C"}]}
    assert resolve_field(out, "flights[].flight_id") == [
        ("flights[0].flight_id", "A"),
        ("flights[2].flight_id", "C"),
    ]
    assert resolve_field({"ids": ["x", "y"]}, "ids[]") == [("ids[0]", "x"), ("ids[1]", "y")]
    g.save(tmp_path / "g.json")
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["stats"] == json.loads(json.dumps(g.stats()))
    assert len(data["functions"]) == g.fg.number_of_edges()
    g.plot(tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_empty_and_tiny_toolsets() -> None:
    assert build_graph(Toolset(name="empty"), LEX).stats()["nodes"] == 0
    one = Toolset.from_openai(
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
                },
            }
        ]
    )
    s = build_graph(one, LEX).stats()
    assert (s["functions"], s["dependent_pairs"], s["components"]) == (1, 0, 1)


def _fn(name: str, params: dict, response: dict | None = None, required: list | None = None):
    from trajsynth.envs.spec import ToolSpec

    return ToolSpec(
        name=name,
        description=name.replace("_", " "),
        parameters={"type": "object", "properties": params, "required": required or list(params)},
        response=response,
    )


def _obj(**props: str) -> dict:
    return {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}}


def test_ids_come_from_evidence_not_suffixes() -> None:
    ts = Toolset(
        name="t",
        tools=[
            _fn("get_philanthropy_code", {"topic": {"type": "string"}}, _obj(code="string")),
            _fn("minify_css", {"css_code": {"type": "string", "description": "CSS code ID"}}),
            _fn("find_user", {"email": {"type": "string"}}, _obj(user_id="string")),
            _fn("get_user", {"user_id": {"type": "string"}}, _obj(name="string")),
            _fn("find_order_id_by_number", {"number": {"type": "integer"}}),
            _fn("get_order", {"order_id": {"type": "string"}}),
        ],
    )
    g = build_graph(ts, LEX)
    # a suffix (code) or "ID" in a description makes no id: no other tool returns css_code
    assert not g.prerequisites("minify_css")
    assert all(not f.id_like for f in g.feeds_into("minify_css"))
    # a name another tool returns, with its type, does (also an undescribed result whose
    # tool name says it returns the id)
    assert g.prerequisites("get_user") == {"user_id": ["find_user"]}
    assert g.prerequisites("get_order") == {"order_id": ["find_order_id_by_number"]}


def test_number_and_integer_feed_each_other() -> None:
    ts = Toolset(
        name="t",
        tools=[
            _fn("get_price", {"item": {"type": "string"}}, _obj(price="number")),
            _fn("pay", {"price": {"type": "integer"}}),
        ],
    )
    assert [(f.field, f.param) for f in build_graph(ts, LEX).feeds("get_price", "pay")] == [
        ("price", "price")
    ]


def test_an_untyped_result_feeds_only_what_it_names() -> None:
    tools = [_fn("search_web", {"query": {"type": "string"}})]
    kinds = {"city": "string", "count": "integer", "flag": "boolean", "search_result": "string"}
    tools += [_fn(f"use_{w}", {w: {"type": t}}) for w, t in kinds.items()]
    g = build_graph(Toolset(name="t", tools=tools), LEX)
    assert g.successors("search_web") == ["use_search_result"]


def test_big_toolsets_block_by_neighbours_and_shared_names(
    external_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ts = import_tools(external_dir / "api-bank", "apibank")
    assert len(ts) > GraphConfig().candidates + 1  # candidates are blocked
    g = build_graph(ts, LEX)
    # GetUserToken's text shares no word with ModifyPassword's: the shared `token` links them
    assert ("token", "token") in {
        (f.field, f.param) for f in g.feeds("GetUserToken", "ModifyPassword")
    }
    monkeypatch.setattr(scorers, "EMBEDDING_MAX_TOOLS", 10)
    assert build_graph(ts, GraphConfig()).similarity == "lexical"  # auto above the limit


def _desc(type_: str, description: str, **kw: object) -> dict:
    return {"type": type_, "description": description, **kw}


def test_a_list_of_scalars_is_named_by_its_description(monkeypatch: pytest.MonkeyPatch) -> None:
    """The items of ``favourites[]`` have no name of their own: "List of ticker symbols"
    names them, so they feed ``symbol``; an id parameter needs a name, not a description."""
    favourites = {
        "type": "object",
        "properties": {
            "favourites": _desc(
                "array", "List of the ticker symbols of followed stocks.", items={"type": "string"}
            ),
            "notified": _desc(
                "array", "Contact ids that were sent a reminder message.", items={"type": "string"}
            ),
        },
    }
    ts = Toolset(
        name="t",
        tools=[
            _fn("list_favourites", {}, favourites),
            _fn("get_quote", {"symbol": _desc("string", "Symbol of a stock to quote.")}),
            _fn("read_message", {"message_id": _desc("string", "The message to read.")}),
            _fn("get_contact", {"contact_id": _desc("string", "The contact to show.")}),
        ],
    )
    g = build_graph(ts, LEX)
    assert [(f.field, f.param, f.score) for f in g.feeds("list_favourites", "get_quote")] == [
        ("favourites[]", "symbol", 0.55)  # 0.5 * 0.6 (named) + 0.5 * 0.5 (description)
    ]
    assert not g.feeds("list_favourites", "read_message")  # "message" names no message ids
    assert not g.feeds("list_favourites", "get_contact")
    # without the rule the names share nothing: max(0.5 * 0.5, 0.5 - 0.15) = 0.35 < 0.5
    monkeypatch.setattr(scorers, "_NAMED_BY_TEXT", 0.0)
    assert not build_graph(ts, LEX).feeds("list_favourites", "get_quote")


def test_an_untyped_lookup_feeds_ids_its_record_relates_to() -> None:
    """``get_part(part_id)`` answers with the part's record (no response schema): it feeds a
    ``variant_ids`` parameter whose description names parts, not one that names nothing,
    and a tool that takes two ids looks nothing up."""
    variant = _desc("array", "Variants to order, each of the same part.", items={"type": "string"})
    ts = Toolset(
        name="t",
        tools=[
            _fn("get_part", {"part_id": _desc("string", "The part id.")}),
            _fn("swap_variants", {"variant_ids": variant}),
            _fn("drop_variants", {"variant_ids": _desc("array", "Variants to drop.")}),
            _fn("move_part", {"part_id": {"type": "string"}, "bin_id": {"type": "string"}}),
            _fn("empty_bin", {"variant_ids": variant}),
        ],
    )
    g = build_graph(ts, LEX)
    assert [(f.field, f.param, f.score) for f in g.feeds("get_part", "swap_variants")] == [
        ("result", "variant_ids", 0.6111)  # 0.5 * 1 (names its part) + 0.5 * 0.22
    ]
    assert not g.feeds("get_part", "drop_variants")
    assert not g.feeds("move_part", "swap_variants")
