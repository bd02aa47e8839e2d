"""Model selection for expert tasks: by the LLM (HuggingGPT), by downloads, or by embedding similarity.

Candidates are the catalog's models for the tool (:meth:`Catalog.candidates`),
most downloaded first, cut to ``top_k``. A tool without ``with_model`` or with
a single candidate needs no choice (and no LLM call), nor does one whose model
is fixed (``tool.fixed_model``: an expert tool with an endpoint or a
``<tool>_model`` setting keeps its own model; the catalog's ``fixed`` table: an
annotator's own detector), nor a task the app's own LLM answers. In ``"llm"``
mode an id that is not among the candidates falls back to the most downloaded
one: a model id from the LLM is never used unchecked.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..config import SETTINGS
from ..engine.prompts import PromptSet
from ..errors import ConfigError
from ..llm.base import Message
from ..runtime.models.manager import ModelManager
from ..tools.base import Tool
from .binding import placeholders
from .catalog import Catalog, ModelInfo, fixed_model_reason, supports_model_selection
from .jsonish import CutOffJSON, NoJSON, extract_json
from .plan import Task
from .results import Assignment

if TYPE_CHECKING:
    from .embedding import Embedder

__all__ = ["SELECTION_MODES", "ModelSelector"]

SELECTION_MODES = ("llm", "downloads", "embedding")
_DESCRIPTION_CHARS = 100  # HuggingGPT's max_description_length
AskLLM = Callable[[list[Message]], str]


class ModelSelector:
    """Assigns a model to each task of a plan."""

    def __init__(self, catalog: Catalog, mode: str = SETTINGS["planner_model_selection"].default,
                 top_k: int = SETTINGS["planner_top_k"].default, *, embedder: Any = None,
                 models: ModelManager | None = None):
        """``embedder``: any object with ``similarities(query, texts)`` for the ``"embedding"`` mode (default:
        the packaged MiniLM, made on first use and held by ``models``, the app's model manager)."""
        if mode not in SELECTION_MODES:
            raise ConfigError(f"planner_model_selection must be one of {', '.join(SELECTION_MODES)}, not {mode!r}",
                              key="planner_model_selection")
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigError("planner_top_k must be a whole number >= 1", key="planner_top_k")
        self.catalog = catalog
        self.mode = mode
        self.top_k = top_k
        self._embedder = embedder
        self._models = models
        self._own_embedder: Embedder | None = None  # the one this selector made: close() frees it
        self._lock = threading.Lock()

    def embedder(self) -> Any:
        """The embedding model of the ``"embedding"`` mode: the one given, else the packaged MiniLM in the
        app's model manager (made on first use; nothing loads until it is asked for similarities)."""
        with self._lock:
            if self._embedder is None:
                from .embedding import Embedder

                self._embedder = self._own_embedder = Embedder(manager=self._models)
            return self._embedder

    def close(self) -> None:
        """Free the embedding model this selector made (a given embedder is its owner's to close)."""
        with self._lock:
            own, self._own_embedder = self._own_embedder, None
            if own is not None:
                self._embedder = None
        if own is not None:
            own.close()

    def candidates(self, tool: Tool) -> list[ModelInfo]:
        return self.catalog.candidates(tool, self.top_k)

    def needs_llm(self, tool: Tool) -> bool:
        """True when this task costs a selection call."""
        return self.mode == "llm" and len(self.candidates(tool)) >= 2

    def assign(self, task: Task, tool: Tool, query: str, prompts: PromptSet,
               ask_llm: AskLLM | None = None) -> Assignment:
        candidates = self.candidates(tool)
        ids = tuple(c.id for c in candidates)
        if not candidates:
            if getattr(tool, "runs_on_app_llm", False):
                return Assignment(task.id, tool.name, None, "answered by the app's own LLM", "single")
            fixed = fixed_model_reason(tool) or (self.catalog.fixed_reason(tool) if supports_model_selection(tool)
                                                 else None)
            own = getattr(tool, "model", None)
            if fixed and isinstance(own, str) and own:
                return Assignment(task.id, tool.name, own, f"the tool's own model: {fixed}", "single", (own,))
            if fixed:
                return Assignment(task.id, tool.name, None, f"nothing to choose: {fixed}", "single")
            reason = ("the tool has no model to choose" if not supports_model_selection(tool)
                      else "no catalog models for this task; the tool's own model is used")
            return Assignment(task.id, tool.name, None, reason, "single")
        if len(candidates) == 1:
            return Assignment(task.id, tool.name, ids[0], "the only candidate model for this task", "single", ids)
        if self.mode == "downloads":
            top = candidates[0]
            return Assignment(task.id, tool.name, top.id, f"the most downloaded {top.task} model "
                              f"({top.downloads:,} downloads)", "downloads", ids)
        if self.mode == "embedding":
            return self._by_embedding(task, tool, query, candidates)
        if ask_llm is None:
            raise ValueError("llm selection needs ask_llm")
        return self._by_llm(task, tool, query, candidates, prompts, ask_llm)

    # ---- modes ---------------------------------------------------------------------------

    def _by_llm(self, task: Task, tool: Tool, query: str, candidates: Sequence[ModelInfo], prompts: PromptSet,
                ask_llm: AskLLM) -> Assignment:
        ids = tuple(c.id for c in candidates)
        task_json = json.dumps(task.as_dict(), ensure_ascii=False)
        metas = json.dumps([{"id": c.id, "likes": c.likes, "downloads": c.downloads,
                             "description": c.description[:_DESCRIPTION_CHARS]} for c in candidates],
                           ensure_ascii=False)
        messages: list[Message] = [
            {"role": "system", "content": prompts.render("select_system")},
            {"role": "user", "content": query},
            {"role": "assistant", "content": prompts.render("select_task", task=task_json)},
            {"role": "user", "content": prompts.render("select_request", candidates=metas, task=task_json)},
        ]
        reply = ask_llm(messages)
        chosen, reason = _read_choice(reply)
        match = _match_id(chosen, ids)
        if match is not None:
            return Assignment(task.id, tool.name, match, reason or "chosen by the LLM", "llm", ids)
        said = f"the LLM chose {chosen!r}, which is not a candidate" if chosen else "the LLM's choice was unreadable"
        return Assignment(task.id, tool.name, ids[0], f"{said}; using the most downloaded candidate", "llm", ids)

    def _by_embedding(self, task: Task, tool: Tool, query: str, candidates: Sequence[ModelInfo]) -> Assignment:
        ids = tuple(c.id for c in candidates)
        request = " ".join([query, *_literal_texts(task)])
        scores = self.embedder().similarities(request, [f"{c.id}: {c.description}" for c in candidates])
        best = max(range(len(candidates)), key=lambda i: (scores[i], -i))
        ranked = tuple(ids[i] for i in sorted(range(len(ids)), key=lambda i: -scores[i]))
        return Assignment(task.id, tool.name, ids[best], f"its description is the closest to the request "
                          f"(cosine similarity {scores[best]:.2f})", "embedding", ranked)


def _read_choice(reply: str) -> tuple[str, str]:
    try:
        value, _, _ = extract_json(reply, "object")
    except (NoJSON, CutOffJSON):
        return "", ""
    chosen = value.get("id") or value.get("model") or value.get("model_id") or ""
    return str(chosen).strip(), str(value.get("reason") or "").strip()


def _match_id(chosen: str, ids: Sequence[str]) -> str | None:
    if not chosen:
        return None
    if chosen in ids:
        return chosen
    low = chosen.lower()
    for candidate in ids:
        if candidate.lower() == low:
            return candidate
    return None


def _literal_texts(task: Task) -> list[str]:
    """The task's own text arguments (not placeholders): what this step is about."""
    texts = []
    for key, value in task.args.items():
        if isinstance(value, str) and not placeholders(value) and key not in ("image", "audio", "video"):
            texts.append(value)
    return texts
