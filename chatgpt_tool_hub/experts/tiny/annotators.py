"""Tiny models of the annotators expert tools."""

from __future__ import annotations

__all__ = ["BUILDERS"]

BUILDERS: dict = {}
