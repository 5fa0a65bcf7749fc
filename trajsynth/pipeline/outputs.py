"""Where a stage's rows go: each named output to its own folder, written as shards.

One function, :func:`write_outputs`, for both places stages run: the runner's driver (sources
and global stages, whose shards are cut every ``shard_rows`` rows and committed as they fill)
and an executor's unit of a map stage (one shard per output, named after the unit, committed
when the unit is done). The caller says how an output is written by the ``writer`` it passes;
the routing is the same everywhere:

- an item a stage yields is rows of the main output, or ``Emit(name, rows)`` for a named one;
- the stage's first declared output is its main one (``Emit`` to it is the main output);
- an output the stage did not declare, or any ``Emit`` from a source, is an error;
- each output's writer is made on first use and closed once the stage has yielded all; when the
  stage fails, what is buffered is dropped (the manifest never records it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..stages import Emit
from ..store.layout import output_dir
from ..store.shards import ShardWriter

__all__ = ["output_names", "write_outputs"]


def output_names(outputs: tuple[str, ...]) -> tuple[str, ...]:
    """The folders' names of a stage's declared outputs: ``main``, then the side outputs."""
    return ("main", *outputs[1:])


def write_outputs(
    produced: Iterable[Any],
    *,
    stage_dir: Path,
    outputs: tuple[str, ...],
    writer: Callable[[str, Path], ShardWriter],
    where: str,
    side_outputs: bool = True,
) -> dict[str, ShardWriter]:
    """Route what a stage yields to its outputs and write them (see the module docstring).

    ``writer(name, folder)`` makes the writer of output ``name``; ``where`` names the stage in
    errors; ``side_outputs=False`` (sources) refuses ``Emit``. Returns the writers used, by
    output name, closed.
    """
    writers: dict[str, ShardWriter] = {}
    for item in produced:
        name, data = (item.name, item.data) if isinstance(item, Emit) else ("main", item)
        if name == outputs[0]:
            name = "main"
        if name != "main":
            if not side_outputs:
                raise ValueError("source stages have one output; Emit is not allowed")
            if name not in outputs:
                raise ValueError(f"{where} emitted to undeclared output {name!r}")
        if name not in writers:
            writers[name] = writer(name, output_dir(stage_dir, name))
        writers[name].write(data)
    for w in writers.values():
        w.close()
    return writers
