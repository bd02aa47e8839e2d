"""Build an app's :class:`~chatgpt_tool_hub.tools.context.AppContext` from its resolved configuration.

One context per app: the app's registry copy, a model manager of its own
(with the app's ``expert_memory_budget_mb``), a redactor of the app's
configured secrets, the workspace, the configuration files it was read from,
HTTP settings, the typed read-only settings view and a builder for LLMs like
the app's (subtrees with ``<name>_model_name``). Nothing in it is shared with
another app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..config import Settings, secret_values
from ..llm.build import build_llm
from ..redact import Redactor
from ..runtime.models.manager import manager_for
from ..tools.context import AppContext, HttpSettings
from .settings import ResolvedConfig

__all__ = ["build_context"]


def build_context(config: ResolvedConfig, registry: Any, *, llm: Any = None) -> AppContext:
    """The context of one app made from ``config`` (see the module docstring)."""
    values = dict(config.values)

    def llm_builder(overrides: Mapping[str, Any]) -> Any:
        return build_llm({**values, **overrides})

    return AppContext(
        settings=Settings(values),
        registry=registry,
        models=manager_for(values),
        redactor=Redactor(secret_values(values)),
        workspace=Path(str(values.get("workspace_dir") or "./workspace")).expanduser().resolve(),
        config_sources=config.config_sources,
        http=HttpSettings.from_config(values),
        llm=llm,
        llm_builder=llm_builder,
    )
