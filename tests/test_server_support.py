"""What the server tests share: a live ``tool-hub serve`` on 127.0.0.1 (uvicorn in a thread), clients.

No tests here. ``live(**create_server_kwargs)`` starts a server and returns it
(``.url`` ends in ``/v1``, ``.root`` is the server's root, ``.app`` the FastAPI
app); every server is stopped at the end of the test.
"""

from __future__ import annotations

import io
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import fastapi  # noqa: F401 - the [server] extra: a missing install fails here, it is never skipped
import openai
import pytest
import uvicorn

from chatgpt_tool_hub.server import create_server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Live:
    def __init__(self, app: Any, port: int):
        self.app, self.port = app, port
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    @property
    def state(self) -> Any:
        return self.app.state.tool_hub

    @property
    def token(self) -> str | None:
        """A keyless server's local token (its bearer key); None when it has keys of its own."""
        return self.state.settings.local_token

    @property
    def auth(self) -> dict[str, str]:
        """The headers of a keyless server's own client: its local token as the bearer key."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, key: str | None = None, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=key or self.token or "no-key", max_retries=0, timeout=60,
                             **kwargs)

    def start(self) -> "Live":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def live(tmp_path) -> Iterator[Callable[..., Live]]:
    started: list[Live] = []

    def start(**kwargs: Any) -> Live:
        kwargs.setdefault("serve_workspace_root", str(tmp_path / "users"))
        kwargs.setdefault("no_default", True)
        server = Live(create_server(**kwargs), free_port()).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def png_bytes(color: tuple[int, int, int] = (255, 0, 0), size: tuple[int, int] = (8, 8)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, "PNG")
    return buffer.getvalue()


def user_workspace(server: Live, user: str = "default", key: str | None = None) -> Path:
    from chatgpt_tool_hub.server.users import identify

    found = identify(f"Bearer {key}" if key else None, user, server.state.settings.api_keys)
    return server.state.apps.workspace(found)


def wait_for(predicate: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("the condition never became true")
