"""The function-signature graph and its operations (layer ``graph``).

It imports ``core`` and the tool data models of ``envs.spec`` (a :class:`Toolset` is its
input), nothing else:

- :mod:`.signature`: :func:`build_graph` → :class:`SignatureGraph` (function, parameter and
  return-field nodes; data-flow edges; prerequisite ordering), the names of :mod:`.build`
  (the steps), :mod:`.container` (the graph and its records), :mod:`.scorers` (name and
  description evidence), :mod:`.compat` (types), :mod:`.fields` (return fields) and
  :mod:`.plot` (drawing);
- :mod:`.ops`: the seeded random walk, MAGNIFY, CONNECT, and Magnet's Merge, Insert, Split,
  each preserving legality.
"""

from .ops import (
    FSP,
    Binding,
    OperationError,
    PathCall,
    TurnPlan,
    bundle,
    connect,
    fan_out,
    insert,
    magnify,
    merge,
    problems,
    random_walk,
    split,
    to_turns,
)
from .signature import (
    EdgeJudge,
    EdgeQuestion,
    Feed,
    GraphConfig,
    ReturnField,
    SignatureGraph,
    Similarity,
    build_graph,
    embedding_similarity,
    lexical_similarity,
    resolve_field,
    return_fields,
    types_compatible,
)

__all__ = [
    "FSP",
    "Binding",
    "EdgeJudge",
    "EdgeQuestion",
    "Feed",
    "GraphConfig",
    "OperationError",
    "PathCall",
    "ReturnField",
    "SignatureGraph",
    "Similarity",
    "TurnPlan",
    "build_graph",
    "bundle",
    "connect",
    "embedding_similarity",
    "fan_out",
    "insert",
    "lexical_similarity",
    "magnify",
    "merge",
    "problems",
    "random_walk",
    "resolve_field",
    "return_fields",
    "split",
    "to_turns",
    "types_compatible",
]
