"""Image and video processing tools in an app: crop, rotate, compose a grid, make a GIF and take its frames.

Run it from the repository root (no key, no network, no model):

    python examples/media_tools.py

It draws three pictures into a temporary workspace; a ScriptedLLM then
drives image-crop, image-rotate, image-grid, frames-to-video and video-frames,
each step reading the file name the previous observation gave (Visual
ChatGPT's {uuid}_{op}_{prev}_{org}.png names show the chain). Needs Pillow
(pip install "chatgpt-tool-hub[media]"; PyAV for MP4).
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM

TOOLS = ["image-crop", "image-rotate", "image-grid", "frames-to-video", "video-frames", "image-convert"]


def draw(workspace: Path) -> list[str]:
    (workspace / "image").mkdir(parents=True)
    names = []
    for name, colour in (("sun", (250, 200, 30)), ("sea", (30, 120, 220)), ("leaf", (60, 170, 70))):
        picture = Image.new("RGB", (160, 120), (255, 255, 255))
        ImageDraw.Draw(picture).ellipse([30, 10, 130, 110], fill=colour)
        picture.save(workspace / "image" / f"{name}.png")
        names.append(f"image/{name}.png")
    return names


def last_file(messages: list[dict], pattern: str = r"(?:image|video)/\S+?\.(?:png|gif|mp4|jpg)") -> str:
    return re.findall(pattern, messages[-1]["content"])[-1]


def main() -> None:
    workspace = Path(tempfile.mkdtemp(prefix="tool-hub-media-"))
    sun, sea, leaf = draw(workspace)

    def act(tool: str, arguments) -> str:
        return f"Action: {tool}\nAction Input: {json.dumps(arguments)}"

    llm = ScriptedLLM([
        act("image-crop", {"image": sun, "box": [0.25, 0, 0.75, 1]}),
        lambda messages: act("image-rotate", {"image": last_file(messages), "degrees": 90}),
        lambda messages: act("image-grid", {"images": [sun, sea, leaf, last_file(messages)], "cell": 96}),
        act("frames-to-video", {"images": [sun, sea, leaf], "fps": 2, "format": "gif"}),
        lambda messages: act("video-frames", {"video": last_file(messages), "count": 3}),
        lambda messages: act("image-convert", {"image": last_file(messages), "format": "jpeg", "mode": "grayscale"}),
        "AI: Done: a cropped and turned sun, a grid of all four pictures, a GIF and its frames.",
    ])
    app = AppFactory().create_app(tools_list=TOOLS, llm=llm, no_default=True, workspace_dir=str(workspace),
                                  think_depth=6)
    result = app.run("Crop the middle of the sun, turn it, show everything in a grid, and make a GIF")
    for step in result.steps:
        print(f"{step.tool}: {step.observation}")
    print("answer:", result.output)
    made = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*") if p.is_file())
    print(f"{len(made)} files in the workspace, e.g. {made[-1]}")
    app.close()


if __name__ == "__main__":
    main()
