"""Drawing a :class:`~.container.SignatureGraph`'s function-level graph to an image
(matplotlib, the ``plots`` extra), for ``trajsynth tools graph --plot``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import networkx as nx

if TYPE_CHECKING:
    from .container import SignatureGraph


def plot_graph(graph: SignatureGraph, path: Any, *, max_labels: int = 80) -> None:
    """Draw the function-level graph to an image: red edges are prerequisites; isolated
    functions sit on rows below the drawing; labels only up to ``max_labels`` functions."""
    from ..core.errors import UserError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UserError("--plot needs matplotlib", hint="pip install 'trajsynth[plots]'") from exc
    n = max(1, len(graph.fg))
    size = min(40.0, 6.0 + n**0.5 * 1.5)
    fig, ax = plt.subplots(figsize=(size, size * 0.75))
    linked = [f for f in graph.fg if graph.fg.degree(f) > 0]
    alone = sorted(f for f in graph.fg if graph.fg.degree(f) == 0)
    pos = (
        nx.spring_layout(graph.fg.subgraph(linked), seed=0, k=2.0 / max(1, len(linked)) ** 0.5)
        if linked
        else {}
    )
    for i, f in enumerate(alone):  # isolated functions on rows below the drawing
        pos[f] = ((i % 12) / 6.0 - 1.0, -1.3 - 0.15 * (i // 12))
    prereq = [(s, t) for s, t, d in graph.fg.edges(data=True) if d["prerequisite"]]
    other = [(s, t) for s, t, d in graph.fg.edges(data=True) if not d["prerequisite"]]
    nx.draw_networkx_nodes(graph.fg, pos, ax=ax, node_size=300, node_color="#9ecae1")
    nx.draw_networkx_edges(graph.fg, pos, edgelist=other, ax=ax, edge_color="#bbbbbb")
    nx.draw_networkx_edges(graph.fg, pos, edgelist=prereq, ax=ax, edge_color="#d62728", width=1.5)
    if n <= max_labels:
        nx.draw_networkx_labels(graph.fg, pos, ax=ax, font_size=8)
    s = graph.stats()
    ax.set_title(
        f"{graph.toolset.name or 'toolset'}: {s['functions']} functions, "
        f"{s['dependent_pairs']} dependent pairs (red: prerequisite), "
        f"{s['components']} components"
    )
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
