"""Base classes for configuration models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown keys, so a typo in YAML fails loudly."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
