"""Diffusion expert tools: generation and image editing on one shared Stable Diffusion base.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

_GEN = "chatgpt_tool_hub.experts.generation"
_EDIT = "chatgpt_tool_hub.experts.diffusion_edit"
_CONTROL = "chatgpt_tool_hub.experts.diffusion_control"
_NEEDS = "needs the diffusion extra"

TOOLS: dict[str, tuple[str, str, str]] = {
    "text-to-image": (_GEN, "TextToImageTool",
                      f"Draw an image from a description (Stable Diffusion, the shared base; {_NEEDS})."),
    "image-to-image": (_GEN, "ImageToImageTool",
                       f"Redraw an image after a description (Stable Diffusion img2img on the shared base; {_NEEDS})."),
    "edit-image": (_EDIT, "EditImageTool",
                   f"Change an image as an instruction says, e.g. 'make it look like a cartoon' (InstructPix2Pix; "
                   f"{_NEEDS})."),
    "remove-object": (_EDIT, "RemoveObjectTool",
                      f"Remove an object named by text from an image (CLIPSeg mask + inpainting; {_NEEDS})."),
    "replace-object": (_EDIT, "ReplaceObjectTool",
                       f"Replace an object named by text with another (CLIPSeg mask + inpainting; {_NEEDS})."),
    "canny-to-image": (_CONTROL, "CannyToImageTool",
                       f"Draw an image from a canny edge map and a description (ControlNet; {_NEEDS})."),
    "depth-to-image": (_CONTROL, "DepthToImageTool",
                       f"Draw an image from a depth map and a description (ControlNet; {_NEEDS})."),
    "hed-to-image": (_CONTROL, "HedToImageTool",
                     f"Draw an image from a HED boundary map and a description (ControlNet; {_NEEDS})."),
    "line-to-image": (_CONTROL, "LineToImageTool",
                      f"Draw an image from a straight-line map and a description (ControlNet; {_NEEDS})."),
    "normal-to-image": (_CONTROL, "NormalToImageTool",
                        f"Draw an image from a normal map and a description (ControlNet; {_NEEDS})."),
    "scribble-to-image": (_CONTROL, "ScribbleToImageTool",
                          f"Draw an image from a scribble and a description (ControlNet; {_NEEDS})."),
    "pose-to-image": (_CONTROL, "PoseToImageTool",
                      f"Draw people in the poses of a pose image, after a description (ControlNet; {_NEEDS})."),
    "segmentation-to-image": (_CONTROL, "SegmentationToImageTool",
                              f"Draw an image from a segmentation map and a description (ControlNet; {_NEEDS})."),
    "text-to-video": (_GEN, "TextToVideoTool",
                      f"Make a short video clip (GIF or MP4) from a description ({_NEEDS})."),
}
