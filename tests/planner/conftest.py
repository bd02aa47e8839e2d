"""Fixtures for the planner tests (helpers live in planner_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatgpt_tool_hub.tools import Tool

from planner_helpers import Recorder, make_tools


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def tools(recorder) -> dict[str, Tool]:
    return make_tools(recorder)


@pytest.fixture
def cat_png(isolated_env) -> Path:
    path = Path("cat.png")
    path.write_text("a cat")
    return path
