"""Fixtures for expert tools: tiny random models saved to temp folders, images, a fake inference endpoint.

The models are built once per session with ``save_pretrained`` and then loaded
by the real code (``<tool>_model=<folder>``), exactly as users' models are.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chatgpt_tool_hub.experts.tiny import (
    build_blip,
    build_blip_vqa,
    build_depth_anything,
    build_detr,
    build_distilbert,
    build_segformer,
    build_vit,
    build_vits,
    build_wav2vec2,
    build_whisper,
    build_yolos,
)
from chatgpt_tool_hub.runtime.models.manager import default_manager


def _built(tmp_path_factory, name: str, builder) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return builder(tmp_path_factory.mktemp(name))


@pytest.fixture(scope="session")
def blip_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-blip", build_blip)


@pytest.fixture(scope="session")
def detr_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-detr", build_detr)


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-vit", build_vit)


@pytest.fixture(scope="session")
def yolos_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-yolos", build_yolos)


@pytest.fixture(scope="session")
def blip_vqa_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-blip-vqa", build_blip_vqa)


@pytest.fixture(scope="session")
def segformer_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-segformer", build_segformer)


@pytest.fixture(scope="session")
def depth_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-depth-anything", build_depth_anything)


@pytest.fixture(scope="session")
def whisper_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-whisper", build_whisper)


@pytest.fixture(scope="session")
def wav2vec2_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-wav2vec2", build_wav2vec2)


@pytest.fixture(scope="session")
def vits_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-vits", build_vits)


@pytest.fixture(scope="session")
def distilbert_dir(tmp_path_factory) -> str:
    return _built(tmp_path_factory, "tiny-distilbert", build_distilbert)


@pytest.fixture(scope="session")
def diffusion_dir(tmp_path_factory) -> str:
    pytest.importorskip("diffusers")
    from chatgpt_tool_hub.experts.tiny import build_stable_diffusion

    return _built(tmp_path_factory, "tiny-stable-diffusion", build_stable_diffusion)


# ---- per test ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch):
    """No test may reach the Hugging Face hub; the default manager's budget is restored afterwards."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    manager = default_manager()
    budget = manager.memory_budget_mb
    yield
    manager.memory_budget_mb = budget


@pytest.fixture
def workspace(isolated_env) -> Path:
    """``./workspace`` of the test's own folder (the tools' default ``workspace_dir``)."""
    root = isolated_env / "workspace"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture
def image_file(workspace) -> str:
    """An ingested 96x64 test picture: ``image/{uuid8}.png``, relative to the workspace."""
    from PIL import Image, ImageDraw

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    picture = Image.new("RGB", (96, 64), (30, 120, 200))
    ImageDraw.Draw(picture).ellipse([20, 10, 70, 55], fill=(240, 200, 20))
    return ingest_image(picture, workspace)


@pytest.fixture
def audio_file(workspace) -> str:
    """An ingested 1.5 s, 22.05 kHz tone: ``audio/{uuid8}.wav`` (resampled to 16 kHz by the speech tools)."""
    np = pytest.importorskip("numpy")
    from chatgpt_tool_hub.runtime.filenames import ingest_audio

    rate = 22050
    t = np.arange(int(rate * 1.5)) / rate
    samples = (0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    return ingest_audio(samples, workspace, rate)


# ---- a fake Hugging Face inference endpoint ---------------------------------------------


class FakeEndpoint:
    """Answers POSTs from ``responses`` (status, content type, body) in order; records requests."""

    def __init__(self) -> None:
        self.responses: list[tuple[int, str, bytes]] = []
        self.requests: list[dict] = []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/models/test"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def reply_json(self, payload, status: int = 200) -> None:
        self.responses.append((status, "application/json", json.dumps(payload).encode()))

    def reply_bytes(self, data: bytes, content_type: str, status: int = 200) -> None:
        self.responses.append((status, content_type, data))

    def _handler(self):
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                endpoint.requests.append({"path": self.path, "body": body,
                                          "headers": {k.lower(): v for k, v in self.headers.items()}})
                status, content_type, data = (endpoint.responses.pop(0) if endpoint.responses
                                              else (500, "text/plain", b"no response scripted"))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output clean
                pass

        return Handler

    def __enter__(self) -> "FakeEndpoint":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_endpoint():
    with FakeEndpoint() as endpoint:
        yield endpoint
