"""Task names (HF task ids, JARVIS names), tasks the app's LLM answers, files named in the request,
and bare ``<resource>-N`` results between tasks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import PlannerApp
from chatgpt_tool_hub.errors import LLMError, ToolExecutionError, ToolInputError
from chatgpt_tool_hub.planner.catalog import llm_tasks, task_names, unavailable_tasks
from chatgpt_tool_hub.planner.events import PlanEvent, TaskStartEvent
from chatgpt_tool_hub.planner.inputs import RequestFiles, request_paths
from chatgpt_tool_hub.planner.llmtask import LLMTaskTool
from chatgpt_tool_hub.planner.plan import resolve_tool, validate_plan
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import Tool, tool
from chatgpt_tool_hub.tools.base import ToolContext, ToolResult

from planner_helpers import plan, task

# the contract's tool names, and the names a plan may use for them (the brief's table)
TOOL_NAMES = [
    "image-captioning", "visual-question-answering", "object-detection", "image-classification",
    "image-segmentation", "depth-estimation", "speech-recognition", "text-to-speech", "text-classification",
    "text-to-image", "image-to-image", "edit-image", "remove-object", "replace-object", "canny-to-image",
    "depth-to-image", "hed-to-image", "line-to-image", "normal-to-image", "scribble-to-image", "pose-to-image",
    "segmentation-to-image", "text-to-video", "image-to-canny", "image-to-line", "image-to-hed", "image-to-scribble",
    "image-to-pose", "image-to-normal", "zero-shot-object-detection", "document-question-answering",
    "video-classification", "summarization", "translation", "question-answering", "zero-shot-classification",
    "token-classification", "text2text-generation", "sentence-similarity", "audio-classification", "audio-to-audio"]
HF_IDS = {
    "image-to-text": "image-captioning", "automatic-speech-recognition": "speech-recognition",
    "text-to-audio": "text-to-speech", "text-to-speech": "text-to-speech",
    "visual-question-answering": "visual-question-answering", "object-detection": "object-detection",
    "image-classification": "image-classification", "image-segmentation": "image-segmentation",
    "depth-estimation": "depth-estimation", "text-classification": "text-classification",
    "text-to-image": "text-to-image", "image-to-image": "image-to-image", "text-to-video": "text-to-video",
    "zero-shot-object-detection": "zero-shot-object-detection",
    "document-question-answering": "document-question-answering", "video-classification": "video-classification",
    "summarization": "summarization", "translation": "translation", "question-answering": "question-answering",
    "zero-shot-classification": "zero-shot-classification", "token-classification": "token-classification",
    "text2text-generation": "text2text-generation", "sentence-similarity": "sentence-similarity",
    "audio-classification": "audio-classification", "audio-to-audio": "audio-to-audio",
    "sentiment-analysis": "text-classification", "ner": "token-classification",
}
JARVIS = {
    "canny-control": "image-to-canny", "canny-text-to-image": "canny-to-image",
    "openpose-control": "image-to-pose", "openpose-text-to-image": "pose-to-image",
    "depth-control": "depth-estimation", "depth-text-to-image": "depth-to-image",
    "hed-control": "image-to-hed", "hed-text-to-image": "hed-to-image",
    "mlsd-control": "image-to-line", "mlsd-text-to-image": "line-to-image",
    "normal-control": "image-to-normal", "normal-text-to-image": "normal-to-image",
    "scribble-control": "image-to-scribble", "scribble-text-to-image": "scribble-to-image",
    "seg-control": "image-segmentation", "seg-text-to-image": "segmentation-to-image",
}


class Named(Tool):
    """A stand-in tool with a contract name; tasks "image-to-text"-like attributes deliberately left out."""

    def __init__(self, name: str):
        self.name = name
        self.description = f"the {name} tool"


ALL_TOOLS = {name: Named(name) for name in TOOL_NAMES}


# ---- task names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,tool", sorted({**HF_IDS, **JARVIS}.items()))
def test_hf_task_ids_and_jarvis_names_resolve_to_the_tools(name, tool):
    assert resolve_tool(name, ALL_TOOLS).name == tool
    tasks, problems = validate_plan([task(0, name, {"text": "x"})], ALL_TOOLS, max_tasks=5)
    assert problems == [] and tasks[0].task == tool  # the plan keeps the canonical tool name


def test_the_table_lives_in_the_catalog_and_names_only_contract_tools():
    table = task_names()
    assert set(table.values()) <= set(TOOL_NAMES)
    assert {**HF_IDS, **JARVIS}.items() <= table.items()
    assert set(llm_tasks()) == {"conversational", "text-generation"}
    assert "tabular-classification" in unavailable_tasks()


@pytest.mark.parametrize("written", ["Image_To_Text", "IMAGE TO TEXT", " image-to-text ", "Canny_Control"])
def test_names_are_read_loosely(written):
    assert resolve_tool(written, ALL_TOOLS).name in ("image-captioning", "image-to-canny")


def test_a_tool_of_the_same_name_wins_over_the_table():
    tools = {**ALL_TOOLS, "image-to-text": Named("image-to-text")}
    assert resolve_tool("image-to-text", tools).name == "image-to-text"


def test_a_known_name_whose_tool_the_app_lacks_is_a_clear_problem():
    tools = {"image-captioning": ALL_TOOLS["image-captioning"], "text-to-speech": ALL_TOOLS["text-to-speech"]}
    _, problems = validate_plan([task(0, "canny-control", {"image": "a.png"})], tools, max_tasks=5)
    assert problems == ["task 0: unknown task 'canny-control' (it means the image-to-canny tool, which this app "
                        "does not have); the available tasks are: image-captioning, text-to-speech"]
    _, problems = validate_plan([task(0, "summarization", {"text": "a"})], tools, max_tasks=5)
    assert "this app has no summarization tool" in problems[0] and "image-captioning, text-to-speech" in problems[0]
    _, problems = validate_plan([task(0, "made-up", {"text": "a"})], tools, max_tasks=5)
    assert problems == ["task 0: unknown task 'made-up'; the available tasks are: image-captioning, text-to-speech"]


def test_tabular_classification_is_refused_with_the_reason():
    _, problems = validate_plan([task(0, "tabular-classification", {"text": "1,2"})], ALL_TOOLS, max_tasks=5)
    assert "cannot run here" in problems[0] and "pickle" in problems[0] and "image-captioning" in problems[0]


def test_a_plan_in_hf_names_runs_on_the_app_tools():
    @tool(name="image-captioning", description="Describe an image.")
    def caption(image: str) -> str:
        return ToolResult(f"{image} shows: a cat", value="a cat")

    spoken = []

    @tool(name="text-to-speech", description="Read text aloud.")
    def speak(text: str) -> str:
        spoken.append(text)
        return "audio/a.wav"

    items = plan(task(0, "image-to-text", {"image": "image/a.png"}),
                 task(1, "text-to-audio", {"text": "<resource>-0"}, [0]))
    result = PlannerApp(ScriptedLLM([items, "done"]), [caption, speak]).run("caption it and read it")
    assert [t["task"] for t in result.plan] == ["image-captioning", "text-to-speech"]
    assert spoken == ["a cat"] and result.tasks[0].resource == "a cat"


# ---- conversational / text-generation: the app's own LLM --------------------------------------------


def test_a_conversational_task_is_answered_by_the_app_llm_and_counted():
    @tool(name="text-to-speech", description="Read text aloud.")
    def speak(text: str) -> str:
        spoken.append(text)
        return "Saved audio/p.wav"

    spoken: list[str] = []
    items = plan(task(0, "conversational", {"text": "Write a two-word greeting"}),
                 task(1, "text-to-speech", {"text": "<resource>-0"}, [0]))
    llm = ScriptedLLM([items, "Hello there", "I greeted you: audio/p.wav"])
    events = []
    result = PlannerApp(llm, [speak]).run("greet me out loud", callbacks=[events.append])
    assert result.tasks[0].status == "ok" and result.tasks[0].output == "Hello there"
    assert spoken == ["Hello there"]  # the bare reply goes on
    assert result.llm_calls == 3 == llm.calls and len(result.usage.calls) == 3  # plan, the task, the response
    task_call = llm.requests[1]
    assert task_call[0]["role"] == "system" and "one step of a plan" in task_call[0]["content"]
    assert task_call[-1] == {"role": "user", "content": "Write a two-word greeting"}
    assert [e.task_id for e in events if isinstance(e, TaskStartEvent)] == [0, 1]  # the DAG ran it as a task
    assert result.assignments[0].model is None and "own LLM" in result.assignments[0].reason
    planning = llm.requests[0][0]["content"]
    assert "- conversational: done by you" in planning and "- text-generation:" in planning


def test_text_generation_works_without_any_tool_and_its_key_is_free():
    llm = ScriptedLLM([plan(task(0, "text-generation", {"prompt": "a haiku about rain"})), "a haiku", "Here: ..."])
    result = PlannerApp(llm, []).run("write me a haiku")
    assert result.tasks[0].output == "a haiku" and llm.requests[1][-1]["content"] == "a haiku about rain"


def test_an_app_tool_named_text_generation_is_used_instead():
    @tool(name="text-generation", description="A local text generator.")
    def local(text: str) -> str:
        return f"local: {text}"

    llm = ScriptedLLM([plan(task(0, "text-generation", {"text": "go"})), "done"])
    result = PlannerApp(llm, [local]).run("generate")
    assert result.tasks[0].output == "local: go" and llm.calls == 2


def test_a_failing_llm_fails_only_its_task():
    def broken(messages):
        raise LLMError("the server is down")

    llm = ScriptedLLM([plan(task(0, "conversational", {"text": "hi"}), task(1, "conversational", {"text": "yo"})),
                       broken, "fine", "partly"])
    result = PlannerApp(llm, [], max_workers=1).run("two chats")
    statuses = sorted(t.status for t in result.tasks.values())
    assert statuses == ["failed", "ok"]
    failed = next(t for t in result.tasks.values() if t.status == "failed")
    assert "the server is down" in failed.error


def test_the_llm_task_is_charged_to_the_request_budget():
    llm = ScriptedLLM([plan(task(0, "conversational", {"text": "hi"})), "never", "sorry"])
    result = PlannerApp(llm, [], budget_limits=(0, None)).run("chat")
    assert result.tasks[0].status == "failed" and "budget of 0 LLM calls" in result.tasks[0].error
    assert llm.calls == 2  # plan + response: the task made no call


def test_llm_task_tool_without_an_llm_says_so():
    with pytest.raises(ToolExecutionError, match="answered by the app's LLM, and this run has none"):
        LLMTaskTool("conversational").run({"text": "x"})
    with pytest.raises(ToolInputError, match="needs a text"):
        LLMTaskTool("conversational").run({"text": "  "}, ToolContext(llm=ScriptedLLM([])))


# ---- files named in the request ----------------------------------------------------------------------


class Looker(Tool):
    """A workspace tool like the expert ones: reads its file inside the workspace, or refuses."""

    output_kind = "text"

    def __init__(self, workspace: Path, name: str = "image-captioning", kind: str = "image"):
        self.name = name
        self.kind = kind
        self.description = f"looks at an {kind}"
        self.parameters = {"type": "object", "properties": {kind: {"type": "string"}}, "required": [kind]}
        self.workspace = workspace.resolve()
        self.seen: list[str] = []

    def _run(self, **arguments) -> str:
        from chatgpt_tool_hub.runtime.filenames import resolve_input

        name = arguments[self.kind]
        path = resolve_input(name, self.workspace, self.kind)
        self.seen.append(name)
        return ToolResult(f"{name} has {os.path.getsize(path)} bytes", value=name)


def picture(path: Path, size=(40, 30), fmt=None) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 20, 20)).save(path, fmt)
    return path


@pytest.fixture
def looker(isolated_env) -> Looker:
    return Looker(isolated_env / "workspace")


def test_request_paths_are_found_as_written():
    text = ('Compare /exp1.jpg with example.jpg, ./photos/a.png and "my photo.png" (also \'C:\\pics\\b.webp\'); '
            "not https://x.org/c.png nor report.pdf; again example.jpg. Clip: `v/clip one.mp4`, sound: s.wav.")
    assert request_paths(text) == ["/exp1.jpg", "example.jpg", "./photos/a.png", "my photo.png", "C:\\pics\\b.webp",
                                   "v/clip one.mp4", "s.wav"]
    assert request_paths("") == [] and request_paths("no files here.") == []
    files = RequestFiles(["请描述/exp1.jpg里的内容"])  # a path written right after other letters
    assert files.named_path("/exp1.jpg") == "/exp1.jpg" and files.named_path("exp1.jpg") is None
    assert files.named_path("/exp2.jpg") is None


def test_files_the_request_names_are_copied_in_and_the_plan_names_the_copies(looker, isolated_env):
    outside = picture(isolated_env / "elsewhere" / "exp1.jpg")
    picture(Path("example.jpg"), (1024, 512), "JPEG")
    picture(Path("my photo.png"))
    query = f'Describe {outside}, example.jpg and "my photo.png".'
    items = plan(task(0, "image-captioning", {"image": str(outside)}),
                 task(1, "image-captioning", {"image": "example.jpg"}),
                 task(2, "image-captioning", {"image": "my photo.png"}))
    events = []
    llm = ScriptedLLM([items, "done"])
    result = PlannerApp(llm, [looker], model_selection="downloads").run(query, callbacks=[events.append])
    assert result.replans == 0 and [t.status for t in result.tasks.values()] == ["ok"] * 3
    names = [t["args"]["image"] for t in result.plan]
    assert all(n.startswith("image/") and n.endswith(".png") and len(n) == len("image/12345678.png") for n in names)
    assert sorted(looker.seen) == sorted(names) and result.tasks[1].resource == names[1]
    from PIL import Image

    with Image.open(looker.workspace / names[1]) as copy:
        assert copy.size == (512, 256)  # the Visual ChatGPT discipline: long side at most 512
    assert next(e for e in events if isinstance(e, PlanEvent)).tasks[0]["args"]["image"] == names[0]
    workflow = llm.requests[1][2]["content"]  # the response names the user's own paths next to the copies
    assert '"files from the request": {"image": "example.jpg"}' in workflow
    assert str((looker.workspace / names[1]).resolve()) in workflow
    assert outside.exists() and Path("example.jpg").exists()  # the originals are left alone


def test_a_missing_file_is_sent_back_then_answered_without_tools(looker):
    items = plan(task(0, "image-captioning", {"image": "/nope/exp1.jpg"}))
    llm = ScriptedLLM([items, items, "I cannot open /nope/exp1.jpg."])
    result = PlannerApp(llm, [looker]).run("what is in /nope/exp1.jpg?")
    assert (result.stopped_by, result.output) == ("plan_failed", "I cannot open /nope/exp1.jpg.")
    expected = "the image '/nope/exp1.jpg' named in the request cannot be used: there is no such file"
    assert any(expected in p for p in result.plan_problems)
    assert expected in llm.requests[2][0]["content"]  # the direct answer knows why
    assert expected in llm.requests[1][-1]["content"]  # the first plan went back with the reason
    assert looker.seen == []  # nothing ran


def test_the_llm_may_answer_instead_of_planning_with_a_missing_file(looker):
    llm = ScriptedLLM([plan(task(0, "image-captioning", {"image": "example.jpg"})),
                       "[]\nAnswer: I cannot open example.jpg: it does not exist."])
    result = PlannerApp(llm, [looker]).run("caption example.jpg")
    assert (result.stopped_by, result.replans) == ("no_tools", 1) and "does not exist" in result.output
    assert "there is no such file" in result.plan_problems[0]


def test_non_media_files_and_links_to_other_files_are_refused(looker):
    Path("notes.png").write_text("not an image")
    Path("secret.txt").write_text("password=hunter2")
    os.symlink("secret.txt", "cat.png")
    picture(Path("real.png"))
    os.symlink("real.png", "pic.png")
    Path("song.wav").write_bytes(b"RIFF")
    files = RequestFiles(["notes.png cat.png pic.png song.wav"])
    _, problem = files.check("notes.png", "image", looker)
    assert "not an image this tool can read" in problem and "hunter2" not in problem
    _, problem = files.check("cat.png", "image", looker)
    assert "is a link to a file that is not an image file" in problem
    _, problem = files.check("song.wav", "image", looker)
    assert "it is not an image file (image files end in .png" in problem
    name, problem = files.check("pic.png", "image", looker)
    assert problem is None and (looker.workspace / name).is_file()
    assert sorted(p.name for p in (looker.workspace / "image").iterdir()) == [Path(name).name]  # only the good one


def test_workspace_files_are_kept_and_made_up_paths_are_problems(looker):
    picture(looker.workspace / "image" / "a.png")
    files = RequestFiles(["see image/a.png"])
    assert files.check("image/a.png", "image", looker) == ("image/a.png", None)
    assert sorted(p.name for p in (looker.workspace / "image").iterdir()) == ["a.png"]  # no copy
    _, problem = files.check("image/zzz.png", "image", looker)
    assert "'image/zzz.png' is neither a file in the workspace nor a file the request names" in problem
    assert files.check("https://example.org/a.png", "image", looker) == ("https://example.org/a.png", None)


def test_audio_and_video_files_are_copied_by_kind(isolated_env):
    import numpy as np

    from chatgpt_tool_hub.runtime.filenames import write_wav

    write_wav("talk.wav", np.zeros(800, dtype=np.float32), 16000)
    Path("talk.mp3").write_bytes(b"ID3")
    from PIL import Image

    frames = [Image.new("RGB", (16, 16), (i * 60, 0, 0)) for i in range(3)]
    frames[0].save("clip.gif", save_all=True, append_images=frames[1:], duration=100)
    Path("clip.mp4").write_text("not a video")
    workspace = isolated_env / "workspace"
    listener, watcher = Looker(workspace, "speech-recognition", "audio"), Looker(workspace, "video-classification",
                                                                                   "video")
    files = RequestFiles(["talk.wav talk.mp3 clip.gif clip.mp4"])
    name, problem = files.check("talk.wav", "audio", listener)
    assert problem is None and name.startswith("audio/") and name.endswith(".wav")
    assert "only WAV audio is read (.mp3 is not)" in files.check("talk.mp3", "audio", listener)[1]
    name, problem = files.check("clip.gif", "video", watcher)
    assert problem is None and name.startswith("video/") and name.endswith(".gif")
    with Image.open(workspace / name) as copy:
        assert copy.n_frames == 3  # copied as a video, not flattened to one image
    assert "it is not a video" in files.check("clip.mp4", "video", watcher)[1]


def test_tools_without_a_workspace_get_the_path_as_written_when_it_exists(tools):
    Path("cat.png").write_text("a cat")
    files = RequestFiles(["caption cat.png and dog.png"])
    captioner = tools["image-captioning"]
    assert files.check("cat.png", "image", captioner) == ("cat.png", None)
    assert "there is no such file" in files.check("dog.png", "image", captioner)[1]
    assert files.check("bird.png", "image", captioner) == ("bird.png", None)  # not named: the tool's business


def test_a_file_is_copied_once_across_a_re_plan(looker):
    picture(Path("example.jpg"))
    first = plan(task(0, "no-such-task", {"text": "x"}), task(1, "image-captioning", {"image": "example.jpg"}))
    second = plan(task(0, "image-captioning", {"image": "example.jpg"}))
    result = PlannerApp(ScriptedLLM([first, second, "ok"]), [looker]).run("caption example.jpg")
    assert result.replans == 1 and result.tasks[0].status == "ok"
    assert len(list((looker.workspace / "image").iterdir())) == 1


def test_files_named_in_earlier_user_messages_count_too(looker):
    picture(Path("old.png"))
    history = [{"role": "user", "content": "here is old.png"}, {"role": "assistant", "content": "ok"}]
    llm = ScriptedLLM([plan(task(0, "image-captioning", {"image": "old.png"})), "done"])
    result = PlannerApp(llm, [looker]).run("caption the picture from before", chat_history=history)
    assert result.tasks[0].status == "ok" and result.plan[0]["args"]["image"].startswith("image/")


# ---- bare results between tasks ---------------------------------------------------------------------


def test_caption_then_speech_hands_over_the_bare_caption(looker):
    picture(Path("park.jpg"))
    heard: list[str] = []

    class Captioner(Looker):
        def _run(self, image: str) -> str:
            return ToolResult(f"{image} shows: two dogs on grass", value="two dogs on grass")

    @tool(name="text-to-speech", description="Read text aloud.")
    def speak(text: str) -> str:
        heard.append(text)
        Path("audio").mkdir(exist_ok=True)
        Path("audio/s.wav").write_bytes(b"RIFF")
        return ToolResult("Read it aloud into audio/s.wav", value="audio/s.wav")

    speak.output_kind = "audio"
    items = plan(task(0, "image-captioning", {"image": "park.jpg"}),
                 task(1, "text-to-speech", {"text": "<resource>-0"}, [0]),
                 task(2, "text-to-speech", {"text": "Caption: <resource>-0."}, [0]))
    llm = ScriptedLLM([items, "done"])
    result = PlannerApp(llm, [Captioner(looker.workspace), speak], max_workers=1).run("describe park.jpg aloud")
    assert sorted(heard) == ["Caption: two dogs on grass.", "two dogs on grass"]  # whole and inside a sentence
    assert result.tasks[0].resource == "two dogs on grass"
    assert result.tasks[0].output.endswith("shows: two dogs on grass")  # the sentence stays the observation
    assert result.tasks[1].resource == "audio/s.wav" and result.tasks[1].file == str(Path("audio/s.wav").resolve())
    workflow = json.loads(llm.requests[1][2]["content"].split("JSON data: ", 1)[1].rsplit(". Do you", 1)[0])
    assert workflow[0]["inference result"].endswith("shows: two dogs on grass")
    assert workflow[1]["task"]["args"] == {"text": "two dogs on grass"}  # the response sees what was handed on


def test_transcript_then_llm_task_gets_the_bare_transcript(isolated_env):
    @tool(name="speech-recognition", description="Transcribe speech.")
    def transcribe(audio: str) -> str:
        return ToolResult(f"Transcript of {audio}: hello world", value="hello world")

    items = plan(task(0, "automatic-speech-recognition", {"audio": "a.wav"}),
                 task(1, "text-generation", {"text": "Translate to French: <resource>-0"}, [0]))
    llm = ScriptedLLM([items, "bonjour le monde", "Here it is."])
    result = PlannerApp(llm, [transcribe]).run("translate my recording")
    assert llm.requests[1][-1]["content"] == "Translate to French: hello world"
    assert result.tasks[1].resource == "bonjour le monde" and result.llm_calls == 3
