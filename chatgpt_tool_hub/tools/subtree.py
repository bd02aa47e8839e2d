"""Tool-in-tool: a tool that runs its own ReAct engine over its own tools.

The parent sees one tool. The subtree's LLM calls and tool calls are charged
to the budget the parent's run shares with its whole tree, its nesting depth
is bounded, and its inner events are forwarded to the parent's stream. A
subtree that fails or runs out of budget gives the parent a typed error
observation, never an empty string.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Sequence

from ..config import set_only, tool_prefix
from ..engine.dispatch import drive
from ..engine.loop import Engine, EngineSettings
from ..errors import ConfigError, LLMError, MissingKeyError, ToolExecutionError
from ..llm.base import LLM
from .base import Tool, ToolContext
from .context import AppContext

__all__ = ["SubtreeTool", "SubtreeError", "subtree_llm", "BrowserTool", "NewsTool", "DEFAULT_MAX_NESTING_DEPTH"]

DEFAULT_MAX_NESTING_DEPTH = 3
log = logging.getLogger("chatgpt_tool_hub.tools")
# keys a subtree may override with its own prefix, e.g. browser_model_name
_LLM_KEYS = ("llm_api_key", "llm_api_base_url", "model_name", "deployment_id", "temperature", "request_timeout")


class SubtreeError(ToolExecutionError):
    """A subtree could not produce an answer; the message says why."""


class SubtreeTool(Tool):
    """Runs a nested engine. ``llm=None`` means: use the calling engine's LLM."""

    needs_context = True

    def __repr__(self) -> str:  # never show the configuration (it may hold keys)
        return f"<{type(self).__name__} {self.name!r} tools={[t.name for t in self.tools]}>"

    def __init__(self, name: str, description: str, tools: Sequence[Tool], *, llm: LLM | None = None,
                 think_depth: int = 3, max_nesting_depth: int = DEFAULT_MAX_NESTING_DEPTH,
                 settings: EngineSettings | None = None, fallback: AppContext | None = None):
        if not name or not isinstance(name, str):
            raise ConfigError("a subtree needs a name", key="name")
        self.name = name
        self.description = description or f"A sub-agent with the tools: {', '.join(t.name for t in tools)}."
        self.tools = list(tools)
        self.llm = llm
        self.max_nesting_depth = max_nesting_depth
        self.settings = replace(settings or EngineSettings(), think_depth=think_depth)
        self._fallback = fallback  # pure mode: build an LLM from the context's settings on first use
        self._fallback_llm: LLM | None = None

    def _run(self, text: str, context: ToolContext) -> str:
        depth = context.depth + 1
        if depth > self.max_nesting_depth:
            raise SubtreeError(f"subtree '{self.name}' was not run: the nesting depth limit "
                               f"(max_nesting_depth={self.max_nesting_depth}) is reached")
        llm = self.llm or context.llm or self._llm_from_config()
        if llm is None:
            raise SubtreeError(f"subtree '{self.name}' has no LLM: give it one, or run it inside an app")
        engine = Engine(llm, self.tools, replace(self.settings, depth=depth), approve=context.approve,
                        budget=context.budget, redactor=context.redactor, taint=context.taint)
        try:
            result = drive(engine.iter_run(text, session_id=context.session_id), context.emit)
        except LLMError as exc:
            raise SubtreeError(f"subtree '{self.name}' failed: its LLM call failed: {exc}") from None
        if context.usage is not None:  # the parent's RunResult.usage covers the whole tree
            context.usage.calls.extend(result.usage.calls)
        if result.stopped_by == "budget":
            raise SubtreeError(f"subtree '{self.name}' ran out of budget: {result.output}")
        output = result.output.strip()
        if not output:
            raise SubtreeError(f"subtree '{self.name}' returned an empty answer")
        if result.stopped_by != "answer":
            return f"[subtree '{self.name}' stopped by {result.stopped_by.replace('_', ' ')}] {output}"
        return output

    def _llm_from_config(self) -> LLM | None:
        if self._fallback is None:
            return None
        if self._fallback_llm is None:
            try:
                self._fallback_llm = self._fallback.build_llm()
            except ConfigError as exc:
                raise SubtreeError(f"subtree '{self.name}' has no LLM outside an app: {exc}") from None
        return self._fallback_llm

    def reset(self, session_id: str | None = None) -> None:
        for tool in self.tools:
            tool.reset(session_id)

    def close(self) -> None:
        for tool in self.tools:
            tool.close()


def subtree_llm(name: str, context: AppContext) -> LLM | None:
    """An LLM of the subtree's own when any ``<name>_<llm key>`` is set (``browser_model_name``), built by
    the app (the app's key unless ``<name>_llm_api_key`` is set); else ``None``: share the caller's."""
    prefix = tool_prefix(name)
    own = set_only({k: context.settings.get(prefix + k) for k in _LLM_KEYS})
    return context.build_llm(own) if own else None


class BrowserTool(SubtreeTool):
    """Built-in subtree ``browser``: a sub-agent with url-get and summary (``browser_use_summary=false``:
    url-get alone)."""

    TOOLS = ("url-get", "summary")

    @classmethod
    def from_context(cls, context: AppContext) -> "BrowserTool":
        settings = context.settings
        names = cls.TOOLS if settings.get("browser_use_summary", True) else ("url-get",)
        tools = [context.build_tool(name) for name in names]  # the app's own registry and settings
        return cls(
            "browser",
            "Browse the web for a task, e.g. 'find the release date on https://example.org/news'. "
            "Input: the task in plain words, with any URLs. Output: what it found.",
            tools,
            llm=subtree_llm("browser", context),
            think_depth=settings.get("browser_think_depth", 3),
            max_nesting_depth=settings.get("max_nesting_depth", DEFAULT_MAX_NESTING_DEPTH),
            fallback=context if context.llm is None else None,
        )


class NewsTool(SubtreeTool):
    """Built-in subtree ``news``: a sub-agent over news-api, morning-news and finance-news.

    Each of them joins when it can be built: news-api and morning-news need
    their keys (``news_api_key``, ``morning_news_api_key``) and are left out,
    with a log line, when the key is not set; finance-news needs none.
    """

    TOOLS = ("news-api", "morning-news", "finance-news")

    @classmethod
    def from_context(cls, context: AppContext) -> "NewsTool":
        settings = context.settings
        tools, left_out = [], []
        for name in cls.TOOLS:
            try:
                tools.append(context.build_tool(name))  # the app's own registry, each with its own keys
            except MissingKeyError as exc:
                left_out.append(f"{name} (needs {exc.key})")
        if left_out:
            log.info("the news subtree runs without %s", ", ".join(left_out))
        return cls(
            "news",
            "Current news: headlines and news search, today's morning digest, and real-time financial "
            "news. Input: what you want to know in plain words, e.g. 'latest news about the ECB'. "
            "Output: the news it found.",
            tools,
            llm=subtree_llm("news", context),
            think_depth=settings.get("news_think_depth", 2),
            max_nesting_depth=settings.get("max_nesting_depth", DEFAULT_MAX_NESTING_DEPTH),
            fallback=context if context.llm is None else None,
        )
