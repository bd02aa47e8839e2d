"""Generation with diffusers (its own extra: ``pip install "chatgpt-tool-hub[diffusion]"``): text-to-image and
image-to-image on the shared Stable Diffusion base, and text-to-video.

text-to-image and image-to-image run on ``diffusion_base_model`` (default
``stable-diffusion-v1-5/stable-diffusion-v1-5``), the base the ControlNet
tools share (see ``experts.diffusion_base``): text-to-image runs the base
pipeline itself, image-to-image builds ``AutoPipelineForImage2Image.from_pipe``
on it for each call (no weight is copied). ``text_to_image_model`` /
``image_to_image_model`` give the tool a model of its own instead (SD-Turbo,
SDXL, ...: anything ``AutoPipelineForText2Image`` loads), loaded as a base of
its own; a tool whose model is the same id as the base shares the base's entry.

text-to-video runs ``TextToVideoSDPipeline`` (its own UNet3D, VAE and text
encoder: nothing to share with an SD 1.5 base) and writes a GIF through Pillow,
or MP4 through PyAV with ``text_to_video_format=mp4`` (``ExpertTool.save_video``).
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

from ..errors import ConfigError, ToolInputError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import open_image
from .diffusion_base import (
    DEFAULT_BASE,
    DIFFUSION_HINT,
    DiffusionTool,
    ImagePromptTool,
    images_of,
    import_diffusers,
    load_diffusers,
)
from .remote import RemoteBlob, RemoteEndpoint

__all__ = ["TextToImageTool", "ImageToImageTool", "TextToVideoTool", "import_diffusers", "DIFFUSION_HINT"]

_TEXT = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "a description of the picture to draw"}},
    "required": ["text"],
    "additionalProperties": False,
}


def _text_of(tool: DiffusionTool, inputs: dict[str, Any], what: str, example: str) -> dict[str, Any]:
    text = str(inputs.get("text", "")).strip()
    if not text:
        raise ToolInputError(f"{tool.name} needs a description of the {what}, e.g. {{\"text\": \"{example}\"}}")
    return {**inputs, "text": text}


class TextToImageTool(DiffusionTool):
    name = "text-to-image"
    task = "text-to-image"
    default_model = DEFAULT_BASE
    runs_on_base = True
    op = "draw"
    description = (
        "text-to-image: draws a new image from an English description. Use it when the user asks you to draw, "
        "paint, generate or imagine a picture. Describe the picture in detail in the text (subject, style, "
        "colours). "
        'Input: {"text": "<a description of the picture>"}. '
        "Output: the name of the new image file. "
        'Example: {"text": "a red fox in the snow, watercolour"} -> "Drew image/1a2b3c4d.png (512x512) from the '
        'description."'
    )
    parameters = _TEXT
    turbo_steps = 1
    # steps 0 / guidance_scale < 0: chosen for the model (1 and 0.0 for *turbo* models, else 25 and 7.5)
    options = {"steps": 0, "guidance_scale": -1.0, "width": 512, "height": 512, "negative_prompt": "",
               "seed": -1}

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return _text_of(self, super().prepare(arguments), "picture", "a red fox in the snow, watercolour")

    def generation_settings(self) -> dict[str, Any]:
        """The keyword arguments of one generation (sizes rounded down to multiples of 8)."""
        return {**self.sampling(), "width": max(8, int(self.options["width"]) // 8 * 8),
                "height": max(8, int(self.options["height"]) // 8 * 8)}

    def generate(self, pipe: Any, *, text: str) -> Any:
        generator = self.generator()
        return pipe(prompt=text, **self.generation_settings(), **({"generator": generator} if generator else {}))

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str) -> Any:
        return endpoint.post_json(text, self.generation_settings())

    def render(self, result: Any, *, text: str) -> str:
        if not images_of(result):
            return "The model returned no image."
        name, image = self.save_result(result, None)
        width, height = image.size
        return ToolResult(f"Drew {name} ({width}x{height}) from the description.{self.safety_note(result)}",
                          value=name)


class ImageToImageTool(ImagePromptTool):
    name = "image-to-image"
    task = "image-to-image"
    default_model = DEFAULT_BASE
    runs_on_base = True
    op = "img2img"
    turbo_steps = 2
    text_example = "the same scene at night, oil painting"
    description = (
        "image-to-image: redraws an image after a description, keeping its layout and colours (Stable Diffusion "
        "img2img). Use it when the user wants a new version of an existing picture in another style or with other "
        "details and the description says what the new picture shows (for an instruction such as 'make it look "
        "like a cartoon', use edit-image). "
        'Input: {"image": "<path of an image file from an earlier observation>", "text": "<a description of the '
        'new picture>"}. '
        "Output: the new image's file name. "
        'Example: {"image": "image/1a2b3c4d.png", "text": "the same street at night, oil painting"} -> "Redrew '
        'image/1a2b3c4d.png after the description: image/5e6f7a8b_img2img_1a2b3c4d_1a2b3c4d.png (512x512)."'
    )
    # steps 0 / guidance_scale < 0: chosen for the model (2 and 0.0 for *turbo* models, else 25 and 7.5);
    # strength: how much of the picture is redrawn (0: nothing, 1: all); size 0: the input's size
    options = {"steps": 0, "guidance_scale": -1.0, "strength": 0.75, "size": 0, "negative_prompt": "", "seed": -1}

    def pipeline(self, model: Any, base: Any) -> Any:
        diffusers = import_diffusers(self.name)
        pipe = diffusers.AutoPipelineForImage2Image.from_pipe(model, scheduler=self.scheduler_for(model))
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def generate(self, pipe: Any, *, image: str, text: str) -> Any:
        from PIL import Image

        picture = open_image(image)
        _, (width, height) = self.sizes(picture)
        strength = min(1.0, max(0.01, float(self.options["strength"])))
        settings = self.sampling()
        # img2img runs steps x strength denoising steps: at least one
        settings["num_inference_steps"] = max(settings["num_inference_steps"], int(1 / strength + 0.999))
        generator = self.generator()
        return pipe(prompt=text, image=picture.resize((width, height), Image.Resampling.LANCZOS), strength=strength,
                    **settings, **({"generator": generator} if generator else {}))

    def describe(self, name: str, image: Any, source: str, text: str) -> str:
        return f"Redrew {source} after the description: {name} ({image.width}x{image.height})."


_VIDEO_FORMATS = ("gif", "mp4")


class TextToVideoTool(DiffusionTool):
    name = "text-to-video"
    task = "text-to-video"
    default_model = "ali-vilab/text-to-video-ms-1.7b"
    output_kind = "video"
    op = "video"
    default_steps = 25
    default_guidance = 9.0
    description = (
        "text-to-video: makes a short video clip from an English description. Use it when the user asks for a "
        "video, an animation or a clip of something happening. Describe the scene and the motion in the text. "
        'Input: {"text": "<a description of the clip>"}. '
        "Output: the name of the new video file (an animated GIF unless configured otherwise), its frame count, "
        "size and frame rate. "
        'Example: {"text": "an astronaut riding a horse on the moon"} -> "Made video/1a2b3c4d.gif (16 frames, '
        '256x256, 8 fps) from the description."'
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "a description of the clip to make"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    # format: gif (Pillow) or mp4 (PyAV, the video extra)
    options = {"steps": 0, "guidance_scale": -1.0, "num_frames": 16, "fps": 8.0, "width": 256, "height": 256,
               "format": "gif", "negative_prompt": "", "seed": -1}

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        fmt = str(self.options["format"]).strip().lower().lstrip(".")
        if fmt not in _VIDEO_FORMATS:
            key = f"{tool_key(self.name)}_format"
            raise ConfigError(f"setting '{key}' must be gif or mp4, got {fmt[:20]!r}", key=key)
        self.options["format"] = fmt

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return _text_of(self, super().prepare(arguments), "clip", "an astronaut riding a horse on the moon")

    def load_model(self, device: str, dtype: str) -> Any:
        def make(diffusers: Any, location: str, torch_dtype: Any) -> Any:
            with warnings.catch_warnings():  # the pipeline is marked deprecated in newer diffusers
                warnings.simplefilter("ignore")
                return diffusers.TextToVideoSDPipeline.from_pretrained(location, torch_dtype=torch_dtype,
                                                                       token=self.hf_token)

        return load_diffusers(self, self.model, f"{tool_key(self.name)}_model", make, device=device, dtype=dtype)

    def generate(self, pipe: Any, *, text: str) -> Any:
        generator = self.generator()
        return pipe(prompt=text, num_frames=max(1, int(self.options["num_frames"])),
                    width=max(8, int(self.options["width"]) // 8 * 8),
                    height=max(8, int(self.options["height"]) // 8 * 8), output_type="np", **self.sampling(),
                    **({"generator": generator} if generator else {})).frames[0]

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str) -> Any:
        return endpoint.post_json(text, self.sampling())

    def render(self, result: Any, *, text: str) -> str:
        from ..runtime.video_io import read_frames

        fps = max(0.1, float(self.options["fps"]))
        fmt = self.options["format"]
        if isinstance(result, RemoteBlob):  # a remote answer: the video file's bytes
            name = self._save_remote(result.data, fmt)
            frames = read_frames(self.workspace / name, max_frames=10_000)
        else:
            frames = list(result)
            if not frames:
                return "The model returned no frames."
            name = self.save_video(frames, None, self.op, fps=fps, ext=fmt)
        first = frames[0]
        height, width = (first.height, first.width) if hasattr(first, "height") else first.shape[:2]
        return ToolResult(f"Made {name} ({len(frames)} frames, {width}x{height}, {fps:g} fps) from the description.",
                          value=name)

    def _save_remote(self, data: bytes, fmt: str) -> str:
        from ..runtime.filenames import new_path

        ext = "gif" if data[:4] == b"GIF8" else "mp4"
        name = new_path(self.workspace, "video", ext)
        (self.workspace / name).write_bytes(data)
        return name
