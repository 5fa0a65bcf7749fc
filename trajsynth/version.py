"""The trajsynth version (part of every stage's cache key)."""

__version__ = "0.1.0"
