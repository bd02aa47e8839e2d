"""The model catalog: candidate HuggingFace models per task, ranked by downloads.

The bundled ``catalog.json`` is a snapshot (id, task, downloads, likes, a
one-line description, and ``requires``: packages a model needs beyond the
experts extra, such as ``timm``; such a model is a candidate only when they
are installed). A tool's candidates are the entries whose task is the
tool's ``hub_task`` (the Hub's pipeline tag of the models it runs), else its
``task`` attribute, else its name, else an alias of one of these
(``image-captioning`` → ``image-to-text``). A tool whose ``fixed_model`` gives a
reason (an expert tool with an endpoint or a ``<tool>_model`` setting) has no
candidates: its own model runs.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import UserError

__all__ = ["ModelInfo", "Catalog", "load_catalog", "supports_model_selection", "fixed_model_reason"]


@dataclass(frozen=True)
class ModelInfo:
    id: str
    task: str
    downloads: int = 0
    likes: int = 0
    description: str = ""
    requires: tuple[str, ...] = ()  # Python packages the model needs beyond the experts extra (e.g. "timm")

    def as_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "task": self.task, "downloads": self.downloads, "likes": self.likes,
               "description": self.description}
        if self.requires:
            out["requires"] = list(self.requires)
        return out

    @property
    def runnable(self) -> bool:
        """Whether every package in ``requires`` is installed (looked up, not imported)."""
        return all(_installed(name) for name in self.requires)


class Catalog:
    """Models by task. Build one from entries, or use :func:`load_catalog`."""

    def __init__(self, models: Iterable[ModelInfo | Mapping[str, Any]], aliases: Mapping[str, str] | None = None):
        self.models: list[ModelInfo] = [m if isinstance(m, ModelInfo) else _entry(m) for m in models]
        self.aliases = dict(aliases or {})
        self._by_task: dict[str, list[ModelInfo]] = {}
        for model in self.models:
            self._by_task.setdefault(model.task, []).append(model)
        for group in self._by_task.values():
            group.sort(key=lambda m: (-m.downloads, -m.likes, m.id))

    @property
    def tasks(self) -> list[str]:
        return sorted(self._by_task)

    def task_of(self, tool: Any) -> str | None:
        """The catalog task a tool belongs to, or ``None``."""
        keys = [k for k in (getattr(tool, "hub_task", None), getattr(tool, "task", None), getattr(tool, "name", None))
                if isinstance(k, str)]
        for key in keys:
            if key in self._by_task:
                return key
        for key in keys:
            if self.aliases.get(key) in self._by_task:
                return self.aliases[key]
        return None

    def for_task(self, task: str | None) -> list[ModelInfo]:
        """Every model of ``task``, most downloaded first."""
        return list(self._by_task.get(task or "", ()))

    def candidates(self, tool: Any, top_k: int | None = None) -> list[ModelInfo]:
        """The tool's candidate models, most downloaded first; none when it cannot switch models."""
        if not supports_model_selection(tool):
            return []
        ranked = [m for m in self.for_task(self.task_of(tool)) if m.runnable]
        return ranked[:top_k] if top_k else ranked

    def __len__(self) -> int:
        return len(self.models)


def supports_model_selection(tool: Any) -> bool:
    """Duck typing: an expert tool offers ``with_model(model_id) -> Tool`` and its model is not fixed."""
    return callable(getattr(tool, "with_model", None)) and fixed_model_reason(tool) is None


def fixed_model_reason(tool: Any) -> str | None:
    """Why a tool's own model must be kept (``tool.fixed_model``: an endpoint, a model setting), or None."""
    reason = getattr(tool, "fixed_model", None)
    return reason if isinstance(reason, str) and reason.strip() else None


@lru_cache(maxsize=None)
def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _entry(raw: Mapping[str, Any]) -> ModelInfo:
    try:
        requires = raw.get("requires") or ()
        requires = (requires,) if isinstance(requires, str) else tuple(str(r) for r in requires)
        return ModelInfo(id=str(raw["id"]), task=str(raw["task"]), downloads=int(raw.get("downloads") or 0),
                         likes=int(raw.get("likes") or 0), description=str(raw.get("description") or ""),
                         requires=requires)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"a catalog entry needs id, task and numeric downloads/likes; got {dict(raw)!r} ({exc})") \
            from None


def load_catalog(source: Catalog | str | Path | Sequence[Mapping[str, Any]] | None = None) -> Catalog:
    """The bundled catalog (``None``), a ``Catalog``, a JSON file path, or a list of entries."""
    if source is None:
        return _bundled()
    if isinstance(source, Catalog):
        return source
    if isinstance(source, (str, Path)):
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read the model catalog {str(source)!r}: {exc}") from None
        return _from_data(data)
    if isinstance(source, Sequence):
        return Catalog(source)
    raise UserError("catalog must be None, a Catalog, a JSON file path or a list of {id, task, ...} entries")


@lru_cache(maxsize=1)
def _bundled() -> Catalog:
    text = resources.files("chatgpt_tool_hub.planner").joinpath("catalog.json").read_text("utf-8")
    return _from_data(json.loads(text))


def _from_data(data: Any) -> Catalog:
    if isinstance(data, list):
        return Catalog(data)
    if isinstance(data, Mapping) and isinstance(data.get("models"), list):
        return Catalog(data["models"], data.get("aliases"))
    raise UserError('a catalog file is a JSON list of entries or {"models": [...], "aliases": {...}}')
