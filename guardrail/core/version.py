"""This installation's version string, read from package metadata (never by importing the facade)."""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

__all__ = ["version"]


@lru_cache(maxsize=1)
def version() -> str:
    """The installed `guardrail` distribution's version ("0+unknown" when run from an uninstalled tree)."""
    try:
        return metadata.version("guardrail")
    except metadata.PackageNotFoundError:
        return "0+unknown"
