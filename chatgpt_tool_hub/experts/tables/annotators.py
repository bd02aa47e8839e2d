"""Annotator expert tools: condition maps (edges, lines, pose, normals ...) for conditional generation.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

TOOLS: dict[str, tuple[str, str, str]] = {
    "image-to-canny": ("chatgpt_tool_hub.experts.annotators", "ImageToCannyTool",
             "Canny edges of an image, white on black, for canny-to-image (no model)."),
    "image-to-line": ("chatgpt_tool_hub.experts.annotators", "ImageToLineTool",
             "Straight lines of an image, white on black, for line-to-image (Hough transform; no model)."),
    "image-to-hed": ("chatgpt_tool_hub.experts.annotators", "ImageToHedTool",
             "Soft edges of an image, for hed-to-image (ControlNet HED network; expert model)."),
    "image-to-scribble": ("chatgpt_tool_hub.experts.annotators", "ImageToScribbleTool",
             "A scribble of an image's outlines, for scribble-to-image (HED; expert model)."),
    "image-to-pose": ("chatgpt_tool_hub.experts.annotators_pose", "ImageToPoseTool",
             "Human pose as an OpenPose skeleton, for pose-to-image (VitPose; expert model)."),
    "image-to-normal": ("chatgpt_tool_hub.experts.annotators", "ImageToNormalTool",
             "Surface normal map from depth, for normal-to-image (Depth Anything V2; expert model)."),
}
