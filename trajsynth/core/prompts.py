"""The system prompt every method and the trainer share, so that data made by one method and
a model evaluated by another see the same instructions.

    system_prompt()                          # the default
    system_prompt(policy="Identify the traveller before booking.")   # plus a domain's rules
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .schema import Trajectory

__all__ = ["DEFAULT_SYSTEM_PROMPT", "conversation_text", "system_prompt"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant that completes the user's requests by calling the tools you "
    "are given. Call a tool only when the request needs it, with arguments taken from the "
    "conversation or from earlier tool results; never invent ids or values. When a required "
    "detail is missing, or no tool can do what is asked, say so and ask the user instead of "
    "guessing. When the request is done, answer briefly with the results."
)


def system_prompt(policy: str | None = None, *, base: str = DEFAULT_SYSTEM_PROMPT) -> str:
    """The shared system prompt, followed by a domain's rules when given."""
    policy = (policy or "").strip()
    return f"{base}\n\n{policy}" if policy else base


def conversation_text(row: Trajectory, limit: int) -> str:
    """A trajectory as plain text for an LLM prompt (a judge, a rewriter): one line per user
    or assistant text, call and tool result, the system prompt left out, cut at ``limit``
    characters."""
    lines = []
    for m in row.messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            lines.append(f"[result of {m.name or m.tool_call_id}] {m.content or ''}")
            continue
        if m.content:
            lines.append(f"[{m.role}] {m.content}")
        for c in m.tool_calls:
            lines.append(f"[call] {c.name}({c.arguments})")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[:limit] + " …"
