"""The LLM-OS web page of ``tool-hub serve`` (``pip install "chatgpt-tool-hub[web]"``).

``mount(app, state)`` puts a Gradio page at ``/`` of the server's FastAPI app
(``create_server(web=True)`` calls it): a chat whose inner monologue shows as
collapsible thought / step blocks and whose answer streams as it is written,
image and WAV uploads, the images, audio and video the tools make shown inline,
the tools of the app with on/off toggles, the think depth, the app type
(ReAct or planner) and a reset. Each browser tab is a user of the server, with
its own workspace and python session; when the server has ``serve_api_keys``
the page asks for one of them as the password. See docs/web.md.

Gradio is imported only when the page is mounted: ``import chatgpt_tool_hub``
and ``tool-hub --help`` stay light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["mount", "available", "MISSING"]

MISSING = 'the web page needs Gradio: pip install "chatgpt-tool-hub[web]"'


def available() -> bool:
    """Whether Gradio is installed (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("gradio") is not None


def mount(app: Any, state: Any) -> Any:
    """Mount the page at ``/`` of the server's FastAPI ``app``; ``state`` is its ``ServerState``."""
    try:
        from .page import mount as mount_page
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("gradio"):
            raise
        from ..errors import ConfigError

        raise ConfigError(f"{MISSING} ({exc.name} is missing)", key="serve_web") from None
    return mount_page(app, state)
