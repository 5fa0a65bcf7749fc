"""Recall of the function-signature graph on real call chains, and its build time at scale.

Why: Magnet tasks are random walks on the graph, so a dependency the graph misses is a chain
no task will ever hold, and an edge that is not a dependency is a task that makes no sense.
Measured on call chains written by others, with the tools' outputs:

- BFCL multi-turn base ground truth (200 entries): the gold calls of each entry run on BFCL's
  own API classes (the ``bfcl-eval`` package, loaded with no dependencies; the source is
  skipped when it is not installed) from the entry's ``initial_config``;
- tau2-bench expected actions (retail and airline tasks): each read action's output is looked
  up in the tau-bench databases (``get_user_details`` → the user record, ``find_user_id_*``
  → the user id, ``get_order_details`` → the order ...; a write action's output is the record
  it changes, as tau-bench's tools return it);
- API-Bank dialogues (level-1 and level-2): the recorded ``result.output`` of each API call.

A gold pair is two consecutive calls of one chain where an output of the first feeds an
argument of the second: a value of the second call's arguments (list elements one by one, at
least 3 characters) is a leaf value of the first call's output and is not one of the first
call's own arguments (an echoed input is no data flow). Recall is the share of gold pairs
(first → second) that are edges of the function-level graph built on the source's whole
toolset; the median out-degree of its functions is shown beside it, so recall is not bought
with noise. Rows: the default graph (``GraphConfig()``), the lexical scorer, and the
baseline ``types_only``: every candidate pair of functions that types allow (what a graph
without similarity would link).

``graph_s_4k``: seconds to build the default graph on 4,000 tools (every distinct tool of
the collections, then definitions dropped as duplicates under a new name, then renamed
copies to reach 4,000).

Nothing here is a test: it prints a table, then one JSON line.

Run: PYTHONPATH=. python bench/graph.py [--external DIR] [--quick] [--misses]
"""

from __future__ import annotations

import copy
import importlib
import itertools
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trajsynth.envs.importers import import_tools
from trajsynth.envs.importers.bfcl import CLASS_TO_FILE, parse_call_string
from trajsynth.envs.spec import Toolset
from trajsynth.graph import GraphConfig, build_graph

QUICK = "--quick" in sys.argv
MISSES = "--misses" in sys.argv  # print the gold pairs the default graph misses most
ROOT = Path(__file__).resolve().parents[1]


def external_dir() -> Path:
    if "--external" in sys.argv:
        return Path(sys.argv[sys.argv.index("--external") + 1])
    env = os.environ.get("TRAJSYNTH_EXTERNAL")
    return Path(env) if env else ROOT.parent / "shared" / "external"


# --------------------------------------------------------------------------------------
# gold pairs
# --------------------------------------------------------------------------------------

Pair = tuple[str, str]


def leaves(value: Any) -> Iterator[str]:
    """Every scalar in a JSON value (dict keys too: ``{name: product_id}`` maps hold ids)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def flows(args_a: dict[str, Any], output_a: Any, args_b: dict[str, Any]) -> bool:
    """Does an output of call a feed an argument of call b (see the module docstring)?"""
    produced = set(leaves(output_a)) - set(leaves(args_a))
    return any(len(v) >= 3 and v in produced for v in leaves(args_b))


def pairs_of(chain: list[tuple[str, dict[str, Any], Any]]) -> list[Pair]:
    return [(a[0], b[0]) for a, b in itertools.pairwise(chain) if flows(a[1], a[2], b[1])]


def apibank_pairs(ext: Path) -> list[tuple[Toolset, list[Pair]]]:
    tools = import_tools(ext / "api-bank", "apibank")
    pairs: list[Pair] = []
    for file in sorted((ext / "api-bank/lv1-lv2-samples").rglob("*.jsonl")):
        chain = []
        for line in file.read_text().splitlines():
            rec = json.loads(line) if line.strip() else {}
            if rec.get("role") == "API":
                result = rec.get("result") or {}
                chain.append((rec["api_name"], rec.get("param_dict") or {}, result.get("output")))
        pairs += pairs_of(chain)
    return [(tools, pairs)]


class TauDB:
    """tau-bench's databases, and what a tool returns for given arguments (module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.tables = {p.stem: json.loads(p.read_text()) for p in (folder / "data").glob("*.json")}

    def output(self, name: str, args: dict[str, Any]) -> Any:
        t = self.tables
        users = t.get("users", {})
        if name == "find_user_id_by_email":
            return next((u for u, r in users.items() if r.get("email") == args.get("email")), None)
        if name == "find_user_id_by_name_zip":
            return next(
                (
                    u
                    for u, r in users.items()
                    if r.get("name", {}).get("first_name") == args.get("first_name")
                    and r.get("name", {}).get("last_name") == args.get("last_name")
                    and r.get("address", {}).get("zip") == args.get("zip")
                ),
                None,
            )
        if name == "list_all_product_types":
            return {p["name"]: pid for pid, p in t.get("products", {}).items()}
        if name == "get_item_details":
            return next(
                (
                    v
                    for p in t.get("products", {}).values()
                    for iid, v in p.get("variants", {}).items()
                    if iid == args.get("item_id")
                ),
                None,
            )
        if name in ("search_direct_flight", "search_onestop_flight"):
            return [
                f
                for f in t.get("flights", {}).values()
                if f.get("origin") == args.get("origin")
                or f.get("destination") == args.get("destination")
            ]
        keys = {
            "order_id": "orders",
            "reservation_id": "reservations",
            "product_id": "products",
            "user_id": "users",
        }
        for arg, table in keys.items():
            if arg in args and args[arg] in t.get(table, {}):
                return t[table][args[arg]]
        return None


def tau_pairs(ext: Path) -> list[tuple[Toolset, list[Pair]]]:
    """Per domain: its own toolset (the two define some names differently) and its pairs."""
    out = []
    for domain in ("retail", "airline"):
        tools = import_tools(ext / "tau-bench" / domain, "tau")
        db = TauDB(ext / "tau-bench" / domain)
        pairs: list[Pair] = []
        for task in json.loads((ext / "tau2-bench" / domain / "tasks.json").read_text()):
            actions = (task.get("evaluation_criteria") or {}).get("actions") or []
            chain = [
                (
                    a["name"],
                    a.get("arguments") or {},
                    db.output(a["name"], a.get("arguments") or {}),
                )
                for a in actions
            ]
            pairs += pairs_of(chain)
        out.append((tools, pairs))
    return out


def bfcl_pairs(ext: Path) -> list[tuple[Toolset, list[Pair]]] | None:
    try:
        importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.func_source_code")
    except ImportError:
        return None
    base = ext / "bfcl"
    tools = import_tools(base / "multi_turn_func_doc", "bfcl")
    answers = {
        r["id"]: r["ground_truth"]
        for r in map(json.loads, (base / "possible_answer/BFCL_v4_multi_turn_base.json").open())
    }
    pairs: list[Pair] = []
    for entry in map(json.loads, (base / "BFCL_v4_multi_turn_base.json").open()):
        instances: dict[str, Any] = {}
        for cls in entry["involved_classes"]:
            module = importlib.import_module(
                "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."
                + CLASS_TO_FILE[cls].removesuffix(".json")
            )
            obj = getattr(module, cls)()
            if hasattr(obj, "_load_scenario") and cls != "MathAPI":
                obj._load_scenario(copy.deepcopy(entry["initial_config"].get(cls, {})))
            instances[cls] = obj
        chain = []
        for turn in answers[entry["id"]]:
            for text in turn:
                call = parse_call_string(text, tools)
                owner = next((o for o in instances.values() if hasattr(o, call.name)), None)
                try:
                    out = getattr(owner, call.name)(**call.arguments) if owner else None
                except Exception as exc:  # a gold call that errors returns its message
                    out = str(exc)
                chain.append((call.name, call.arguments, out))
        pairs += pairs_of(chain)
    return [(tools, pairs)]


# --------------------------------------------------------------------------------------
# measures
# --------------------------------------------------------------------------------------


def type_baseline(ts: Toolset, config: GraphConfig) -> set[Pair]:
    """The baseline: every candidate pair the type rules (and the untyped-result rule) admit,
    with the description similarity forced to 1 and no threshold."""
    wide = config.model_copy(update={"threshold": 0.0})
    g = build_graph(ts, wide, similarity=lambda a, b: np.ones((len(a), len(b))))
    return set(g.fg.edges)


def score(parts: list[tuple[set[Pair], list[str], list[Pair]]]) -> dict[str, Any]:
    """Recall over every part's pairs; median out-degree over every part's functions."""
    known = hit = unknown = 0
    degrees: list[int] = []
    for edges, functions, pairs in parts:
        names = set(functions)
        mine = [p for p in pairs if p[0] in names and p[1] in names]
        known += len(mine)
        unknown += len(pairs) - len(mine)
        hit += sum(1 for p in mine if p in edges)
        out_degree = dict.fromkeys(functions, 0)
        for src, _ in edges:
            out_degree[src] += 1
        degrees += out_degree.values()
    return {
        "pairs": known,
        "unknown_tool": unknown,
        "recall": round(hit / known, 3) if known else None,
        "median_out_degree": statistics.median(degrees) if degrees else 0,
        "functions": len(degrees),
    }


def pool_4k(ext: Path, n: int = 4000) -> tuple[Toolset, int]:
    sources = [
        ("bfcl", "bfcl"),
        ("stabletoolbench", "stabletoolbench"),
        ("toolalpaca", "toolalpaca"),
        ("api-bank", "apibank"),
        ("tau-bench", "tau"),
    ]
    tools: dict[str, Any] = {}
    for src, fmt in sources:
        for t in import_tools(ext / src, fmt).tools:
            tools.setdefault(t.name, t)
    distinct = len(tools)
    pool = list(tools.values())
    i = 0
    while len(tools) < n:
        t = pool[i % len(pool)]
        name = f"{t.name[:58]}_v{i // len(pool) + 2}"
        tools.setdefault(name, t.model_copy(update={"name": name}))
        i += 1
    return Toolset(name="pool", tools=list(tools.values())[:n]), distinct


def main() -> None:
    ext = external_dir()
    if not ext.is_dir():
        sys.exit(f"error: {ext} not found (pass --external DIR or set TRAJSYNTH_EXTERNAL)")
    load = os.getloadavg()[0]
    default = GraphConfig()
    configs = {"default": default, "lexical": GraphConfig(similarity="lexical")}
    sources = {
        "bfcl_multi_turn": bfcl_pairs(ext),
        "tau2": tau_pairs(ext),
        "api_bank": apibank_pairs(ext),
    }
    rows: dict[str, dict[str, Any]] = {}
    for source, found in sources.items():
        if found is None:
            print(f"{source}: skipped (pip install --no-deps bfcl-eval to run BFCL's classes)")
            continue
        for label, config in configs.items():
            graphs = [(build_graph(ts, config), pairs) for ts, pairs in found]
            if MISSES and label == "default":
                missed = Counter(
                    p
                    for g, ps in graphs
                    for p in ps
                    if p[0] in g.fg and p[1] in g.fg and not g.fg.has_edge(*p)
                )
                for (a, b), n in missed.most_common(12):
                    print(f"  {source} missed {n:>3}× {a} → {b}")
            rows[f"{source}/{label}"] = {
                **score([(set(g.fg.edges), g.functions, p) for g, p in graphs]),
                "similarity": graphs[0][0].similarity,
            }
        rows[f"{source}/types_only"] = {
            **score([(type_baseline(ts, default), ts.names(), p) for ts, p in found]),
            "similarity": "-",
        }
    print(f"graph recall on real chains, load average {load:.2f} → {os.getloadavg()[0]:.2f}")
    print(f"{'source/graph':28}{'pairs':>7}{'recall':>8}{'median out':>12}{'functions':>11}  sim")
    print(f"{'':28}(pairs whose tools the toolset lacks are left out: ToolSearcher, ...)")
    for key, r in rows.items():
        print(
            f"{key:28}{r['pairs']:>7}{r['recall'] if r['recall'] is not None else '-':>8}"
            f"{r['median_out_degree']:>12}{r['functions']:>11}  {r['similarity']}"
        )
    ts, distinct = pool_4k(ext, 1000 if QUICK else 4000)
    started = time.perf_counter()
    g = build_graph(ts, default)
    seconds = time.perf_counter() - started
    s = g.stats()
    print(
        f"default graph on {len(ts)} tools ({distinct} distinct): {seconds:.1f}s, "
        f"{s['dependent_pairs']} dependent pairs ({s['prerequisite_pairs']} prerequisites), "
        f"similarity {s['similarity']}"
    )
    defaults = {k.split("/")[0]: v for k, v in rows.items() if k.endswith("/default")}
    total = sum(v["pairs"] for v in defaults.values())
    hits = sum(v["pairs"] * (v["recall"] or 0) for v in defaults.values())
    summary = {
        "recall": round(hits / total, 3) if total else None,
        "by_source": {
            k: {
                "recall": v["recall"],
                "pairs": v["pairs"],
                "median_out_degree": v["median_out_degree"],
            }
            for k, v in defaults.items()
        },
        "baseline_types_only": {
            k.split("/")[0]: {"recall": v["recall"], "median_out_degree": v["median_out_degree"]}
            for k, v in rows.items()
            if k.endswith("/types_only")
        },
        "graph_s_4k": round(seconds, 1),
        "graph_tools": len(ts),
        "graph_similarity": s["similarity"],
        "load_average": round(load, 2),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
