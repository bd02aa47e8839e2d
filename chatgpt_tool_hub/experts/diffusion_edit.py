"""Image editing with diffusers: InstructPix2Pix (edit-image) and text-masked inpainting (remove/replace-object).

* **edit-image** runs InstructPix2Pix (``timbrooks/instruct-pix2pix``): its UNet
  has 8 input channels (noise + the input image's latents), so it cannot use the
  base's UNet. It loads as a pipeline of its own by default: its VAE and text
  encoder are not guaranteed to be the base's. ``edit_image_share_base=true``
  loads only its UNet and takes the VAE, text encoder, tokenizer and safety
  checker from the shared base (right for checkpoints fine-tuned from the base
  with those parts frozen, as InstructPix2Pix was from SD 1.5), saving their
  memory.
* **remove-object / replace-object** (Visual ChatGPT's "Remove/Replace
  Something From The Photo"): CLIPSeg (``CIDAS/clipseg-rd64-refined``, the
  ``<tool>_mask_model`` option) makes a mask of the named object from the text,
  grown by ``<tool>_mask_padding`` pixels, then an inpainting pipeline
  (``stable-diffusion-v1-5/stable-diffusion-inpainting``, a UNet with 9 input
  channels) repaints it: with "background" to remove it, with the new object to
  replace it. Both tools share one inpainting model and one CLIPSeg when their
  settings name the same ids; ``<tool>_share_base`` works as for edit-image.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from ..errors import ToolInputError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import open_image
from .diffusion_base import (
    LOAD_LOCK,
    DiffusionTool,
    ImagePromptTool,
    build_pipeline,
    import_diffusers,
    load_diffusers,
)

__all__ = ["EditImageTool", "RemoveObjectTool", "ReplaceObjectTool", "ObjectMask"]


if TYPE_CHECKING:  # the class the mixin goes into, so that its uses of the tool's attributes are checked
    _MixinBase = DiffusionTool
else:
    _MixinBase = object


class _OwnUnetMixin(_MixinBase):
    """``<tool>_share_base``: load only the checkpoint's UNet and run it on the shared base's other parts."""

    unet_channels: ClassVar[tuple[int, ...]] = ()  # accepted UNet input channels (empty: any)

    @property
    def shares_base(self) -> bool:
        return bool(self.options.get("share_base"))

    @property
    def model_key(self) -> tuple[str, str, str, str]:
        model, task, device, dtype = super().model_key
        return (model, f"{task}/unet" if self.shares_base else task, device, dtype)

    def _check_unet(self, unet: Any) -> None:
        channels = unet.config.in_channels
        if self.unet_channels and channels not in self.unet_channels:
            wanted = " or ".join(map(str, self.unet_channels))
            raise ValueError(f"its UNet takes {channels} input channels, not {wanted} as {self.task} models do")

    def _load(self, device: str, dtype: str, pipeline_class: str) -> Any:
        setting = f"{tool_key(self.name)}_model"

        def make(diffusers: Any, location: str, torch_dtype: Any) -> Any:
            if self.shares_base:
                made = diffusers.UNet2DConditionModel.from_pretrained(location, subfolder="unet",
                                                                      torch_dtype=torch_dtype, token=self.hf_token)
                self._check_unet(made)
                return made
            made = getattr(diffusers, pipeline_class).from_pretrained(location, torch_dtype=torch_dtype,
                                                                      token=self.hf_token)
            self._check_unet(made.unet)
            return made

        return load_diffusers(self, self.model, setting, make, device=device, dtype=dtype)


class EditImageTool(_OwnUnetMixin, ImagePromptTool):
    name = "edit-image"
    task = "instruct-pix2pix"
    hub_task = "image-to-image"
    default_model = "timbrooks/instruct-pix2pix"
    op = "pix2pix"
    unet_channels = (8,)
    default_steps = 20
    text_example = "make it look like a cartoon"
    description = (
        "edit-image: changes an image as an English instruction says (InstructPix2Pix), keeping the rest of it. "
        "Use it when the user asks to change the style or a detail of an existing image, e.g. 'make it look like "
        "a cartoon', 'turn the sky into a sunset', 'make it winter'. The text is the instruction itself. "
        'Input: {"image": "<path of an image file from an earlier observation>", "text": "<the instruction>"}. '
        "Output: the edited image's file name. "
        'Example: {"image": "image/1a2b3c4d.png", "text": "make it look like a cartoon"} -> "Edited '
        'image/1a2b3c4d.png as instructed: image/5e6f7a8b_pix2pix_1a2b3c4d_1a2b3c4d.png (512x512)."'
    )
    # image_guidance_scale: how closely the result keeps the input image (TaskMatrix used 1.2)
    options = {"steps": 0, "guidance_scale": -1.0, "image_guidance_scale": 1.2, "size": 0, "negative_prompt": "",
               "seed": -1, "share_base": False}

    def load_model(self, device: str, dtype: str) -> Any:
        return self._load(device, dtype, "StableDiffusionInstructPix2PixPipeline")

    def pipeline(self, model: Any, base: Any) -> Any:
        if base is None:
            return model
        diffusers = import_diffusers(self.name)
        return build_pipeline(diffusers.StableDiffusionInstructPix2PixPipeline, base, unet=model,
                              scheduler=self.scheduler_for(base, "EulerAncestralDiscreteScheduler"))

    def generate(self, pipe: Any, *, image: str, text: str) -> Any:
        from PIL import Image

        picture = open_image(image)
        _, size = self.sizes(picture)
        generator = self.generator()
        return pipe(prompt=text, image=picture.resize(size, Image.Resampling.LANCZOS),
                    image_guidance_scale=float(self.options["image_guidance_scale"]), **self.sampling(),
                    **({"generator": generator} if generator else {}))

    def describe(self, name: str, image: Any, source: str, text: str) -> str:
        return f"Edited {source} as instructed: {name} ({image.width}x{image.height})."


class ObjectMask:
    """A CLIPSeg model and its processor: ``mask(image, text)`` -> (probabilities at the model's size)."""

    def __init__(self, model: Any, processor: Any, device: str):
        self.model, self.processor, self.device = model, processor, device

    def probabilities(self, image: Any, text: str) -> Any:
        """The sigmoid of CLIPSeg's logits for ``text`` on ``image``, a 2-D numpy array."""
        import torch

        inputs = self.processor(text=[text], images=[image], padding="max_length", return_tensors="pt")
        dtype = next(self.model.parameters()).dtype
        inputs = {k: (v.to(self.device, dtype) if v.is_floating_point() else v.to(self.device))
                  for k, v in inputs.items()}
        with torch.inference_mode():
            logits = self.model(**inputs).logits
        return torch.sigmoid(logits.float()).reshape(logits.shape[-2:]).cpu().numpy()


_OBJECT = {"type": "string", "description": "the object to find in the image, e.g. 'the dog'"}


class _ObjectInpaintTool(_OwnUnetMixin, DiffusionTool):
    """Mask an object named by text with CLIPSeg, then inpaint the mask (remove: "background"; replace: the new
    object)."""

    task = "inpainting"
    hub_task = "image-to-image"
    default_model = "stable-diffusion-v1-5/stable-diffusion-inpainting"
    unet_channels = (9, 4)
    # mask_threshold: CLIPSeg probability that counts as the object; mask_min_area: the smallest share of the
    # image a found object covers; mask_padding: pixels the mask grows by (TaskMatrix's values)
    options = {"steps": 0, "guidance_scale": -1.0, "size": 0, "negative_prompt": "", "seed": -1,
               "mask_model": "CIDAS/clipseg-rd64-refined", "mask_threshold": 0.5, "mask_min_area": 0.02,
               "mask_padding": 20, "share_base": False}

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        """Also accepts Visual ChatGPT's plain form ``image/1a2b3c4d.png, the dog[, a cat]``."""
        keys = list((self.parameters or {}).get("properties") or {})
        if isinstance(tool_input, str) and not tool_input.strip().startswith("{") and "," in tool_input:
            parts = [p.strip() for p in tool_input.split(",", len(keys) - 1)]
            return super().parse_arguments(dict(zip(keys, parts, strict=False)))
        return super().parse_arguments(tool_input)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        for key in list(inputs):
            if key != "image":
                inputs[key] = str(inputs[key]).strip()
                if not inputs[key]:
                    raise ToolInputError(f"{self.name} needs the {key} as text, e.g. {self.example_input_text}")
        open_image(inputs["image"])
        return inputs

    example_input_text: ClassVar[str] = ""

    def load_model(self, device: str, dtype: str) -> Any:
        return self._load(device, dtype, "AutoPipelineForInpainting")

    def pipeline(self, model: Any, base: Any) -> Any:
        if base is None:
            return model
        diffusers = import_diffusers(self.name)
        pipe = diffusers.AutoPipelineForInpainting.from_pipe(base, unet=model, scheduler=self.scheduler_for(base))
        pipe.set_progress_bar_config(disable=True)
        return pipe

    # ---- the mask --------------------------------------------------------------------

    @property
    def mask_key(self) -> tuple[str, str, str, str]:
        return (self.mask_source, "clipseg", self.device, self.dtype)

    @property
    def mask_source(self) -> str:
        """``<tool>_mask_model``; when it is left at its default and the model folder carries a ``mask/``
        model (tiny test models), that one."""
        source = str(self.options["mask_model"]).strip()
        if source == type(self).options["mask_model"]:
            bundled = os.path.join(os.path.expanduser(self.model), "mask")
            if os.path.isfile(os.path.join(bundled, "config.json")):
                return bundled
        return source

    def load_mask_model(self) -> ObjectMask:
        from ..runtime.models.loading import import_backend

        _, transformers = import_backend()
        source, _, device, dtype = self.mask_key

        def build(location: str, args: dict[str, Any]) -> ObjectMask:
            token = {"token": args["token"]} if "token" in args else {}
            with LOAD_LOCK:  # see diffusion_base.LOAD_LOCK
                processor = transformers.CLIPSegProcessor.from_pretrained(location, **token)
                model = transformers.CLIPSegForImageSegmentation.from_pretrained(location, dtype=args["dtype"], **token)
            return ObjectMask(model.to(device).eval(), processor, device)

        def load() -> ObjectMask:
            return self.load_checkpoint(build, device, dtype, source=source,
                                        setting=f"{tool_key(self.name)}_mask_model", task="image-segmentation")

        expected = None
        if self.manager.memory_budget_mb > 0 and not self.manager.is_loaded(self.mask_key):
            from ..runtime.models.loading import checkpoint_mb

            expected = checkpoint_mb(source, self.hf_token, dtype)
        return self.manager.get(self.mask_key, load, device=device, expected_mb=expected)

    def mask(self, picture: Any, text: str) -> tuple[Any, float]:
        """``(mask, share of the image)``: a PIL "L" mask at the picture's size, 255 where ``text`` is."""
        import numpy as np
        from PIL import Image, ImageFilter

        masker = self.load_mask_model()
        with self.manager.call_lock(self.mask_key):
            probabilities = masker.probabilities(picture, text)
        found = probabilities > float(self.options["mask_threshold"])
        mask = Image.fromarray((found * 255).astype(np.uint8), "L").resize(picture.size, Image.Resampling.NEAREST)
        share = float(np.asarray(mask).mean() / 255)
        padding = max(0, int(self.options["mask_padding"]))
        if padding and share > 0:
            mask = mask.filter(ImageFilter.MaxFilter(2 * padding + 1))
        return mask, share

    # ---- a call ----------------------------------------------------------------------

    def inpaint(self, pipe: Any, image: str, target: str, prompt: str, negative: str = "") -> Any:
        from PIL import Image

        picture = open_image(image)
        mask, share = self.mask(picture, target)
        if share < float(self.options["mask_min_area"]):
            return {"found": False, "share": share}
        _, (width, height) = self.sizes(picture)
        settings = self.sampling()
        if negative and "negative_prompt" not in settings and settings["guidance_scale"] > 1:
            settings["negative_prompt"] = negative
        generator = self.generator()
        result = pipe(prompt=prompt, image=picture.resize((width, height), Image.Resampling.LANCZOS),
                      mask_image=mask.resize((width, height), Image.Resampling.NEAREST), width=width, height=height,
                      **settings, **({"generator": generator} if generator else {}))
        return {"found": True, "share": share, "output": result}

    def render_edit(self, result: dict[str, Any], image: str, target: str, done: str) -> str:
        source = self.rel(image)
        share = 100 * result["share"]
        if not result["found"]:
            return ToolResult(f"Found no {target} in {source} (the mask covers {share:.1f}% of it, under "
                              f"{tool_key(self.name)}_mask_min_area); the image was not changed.", value=source)
        size = self.sizes(open_image(image))[0]
        name, picture = self.save_result(result["output"], image, size)
        note = self.safety_note(result["output"])
        return ToolResult(f"{done}: {name} ({picture.width}x{picture.height}; the mask covered {share:.1f}% of the "
                          f"image).{note}", value=name)


class RemoveObjectTool(_ObjectInpaintTool):
    name = "remove-object"
    op = "remove-something"
    description = (
        "remove-object: removes an object from an image and fills its place with background. Use it when the user "
        "asks to remove, erase or delete something from a picture. Name the object as it looks in the picture. "
        'Input: {"image": "<path of an image file from an earlier observation>", "object": "<the object to '
        'remove>"}. '
        "Output: the new image's file name, or that no such object was found. "
        'Example: {"image": "image/1a2b3c4d.png", "object": "the dog"} -> "Removed the dog from image/1a2b3c4d.png: '
        'image/5e6f7a8b_remove-something_1a2b3c4d_1a2b3c4d.png (512x512; the mask covered 12.5% of the image)."'
    )
    parameters = {
        "type": "object",
        "properties": {"image": {"type": "string", "description": "path of an image file from an earlier observation"},
                       "object": _OBJECT},
        "required": ["image", "object"],
        "additionalProperties": False,
    }
    example_input_text = '{"image": "image/1a2b3c4d.png", "object": "the dog"}'

    def generate(self, pipe: Any, *, image: str, object: str) -> Any:
        return self.inpaint(pipe, image, object, "background", negative=object)

    def render(self, result: Any, *, image: str, object: str) -> str:
        return self.render_edit(result, image, object, f"Removed {object} from {self.rel(image)}")


class ReplaceObjectTool(_ObjectInpaintTool):
    name = "replace-object"
    op = "replace-something"
    description = (
        "replace-object: replaces an object in an image with another one, keeping the rest. Use it when the user "
        "asks to replace, swap or change one thing in a picture into another. "
        'Input: {"image": "<path of an image file from an earlier observation>", "object": "<the object to '
        'replace>", "replacement": "<what to put in its place>"}. '
        "Output: the new image's file name, or that no such object was found. "
        'Example: {"image": "image/1a2b3c4d.png", "object": "the dog", "replacement": "a white cat"} -> "Replaced '
        "the dog in image/1a2b3c4d.png with a white cat: image/5e6f7a8b_replace-something_1a2b3c4d_1a2b3c4d.png "
        '(512x512; the mask covered 12.5% of the image)."'
    )
    parameters = {
        "type": "object",
        "properties": {"image": {"type": "string", "description": "path of an image file from an earlier observation"},
                       "object": _OBJECT,
                       "replacement": {"type": "string", "description": "what to put in its place, e.g. 'a cat'"}},
        "required": ["image", "object", "replacement"],
        "additionalProperties": False,
    }
    example_input_text = '{"image": "image/1a2b3c4d.png", "object": "the dog", "replacement": "a white cat"}'

    def generate(self, pipe: Any, *, image: str, object: str, replacement: str) -> Any:
        return self.inpaint(pipe, image, object, replacement)

    def render(self, result: Any, *, image: str, object: str, replacement: str) -> str:
        return self.render_edit(result, image, object, f"Replaced {object} in {self.rel(image)} with {replacement}")

