"""Build a ``transformers.pipeline`` for an expert tool, with errors that say what to fix.

torch and transformers are imported here, inside functions, never at import
time. A hub id is first looked up in the local Hugging Face cache only (no
network, no retries); when it is not there and the process is not offline
(``HF_HUB_OFFLINE``), transformers downloads it, with huggingface_hub's
progress bars on stderr.

Heavy libraries are imported once per process, under one lock, and completely
(``import_heavy``): transformers and diffusers are lazy modules whose
attributes appear as their submodules load, so a thread that imports
``transformers`` while another one is still importing it can see a module
without ``pipeline``. The first import resolves the attributes the tools use
before any other thread gets the module.

A loaded model that still holds tensors on the ``meta`` device (the weights
never arrived: a checkpoint without them, or a load disturbed by another
one) raises a ``ToolExecutionError`` and is never cached (``meta_tensors``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import struct
import sys
import threading
from importlib import import_module
from typing import Any, Callable, Iterable

from ...errors import ToolExecutionError, UserError
from ...loadlock import CALL_GATE
from . import progress
from .manager import meta_error

__all__ = ["import_backend", "import_heavy", "load_pipeline", "load_with", "is_offline", "looks_like_path",
           "checkpoint_mb", "meta_error", "token_limit", "INSTALL_HINT", "EXTRA_HINTS"]

log = logging.getLogger("chatgpt_tool_hub.experts")

INSTALL_HINT = 'pip install "chatgpt-tool-hub[experts]"'
# the extra that installs each heavy library
EXTRA_HINTS = {"torch": INSTALL_HINT, "transformers": INSTALL_HINT,
               "diffusers": 'pip install "chatgpt-tool-hub[diffusion]"'}
# lazy attributes resolved by the first import, before any other thread sees the module
_RESOLVE = {
    "transformers": ("pipeline", "AutoConfig", "AutoModel", "AutoProcessor", "AutoTokenizer",
                     "AutoImageProcessor", "AutoFeatureExtractor", "PreTrainedModel", "PretrainedConfig"),
    "diffusers": ("DiffusionPipeline", "AutoPipelineForText2Image", "AutoPipelineForImage2Image",
                  "AutoPipelineForInpainting", "ModelMixin", "SchedulerMixin"),
}
# what a heavy library needs imported first (also under the lock)
_NEEDS = {"transformers": ("torch",), "diffusers": ("torch", "transformers")}

_import_lock = threading.RLock()  # one for the process: heavy imports never run in two threads at once
_imported: dict[str, Any] = {}  # name -> module, once fully imported


def import_heavy(name: str, *, needed_by: str = "", resolve: Iterable[str] = ()) -> Any:
    """The module ``name`` (torch, transformers, diffusers...), imported once per process, completely.

    Runs under one process-wide lock; the first import also imports what the
    library needs (torch before transformers) and touches its lazy attributes
    (``transformers.pipeline``, ``diffusers.DiffusionPipeline``... and
    ``resolve``), so no thread ever gets a half-initialised module. Later calls
    are a dict lookup. A missing package raises a ``UserError`` that names the
    extra to install (``needed_by`` says what needs it, e.g. ``text-to-image``).
    """
    module = _imported.get(name)
    extra = tuple(resolve)
    if module is not None and sys.modules.get(name) is module and all(hasattr(module, a) for a in extra):
        return module
    with _import_lock:
        try:
            for first in _NEEDS.get(name, ()):
                import_heavy(first, needed_by=needed_by)
            module = import_module(name)
            for attribute in (*_RESOLVE.get(name, ()), *extra):
                try:
                    getattr(module, attribute)  # imports the submodule behind a lazy attribute
                except Exception as exc:  # an optional part missing: the tools that need it will say so
                    log.debug("%s.%s is not available: %s", name, attribute, _first_line(exc))
        except ImportError as exc:
            hint = EXTRA_HINTS.get(name, f"pip install {name}")
            who = needed_by or ("expert tools" if name in ("torch", "transformers") else "this tool")
            verb = "need" if who == "expert tools" else "needs"
            raise UserError(f"{who} {verb} {name}, which is not installed ({exc.name or exc}): {hint}") from exc
        _imported[name] = module
    return module


def import_backend(extras: Iterable[str] = ()) -> tuple[Any, ...]:
    """``(torch, transformers)``, then one module per name in ``extras`` (``("diffusers",)``).

    Imported through :func:`import_heavy` (once, under the process-wide import
    lock). A missing package raises a ``UserError`` naming the extra to install.
    """
    try:
        torch = import_heavy("torch")
        transformers = import_heavy("transformers")
    except UserError as exc:
        raise UserError(f"expert tools need torch and transformers, which are not installed "
                        f"({_missing(exc)}): {INSTALL_HINT}") from exc.__cause__
    return (torch, transformers, *(import_heavy(name) for name in extras))


def _missing(exc: UserError) -> str:
    cause = exc.__cause__
    return str(getattr(cause, "name", None) or cause or exc)


def is_offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def looks_like_path(source: str) -> bool:
    """A local path rather than a hub id (``org/name``)."""
    return (source.startswith(("/", "./", "../", "~", "\\", "."))
            or (len(source) > 1 and source[1] == ":")
            or source.count("/") > 1
            or os.path.exists(source))


def token_limit(tokenizer: Any, config: Any = None, fallback: int = 512) -> int:
    """The most tokens the model reads: the tokenizer's ``model_max_length`` unless it is the "no limit" stand-in
    (1e30), else the config's positions, else ``fallback``."""
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < 1_000_000:
        return limit
    for name in ("max_position_embeddings", "n_positions", "max_source_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value - 2 if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert") else value
    return fallback


def load_pipeline(task: str, source: str, *, device: str, dtype: str, tool: str, setting: str,
                  device_setting: str = "expert_device", token: str | None = None, **kwargs: Any) -> Any:
    """``transformers.pipeline(task, model=source, device=device, dtype=dtype, **kwargs)``.

    ``tool`` and ``setting`` (e.g. ``image_captioning_model``) name what to fix
    in error messages. Raises ``ToolExecutionError`` when the model cannot be
    loaded and ``UserError`` when a Python package is missing.
    """
    _, transformers = import_backend()

    def build(location: str, args: dict[str, Any]) -> Any:
        return transformers.pipeline(task, model=location, **kwargs, **args)

    return load_with(build, source, device=device, dtype=dtype, tool=tool, setting=setting,
                     device_setting=device_setting, token=token, task=task)


def load_with(build: Callable[[str, dict[str, Any]], Any], source: str, *, device: str, dtype: str, tool: str,
              setting: str, device_setting: str = "expert_device", token: str | None = None,
              task: str = "") -> Any:
    """Load a model with ``build(location, args)``, with the same lookup and errors as :func:`load_pipeline`.

    ``location`` is a local folder (``source`` itself, or the cached snapshot of
    a hub id) or, when the hub id is not cached and the process is online, the
    hub id (``build`` then downloads it). ``args`` holds ``device``, ``dtype``
    (a ``torch.dtype``) and ``token`` when one is set. Use it for models that are
    not a plain ``transformers.pipeline`` (a diffusers pipeline, a model class
    with its processor).
    """
    torch, _ = import_backend()
    local = os.path.expanduser(source)
    is_dir = os.path.isdir(local)
    if not is_dir and looks_like_path(source):
        raise ToolExecutionError(f"could not load model {source!r} for {tool}: no such folder; "
                                 f"set {setting} to a folder made by save_pretrained or to a hub id")
    args: dict[str, Any] = {"device": device, "dtype": getattr(torch, dtype)}
    if token:
        args["token"] = token
    label = f"{source} for {tool} on {device}"

    switches = args["dtype"] != torch.get_default_dtype()  # e.g. float16 on CUDA: built with that default

    def built(location: str) -> Any:
        with CALL_GATE.switching(label) if switches else contextlib.nullcontext():
            value = build(location, args)
        error = meta_error(value, f"model {source!r} for {tool}", setting)
        if error:
            raise ToolExecutionError(error)
        return value

    try:
        folder = local if is_dir else _cached_snapshot(source, token)
        if folder is not None:
            try:
                with progress.loading(label):
                    return built(folder)
            except OSError:
                if is_dir or is_offline():
                    raise  # otherwise a partial cache: let the hub complete it below
        elif is_offline():
            raise OSError(f"{source} is not in the Hugging Face cache")
        log.info("%s is not in the Hugging Face cache: downloading it (progress on stderr)", source)
        return built(source)
    except ImportError as exc:
        raise UserError(f"loading {source!r} for {tool} needs a package that is not installed: "
                        f"{_first_line(exc)} (or set {setting} to another model)") from exc
    except OSError as exc:
        raise ToolExecutionError(_not_found(source, tool, setting, exc, is_dir)) from exc
    except (AssertionError, RuntimeError) as exc:
        if "cuda" in str(exc).lower() or "device" in str(exc).lower():
            raise ToolExecutionError(f"could not load model {source!r} for {tool} on {device}: "
                                     f"{_first_line(exc)}; set {device_setting} (e.g. cpu)") from exc
        raise ToolExecutionError(f"could not load model {source!r} for {tool}: {_first_line(exc)}") from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ToolExecutionError(f"could not load model {source!r} for {tool}: {_first_line(exc)}; "
                                 f"set {setting} to a model that supports the {task or tool!r} task") from exc


_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
_VARIANT = re.compile(r"\.(fp16|fp32|bf16|fp8|int8|non_ema|ema)\.", re.I)
_FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def checkpoint_mb(source: str, token: str | None = None, dtype: str | None = None) -> float | None:
    """The size in MB of a model's weights: a local folder or a cached hub id (no network).

    An estimate of its memory before a first load. Each folder counts one copy
    of the weights: safetensors when there are some (else .bin/.pt/...), and
    variants (``*.fp16.safetensors``) only when the folder holds nothing else.
    With ``dtype`` (``"float16"``...), the floating-point tensors of safetensors
    files count at that width, as they will be loaded. ``None`` when the model
    is not on this machine.
    """
    local = os.path.expanduser(source)
    folder = local if os.path.isdir(local) else (None if looks_like_path(source) else _cached_snapshot(source, token))
    if not folder:
        return None
    width = _DTYPE_BYTES.get(str(dtype or ""))
    total = 0
    for root, _, names in os.walk(folder):
        weights = [n for n in names if n.endswith(_WEIGHTS)]
        preferred = [n for n in weights if n.endswith(".safetensors")] or weights
        for name in [n for n in preferred if not _VARIANT.search(n)] or preferred:
            total += _weights_bytes(os.path.join(root, name), width)
    return total / (1024 * 1024) if total else None


def _weights_bytes(path: str, width: int | None) -> int:
    """A weights file's size; for safetensors with ``width``, floats counted at that many bytes each."""
    try:
        size = os.path.getsize(path)  # follows the hub cache's symlinks
    except OSError:
        return 0
    if width is None or not path.endswith(".safetensors"):
        return size
    try:
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if not 0 < length <= min(size, 100 * 1024 * 1024):
                return size
            header = json.loads(fh.read(length))
        total = 0
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            stored = int(end) - int(start)
            own = _FLOAT_BYTES.get(info.get("dtype"))
            total += stored // own * width if own else stored
        return total
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        return size  # not a header we can read: the file size will do


def _cached_snapshot(repo_id: str, token: str | None) -> str | None:
    """The cached snapshot folder of a hub id, without touching the network; None when not cached."""
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo_id, local_files_only=True, token=token or None)
    except Exception:  # not cached, not a valid id, or an old huggingface_hub
        return None


def _not_found(source: str, tool: str, setting: str, exc: BaseException, is_dir: bool) -> str:
    if is_dir:
        return (f"could not load model {source!r} for {tool}: the folder is incomplete or unreadable "
                f"({_first_line(exc)}); set {setting} to a folder made by save_pretrained")
    kind = type(exc).__name__.lower()
    text = str(exc).lower()
    if "repositorynotfound" in kind or "is not a valid model identifier" in text or "404" in text:
        why = "no such model on the Hugging Face hub"
    elif is_offline():
        why = "not found locally and the hub is unreachable (offline mode is on)"
    else:
        why = "not found locally and the hub is unreachable"
    return f"could not load model {source!r} for {tool}: {why}; set {setting} to a local path"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
