"""``wechat``: registered so that a configuration naming it gets a clear answer, and not offered.

chatgpt-tool-hub 0.5 registered a ``wechat`` tool that sent WeChat messages
through an itchat client it vendored, but that client was left out of 0.5's
own wheel, so the tool never worked from an install; the WeChat web login
that client relied on is closed to most accounts anyway. Building the tool
raises a ``ConfigError`` that says so and what to use instead (in pure mode,
``factory(**kwargs).run(...)`` returns the same text as ``Error: ...``).
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ..base import Tool

__all__ = ["WechatTool", "NOT_OFFERED"]

NOT_OFFERED = (
    "the wechat tool is not offered: chatgpt-tool-hub 0.5 sent WeChat messages through an itchat client it "
    "vendored, but that client was missing from 0.5's own wheel, so the tool never worked from an install (and "
    "the WeChat web login it used is closed to most accounts). Remove 'wechat' from the tool list; to reach "
    "people use the email or sms tools, and to answer in WeChat let your chatbot host (chatgpt-on-wechat) "
    "send the reply"
)


class WechatTool(Tool):
    name = "wechat"
    description = "(not offered: see the wechat entry of docs/tools.md)"

    @classmethod
    def from_context(cls, context: Any) -> "WechatTool":
        raise ConfigError(NOT_OFFERED, key="tools_list")

    def _run(self, text: str) -> str:  # pragma: no cover - never built
        raise ConfigError(NOT_OFFERED, key="tools_list")
