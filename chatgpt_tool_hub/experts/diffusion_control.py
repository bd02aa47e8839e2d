"""ControlNet generation: a condition image (edges, depth, pose, ...) and a description -> a new image.

Visual ChatGPT's eight "X to image" tools. Each is the shared Stable Diffusion
base (``diffusion_base_model``, see ``experts.diffusion_base``) with a
ControlNet of its own: ``<tool>_model`` is the ControlNet checkpoint (a
``ControlNetModel``, a few hundred MB), loaded and kept in the manager under
its own key, and each call builds ``AutoPipelineForText2Image.from_pipe(base,
controlnet=...)`` (``StableDiffusionControlNetPipeline`` for an SD base) on the
base's modules, with a UniPC scheduler as TaskMatrix used. Loading eight of
them costs eight ControlNets and one base, not eight bases.

The condition image should come from the matching annotator tool
(``image-to-canny`` for canny-to-image, ``depth-estimation`` for
depth-to-image, ...): a ControlNet follows the kind of map it was trained on.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import ToolExecutionError
from ..runtime.models.devices import tool_key
from .base import open_image
from .diffusion_base import BASE_SETTING, ImagePromptTool, import_diffusers, load_diffusers

__all__ = ["ControlNetTool", "CannyToImageTool", "DepthToImageTool", "HedToImageTool", "LineToImageTool",
           "NormalToImageTool", "ScribbleToImageTool", "PoseToImageTool", "SegmentationToImageTool"]

# TaskMatrix's prompt additions for its ControlNet tools
ADDED_PROMPT = "best quality, extremely detailed"
NEGATIVE_PROMPT = ("longbody, lowres, bad anatomy, bad hands, missing fingers, extra digit, fewer digits, cropped, "
                   "worst quality, low quality")


class ControlNetTool(ImagePromptTool):
    """A condition map + a description -> an image, through a ControlNet attached to the shared base.

    Subclasses set ``name``, ``default_model`` (the ControlNet), ``op``, ``condition`` (what the map is, for
    the description) and ``annotator`` (the tool that makes such maps).
    """

    task = "controlnet"
    hub_task = "text-to-image"
    default_steps = 20
    default_guidance = 9.0
    condition: ClassVar[str] = ""
    annotator: ClassVar[str] = ""
    use: ClassVar[str] = ""  # when to use it, in the user's words
    example_text: ClassVar[str] = "a red sports car on a mountain road"
    # conditioning_scale: how strictly the picture follows the map; added_prompt is appended to the text
    options = {"steps": 0, "guidance_scale": -1.0, "conditioning_scale": 1.0, "size": 0, "seed": -1,
               "added_prompt": ADDED_PROMPT, "negative_prompt": NEGATIVE_PROMPT}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.condition:
            cls.description = (
                f"{cls.name}: draws a new picture that follows {cls.condition} and an English description. "
                f"Use it {cls.use}. The image must be {cls.condition}: make it first with {cls.annotator} "
                f"(or use one the user gave). "
                f'Input: {{"image": "<path of the {cls.short} image from an earlier observation>", '
                f'"text": "<a description of the new picture>"}}. '
                f"Output: the new image's file name. "
                f'Example: {{"image": "image/5e6f7a8b_x_1a2b3c4d_1a2b3c4d.png", "text": "{cls.example_text}"}} -> '
                f'"Drew image/9c0d1e2f_{cls.op}_5e6f7a8b_1a2b3c4d.png (512x512) from the {cls.short} '
                f'image/5e6f7a8b_x_1a2b3c4d_1a2b3c4d.png and the description."'
            )
            cls.text_example = cls.example_text

    short: ClassVar[str] = ""  # a short name of the map: "canny edge map"

    @property
    def shares_base(self) -> bool:
        return True

    def load_model(self, device: str, dtype: str) -> Any:
        def make(diffusers: Any, location: str, torch_dtype: Any) -> Any:
            return diffusers.ControlNetModel.from_pretrained(location, torch_dtype=torch_dtype, token=self.hf_token)

        return load_diffusers(self, self.model, f"{tool_key(self.name)}_model", make, device=device, dtype=dtype)

    def pipeline(self, model: Any, base: Any) -> Any:
        unet = getattr(base, "unet", None)
        width = getattr(getattr(unet, "config", None), "cross_attention_dim", None)
        if width != model.config.cross_attention_dim:
            raise ToolExecutionError(
                f"{self.name}: the ControlNet {self.model!r} ({tool_key(self.name)}_model) was made for a base with "
                f"cross-attention width {model.config.cross_attention_dim}, but {BASE_SETTING} "
                f"({self.base_model!r}) has {width}; set {BASE_SETTING} to the base the ControlNet was trained on "
                f"(Stable Diffusion 1.5 for the lllyasviel ControlNets)")
        diffusers = import_diffusers(self.name)
        pipe = diffusers.AutoPipelineForText2Image.from_pipe(
            base, controlnet=model, scheduler=self.scheduler_for(base, "UniPCMultistepScheduler"))
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def generate(self, pipe: Any, *, image: str, text: str) -> Any:
        from PIL import Image

        condition = open_image(image)
        _, (width, height) = self.sizes(condition)
        added = str(self.options["added_prompt"]).strip()
        generator = self.generator()
        return pipe(prompt=f"{text}, {added}" if added else text,
                    image=condition.resize((width, height), Image.Resampling.BILINEAR), width=width, height=height,
                    controlnet_conditioning_scale=float(self.options["conditioning_scale"]), **self.sampling(),
                    **({"generator": generator} if generator else {}))

    def describe(self, name: str, image: Any, source: str, text: str) -> str:
        return f"Drew {name} ({image.width}x{image.height}) from the {self.short} {source} and the description."


class CannyToImageTool(ControlNetTool):
    name = "canny-to-image"
    default_model = "lllyasviel/control_v11p_sd15_canny"
    op = "canny2image"
    condition = "a canny edge map (white edges on black)"
    short = "canny edge map"
    annotator = "image-to-canny"
    use = "to draw a new image with the outlines of an existing one, e.g. 'draw a new car from this edge image'"


class DepthToImageTool(ControlNetTool):
    name = "depth-to-image"
    default_model = "lllyasviel/control_v11f1p_sd15_depth"
    op = "depth2image"
    condition = "a depth map (grey-scale, brighter is closer)"
    short = "depth map"
    annotator = "depth-estimation"
    use = "to draw a new image with the same depth layout as an existing one, e.g. 'a new picture of this depth'"
    example_text = "a cosy wooden house in a forest"


class HedToImageTool(ControlNetTool):
    name = "hed-to-image"
    default_model = "lllyasviel/control_v11p_sd15_softedge"
    op = "hed2image"
    condition = "a soft HED boundary map"
    short = "HED boundary map"
    annotator = "image-to-hed"
    use = "to redraw an image in a new style or as a new subject while keeping its soft outlines"
    example_text = "a watercolour painting of a cat"


class LineToImageTool(ControlNetTool):
    name = "line-to-image"
    default_model = "lllyasviel/control_v11p_sd15_mlsd"
    op = "line2image"
    condition = "a straight-line (M-LSD) map"
    short = "line map"
    annotator = "image-to-line"
    use = "for buildings and rooms: a new picture with the same straight lines, e.g. 'a modern living room'"
    example_text = "a bright modern living room"


class NormalToImageTool(ControlNetTool):
    name = "normal-to-image"
    default_model = "lllyasviel/control_v11p_sd15_normalbae"
    op = "normal2image"
    condition = "a surface normal map (RGB-coded directions)"
    short = "normal map"
    annotator = "image-to-normal"
    use = "to draw a new image with the same 3-D surfaces and shapes as an existing one"
    example_text = "a marble statue of a lion"


class ScribbleToImageTool(ControlNetTool):
    name = "scribble-to-image"
    default_model = "lllyasviel/control_v11p_sd15_scribble"
    op = "scribble2image"
    condition = "a scribble (white strokes on black)"
    short = "scribble"
    annotator = "image-to-scribble"
    use = "to turn a rough sketch or scribble into a finished picture"
    example_text = "a cute bird on a branch"


class PoseToImageTool(ControlNetTool):
    name = "pose-to-image"
    default_model = "lllyasviel/control_v11p_sd15_openpose"
    op = "pose2image"
    condition = "an OpenPose skeleton image of human poses"
    short = "pose image"
    annotator = "image-to-pose"
    use = "to draw people in the same poses as in an existing image, e.g. 'an astronaut in this pose'"
    example_text = "an astronaut dancing on the moon"


class SegmentationToImageTool(ControlNetTool):
    name = "segmentation-to-image"
    default_model = "lllyasviel/control_v11p_sd15_seg"
    op = "segment2image"
    condition = "a semantic segmentation map (ADE20K colours)"
    short = "segmentation map"
    annotator = "image-segmentation"
    use = "to draw a new scene with the same regions (sky, road, buildings ...) as an existing one"
    example_text = "a street in Paris at sunset"
