"""Video and other media expert tools.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

TOOLS: dict[str, tuple[str, str, str]] = {
    "video-classification": ("chatgpt_tool_hub.experts.video", "VideoClassificationTool",
             "What happens in a video clip, top labels with scores (VideoMAE Kinetics; expert model)."),
}
