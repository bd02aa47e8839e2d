"""Annotator tools: an image in, a ControlNet condition map out (Visual ChatGPT's ``Image2Canny`` & co.).

Each tool writes the map that the matching ControlNet tool takes as its ``image``:

=====================  ==========  ===========================================  =====================
tool                   op (name)   map                                          for
=====================  ==========  ===========================================  =====================
``image-to-canny``     ``edge``    white Canny edges on black (numpy)           ``canny-to-image``
``image-to-line``      ``line``    white straight lines on black (Hough)        ``line-to-image``
``image-to-hed``       ``hed``     grey HED soft edges on black (torch)         ``hed-to-image``
``image-to-scribble``  ``scribble`` white scribble lines on black (HED)         ``scribble-to-image``
``image-to-pose``      ``pose``    OpenPose body skeleton on black (VitPose)    ``pose-to-image``
``image-to-normal``    ``normal``  RGB surface normals from depth               ``normal-to-image``
=====================  ==========  ===========================================  =====================

(``depth-estimation`` and ``image-segmentation`` write the ``depth`` and
``segmentation`` maps of ``depth-to-image`` and ``segmentation-to-image``.)
Maps have the input's size; grey maps are saved as 8-bit grey PNG. Canny and
lines run no model (``<tool>_model`` is not read); HED and scribble share one
HED network (``ControlNetHED.pth``, see ``annotators_hed``); the normal map
reuses the depth-estimation model through the model manager (one load for
both tools). The pose tool lives in ``annotators_pose``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from ..errors import ToolExecutionError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import ExpertTool, open_image
from .vision import IMAGE_PARAMETERS

__all__ = ["ImageToCannyTool", "ImageToLineTool", "ImageToHedTool", "ImageToScribbleTool", "ImageToNormalTool",
           "condition_result", "load_hed_weights", "local_only", "HED_REPO"]

HED_REPO = "lllyasviel/Annotators"  # holds ControlNetHED.pth


def condition_result(tool: ExpertTool, picture: Any, image: str, op: str, what: str, details: str,
                     consumer: str) -> ToolResult:
    """Save a condition map beside its input; the observation names it, its size and the tool that takes it."""
    name = tool.save_image(picture, image, op)
    width, height = picture.size
    return ToolResult(f"{what} of {tool.rel(image)}: {name} ({width}x{height}, {details}; the image input of "
                      f"{consumer}).", value=name)


def local_only(tool: ExpertTool) -> Any:
    """What ``call_remote`` does for a tool no inference endpoint serves: an observation that says so."""
    raise ToolExecutionError(f"{tool.name} runs only locally (no inference endpoint serves it); unset "
                             f"{tool_key(tool.name)}_endpoint")


def _description(name: str, makes: str, use: str, output: str, example_op: str) -> str:
    return (f"{name}: {makes} Use it {use} "
            'Input: {"image": "<path of an image file from an earlier observation>"}. '
            f"Output: {output} "
            f'Example: {{"image": "image/1a2b3c4d.png"}} -> "... image/5e6f7a8b_{example_op}_1a2b3c4d_1a2b3c4d.png ...".')


if TYPE_CHECKING:  # the class the mixin goes into, so that its uses of the tool's attributes are checked
    _MixinBase = ExpertTool
else:
    _MixinBase = object


class _NoModel(_MixinBase):
    """Mixin of the annotators that run no model: no load, no manager, never a planner model choice."""

    def _run(self, **arguments: Any) -> str:
        inputs = self.prepare(arguments)
        result = self._guarded(self.call_local, None, **inputs)
        return self._guarded(self.render, result, **inputs)

    def load(self) -> None:
        return None

    def is_loaded(self) -> bool:
        return False

    def unload(self) -> bool:
        return False

    @property
    def fixed_model(self) -> str:
        return f"{self.name} runs no model"


class ImageToCannyTool(_NoModel, ExpertTool):
    name = "image-to-canny"
    task = "image-to-image"
    default_model = "builtin:canny"  # no model: Canny edges in numpy
    description = _description(
        "image-to-canny", "detects the edges of an image (Canny) and saves them as white lines on black.",
        "when the user wants the edges or outline of an image, or as the first step of canny-to-image (a new "
        "image that keeps these edges).", "the name of the edge image.", "edge")
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    options = {"low_threshold": 100.0, "high_threshold": 200.0, "blur": 0.0}

    def call_local(self, model: Any, *, image: str) -> Any:
        import numpy as np

        from .annotators_ops import canny

        rgb = np.asarray(open_image(image))
        return canny(rgb, float(self.options["low_threshold"]), float(self.options["high_threshold"]),
                     float(self.options["blur"]))

    def render(self, result: Any, *, image: str) -> ToolResult:
        from PIL import Image

        edges = Image.fromarray(result.astype("uint8") * 255, "L")
        share = 100 * float(result.mean())
        return condition_result(self, edges, image, "edge", "Edge map",
                                f"white Canny edges on black, {share:.1f}% of the pixels", "canny-to-image")


class ImageToLineTool(_NoModel, ExpertTool):
    name = "image-to-line"
    task = "image-to-image"
    default_model = "builtin:hough-lines"  # no model: a Hough transform on Canny edges, in numpy
    description = _description(
        "image-to-line", "detects the straight lines of an image (walls, edges of furniture and buildings) and "
        "saves them as white lines on black.", "for the straight-line layout of a room or building, or as the first "
        "step of line-to-image (a new image that keeps these lines).", "the name of the line image and how many "
        "lines it has.", "line")
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    options = {"low_threshold": 100.0, "high_threshold": 200.0, "min_length": 20, "max_gap": 4,
               "max_lines": 200}

    def call_local(self, model: Any, *, image: str) -> Any:
        import numpy as np

        from .annotators_ops import canny, hough_segments

        picture = open_image(image)
        edges = canny(np.asarray(picture), float(self.options["low_threshold"]), float(self.options["high_threshold"]))
        segments = hough_segments(edges, min_length=int(self.options["min_length"]),
                                  max_gap=int(self.options["max_gap"]), max_lines=int(self.options["max_lines"]))
        return {"size": picture.size, "lines": segments}

    def render(self, result: Any, *, image: str) -> ToolResult:
        from PIL import Image, ImageDraw

        canvas = Image.new("L", tuple(result["size"]), 0)
        draw = ImageDraw.Draw(canvas)
        for x0, y0, x1, y1 in result["lines"]:
            draw.line([(round(x0), round(y0)), (round(x1), round(y1))], fill=255, width=1)
        count = len(result["lines"])
        return condition_result(self, canvas, image, "line", "Line map",
                                f"{count} straight line{'' if count == 1 else 's'}, white on black", "line-to-image")


def load_hed_weights(tool: ExpertTool, device: str, dtype: str) -> Any:
    """The HED network of ``tool.model``: a ``.pth`` file, a folder holding ``ControlNetHED.pth``, or a hub id."""
    setting = f"{tool_key(tool.name)}_model"
    source, filename = os.path.expanduser(tool.model), "ControlNetHED.pth"
    own_folder = os.path.isdir(source)
    if os.path.isfile(source):
        source, filename, own_folder = os.path.dirname(os.path.abspath(source)), os.path.basename(source), True
    token = tool.hf_token

    def build(location: str, args: dict[str, Any]) -> Any:
        from . import annotators_hed

        path = os.path.join(location, filename)
        if not os.path.isfile(path):
            if own_folder:
                raise ToolExecutionError(
                    f"could not load model {tool.model!r} for {tool.name}: the folder has no {filename}; set "
                    f"{setting} to a folder holding {filename} (from {HED_REPO}) or to the .pth file itself")
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(source, filename, token=token)  # a hub id: the cache, else the hub
        return annotators_hed.load_hed(path, device, args["dtype"])

    return tool.load_checkpoint(build, device, dtype, source=source, setting=setting, task=tool.name)


class ImageToHedTool(ExpertTool):
    name = "image-to-hed"
    task = "image-to-image"
    default_model = HED_REPO
    description = _description(
        "image-to-hed", "detects the soft edges of an image (HED: object outlines, grey for weaker edges) and "
        "saves them on black.", "for the soft outline of an image, or as the first step of hed-to-image (a new "
        "image that keeps these outlines).", "the name of the soft-edge image.", "hed")
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    options = {"detect_resolution": 512}

    @property
    def fixed_model(self) -> str:
        return super().fixed_model or f"{self.name} runs the ControlNet HED network only"

    def load_model(self, device: str, dtype: str) -> Any:
        return load_hed_weights(self, device, dtype)

    def call_remote(self, endpoint: Any, **inputs: Any) -> Any:
        return local_only(self)

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(open_image(image), resolution=int(self.options["detect_resolution"]))

    def render(self, result: Any, *, image: str) -> ToolResult:
        from PIL import Image

        return condition_result(self, Image.fromarray(result, "L"), image, "hed", "HED soft-edge map",
                                "grey soft edges on black", "hed-to-image")


class ImageToScribbleTool(ImageToHedTool):
    """The HED network's soft edges, thinned into scribble lines."""

    name = "image-to-scribble"
    description = _description(
        "image-to-scribble", "turns an image into a scribble: its main outlines as white hand-drawn-like lines "
        "on black.", "when the user wants a sketch or scribble of an image, or as the first step of "
        "scribble-to-image (a new image drawn from that scribble).", "the name of the scribble image.", "scribble")
    options = {"detect_resolution": 512}

    def call_local(self, model: Any, *, image: str) -> Any:
        from .annotators_ops import scribble

        return scribble(super().call_local(model, image=image))

    def render(self, result: Any, *, image: str) -> ToolResult:
        from PIL import Image

        share = 100 * float((result > 0).mean())
        return condition_result(self, Image.fromarray(result, "L"), image, "scribble", "Scribble",
                                f"white scribble lines on black, {share:.1f}% of the pixels", "scribble-to-image")


class ImageToNormalTool(ExpertTool):
    name = "image-to-normal"
    task = "depth-estimation"  # runs the depth model, then takes its gradients
    default_model = "depth-anything/Depth-Anything-V2-Small-hf"  # depth-estimation's: one load serves both
    description = _description(
        "image-to-normal", "estimates which way each surface of an image faces and saves it as a colour normal "
        "map (computed from the image's depth).", "for the 3-D shape of the surfaces in an image, or as the first "
        "step of normal-to-image (a new image with the same shapes).", "the name of the normal map.", "normal")
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    options = {"background_threshold": 0.4, "strength": 1.0, "metric": "auto"}

    @classmethod
    def from_context(cls, context: Any) -> "ImageToNormalTool":
        """As every expert tool; without ``image_to_normal_model`` the ``depth_estimation_model`` runs."""
        tool = cast(ImageToNormalTool, super().from_context(context))  # ``cls(...)``: an ImageToNormalTool
        depth_model = context.settings.get("depth_estimation_model")
        if not tool.model_configured and depth_model and str(depth_model).strip():
            tool.model, tool.model_configured = str(depth_model).strip(), True
            tool.model_setting = "depth_estimation_model"
        return tool

    model_setting = "image_to_normal_model"  # where the model came from, for fixed_model

    @property
    def fixed_model(self) -> str | None:
        reason = super().fixed_model
        return reason.replace("image_to_normal_model", self.model_setting) if reason else None

    def call_local(self, model: Any, *, image: str) -> Any:
        from .dense import run_depth

        return run_depth(model, open_image(image))

    def render(self, result: Any, *, image: str) -> ToolResult:
        from PIL import Image

        from .annotators_ops import normals_from_depth
        from .dense import closeness

        size = open_image(image).size
        near = closeness(result, size, self.options["metric"])
        if near is None:
            return ToolResult(f"The depth model returned no depth map for {self.rel(image)}, so no normal map was "
                              f"made.")
        normal = normals_from_depth(near, background=float(self.options["background_threshold"]),
                                    strength=float(self.options["strength"]))
        return condition_result(self, Image.fromarray(normal, "RGB"), image, "normal", "Normal map",
                                "RGB surface normals in ControlNet's convention, flat background blue",
                                "normal-to-image")
