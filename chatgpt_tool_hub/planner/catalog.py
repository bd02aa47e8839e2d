"""The model catalog: candidate HuggingFace models per tool, ranked by downloads, and the task names.

The bundled ``catalog.json`` is a snapshot. A model entry has ``id``,
``task`` (the Hub pipeline tag of the tools that run it, as their
``hub_task`` declares it), ``downloads``, ``likes``, a one-line
``description``, ``requires`` (packages a model needs beyond the experts
extra, such as ``timm``: such a model is a candidate only when they are
installed) and ``tools`` (the names of the tools that can run it).

A tool's candidates are the entries whose ``tools`` name it; a tool that no
entry names takes the entries *without* ``tools`` whose task is the tool's
``hub_task``, else its ``task`` attribute, else its name, else an alias of one
of these (``image-captioning`` → ``image-to-text``). So two tools of one Hub
tag (``image-to-image``: SD img2img and InstructPix2Pix) never get each
other's checkpoints, while a catalog of plain ``{id, task}`` entries works as
before. A tool whose ``fixed_model`` gives a reason (an expert tool with an
endpoint or a ``<tool>_model`` setting), or that the catalog's ``fixed`` table
names (an annotator with its own detector), has no candidates: its own model
runs.

The bundled file also holds what the planner knows about task *names*
(:func:`task_names`, :func:`llm_tasks`, :func:`unavailable_tasks`): the
HuggingFace task ids and JARVIS names a plan may use for each tool, the tasks
the app's own LLM answers (``conversational``, ``text-generation``), and the
tasks no tool can run, with the reason.
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

__all__ = ["ModelInfo", "Catalog", "load_catalog", "supports_model_selection", "fixed_model_reason",
           "task_names", "llm_tasks", "unavailable_tasks"]


@dataclass(frozen=True)
class ModelInfo:
    id: str
    task: str
    downloads: int = 0
    likes: int = 0
    description: str = ""
    requires: tuple[str, ...] = ()  # Python packages the model needs beyond the experts extra (e.g. "timm")
    tools: tuple[str, ...] = ()     # the tools that can run it; empty: any tool of its task

    def as_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "task": self.task, "downloads": self.downloads, "likes": self.likes,
               "description": self.description}
        if self.requires:
            out["requires"] = list(self.requires)
        if self.tools:
            out["tools"] = list(self.tools)
        return out

    @property
    def runnable(self) -> bool:
        """Whether every package in ``requires`` is installed (looked up, not imported)."""
        return all(_installed(name) for name in self.requires)


class Catalog:
    """Models by task and by tool. Build one from entries, or use :func:`load_catalog`.

    ``fixed``: tool name -> why that tool keeps its own model (no candidates).
    """

    def __init__(self, models: Iterable[ModelInfo | Mapping[str, Any]], aliases: Mapping[str, str] | None = None,
                 *, fixed: Mapping[str, str] | None = None):
        self.models: list[ModelInfo] = [m if isinstance(m, ModelInfo) else _entry(m) for m in models]
        self.aliases = dict(aliases or {})
        self.fixed = dict(fixed or {})
        self._by_task: dict[str, list[ModelInfo]] = {}
        self._open: dict[str, list[ModelInfo]] = {}   # entries without a tools list, by task
        self._by_tool: dict[str, list[ModelInfo]] = {}
        for model in self.models:
            self._by_task.setdefault(model.task, []).append(model)
            if model.tools:
                for name in model.tools:
                    self._by_tool.setdefault(name, []).append(model)
            else:
                self._open.setdefault(model.task, []).append(model)
        for groups in (self._by_task, self._open, self._by_tool):
            for group in groups.values():
                group.sort(key=lambda m: (-m.downloads, -m.likes, m.id))

    @property
    def tasks(self) -> list[str]:
        return sorted(self._by_task)

    @property
    def tools(self) -> list[str]:
        """The tool names that entries are restricted to."""
        return sorted(self._by_tool)

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
        """Every model of ``task`` (whichever tools run it), most downloaded first."""
        return list(self._by_task.get(task or "", ()))

    def for_tool(self, tool: Any) -> list[ModelInfo]:
        """Every model the tool can run, most downloaded first (installed or not; see :meth:`candidates`)."""
        name = getattr(tool, "name", None)
        if isinstance(name, str) and name in self._by_tool:
            return list(self._by_tool[name])
        return list(self._open.get(self.task_of(tool) or "", ()))

    def fixed_reason(self, tool: Any) -> str | None:
        """Why the catalog gives this tool no choice (an annotator's own detector), or None."""
        reason = self.fixed.get(getattr(tool, "name", None) or "")
        return reason or None

    def candidates(self, tool: Any, top_k: int | None = None) -> list[ModelInfo]:
        """The tool's candidate models, most downloaded first; none when it cannot switch models."""
        if not supports_model_selection(tool) or self.fixed_reason(tool):
            return []
        ranked = [m for m in self.for_tool(tool) if m.runnable]
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


def _names(raw: Any) -> tuple[str, ...]:
    raw = raw or ()
    return (raw,) if isinstance(raw, str) else tuple(str(r) for r in raw)


def _entry(raw: Mapping[str, Any]) -> ModelInfo:
    try:
        return ModelInfo(id=str(raw["id"]), task=str(raw["task"]), downloads=int(raw.get("downloads") or 0),
                         likes=int(raw.get("likes") or 0), description=str(raw.get("description") or ""),
                         requires=_names(raw.get("requires")), tools=_names(raw.get("tools")))
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
    if isinstance(source, Sequence) and not isinstance(source, str):  # mypy counts str a Sequence again here
        return Catalog(source)
    raise UserError("catalog must be None, a Catalog, a JSON file path or a list of {id, task, ...} entries")


@lru_cache(maxsize=1)
def _bundled_data() -> dict[str, Any]:
    text = resources.files("chatgpt_tool_hub.planner").joinpath("catalog.json").read_text("utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def _bundled() -> Catalog:
    return _from_data(_bundled_data())


def _from_data(data: Any) -> Catalog:
    if isinstance(data, list):
        return Catalog(data)
    if isinstance(data, Mapping) and isinstance(data.get("models"), list):
        fixed = data.get("fixed") or {}
        if not isinstance(fixed, Mapping):
            raise UserError('a catalog\'s "fixed" is an object: {"<tool>": "why it keeps its own model"}')
        return Catalog(data["models"], data.get("aliases"), fixed={str(k): str(v) for k, v in fixed.items()})
    raise UserError('a catalog file is a JSON list of entries or {"models": [...], "aliases": {...}}')


# ---- task names (always the bundled table) -------------------------------------------------


def task_names() -> dict[str, str]:
    """A plan's task name (HuggingFace task id, JARVIS name, common alias) -> the tool name it means."""
    return dict(_bundled_data().get("task_names") or {})


def llm_tasks() -> dict[str, str]:
    """Tasks the app's own LLM answers in planner mode -> what the planning prompt says of them."""
    return dict(_bundled_data().get("llm_tasks") or {})


def unavailable_tasks() -> dict[str, str]:
    """HuggingGPT tasks that no tool runs -> the reason (told to the LLM when a plan names one)."""
    return dict(_bundled_data().get("unavailable") or {})
