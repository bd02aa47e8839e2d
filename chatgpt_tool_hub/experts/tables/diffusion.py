"""Diffusion expert tools: generation and image editing on one shared Stable Diffusion base.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

TOOLS: dict[str, tuple[str, str, str]] = {
    "text-to-image": ("chatgpt_tool_hub.experts.generation", "TextToImageTool",
             "Draw an image from a description (SD-Turbo via diffusers; needs the diffusion extra)."),
}
