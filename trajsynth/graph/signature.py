"""The function-signature graph of a toolset (Magnet, Yin et al. 2025, arXiv:2503.07826, §3.1
"local dependency graph", step 2 of the method): the names of its modules in one place.

- :mod:`.build`: :func:`build_graph`, steps 1-6 (its docstring describes the method);
- :mod:`.container`: :class:`GraphConfig`, the :class:`ReturnField`, :class:`Feed` and
  :class:`EdgeQuestion` records and the :class:`SignatureGraph` container;
- :mod:`.scorers`: content words, name evidence and description similarity (step 4);
- :mod:`.compat`: JSON types of a schema, their compatibility (step 3), id evidence (step 6);
- :mod:`.fields`: a response schema's return fields (step 1) and their values in an output;
- :mod:`.plot`: the drawing of the function-level graph.

Example::

    g = build_graph(get_domain("travel").toolset())
    g.feeds("find_user", "book_flight")    # [Feed(field='user_id', param='user_id', ...)]
    g.prerequisites("book_flight")         # {'user_id': ['find_user', 'get_booking', ...], ...}
"""

from __future__ import annotations

from .build import build_graph
from .compat import UNTYPED as UNTYPED
from .compat import _types as _types
from .compat import types_compatible
from .container import EdgeJudge, EdgeQuestion, Feed, GraphConfig, ReturnField, SignatureGraph
from .fields import resolve_field, return_fields
from .scorers import EMBEDDING_MAX_TOOLS as EMBEDDING_MAX_TOOLS
from .scorers import Similarity, embedding_similarity, lexical_similarity
from .scorers import name_similarity as name_similarity
from .scorers import words as words

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
