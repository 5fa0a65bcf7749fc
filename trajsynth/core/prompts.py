"""The system prompt every method and the trainer share, so that data made by one method and
a model evaluated by another see the same instructions.

    system_prompt()                          # the default
    system_prompt(policy="Identify the traveller before booking.")   # plus a domain's rules
"""

from __future__ import annotations

__all__ = ["DEFAULT_SYSTEM_PROMPT", "system_prompt"]

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
