"""The server's settings (``trajsynth serve`` options): response latency, injected faults,
the batch delay."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ...core.errors import ConfigError

FAULT_KINDS = ("429", "500", "timeout", "garbage")


@dataclass(frozen=True)
class Latency:
    """Response latency in milliseconds: fixed, uniform, or exponential."""

    kind: str = "fixed"
    a: float = 0.0
    b: float = 0.0

    @classmethod
    def parse(cls, text: str | float | None) -> Latency:
        if text is None or text == "":
            return cls()
        if isinstance(text, (int, float)):
            return cls("fixed", float(text))
        s = str(text).strip()
        try:
            if s.startswith("exp:"):
                return cls("exp", float(s[4:]))
            if ":" in s:
                lo, hi = s.split(":", 1)
                return cls("uniform", float(lo), float(hi))
            return cls("fixed", float(s))
        except ValueError:
            raise ConfigError(
                f"--latency-ms {text!r}: use 200 (fixed), 100:300 (uniform) or exp:200"
            ) from None

    def sample(self, rng: random.Random) -> float:
        """Seconds."""
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b) / 1000.0
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.a) / 1000.0 if self.a > 0 else 0.0
        return self.a / 1000.0


@dataclass
class ServerOptions:
    """Behaviour of the server (``trajsynth serve`` options)."""

    model_name: str = "sim"
    latency: Latency = field(default_factory=Latency)
    fault_rate: float = 0.0
    fault_mix: tuple[str, ...] = FAULT_KINDS
    retry_after_ms: float = 100.0
    hang_s: float = 30.0
    seed: int = 0
    ignore_n: bool = False  # behave like servers without `n`: always one choice
    parse_calls: bool = False  # parse tool calls out of text (local models)
    batch_delay_s: float = 1.0  # a batch completes this long after it was created

    def __post_init__(self) -> None:
        if not 0 <= self.fault_rate <= 1:
            raise ConfigError(f"--fault-rate {self.fault_rate}: must be between 0 and 1")
        bad = [k for k in self.fault_mix if k not in FAULT_KINDS]
        if bad or not self.fault_mix:
            raise ConfigError(f"--fault-mix {bad or '(empty)'}: choose from {list(FAULT_KINDS)}")
        if self.batch_delay_s < 0:
            raise ConfigError(f"--batch-delay {self.batch_delay_s}: must be 0 or more seconds")
