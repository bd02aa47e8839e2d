"""What the diffusion tools share: one Stable Diffusion base per (model, device, dtype), options, image output.

The shared base
---------------
Visual ChatGPT loaded a separate Stable Diffusion for each of its diffusion
tools (and needed four V100s for its 22 models). Here the base, a component
set (UNet, VAE, text encoder, tokenizer, scheduler, and the safety checker
when the checkpoint ships one), is loaded once per (``diffusion_base_model``,
device, dtype) by ``AutoPipelineForText2Image`` into the app's
``ModelManager``, under the key ``(base id, "diffusion-base", device, dtype)``:

* text-to-image runs the base pipeline as it is; image-to-image, the ControlNet
  tools (and edit-image, remove-object, replace-object with
  ``<tool>_share_base=true``) build their pipeline **for each call** from the
  base's modules plus their own part (a ControlNet, a UNet), with diffusers'
  ``AutoPipelineFor*.from_pipe`` or the pipeline class itself. That copies no
  weight: the new pipeline refers to the very same modules (about 1 ms).
  ``DiffusionPipeline.from_pipe`` is not used: it casts every module to its
  ``torch_dtype`` argument in place (float32 when not given), which would turn
  the shared float16 base into float32 for every tool.
* **Eviction.** No tool keeps a pipeline built on the base between calls, so
  the manager's entry is the only lasting reference: the base is counted once
  in the memory budget (a ControlNet's entry counts the ControlNet alone) and
  evicting it frees it, at the latest when a call still running on it ends
  (``reclaim`` runs then, as for a tool's own model).
* **Locks.** Calls on the base are serialised (pipelines are not
  thread-safe): a call takes its own model's lock (``ExpertTool._run``), then
  the base's; nothing takes them the other way round. Each built pipeline gets
  its own scheduler (from the base's scheduler config), so no call changes the
  state of another's.

ControlNets for SD 1.5 need an SD 1.5 base, hence the default
``stable-diffusion-v1-5/stable-diffusion-v1-5``; a ControlNet whose
cross-attention width differs from the base's UNet is refused with an error
naming both settings. diffusers is imported on first load only.

Prompt translation
------------------
Stable Diffusion's CLIP text encoder understands English. A description that
is not English (a non-Latin script, or Latin-script text whose common words
are French, German, Spanish, Italian, Portuguese or Dutch: :func:`needs_translation`)
is translated first by the calling engine's LLM (``ToolContext.llm``), in one
call charged to the run's budget and usage; the observation says so. The
setting ``diffusion_translate_prompts`` (default true) turns it off. Without an
LLM (a tool run alone) or past the budget, the description is used as given
and the observation says why.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any, Callable, ClassVar, Mapping, cast

from ..config import SETTINGS
from ..errors import LLMError, RunError, ToolExecutionError, ToolInputError
from ..llm.base import call_llm
from ..loadlock import PROCESS_LOAD_LOCK
from ..runtime.models.devices import tool_key
from ..runtime.models.loading import import_heavy
from ..tools.base import DEFAULT_CONTEXT, ToolContext, ToolResult, value_of
from .base import ExpertTool, decode_image, image_base64, open_image
from .languages import guess_language
from .remote import RemoteBlob, RemoteEndpoint

__all__ = ["DIFFUSION_HINT", "DEFAULT_BASE", "BASE_SETTING", "BASE_TASK", "import_diffusers", "DiffusionTool",
           "ImagePromptTool", "build_pipeline", "load_diffusers", "images_of", "LOAD_LOCK", "TRANSLATE_SETTING",
           "needs_translation", "translate_prompt"]

DIFFUSION_HINT = 'pip install "chatgpt-tool-hub[diffusion]"'
DEFAULT_BASE = SETTINGS["diffusion_base_model"].default
BASE_SETTING = "diffusion_base_model"
BASE_TASK = "diffusion-base"  # the task part of a base's manager key
# one diffusion model is built at a time: with accelerate installed, from_pretrained builds models inside
# accelerate's init_empty_weights, which patches torch.nn.Module process-wide, so two loads in two threads
# (a base and a ControlNet, say) would put each other's parameters on the meta device
LOAD_LOCK = PROCESS_LOAD_LOCK  # one model load at a time per process (accelerate and diffusers patch torch)


def import_diffusers(tool: str = "this tool") -> Any:
    """The diffusers module (imported once, completely, under the process-wide import lock), or a
    ``UserError`` naming the extra to install."""
    return import_heavy("diffusers", needed_by=tool)


def load_diffusers(tool: ExpertTool, source: str, setting: str, make: Callable[[Any, str, Any], Any], *,
                   device: str, dtype: str, task: str = "") -> Any:
    """Load a diffusers object with ``make(diffusers, location, torch_dtype)`` through ``loading.load_with``
    (its cache lookup and error messages naming ``setting``), moved to ``device``, progress bars off."""
    from ..runtime.models.loading import import_backend

    import_backend()
    diffusers = import_diffusers(tool.name)

    def build(location: str, args: dict[str, Any]) -> Any:
        with LOAD_LOCK, warnings.catch_warnings():  # newer diffusers renamed torch_dtype to dtype
            warnings.simplefilter("ignore", FutureWarning)
            made = make(diffusers, location, args["dtype"])
        made = made.to(device)
        if hasattr(made, "set_progress_bar_config"):
            made.set_progress_bar_config(disable=True)
        return made

    return tool.load_checkpoint(build, device, dtype, source=source, setting=setting, task=task or None)


def build_pipeline(cls: Any, base: Any, **overrides: Any) -> Any:
    """A ``cls`` pipeline on ``base``'s modules (no weight is copied), with ``overrides`` (a UNet, a scheduler...)."""
    import inspect

    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    parts = {k: v for k, v in base.components.items() if k in accepted}
    parts.update(overrides)
    if "requires_safety_checker" in accepted:
        parts["requires_safety_checker"] = parts.get("safety_checker") is not None
    pipe = cls(**parts)
    pipe.set_progress_bar_config(disable=True)
    return pipe


# ---- prompt translation --------------------------------------------------------------------

TRANSLATE_SETTING = "diffusion_translate_prompts"
TRANSLATE_PROMPT = (
    "You translate descriptions of pictures for an image generator that understands English only. Translate "
    "the user's description into natural English, keeping every detail (subject, style, colours, names); if it "
    "is English already, repeat it unchanged. Reply with the English description only: no quotes, no notes."
)
_MAX_TRANSLATION_CHARS = 2000
# common words of Latin-script languages other than English (none of them an English word)
_FOREIGN_WORDS = frozenset("""
le les des une est et dans avec sur pour du au aux très sous chez une qui que où
der das und ein eine einem einer mit auf im ist nicht dem den des zum zur über unter
el los las una con por para del y es muy sobre entre
il lo gli della delle dello nel nella sulla sul una con uno
os um uma com para da dos das em na nas no nos
het een en met op van bij
""".split())
_ENGLISH_WORDS = frozenset("the a an of with on in at by for and is are to from under over".split())
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def needs_translation(text: str) -> bool:
    """Whether a description is not English: a non-Latin script (Han, kana, Hangul, Cyrillic, Arabic ...),
    or Latin-script text with at least two common words of another language and more of them than English ones."""
    if guess_language(text).iso != "en":
        return True
    words = [w.lower() for w in _WORD.findall(text[:2000])]
    foreign = sum(w in _FOREIGN_WORDS for w in words)
    return foreign >= 2 and foreign > sum(w in _ENGLISH_WORDS for w in words)


def translate_prompt(text: str, context: ToolContext) -> tuple[str, str]:
    """``(the description to draw, a note for the observation)``: the calling engine's LLM translates a
    description that is not English; English text, or no LLM, keeps it as it is."""
    if not needs_translation(text):
        return text, ""
    llm = getattr(context, "llm", None)
    if llm is None:
        return text, (f"(The description is not in English and no LLM was available to translate it; it was used "
                      f"as given. Set {TRANSLATE_SETTING}=false to silence this.)\n")
    try:
        if context.budget is not None:
            context.budget.charge_llm()
        response = call_llm(llm, [{"role": "system", "content": TRANSLATE_PROMPT}, {"role": "user", "content": text}])
    except (RunError, LLMError) as exc:
        return text, f"(The description could not be translated into English ({exc}); it was used as given.)\n"
    if context.usage is not None:
        context.usage.calls.append(response.usage)  # counted in the run's RunResult.usage
    reply = " ".join(str(response.text or "").split()).strip().strip("\"'“”‘’`").strip()
    if not reply:
        return text, "(The LLM returned no translation; the description was used as given.)\n"
    reply = reply[:_MAX_TRANSLATION_CHARS]
    return reply, f"(The description was translated into English first: \"{reply}\")\n"


def images_of(result: Any) -> list[Any]:
    """The PIL images of a local pipeline output or a remote answer (image bytes, or JSON with base64 images)."""
    images = getattr(result, "images", None)
    if images is None:
        if isinstance(result, RemoteBlob):
            images = [result]
        elif isinstance(result, list):
            images = [r.get("image") or r.get("generated_image") if isinstance(r, dict) else r for r in result]
        elif isinstance(result, dict):
            images = [result.get("image") or result.get("generated_image")]
    return [decode_image(i).convert("RGB") for i in (images or []) if i is not None]


class DiffusionTool(ExpertTool):
    """A diffusers tool: the shared base, per-tool options (``<tool>_steps`` ...), seeds and sizes.

    ``runs_on_base``: the tool's own model *is* a base (text-to-image, image-to-image: unset, their model is
    ``diffusion_base_model``). ``shares_base``: a call runs on the shared base's modules besides the tool's
    own model (the ControlNet tools always; edit/remove/replace with ``<tool>_share_base``).
    Subclasses implement ``pipeline(model, base)`` (the pipeline of one call) and ``generate(pipe, **inputs)``.
    """

    half_precision = True
    output_kind = "image"
    runs_on_base: ClassVar[bool] = False
    default_steps: ClassVar[int] = 25
    default_guidance: ClassVar[float] = 7.5
    turbo_steps: ClassVar[int] = 0  # > 0: a *turbo* model's default steps (and guidance 0)
    op: ClassVar[str] = "image"  # the op in output names: {uuid}_{op}_{prev}_{org}.png
    needs_context = True  # the calling engine's LLM translates a description that is not English

    def __init__(self, *, base_model: str | None = None, translate_prompts: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self._set_base(base_model)
        self.translate_prompts = bool(translate_prompts)

    @classmethod
    def from_context(cls, context: Any) -> "DiffusionTool":
        tool = cast(DiffusionTool, super().from_context(context))  # ``cls(...)``: a DiffusionTool
        tool._set_base(context.settings.get(BASE_SETTING))
        tool.translate_prompts = bool(context.settings.get(TRANSLATE_SETTING, True))
        return tool

    def _run(self, context: ToolContext = DEFAULT_CONTEXT, **arguments: Any) -> Any:
        """Translate a description that is not English (``diffusion_translate_prompts``), then generate."""
        text = arguments.get("text")
        if not (self.translate_prompts and isinstance(text, str) and text.strip()):
            return super()._run(**arguments)
        self.prepare(arguments)  # a bad input (no image, an empty text) fails before the LLM is asked
        translated, note = translate_prompt(text.strip(), context or DEFAULT_CONTEXT)
        result = super()._run(**{**arguments, "text": translated})
        return ToolResult(note + str(result), value=value_of(result)) if note else result

    def _set_base(self, base_model: Any) -> None:
        text = str(base_model or "").strip()
        if text == DEFAULT_BASE:  # the default, as every app passes it: a base the model folder carries wins
            text = ""
        self.base_configured = bool(text)
        if not text and not self.runs_on_base:  # a model folder that carries its own base (tiny test models)
            bundled = os.path.join(os.path.expanduser(self.model), "base")
            if os.path.isfile(os.path.join(bundled, "model_index.json")):
                text = bundled
        self.base_model = text or DEFAULT_BASE
        if self.runs_on_base and not self.model_configured:
            self.model = self.base_model

    # ---- the base ------------------------------------------------------------------

    @property
    def shares_base(self) -> bool:
        return False

    @property
    def base_key(self) -> tuple[str, str, str, str]:
        """The shared base's manager key: one load per (base model, device, dtype)."""
        return (self.base_model, BASE_TASK, self.device, self.dtype)

    @property
    def model_key(self) -> tuple[str, str, str, str]:
        if self.runs_on_base:  # the model is a base: the same entry as the base of the same id
            return (self.model, BASE_TASK, self.device, self.dtype)
        return super().model_key

    def load_base(self) -> Any:
        """The shared base pipeline of ``diffusion_base_model``, loading it on first use."""
        return self._load_base(self.base_model, self.base_key, BASE_SETTING)

    def _load_base(self, source: str, key: tuple, setting: str) -> Any:
        device, dtype = self.device, self.dtype
        expected = None
        if self.manager.memory_budget_mb > 0 and not self.manager.is_loaded(key):
            from ..runtime.models.loading import checkpoint_mb

            expected = checkpoint_mb(source, self.hf_token, dtype)

        def make(diffusers: Any, location: str, torch_dtype: Any) -> Any:
            return diffusers.AutoPipelineForText2Image.from_pretrained(location, torch_dtype=torch_dtype,
                                                                       token=self.hf_token)

        return self.manager.get(key, lambda: load_diffusers(self, source, setting, make, device=device,
                                                            dtype=dtype, task="text-to-image"),
                                device=device, expected_mb=expected)

    def load_model(self, device: str, dtype: str) -> Any:
        if self.runs_on_base:
            setting = f"{tool_key(self.name)}_model" if self.model_configured else BASE_SETTING

            def make(diffusers: Any, location: str, torch_dtype: Any) -> Any:
                return diffusers.AutoPipelineForText2Image.from_pretrained(location, torch_dtype=torch_dtype,
                                                                           token=self.hf_token)

            return load_diffusers(self, self.model, setting, make, device=device, dtype=dtype, task="text-to-image")
        raise NotImplementedError(f"diffusion tool '{self.name}' does not implement load_model")

    # ---- a call ----------------------------------------------------------------------

    def call_local(self, model: Any, **inputs: Any) -> Any:
        if not self.shares_base:
            return self.generate(self.pipeline(model, None), **inputs)
        base = self.load_base()
        key = self.base_key
        result = self._on_base(base, model, inputs)
        if not self.manager.holds(key, base):  # evicted while this call ran on it: free it now
            del base
            self.manager.reclaim(self.device)
        return result

    def _on_base(self, base: Any, model: Any, inputs: dict[str, Any]) -> Any:
        """Build the call's pipeline on the base and run it; the pipeline is gone when this returns."""
        with self.manager.call_lock(self.base_key):
            return self.generate(self.pipeline(model, base), **inputs)

    def pipeline(self, model: Any, base: Any) -> Any:
        """The pipeline of one call: ``model`` (the tool's own) on ``base`` (None unless ``shares_base``)."""
        return model

    def generate(self, pipe: Any, *args: Any, **inputs: Any) -> Any:  # pragma: no cover - abstract
        """Run ``pipe`` on the call's inputs. ``*args: Any, **inputs: Any`` lets a subclass name the keyword
        inputs it takes (``*, image: str, text: str``)."""
        raise NotImplementedError(f"diffusion tool '{self.name}' does not implement generate")

    def scheduler_for(self, base: Any, kind: str | None = None) -> Any:
        """A fresh scheduler from ``base``'s config (``kind``: a diffusers scheduler class name, or the base's)."""
        import diffusers

        cls = getattr(diffusers, kind) if kind else type(base.scheduler)
        return cls.from_config(base.scheduler.config)

    # ---- options ---------------------------------------------------------------------

    @property
    def turbo(self) -> bool:
        return "turbo" in self.model.lower()

    def sampling(self) -> dict[str, Any]:
        """Steps, guidance and the negative prompt of one call (``<tool>_steps`` 0 / ``guidance_scale`` < 0:
        the tool's defaults, or ``turbo_steps`` and no guidance for *turbo* models)."""
        turbo = self.turbo_steps > 0 and self.turbo
        steps = int(self.options.get("steps", 0)) or (self.turbo_steps if turbo else self.default_steps)
        guidance = float(self.options.get("guidance_scale", -1.0))
        if guidance < 0:
            guidance = 0.0 if turbo else self.default_guidance
        settings: dict[str, Any] = {"num_inference_steps": max(1, steps), "guidance_scale": guidance}
        negative = str(self.options.get("negative_prompt", "")).strip()
        if negative and guidance > 1:
            settings["negative_prompt"] = negative
        return settings

    def generator(self) -> Any:
        """A seeded CPU generator when ``<tool>_seed`` >= 0 (the same picture for the same input), else None."""
        seed = int(self.options.get("seed", -1))
        if seed < 0:
            return None
        import torch

        return torch.Generator("cpu").manual_seed(seed)

    def sizes(self, image: Any) -> tuple[tuple[int, int], tuple[int, int]]:
        """``(output size, generation size)`` for an input image: the input's size, or a long side of
        ``<tool>_size`` with the input's aspect; generation at multiples of 8 (what the pipelines need)."""
        width, height = image.size
        side = int(self.options.get("size", 0) or 0)
        if side > 0:
            scale = side / max(width, height)
            width, height = max(8, round(width * scale)), max(8, round(height * scale))
        return (width, height), (max(8, width // 8 * 8), max(8, height // 8 * 8))

    # ---- output ----------------------------------------------------------------------

    def save_result(self, result: Any, source: str | None, size: tuple[int, int] | None = None) -> tuple[str, Any]:
        """Save the first image of ``result`` (resized to ``size``) under the chained name; ``(name, image)``."""
        from PIL import Image

        images = images_of(result)
        if not images:
            raise ToolExecutionError(f"{self.name}: the model returned no image")
        image = images[0]
        if size and image.size != tuple(size):
            image = image.resize(tuple(size), Image.Resampling.LANCZOS)
        return self.save_image(image, source, self.op), image

    @staticmethod
    def safety_note(result: Any) -> str:
        flagged = getattr(result, "nsfw_content_detected", None)
        if isinstance(flagged, list) and flagged and flagged[0]:
            return " The safety checker flagged it and blanked the image; describe a different picture."
        return ""


_IMAGE_TEXT = {
    "type": "object",
    "properties": {
        "image": {"type": "string", "description": "path of an image file from an earlier observation"},
        "text": {"type": "string", "description": "what to draw or do, in English"},
    },
    "required": ["image", "text"],
    "additionalProperties": False,
}


class ImagePromptTool(DiffusionTool):
    """A diffusion tool that takes an image and a text (image-to-image, edit-image, the ControlNet tools).

    Also accepts Visual ChatGPT's plain form ``image/1a2b3c4d.png, a red car``; a remote endpoint gets the
    image as base64 with ``{"prompt": text, ...}`` as parameters (the Inference API's image-to-image form).
    """

    parameters = _IMAGE_TEXT
    text_example: ClassVar[str] = "a red car in the snow"

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(tool_input, str) and not tool_input.strip().startswith("{") and "," in tool_input:
            image, text = (part.strip() for part in tool_input.split(",", 1))
            return super().parse_arguments({"image": image, "text": text})
        return super().parse_arguments(tool_input)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        text = str(inputs.get("text", "")).strip()
        if not text:
            raise ToolInputError(f"{self.name} needs a text besides the image, e.g. "
                                 f'{{"image": "image/1a2b3c4d.png", "text": "{self.text_example}"}}')
        open_image(inputs["image"])  # not an image: a ToolInputError before anything is loaded
        return {**inputs, "text": text}

    def call_remote(self, endpoint: RemoteEndpoint, *, image: str, text: str) -> Any:
        return endpoint.post_json(image_base64(image), {"prompt": text, **self.sampling()})

    def describe(self, name: str, image: Any, source: str, text: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def render(self, result: Any, *, image: str, text: str) -> str:
        local = getattr(result, "images", None) is not None  # a pipeline's output (remote images keep their size)
        size = self.sizes(open_image(image))[0] if local else None
        name, picture = self.save_result(result, image, size)
        return ToolResult(self.describe(name, picture, self.rel(image), text) + self.safety_note(result), value=name)
