"""Expert-model tools: HuggingFace models as tools, loaded lazily, kept warm per app.

Importing this package is light: no torch, transformers or PIL is imported
until a tool is first called. ``EXPERT_TOOLS`` maps each tool name to the
module and class that implement it (from one table per family in
``experts.tables``; every class is built by
``from_context(context)`` for an app, or ``from_config(**kwargs)`` alone); none
of them is a default tool.

* ``experts.base.ExpertTool`` — the base class (its docstring says how to add a tool)
* ``runtime.models.manager.ModelManager`` / ``default_manager()`` — lazy loads, warm models, LRU budget
* ``runtime.models.devices`` — ``<tool>_device``, ``expert_load``, ``expert_device`` and dtype
* ``runtime.filenames`` — Visual ChatGPT file names inside the workspace
* ``experts.remote`` — Hugging Face inference API endpoints
* ``experts.tiny`` — tiny random models of every tool (``BUILDERS[name]``), for tests and benchmarks

Tools: ``vision`` (captioning, detection, classification), ``vqa``, ``dense``
(segmentation, depth), ``audio`` (speech recognition, text-to-speech),
``text`` (text classification), ``generation`` (text-to-image, diffusers).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

from .tables import ALL

__all__ = ["EXPERT_TOOLS", "EXPERT_DESCRIPTIONS", "expert_factory", "register_expert_tools"]

# name -> (module, class); name -> one line for tool listings (the full description lives on the class)
EXPERT_TOOLS: dict[str, tuple[str, str]] = {name: (module, cls) for name, (module, cls, _) in ALL.items()}
EXPERT_DESCRIPTIONS: dict[str, str] = {name: line for name, (_, _, line) in ALL.items()}


def expert_factory(name: str) -> Callable[..., Any]:
    """A registry factory for ``name`` that imports its module only when the tool is built."""
    module, cls = EXPERT_TOOLS[name]

    def build(context: Any) -> Any:
        return getattr(import_module(module), cls).from_context(context)

    build.__qualname__ = f"{cls}.from_context"
    return build


def register_expert_tools(registry: Any) -> None:
    """Register every expert tool (non-default) in a ``ToolRegistry``."""
    for name in EXPERT_TOOLS:
        registry.register_tool(name, expert_factory(name), [], default=False,
                               description=EXPERT_DESCRIPTIONS.get(name, ""), takes_context=True,
                               secret_keys=["hf_token"])
