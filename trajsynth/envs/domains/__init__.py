"""The built-in executable domains, shipped in the package.

| domain | what | tools |
|---|---|---|
| travel | flights, hotels, bookings, payment methods, currency | 12 |
| files | a virtual file system with a working directory | 12 |
| messaging | contacts, messages, a calendar with free/busy | 12 |
| commerce | customers, products, orders, returns, exchanges (tau-bench retail style) | 12 |
| math | arithmetic, units, statistics, interest, memory slots | 10 |

Each domain's module docstring lists its tables, failure modes and the data flow between its
tools (which return field feeds which parameter). :func:`example_tasks` materializes the
hand-written tasks (gold calls executed, outputs and final state hash filled in).
"""

from __future__ import annotations

import functools

from ...core.errors import ConfigError
from ..domain import Domain
from ..tasks import ExampleTask, materialize
from . import commerce, files, math, messaging, travel

__all__ = ["BUILTIN_DOMAINS", "domain_policy", "example_tasks", "get_domain"]

BUILTIN_DOMAINS: dict[str, Domain] = {
    m.DOMAIN.name: m.DOMAIN for m in (travel, files, messaging, commerce, math)
}


def get_domain(name: str) -> Domain:
    """A built-in domain by name (:class:`ConfigError` naming the choices otherwise)."""
    try:
        return BUILTIN_DOMAINS[name]
    except KeyError:
        raise ConfigError(
            f"unknown domain {name!r}", hint=f"built-in domains: {', '.join(BUILTIN_DOMAINS)}"
        ) from None


def domain_policy(name: str) -> str | None:
    """The policy text of a built-in domain (what its system prompt states); None for any
    other domain."""
    d = BUILTIN_DOMAINS.get(name)
    return d.policy if d is not None else None


@functools.cache
def _examples(name: str) -> tuple[ExampleTask, ...]:
    domain = get_domain(name)
    return tuple(materialize(a, domain) for a in domain.authored_tasks())


def example_tasks(domain: str | None = None) -> list[ExampleTask]:
    """The materialized example tasks of one domain, or of every built-in domain."""
    names = [domain] if domain is not None else list(BUILTIN_DOMAINS)
    return [t for n in names for t in _examples(n)]
