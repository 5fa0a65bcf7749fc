"""How trainers report progress: a small protocol, so the library never draws on the screen
itself (the CLI plugs in a rich progress bar; tests and benchmarks collect the records)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["NullProgress", "Progress", "RecordingProgress"]


class Progress(Protocol):
    """``start`` once with the number of steps, ``update`` after each step with its metrics
    (``loss``, ``lr``, ``tokens_per_s``, ...), ``note`` for one-off messages, then ``close``."""

    def start(self, total: int, description: str, done: int = 0) -> None: ...

    def update(self, step: int, metrics: dict[str, float]) -> None: ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


class NullProgress:
    """Reports nothing."""

    def start(self, total: int, description: str, done: int = 0) -> None:
        return None

    def update(self, step: int, metrics: dict[str, float]) -> None:
        return None

    def note(self, message: str) -> None:
        return None

    def close(self) -> None:
        return None


class RecordingProgress(NullProgress):
    """Keeps every update (for tests and benchmarks)."""

    def __init__(self) -> None:
        self.total = 0
        self.records: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def start(self, total: int, description: str, done: int = 0) -> None:
        self.total = total

    def update(self, step: int, metrics: dict[str, float]) -> None:
        self.records.append({"step": step, **metrics})

    def note(self, message: str) -> None:
        self.notes.append(message)
