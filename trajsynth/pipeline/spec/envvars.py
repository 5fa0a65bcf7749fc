"""``${NAME}`` and ``${NAME:-default}`` in a pipeline's strings, from the environment."""

from __future__ import annotations

import os
import re
from typing import Any

from ...core.errors import ConfigError

_ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, *, where: str = "pipeline") -> Any:
    """``${NAME}`` and ``${NAME:-default}`` in every string of a pipeline, from the
    environment, as in docker compose files: a pipeline can name data that lives elsewhere on
    each machine (``file: ${TOOLS}/fs.json``). A variable that is unset and has no default is
    a ConfigError naming it. Strings without ``${`` are unchanged (loop references such as
    ``$data`` included); in a string with one, ``$$`` is a literal ``$``.

    >>> import os; os.environ["TS_DOC_DIR"] = "/data"
    >>> expand_env({"file": "${TS_DOC_DIR}/a.json", "b": "${TS_DOC_UNSET:-x}", "c": "$data"})
    {'file': '/data/a.json', 'b': 'x', 'c': '$data'}
    """
    if isinstance(value, dict):
        return {k: expand_env(v, where=where) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, where=where) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, default = m.group(1), m.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ConfigError(
            f"{where}: ${{{name}}} is not set",
            hint=f"export {name}=... (or write ${{{name}:-default}} in the pipeline)",
        )

    return _ENV_REF.sub(sub, value)
