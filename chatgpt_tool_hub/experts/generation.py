"""Text-to-image with diffusers (its own extra: ``pip install "chatgpt-tool-hub[diffusion]"``).

``load_model`` builds a ``diffusers.AutoPipelineForText2Image`` from a hub id or
a folder made by ``save_pretrained`` (Stable Diffusion 1.x/2.x, SD-Turbo,
SDXL, ...), through the same lookup and error messages as the transformers
tools; diffusers is imported on first load only.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

from ..errors import ToolInputError, UserError
from ..tools.base import ToolResult
from .base import ExpertTool, decode_image
from .devices import tool_key
from .remote import RemoteBlob, RemoteEndpoint

__all__ = ["TextToImageTool", "import_diffusers", "DIFFUSION_HINT"]

DIFFUSION_HINT = 'pip install "chatgpt-tool-hub[diffusion]"'


def import_diffusers() -> Any:
    """The diffusers module, or a ``UserError`` naming the extra to install."""
    try:
        import diffusers
    except ImportError as exc:
        raise UserError(f"text-to-image needs diffusers, which is not installed ({exc.name or exc}): "
                        f"{DIFFUSION_HINT}") from exc
    return diffusers


class TextToImageTool(ExpertTool):
    name = "text-to-image"
    task = "text-to-image"
    default_model = "stabilityai/sd-turbo"
    description = (
        "text-to-image: draws a new image from an English description. Use it when the user asks you to draw, "
        "paint, generate or imagine a picture. Describe the picture in detail in the text (subject, style, "
        "colours). "
        'Input: {"text": "<a description of the picture>"}. '
        "Output: the name of the new image file. "
        'Example: {"text": "a red fox in the snow, watercolour"} -> "Drew image/1a2b3c4d.png (512x512) from the '
        'description."'
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "a description of the picture to draw"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    output_kind = "image"
    # steps 0 / guidance_scale < 0: chosen for the model (1 and 0.0 for *turbo* models, else 25 and 7.5)
    options = {"steps": 0, "guidance_scale": -1.0, "width": 512, "height": 512, "negative_prompt": "",
               "seed": -1}

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        text = str(inputs.get("text", "")).strip()
        if not text:
            raise ToolInputError(f"{self.name} needs a description of the picture, e.g. "
                                 '{"text": "a red fox in the snow, watercolour"}')
        return {**inputs, "text": text}

    def load_model(self, device: str, dtype: str) -> Any:
        from .loading import import_backend, load_with

        import_backend()
        diffusers = import_diffusers()
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            with warnings.catch_warnings():  # newer diffusers renamed torch_dtype to dtype
                warnings.simplefilter("ignore", FutureWarning)
                pipe = diffusers.AutoPipelineForText2Image.from_pretrained(location, torch_dtype=args["dtype"],
                                                                           token=token)
            pipe = pipe.to(device)
            pipe.set_progress_bar_config(disable=True)
            return pipe

        device_setting = self.device_plan.source if self.device_plan.device else "expert_device"
        return load_with(build, self.model, device=device, dtype=dtype, tool=self.name,
                         setting=f"{tool_key(self.name)}_model", device_setting=device_setting, token=token,
                         task=self.task)

    @property
    def turbo(self) -> bool:
        return "turbo" in self.model.lower()

    def generation_settings(self) -> dict[str, Any]:
        """The keyword arguments of one generation (sizes rounded down to multiples of 8)."""
        steps = int(self.options["steps"]) or (1 if self.turbo else 25)
        guidance = float(self.options["guidance_scale"])
        if guidance < 0:
            guidance = 0.0 if self.turbo else 7.5
        settings: dict[str, Any] = {"num_inference_steps": max(1, steps), "guidance_scale": guidance,
                                    "width": max(8, int(self.options["width"]) // 8 * 8),
                                    "height": max(8, int(self.options["height"]) // 8 * 8)}
        if str(self.options["negative_prompt"]).strip() and guidance > 1:
            settings["negative_prompt"] = str(self.options["negative_prompt"]).strip()
        return settings

    def call_local(self, model: Any, *, text: str) -> Any:
        import torch

        settings = self.generation_settings()
        seed = int(self.options["seed"])
        if seed >= 0:
            settings["generator"] = torch.Generator("cpu").manual_seed(seed)
        return model(prompt=text, **settings)

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str) -> Any:
        settings = self.generation_settings()
        return endpoint.post_json(text, {k: v for k, v in settings.items() if k != "generator"})

    def render(self, result: Any, *, text: str) -> str:
        images = getattr(result, "images", None)
        if images is None:  # a remote answer: image bytes, or JSON with base64 images
            if isinstance(result, RemoteBlob):
                images = [result]
            elif isinstance(result, list):
                images = [r.get("image") or r.get("generated_image") if isinstance(r, dict) else r for r in result]
            elif isinstance(result, dict):
                images = [result.get("image") or result.get("generated_image")]
        images = [decode_image(i) for i in (images or []) if i is not None]
        if not images:
            return "The model returned no image."
        image = images[0].convert("RGB")
        flagged = getattr(result, "nsfw_content_detected", None)
        name = self.save_image(image, None, "draw")
        width, height = image.size
        note = ""
        if isinstance(flagged, list) and flagged and flagged[0]:
            note = " The safety checker flagged it and blanked the image; describe a different picture."
        return ToolResult(f"Drew {name} ({width}x{height}) from the description.{note}", value=name)
