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

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..envs.spec import Toolset, ToolSpec
from .compat import UNTYPED, _IdEvidence, _name_key, _types, types_compatible
from .container import EdgeJudge, EdgeQuestion, Feed, GraphConfig, ReturnField, SignatureGraph
from .fields import return_fields
from .scorers import (
    Similarity,
    _clip,
    _content,
    _encode,
    _field_text,
    _id_conflict,
    _looked_up,
    _name_score,
    _pair_similarity,
    _param_text,
    _scorer,
    words,
)

#: a parameter: (tool, name, schema, required)
_Param = tuple[str, str, dict[str, Any], bool]


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
    params = _add_nodes(graph, tools)
    if not tools:
        return graph
    allowed = _candidates(graph, tools, scorer_name)
    all_fields, pairs = _typed_pairs(graph, tools, params, allowed)
    if not pairs:
        return graph
    by_pair = _scored_feeds(
        graph,
        tools,
        params,
        all_fields,
        pairs,
        scorer if scorer_name == "custom" else scorer_name,
        threshold,
    )
    if judge is not None and by_pair:
        by_pair = _judged(graph, by_pair, judge)
    _add_edges(graph, by_pair)
    return graph


def _add_nodes(graph: SignatureGraph, tools: Sequence[ToolSpec]) -> list[_Param]:
    """Step 1: function, parameter and return-field nodes; returns every parameter."""
    params: list[_Param] = []
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
        fields = return_fields(spec, graph.config.max_depth)
        graph.fields[spec.name] = fields
        for f in fields:
            node = f"out:{spec.name}.{f.path}"
            graph.g.add_node(node, kind="field", tool=spec.name, path=f.path, types=list(f.types))
            graph.g.add_edge(f"fn:{spec.name}", node, kind="returns")
    return params


def _candidates(graph: SignatureGraph, tools: Sequence[ToolSpec], scorer_name: str) -> np.ndarray:
    """Step 2: the candidate function pairs, a boolean (n, n) matrix over ``tools``: each
    function's ``candidates`` nearest neighbours, and every pair that shares a name."""
    k = graph.config.candidates
    if len(tools) <= k + 1:
        allowed = np.ones((len(tools), len(tools)), dtype=bool)
    else:
        texts = [_clip(f"{' '.join(words(t.name))}: {t.description}") for t in tools]
        encoder = scorer_name if scorer_name == "embedding" else "lexical"
        allowed = _nearest(_encode(encoder, texts), k)
        _shared_names(graph.fields, tools, allowed)
    if not graph.config.self_loops:
        np.fill_diagonal(allowed, False)
    return allowed


def _typed_pairs(
    graph: SignatureGraph,
    tools: Sequence[ToolSpec],
    params: Sequence[_Param],
    allowed: np.ndarray,
) -> tuple[list[ReturnField], list[tuple[int, int]]]:
    """Step 3: every return field in one list, and the (field index, parameter index) pairs
    between candidate functions whose types agree."""
    names = [t.name for t in tools]
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
    return all_fields, pairs


def _scored_feeds(
    graph: SignatureGraph,
    tools: Sequence[ToolSpec],
    params: Sequence[_Param],
    all_fields: Sequence[ReturnField],
    pairs: Sequence[tuple[int, int]],
    scorer: Similarity | str,
    threshold: float,
) -> dict[tuple[str, str], list[Feed]]:
    """Step 4: name evidence first (cheap), description similarity for the pairs left; keeps
    the best field of each source function per (function, parameter), grouped by function
    pair. ``scorer`` is an injected :data:`Similarity` or the name of the configured one."""
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
        name = _name_score(f, pname, schema, untyped, looked_up.get(f.tool, frozenset()))
        if untyped and name < 0.5:
            continue
        # the best score the description can give is 1: skip pairs that cannot reach it
        if max(0.5 * name + 0.5, 0.85) < threshold:
            continue
        scored.append((fi, pi, name))
    if not scored:
        return {}
    desc = _pair_similarity(
        scorer,
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
    return by_pair


def _judged(
    graph: SignatureGraph, by_pair: dict[tuple[str, str], list[Feed]], judge: EdgeJudge
) -> dict[tuple[str, str], list[Feed]]:
    """Step 5: the optional LLM edge check; the function pairs it rejects are dropped."""
    toolset = graph.toolset
    keys = sorted(by_pair)
    questions = [EdgeQuestion(toolset[s], toolset[t], tuple(by_pair[(s, t)])) for s, t in keys]
    verdicts = list(judge(questions))
    if len(verdicts) != len(keys):
        raise ValueError(f"edge judge gave {len(verdicts)} verdicts for {len(keys)} pairs")
    graph.judged = {"asked": len(keys), "rejected": sum(1 for v in verdicts if not v)}
    return {k: by_pair[k] for k, ok in zip(keys, verdicts, strict=True) if ok}


def _add_edges(graph: SignatureGraph, by_pair: dict[tuple[str, str], list[Feed]]) -> None:
    """Step 6: a ``feeds`` edge in ``g`` per binding; in ``fg`` an edge per function pair
    carrying its bindings, best score and whether it is a prerequisite."""
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
