"""``tool-hub serve``: the engine over HTTP (``pip install "chatgpt-tool-hub[server]"``).

``create_server(...)`` returns the FastAPI app (OpenAI's chat API, JARVIS's
planner API, signed file links); ``chatgpt_tool_hub.server.cli`` runs it with
uvicorn. See docs/server.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_server"]


def create_server(**kwargs: Any) -> Any:
    """See :func:`chatgpt_tool_hub.server.app.create_server`."""
    try:
        from .app import create_server as create
    except ImportError as exc:
        if exc.name not in ("fastapi", "starlette", "uvicorn"):
            raise
        from ..errors import ConfigError

        raise ConfigError(f'tool-hub serve needs FastAPI and uvicorn: pip install "chatgpt-tool-hub[server]" '
                          f"({exc.name} is missing)", key="serve_host") from None

    return create(**kwargs)
