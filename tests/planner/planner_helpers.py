"""Tiny in-process tools and plan builders shared by the planner tests."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from chatgpt_tool_hub.tools import Tool, tool


def plan(*tasks: dict) -> str:
    return json.dumps(list(tasks))


def task(task_id: int, name: str, args: dict, dep=(-1,)) -> dict:
    return {"task": name, "id": task_id, "dep": list(dep), "args": args}


class Recorder:
    """Records (event, task label, time) from tools, thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, float]] = []

    def add(self, kind: str, label: str) -> None:
        with self.lock:
            self.events.append((kind, label, time.perf_counter()))

    def order(self) -> list[tuple[str, str]]:
        return [(k, label) for k, label, _ in self.events]

    def index(self, kind: str, label: str) -> int:
        return self.order().index((kind, label))


def make_tools(recorder: Recorder, delay: float = 0.0) -> dict[str, Tool]:
    """caption (image -> text), draw (text -> image file), speak (text -> audio file), upper (text -> text)."""

    @tool(name="image-captioning", description="Describe an image.")
    def caption(image: str) -> str:
        recorder.add("start", f"caption:{image}")
        time.sleep(delay)
        if not Path(image).exists():
            recorder.add("end", f"caption:{image}")
            raise FileNotFoundError(f"no such image: {image}")
        recorder.add("end", f"caption:{image}")
        return f"a drawing of {Path(image).read_text()}"

    @tool(name="text-to-image", description="Draw a picture of the text.")
    def draw(text: str) -> str:
        recorder.add("start", f"draw:{text}")
        time.sleep(delay)
        path = Path("image") / f"draw_{abs(hash(text)) % 10**8}.png"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        recorder.add("end", f"draw:{text}")
        return str(path)

    draw.output_kind = "image"

    @tool(name="text-to-speech", description="Read text aloud.")
    def speak(text: str) -> str:
        recorder.add("start", f"speak:{text}")
        time.sleep(delay)
        path = Path("audio") / f"speech_{abs(hash(text)) % 10**8}.wav"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        recorder.add("end", f"speak:{text}")
        return f"Saved the speech to {path}"

    speak.output_kind = "audio"

    @tool(name="upper", description="Upper-case the text.")
    def upper(text: str) -> str:
        recorder.add("start", f"upper:{text}")
        time.sleep(delay)
        recorder.add("end", f"upper:{text}")
        return text.upper()

    return {t.name: t for t in (caption, draw, speak, upper)}


class SleepTool(Tool):
    """A string tool that sleeps, records start/end, and can fail or hang."""

    def __init__(self, name: str, recorder: Recorder, seconds: float = 0.2, *, fail: bool = False,
                 hang: threading.Event | None = None):
        self.name = name
        self.description = f"sleeps {seconds}s"
        self.recorder = recorder
        self.seconds = seconds
        self.fail = fail
        self.hang = hang
        self.calls: list[str] = []

    def _run(self, text: str) -> str:
        self.calls.append(text)
        self.recorder.add("start", self.name)
        if self.hang is not None:
            self.hang.wait(30)
        time.sleep(self.seconds)
        self.recorder.add("end", self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} broke")
        return f"{self.name}({text})"


class ExpertTool(Tool):
    """An expert-model tool: switches models with ``with_model``; its output names the model."""

    output_kind = "text"
    parameters = {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]}

    def __init__(self, name: str = "image-captioning", task: str = "image-to-text", model: str = "default"):
        self.name = name
        self.task = task
        self.model = model
        self.description = "Caption an image with a HuggingFace model."
        self.switched: list[str] = []

    def with_model(self, model_id: str) -> "ExpertTool":
        self.switched.append(model_id)
        return ExpertTool(self.name, self.task, model_id)

    def _run(self, image: str) -> str:
        return f"[{self.model}] caption of {image}"


class WorkspaceDetector(Tool):
    """Like the expert object-detection tool: names its input, then the image it wrote, workspace-relative."""

    name = "object-detection"
    output_kind = "image"
    parameters = {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]}

    def __init__(self, workspace: Path):
        self.workspace = workspace.resolve()

    def _run(self, image: str) -> str:
        out = self.workspace / "image" / "b1_detect_a_a.png"
        out.write_text("boxes")
        return f"Found 1 object(s) in {image}:\n- dog 0.98 [1, 2, 3, 4]\nAnnotated image: image/b1_detect_a_a.png"

