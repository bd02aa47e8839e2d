"""Model selection over the real expert tools: candidates by hub task, and the chosen model is the one that
runs (tiny random models loaded through the real code); a tool's endpoint or model setting is kept."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.apps import PlannerApp
from chatgpt_tool_hub.experts import EXPERT_TOOLS
from chatgpt_tool_hub.planner import Catalog
from chatgpt_tool_hub.planner.catalog import load_catalog
from chatgpt_tool_hub.planner.events import TaskStartEvent
from chatgpt_tool_hub.runtime.models.manager import ModelManager
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.tool_register import main_tool_register

from planner_helpers import plan, task


@pytest.mark.parametrize("name", sorted(EXPERT_TOOLS))
def test_every_expert_tool_has_catalog_candidates_and_switches_models(name, tmp_path):
    tool = main_tool_register.build(name, workspace_dir=str(tmp_path))
    catalog = load_catalog(None)
    if catalog.fixed_reason(tool):  # annotators, voice conversion: their own model, no selection
        assert catalog.candidates(tool, top_k=5) == [], name
        return
    candidates = catalog.candidates(tool, top_k=5)
    assert candidates, f"{name} ({tool.hub_task}) has no candidates in the bundled catalog"
    other = tool.with_model(candidates[-1].id)
    assert other.name == tool.name and other is not tool


# ---- the planner with real expert tools: the chosen model is the one that runs ---------------------------


@pytest.fixture(scope="module")
def two_vits(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from chatgpt_tool_hub.experts.tiny import build_vit

    return build_vit(tmp_path_factory.mktemp("vit-a")), build_vit(tmp_path_factory.mktemp("vit-b"))


@pytest.fixture
def picture(isolated_env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from PIL import Image

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    return ingest_image(Image.new("RGB", (40, 30), (200, 10, 10)), isolated_env / "workspace")


def classifier(**kwargs):
    from chatgpt_tool_hub.experts.vision import ImageClassificationTool

    return ImageClassificationTool(device="cpu", manager=ModelManager(), **kwargs)


def test_the_model_the_llm_chooses_is_loaded_and_run(two_vits, picture):
    first, second = two_vits
    catalog = Catalog([{"id": first, "task": "image-classification", "downloads": 9, "description": "a"},
                       {"id": second, "task": "image-classification", "downloads": 1, "description": "b"}])
    tool = classifier()  # the default hub id: never loaded here
    llm = ScriptedLLM([plan(task(0, "image-classification", {"image": picture})),
                       json.dumps({"id": second, "reason": "b fits"}), "done"])
    app = PlannerApp(llm, [tool], catalog=catalog)
    events = []
    result = app.run("classify my picture", callbacks=[events.append])
    assert result.tasks[0].status == "ok", result.tasks[0].error
    assert result.tasks[0].output.startswith(f"Top labels for {picture}")
    assert result.tasks[0].model == second and result.assignments[0].reason == "b fits"
    assert [e.model for e in events if isinstance(e, TaskStartEvent)] == [second]
    assert tool.manager.stats()["models"] == [f"{second} image-classification cpu float32"]
    assert not tool.is_loaded()  # the app's own tool was not changed


def test_a_tool_served_by_an_endpoint_keeps_its_model(two_vits, picture):
    first, second = two_vits
    catalog = Catalog([{"id": first, "task": "image-classification", "downloads": 9},
                       {"id": second, "task": "image-classification", "downloads": 1}])
    tool = classifier(endpoint="http://127.0.0.1:9/models/vit")
    tool.call_remote = lambda endpoint, **inputs: [{"label": "remote", "score": 1.0}]
    llm = ScriptedLLM([plan(task(0, "image-classification", {"image": picture})), "done"])
    result = PlannerApp(llm, [tool], catalog=catalog, model_selection="downloads").run("classify it")
    assert result.tasks[0].status == "ok", result.tasks[0].error
    assert result.tasks[0].output.endswith("- remote: 1.000")  # run on the endpoint, not a local catalog model
    chosen = result.assignments[0]
    assert (chosen.model, chosen.mode) == (tool.model, "single")
    assert "image_classification_endpoint" in chosen.reason
    assert tool.manager.stats()["loads"] == 0


def test_a_model_set_by_its_setting_is_not_replaced(two_vits, picture):
    first, second = two_vits
    catalog = Catalog([{"id": "org/a", "task": "image-classification", "downloads": 9},
                       {"id": "org/b", "task": "image-classification", "downloads": 1}])
    tool = classifier(model=first)  # like image_classification_model=<folder>
    llm = ScriptedLLM([plan(task(0, "image-classification", {"image": picture})), "done"])
    result = PlannerApp(llm, [tool], catalog=catalog).run("classify it")
    assert llm.calls == 2  # no selection call: nothing to choose
    assert result.tasks[0].status == "ok", result.tasks[0].error
    assert result.tasks[0].model == first and "image_classification_model" in result.assignments[0].reason
