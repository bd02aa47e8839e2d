"""``ExpertTool``: a HuggingFace model as a tool (Visual ChatGPT style, loaded lazily).

How to add an expert tool
-------------------------
1. Subclass ``ExpertTool`` and set the class attributes:
   ``name`` (``"depth-estimation"``), ``task`` (the ``transformers.pipeline``
   task), ``default_model`` (a hub id), ``description`` (Visual ChatGPT style:
   what it does, when to use it, inputs, outputs, an example), ``parameters``
   (a JSON schema; name file parameters ``image``/``audio``/``video`` so they
   are resolved inside the workspace, text ones ``text``/``question``),
   ``output_kind`` (``"image"``/``"audio"`` when the observation names a file
   it wrote), ``half_precision`` (False when the model breaks in float16) and
   ``options`` (extra settings read as ``<tool>_<option>``, typed like their
   default, available as ``self.options[...]``). Set ``hub_task`` (the Hub's
   ``pipeline_tag`` of the models the tool runs, which the planner's model
   selection looks up candidates by) only where it differs from ``task``
   (``image-to-text`` for a captioner run by the ``image-text-to-text`` pipeline).
2. Implement ``call_local(self, model, **inputs)``: run the loaded pipeline
   (``inputs`` are the arguments, file parameters as absolute paths; use
   ``open_image``/``read_wav``) and return its raw result.
3. Implement ``render(self, result, **inputs) -> str``: turn the raw result
   (local, or the remote endpoint's JSON of the same shape) into the
   observation; save made files with ``self.save_image(...)`` /
   ``self.save_audio(...)``, which return the workspace-relative name to show.
4. Optionally override ``call_remote(self, endpoint, **inputs)`` (default: POST
   the one file input as bytes, else ``{"inputs": text}``) and
   ``load_model(self, device, dtype)`` (default: ``transformers.pipeline``;
   override for diffusers or a model class with its processor, building it
   inside ``loading.load_with(build, ...)`` to keep the cache lookup and the
   error messages: see ``vqa.py`` and ``generation.py``).
5. Add ``"name": ("module", "Class", "one line")`` to the family's table in
   ``experts/tables/`` , a tiny-model builder to the family's module in
   ``experts/tiny/`` (and its ``BUILDERS`` table), and tests that build it.

Settings each tool reads (``<tool>`` = name with ``-`` → ``_``): ``<tool>_model``
(hub id or local folder), ``<tool>_device`` / ``expert_load`` / ``expert_device``
(see ``runtime.models.devices``), ``<tool>_endpoint`` + ``hf_token`` (remote),
``expert_memory_budget_mb``, ``workspace_dir``. Nothing is loaded when the
tool is built: the model is loaded through the ``ModelManager`` on first call.
``tool.with_model(model_id)`` is a copy of the tool for another hub id or folder
(same settings and manager), which the planner uses to run a chosen model;
``tool.fixed_model`` says why it must not (an endpoint, or ``<tool>_model`` set).
Each app has its own ``ModelManager`` (its own budget; ``context.models``):
the app's tools share it and ``close()`` leaves models warm; ``tool.unload()``
evicts one, ``tool.manager.clear()`` all of that app's. Tools built alone
(``from_config``) share the process-wide manager of their
``expert_memory_budget_mb`` (``shared_manager(budget)``; without a budget
``default_manager()``), whose budget no other tool or app can change.
Every failure inside a call becomes a ``ToolExecutionError`` (an observation).
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any, ClassVar, Mapping

from ..errors import ConfigError, ModelFeedbackError, ToolExecutionError, ToolInputError, UserError
from ..loadlock import CALL_GATE
from ..runtime import filenames as files
from ..runtime.models.devices import DevicePlan, Placed, normalize_device, plan_device, tool_key
from ..runtime.models.manager import ModelManager, default_manager, manager_of
from ..tools.base import Tool
from .remote import RemoteEndpoint

__all__ = ["ExpertTool", "open_image", "image_base64", "decode_image"]


LONG_TEXT_CHARS = 4000  # a text input longer than this is named when a call fails (models read ~512 tokens)
SMALL_IMAGE_PX = 8      # an image with a side shorter than this is named when a call fails


class ExpertTool(Placed, Tool):
    """Base class of the expert-model tools; see the module docstring for how to add one."""

    task: ClassVar[str] = ""
    # the Hub's pipeline_tag of the models this tool runs: what the planner's model selection (HuggingGPT mode)
    # ranks candidates by; defaults to ``task`` (set by ``__init_subclass__`` when a subclass sets only ``task``)
    hub_task: ClassVar[str] = ""
    default_model: ClassVar[str] = ""
    half_precision: ClassVar[bool] = True
    options: dict[str, Any] = {}  # class level: defaults; instance level: the configured values
    pipeline_kwargs: ClassVar[dict[str, Any]] = {}  # extra keyword arguments for transformers.pipeline

    def __init__(self, *, model: str | None = None, device: str | DevicePlan | None = None,
                 endpoint: str | None = None, hf_token: str | None = None,
                 workspace_dir: str | os.PathLike = "./workspace", options: Mapping[str, Any] | None = None,
                 manager: ModelManager | None = None, proxy: str | None = None, remote_timeout: float = 120.0):
        prefix = tool_key(self.name)
        self.model_configured = bool(model and str(model).strip())  # set by <tool>_model, not the default
        self.model = (model or self.default_model).strip()
        if not self.model:
            raise ConfigError(f"tool '{self.name}' has no model: set {prefix}_model", key=f"{prefix}_model")
        if isinstance(device, DevicePlan):
            self.device_plan = device
        else:
            plain = normalize_device(device, f"{prefix}_device") if device else None
            self.device_plan = DevicePlan(plain, f"{prefix}_device" if plain else "default", self.half_precision)
        self.workspace = Path(workspace_dir).expanduser().resolve()
        self.options = {**type(self).options, **dict(options or {})}
        self.manager = manager or default_manager()
        self.endpoint = (RemoteEndpoint(endpoint, token=hf_token, setting=f"{prefix}_endpoint", proxy=proxy,
                                        timeout=remote_timeout) if endpoint else None)
        self.hf_token = hf_token or None
        self._device: str | None = None  # resolved on first local use

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "hub_task" not in cls.__dict__ and "task" in cls.__dict__:
            cls.hub_task = cls.task

    def with_model(self, model_id: str) -> "ExpertTool":
        """A copy of this tool that runs ``model_id`` (a hub id or a local folder), sharing the manager.

        Device, options, workspace and token are kept. The remote endpoint is kept
        only when ``model_id`` is the tool's own model (an endpoint serves one model).
        Nothing is loaded: the copy loads its model on first call, once per process.
        """
        model_id = str(model_id or "").strip()
        if not model_id:
            key = f"{tool_key(self.name)}_model"
            raise ConfigError(f"tool '{self.name}' needs a model id or folder (like {key})", key=key)
        clone = copy.copy(self)
        clone.options = dict(self.options)
        if model_id != self.model:
            clone.model = model_id
            clone.model_configured = True
            clone.endpoint = None
        return clone

    @property
    def fixed_model(self) -> str | None:
        """Why model selection (the planner) must keep this tool's model; None when it may pick another.

        A remote endpoint serves one model (a copy for another model would run
        locally instead), and a model set by ``<tool>_model`` is the user's choice.
        """
        prefix = tool_key(self.name)
        if self.endpoint is not None:
            return f"{prefix}_endpoint serves this tool's model"
        if self.model_configured:
            return f"set by {prefix}_model"
        return None

    @classmethod
    def from_context(cls, context: Any) -> "ExpertTool":
        """Build for an app: the app's model manager (its own memory budget), its workspace and settings.
        Loads nothing. Alone (``from_config(**kwargs)``), the process-wide manager of its budget is used."""
        prefix = tool_key(cls.name)
        settings = context.settings
        manager = manager_of(context.models, settings)
        return cls(
            model=settings.get(f"{prefix}_model"),
            device=plan_device(cls.name, settings, half_precision=cls.half_precision),
            endpoint=settings.get(f"{prefix}_endpoint"),
            hf_token=settings.get("hf_token"),
            workspace_dir=context.workspace,
            options={k: settings.get(f"{prefix}_{k}", v) for k, v in cls.options.items()},
            proxy=context.http.proxy,
            manager=manager,
        )

    # ---- running -------------------------------------------------------------------

    def _run(self, **arguments: Any) -> str:
        inputs = self.prepare(arguments)
        if self.endpoint is not None and not self.is_loaded():
            result = self._guarded(self.call_remote, self.endpoint, **inputs)
        else:
            key = self.model_key
            model = self._guarded(self.load)
            try:
                with self.manager.call_lock(key), CALL_GATE.calling():  # never beside a dtype-switching load
                    result = self._guarded(self.call_local, model, **inputs)
            finally:
                evicted = not self.manager.holds(key, model)
                del model
                if evicted:  # evicted while this call held it: its memory returns only now
                    self.manager.reclaim(self.device)
        return self._guarded(self.render, result, **inputs)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments with file parameters (image/audio/video) resolved to absolute workspace paths."""
        inputs = dict(arguments)
        for name, kind in self.input_kinds().items():
            if kind != "text" and name in inputs:
                inputs[name] = files.resolve_input(inputs[name], self.workspace, kind)
        return inputs

    def _guarded(self, step: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a step; a failure becomes a ``ToolExecutionError`` (an observation), not a crash."""
        try:
            return step(*args, **kwargs)
        except (ModelFeedbackError, UserError):
            raise
        except Exception as exc:
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            if "out of memory" in text.lower():
                raise ToolExecutionError(
                    f"{self.name} ran out of memory on {self._device}: set {tool_key(self.name)}_device=cpu "
                    f"or a smaller expert_memory_budget_mb") from exc
            if step == self.call_local:
                problem = self._input_problem(kwargs)
                if problem:  # the input, not the model: say what to change
                    raise ToolInputError(f"{self.name} could not use its input: {problem}") from exc
            message = f"{self.name} failed: {type(exc).__name__}: {text}"
            if step == self.call_local and isinstance(exc, (AttributeError, TypeError, KeyError, IndexError)):
                # the usual cause: a model made for another task
                message += (f"; check that {tool_key(self.name)}_model ({self.model}) is a model for "
                            f"the {self.task!r} task")
            raise ToolExecutionError(message) from exc

    def _input_problem(self, inputs: Mapping[str, Any]) -> str | None:
        """After a failed call: an input a model of this kind cannot take (text far longer than models of
        this kind read, an image too small to look at), in words; None when the inputs look ordinary."""
        kinds = self.input_kinds()
        for name, value in inputs.items():
            kind = kinds.get(name, "text")
            if kind == "text" and isinstance(value, str) and len(value) > LONG_TEXT_CHARS:
                return (f"its {name} is {len(value):,} characters long, far more than this model reads at once: "
                        f"shorten it to a sentence or a short paragraph")
            if kind == "image" and isinstance(value, str):
                try:
                    from PIL import Image

                    with Image.open(value) as image:
                        width, height = image.size
                except Exception:  # noqa: BLE001 - not readable: that is said elsewhere
                    continue
                if min(width, height) < SMALL_IMAGE_PX:
                    return (f"the image {self.rel(value)} is {width}x{height} pixels, too small for this "
                            f"model: use an image at least {SMALL_IMAGE_PX} pixels on each side")
        return None

    # ---- the model -----------------------------------------------------------------

    @property
    def model_key(self) -> tuple[str, str, str, str]:
        """What the manager caches on: one load per (model, task, device, dtype) per process."""
        return (self.model, self.task, self.device, self.dtype)

    def is_loaded(self) -> bool:
        """Whether the model is warm, without importing torch when nothing has loaded it."""
        if self._device is None and self.device_plan.device is None and "torch" not in sys.modules:
            return False
        return self.manager.is_loaded(self.model_key)

    def load(self) -> Any:
        """The warm model, loading it on first use (call it to warm up ahead of time).

        Under a memory budget, the size of the checkpoint files is the expected size
        of a first load, so the manager makes room before loading, not after.
        """
        device, dtype, key = self.device, self.dtype, self.model_key
        expected = None
        if self.manager.memory_budget_mb > 0 and not self.manager.is_loaded(key):
            from ..runtime.models.loading import checkpoint_mb

            expected = checkpoint_mb(self.model, self.hf_token, dtype)
        return self.manager.get(key, lambda: self.load_model(device, dtype), device=device, expected_mb=expected)

    def unload(self) -> bool:
        """Evict this tool's model from the manager; True when it was loaded."""
        return self.is_loaded() and self.manager.evict(self.model_key)

    @property
    def device_setting(self) -> str:
        """The setting that chose this tool's device (load errors name it)."""
        return self.device_plan.source if self.device_plan.device else "expert_device"

    def load_model(self, device: str, dtype: str) -> Any:
        """Build the model object; the default is ``transformers.pipeline(self.task, ...)``."""
        from ..runtime.models.loading import load_pipeline

        return load_pipeline(self.task, self.model, device=device, dtype=dtype, tool=self.name,
                             setting=f"{tool_key(self.name)}_model", device_setting=self.device_setting,
                             token=self.hf_token, **self.pipeline_kwargs)

    def load_checkpoint(self, build: Any, device: str, dtype: str, *, source: str | None = None,
                        setting: str | None = None, task: str | None = None) -> Any:
        """``loading.load_with(build, ...)`` for this tool: its model (or ``source``), its token, and its
        ``<tool>_model`` (or ``setting``), device setting and task named in the errors."""
        from ..runtime.models.loading import load_with

        return load_with(build, self.model if source is None else source, device=device, dtype=dtype,
                         tool=self.name, setting=setting or f"{tool_key(self.name)}_model",
                         device_setting=self.device_setting, token=self.hf_token, task=task or self.task)

    # ---- what subclasses implement ---------------------------------------------------
    # ``*args: Any, **inputs: Any`` lets a subclass name the keyword inputs it takes (``*, image: str``)

    def call_local(self, model: Any, *args: Any, **inputs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"expert tool '{self.name}' does not implement call_local")

    def call_remote(self, endpoint: RemoteEndpoint, *args: Any, **inputs: Any) -> Any:
        """POST the one file input as bytes, else ``{"inputs": <the text input>}``."""
        kinds = self.input_kinds()
        file_inputs = [inputs[n] for n, k in kinds.items() if k != "text" and n in inputs]
        if len(file_inputs) == 1 and len(inputs) == 1:
            return endpoint.post_file(file_inputs[0])
        if len(inputs) == 1:
            return endpoint.post_json(next(iter(inputs.values())))
        raise ToolExecutionError(f"{self.name} cannot run on a remote endpoint with several inputs; "
                                 f"unset {tool_key(self.name)}_endpoint to run it locally")

    def render(self, result: Any, *args: Any, **inputs: Any) -> str:  # pragma: no cover - abstract
        raise NotImplementedError(f"expert tool '{self.name}' does not implement render")

    # ---- helpers for subclasses -----------------------------------------------------

    def rel(self, path: str | os.PathLike) -> str:
        """A workspace path as the observation shows it (relative, ``/`` separators)."""
        return files.relative(path, self.workspace)

    def save_image(self, image: Any, input_path: str | os.PathLike | None, op: str) -> str:
        """Save a PIL image under the chained output name (or a fresh one); returns the relative name."""
        name = (files.output_path(self.rel(input_path), op, "png") if input_path
                else files.new_path(self.workspace, "image", "png"))
        target = self.workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        image.save(target, "PNG")
        return name

    def save_video(self, frames: Any, input_path: str | os.PathLike | None, op: str, *, fps: float = 8.0,
                   ext: str = "gif") -> str:
        """Save RGB frames as a video (``gif`` through Pillow, ``mp4`` through PyAV) under the chained output
        name (or a fresh ``video/{uuid}.{ext}``); returns the relative name."""
        from ..runtime.video_io import write_video

        name = (files.output_path(self.rel(input_path), op, ext) if input_path
                else files.new_path(self.workspace, "video", ext))
        target = self.workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_video(frames, target, fps=fps)
        return name

    def save_audio(self, samples: Any, sampling_rate: int, input_path: str | os.PathLike | None, op: str) -> str:
        """Save audio samples as WAV under the chained output name (or a fresh one)."""
        name = (files.output_path(self.rel(input_path), op, "wav") if input_path
                else files.new_path(self.workspace, "audio", "wav"))
        target = self.workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        files.write_wav(target, samples, sampling_rate)
        return name


def open_image(path: str | os.PathLike) -> Any:
    """A PIL RGB image, or ``ToolInputError`` when the file is not an image."""
    from PIL import Image, UnidentifiedImageError

    from ..errors import ToolInputError
    from ..runtime.filenames import IMAGE_FORMATS, check_pixels

    try:
        with Image.open(path, formats=IMAGE_FORMATS) as image:  # no EPS (Ghostscript) and the like
            check_pixels(image, os.path.basename(path))  # before decoding: decompression bombs
            return _as_rgb(image)
    except (UnidentifiedImageError, OSError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise ToolInputError(f"file '{os.path.basename(path)}' is not an image this tool can read ({reason}); "
                             f"hand over the image again, as PNG or JPEG") from None


def _as_rgb(image: Any) -> Any:
    """RGB, with 16-bit and float greyscale (``I;16``, ``I``, ``F``: depth maps, medical and scientific
    images) scaled into 8 bits; a plain ``convert("RGB")`` clips everything above 255 to white."""
    if image.mode not in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        return image.convert("RGB")
    import numpy as np
    from PIL import Image

    values = np.asarray(image, dtype=np.float64)
    top = float(values.max()) if values.size else 0.0
    if image.mode.startswith("I;16") or 255 < top <= 65535:
        values = values / 257.0  # 16-bit: 65535 -> 255
    elif image.mode == "F" and top <= 1.0:
        values = values * 255.0  # float in [0, 1]
    elif top > 65535:
        values = values * (255.0 / top)
    return Image.fromarray(np.clip(values, 0, 255).astype(np.uint8), "L").convert("RGB")


def image_base64(path: str | os.PathLike) -> str:
    """A file's bytes as base64 text (how the inference API takes an image inside a JSON body)."""
    import base64

    with open(path, "rb") as fh:
        return base64.b64encode(fh.read()).decode("ascii")


def decode_image(data: Any) -> Any:
    """A PIL image from a remote answer: a ``RemoteBlob``, bytes, base64 text (or a ``data:`` URL), or an image.

    Raises ``ValueError`` when it is none of these (the caller's ``_guarded`` makes it an observation).
    """
    import base64
    import binascii
    import io

    from PIL import Image, UnidentifiedImageError

    if hasattr(data, "save") and hasattr(data, "size"):
        return data  # already a PIL image
    raw = getattr(data, "data", data)
    if isinstance(raw, str):
        text = raw.split(",", 1)[1] if raw.startswith("data:") else raw
        try:
            raw = base64.b64decode(text, validate=False)
        except (binascii.Error, ValueError):
            raise ValueError("the endpoint sent an image that is not valid base64") from None
    if not isinstance(raw, (bytes, bytearray)):
        raise ValueError(f"the endpoint sent {type(raw).__name__} where an image was expected")
    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            return image.copy()
    except (UnidentifiedImageError, OSError):
        raise ValueError("the endpoint sent bytes that are not an image") from None
