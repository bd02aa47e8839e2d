"""Tiny models of the media expert tools."""

from __future__ import annotations

__all__ = ["BUILDERS"]

BUILDERS: dict = {}
