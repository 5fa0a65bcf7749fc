"""The graph's data model: :class:`GraphConfig`, the :class:`ReturnField`, :class:`Feed` and
:class:`EdgeQuestion` records, and the :class:`SignatureGraph` container with its queries and
its JSON file (the steps that build it are in :mod:`.build`)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import networkx as nx
from pydantic import Field

from ..core.config import StrictModel
from ..envs.spec import Toolset, ToolSpec


class GraphConfig(StrictModel):
    """How the graph is built (steps 2-5 of trajsynth.graph.build)."""

    similarity: Literal["auto", "lexical", "embedding"] = Field(
        "auto",
        description="Description similarity: lexical (content-word TF cosine), embedding "
        "(all-MiniLM-L6-v2 via trajsynth.core.embeddings, the `embed` extra), or auto "
        "(embedding when installed and the toolset has at most 500 tools, else lexical).",
    )
    threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Lowest score of a feeds edge (default 0.5 lexical, 0.55 embedding).",
    )
    candidates: int = Field(
        30,
        ge=1,
        description="Candidate neighbours per function (Magnet samples 30 from its category).",
    )
    max_depth: int = Field(3, ge=1, le=6, description="How deep response schemas are flattened.")
    self_loops: bool = Field(False, description="Let a function feed its own parameters.")


@dataclass(frozen=True)
class ReturnField:
    """One flattened field of a tool's response: ``path`` like ``flights[].flight_id``."""

    tool: str
    path: str
    types: tuple[str, ...]  # JSON types; ("any",) when unknown
    description: str = ""
    item_types: tuple[str, ...] = ()  # for arrays: their items' types
    nullable: bool = False  # the schema admits null (e.g. a hotel_id of a flight booking)

    @functools.cached_property
    def leaf(self) -> str:
        """The last name of the path (``flight_id``; ``order_ids`` for ``order_ids[]``)."""
        return re.split(r"[.\[\]]+", self.path.strip("[]."))[-1] if self.path else ""


@dataclass(frozen=True)
class Feed:
    """A data-flow edge: ``source``'s return field ``field`` can be passed as ``target``'s
    parameter ``param``."""

    source: str
    field: str
    target: str
    param: str
    score: float
    required: bool
    id_like: bool
    nullable: bool = False


@dataclass(frozen=True)
class EdgeQuestion:
    """What the optional LLM edge check is asked about one function pair."""

    source: ToolSpec
    target: ToolSpec
    feeds: tuple[Feed, ...]


#: the optional LLM check of step 5: one verdict (True = keep) per question, in order
EdgeJudge = Callable[[Sequence[EdgeQuestion]], Sequence[bool]]


class SignatureGraph:
    """A toolset's function-signature graph: ``g`` (function, parameter and field nodes) and
    ``fg`` (functions only; edges carry ``feeds`` and ``prerequisite``)."""

    def __init__(self, toolset: Toolset, config: GraphConfig, similarity: str) -> None:
        self.toolset = toolset
        self.config = config
        self.similarity = similarity
        self.g: nx.DiGraph = nx.DiGraph()
        self.fg: nx.DiGraph = nx.DiGraph()
        self.fields: dict[str, list[ReturnField]] = {}
        self.judged: dict[str, int] = {}

    # -- queries ----------------------------------------------------------------------------
    @property
    def functions(self) -> list[str]:
        return list(self.fg.nodes)

    def spec(self, name: str) -> ToolSpec:
        return self.toolset[name]

    def feeds(self, source: str, target: str) -> list[Feed]:
        """The bindings of edge source → target (empty when there is none)."""
        if not self.fg.has_edge(source, target):
            return []
        return list(self.fg.edges[source, target]["feeds"])

    def feeds_into(self, target: str) -> list[Feed]:
        """Every feed into ``target``'s parameters, best first."""
        out = [f for s in self.fg.predecessors(target) for f in self.feeds(s, target)]
        return sorted(out, key=lambda f: (-f.score, f.source, f.param))

    def successors(self, name: str) -> list[str]:
        return sorted(self.fg.successors(name))

    def predecessors(self, name: str) -> list[str]:
        return sorted(self.fg.predecessors(name))

    def prerequisites(self, name: str) -> dict[str, list[str]]:
        """Required id-like parameters of ``name`` → the functions that produce them."""
        out: dict[str, list[str]] = {}
        for f in self.feeds_into(name):
            if f.required and f.id_like and not f.nullable:
                out.setdefault(f.param, [])
                if f.source not in out[f.param]:
                    out[f.param].append(f.source)
        return out

    def remove_feed(self, source: str, field: str, target: str, param: str) -> bool:
        """Drop one data-flow edge (execution showed the value never works there); the
        function edge goes when it has no feed left. True when something was removed."""
        if not self.fg.has_edge(source, target):
            return False
        data = self.fg.edges[source, target]
        keep = tuple(f for f in data["feeds"] if not (f.field == field and f.param == param))
        if len(keep) == len(data["feeds"]):
            return False
        if self.g.has_edge(f"out:{source}.{field}", f"in:{target}.{param}"):
            self.g.remove_edge(f"out:{source}.{field}", f"in:{target}.{param}")
        if keep:
            data["feeds"] = keep
            data["score"] = max(f.score for f in keep)
            data["prerequisite"] = any(f.required and f.id_like and not f.nullable for f in keep)
        else:
            self.fg.remove_edge(source, target)
        return True

    def stats(self) -> dict[str, Any]:
        """Counts for display: nodes by kind, edges, components, dependent pairs."""
        kinds: dict[str, int] = {}
        for _, data in self.g.nodes(data=True):
            kinds[data["kind"]] = kinds.get(data["kind"], 0) + 1
        feeds = sum(1 for *_, d in self.g.edges(data=True) if d["kind"] == "feeds")
        prereq = sum(1 for *_, d in self.fg.edges(data=True) if d["prerequisite"])
        return {
            "functions": kinds.get("function", 0),
            "parameters": kinds.get("param", 0),
            "return_fields": kinds.get("field", 0),
            "nodes": self.g.number_of_nodes(),
            "edges": self.g.number_of_edges(),
            "feeds_edges": feeds,
            "dependent_pairs": self.fg.number_of_edges(),
            "prerequisite_pairs": prereq,
            "components": nx.number_weakly_connected_components(self.fg) if len(self.fg) else 0,
            "isolated_functions": sum(1 for n in self.fg if self.fg.degree(n) == 0),
            "similarity": self.similarity,
            **({"judged": dict(self.judged)} if self.judged else {}),
        }

    # -- files ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """node-link JSON of the full graph plus the function-level edges and the stats."""
        return {
            "format_version": "trajsynth.signature_graph/1",
            "toolset": self.toolset.name,
            "config": self.config.model_dump(mode="json"),
            "stats": self.stats(),
            "graph": nx.node_link_data(self.g, edges="edges"),
            "functions": [
                {
                    "source": s,
                    "target": t,
                    "prerequisite": d["prerequisite"],
                    "score": d["score"],
                    "feeds": [asdict(f) for f in d["feeds"]],
                }
                for s, t, d in self.fg.edges(data=True)
            ],
        }

    def save(self, path: Any) -> None:
        from pathlib import Path

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n")

    def plot(self, path: Any, *, max_labels: int = 80) -> None:
        """Draw the function-level graph to an image (matplotlib, the ``plots`` extra)."""
        from .plot import plot_graph

        plot_graph(self, path, max_labels=max_labels)
