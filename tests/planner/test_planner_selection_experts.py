"""Model selection over the real expert tools (tiny models not needed: nothing is loaded)."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.experts import EXPERT_TOOLS
from chatgpt_tool_hub.planner.catalog import load_catalog
from chatgpt_tool_hub.tools.tool_register import main_tool_register


@pytest.mark.parametrize("name", sorted(EXPERT_TOOLS))
def test_every_expert_tool_has_catalog_candidates_and_switches_models(name, tmp_path):
    tool = main_tool_register.build(name, workspace_dir=str(tmp_path))
    catalog = load_catalog(None)
    candidates = catalog.candidates(tool, top_k=5)
    assert candidates, f"{name} ({tool.hub_task}) has no candidates in the bundled catalog"
    other = tool.with_model(candidates[-1].id)
    assert other.name == tool.name and other is not tool
