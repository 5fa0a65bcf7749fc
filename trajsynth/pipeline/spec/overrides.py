"""``--set KEY=VALUE`` overrides, applied to the YAML mapping before validation."""

from __future__ import annotations

from typing import Any

import yaml

from ...core.errors import ConfigError


def parse_overrides(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["a.b=1", "c=x"]`` → ``[("a.b", 1), ("c", "x")]`` with YAML scalar typing."""
    out = []
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        key, _, text = item.partition("=")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            value = text
        out.append((key.strip(), value))
    return out


def apply_overrides(raw: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    """Set each dotted key in ``raw``; ``stages.<id>`` addresses a stage by its id (also a
    stage inside a loop block; ``stages.<loop>`` addresses the loop block itself)."""
    for key, value in overrides:
        parts = key.split(".")
        node: Any = raw
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                match = [
                    s for s in node if isinstance(s, dict) and part in (s.get("id"), s.get("loop"))
                ]
                if not match:  # a stage inside a loop block, by its own id
                    match = [
                        s
                        for block in node
                        if isinstance(block, dict) and isinstance(block.get("stages"), list)
                        for s in block["stages"]
                        if isinstance(s, dict) and s.get("id") == part
                    ]
                if not match:
                    ids = [s.get("id") or s.get("loop") for s in node if isinstance(s, dict)]
                    raise ConfigError(f"--set {key}: no stage with id {part!r} (ids: {ids})")
                if last:
                    raise ConfigError(f"--set {key}: cannot replace a whole stage")
                node = match[0]
                continue
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i])} is not a mapping")
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
    return raw
