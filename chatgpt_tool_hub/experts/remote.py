"""A remote inference endpoint that speaks the Hugging Face inference API.

* Text inputs are POSTed as JSON ``{"inputs": ..., "parameters": {...}}``.
* Binary inputs (an image or audio file) are POSTed as raw bytes with their
  content type (``image/png``, ``audio/wav``).
* ``hf_token`` is sent as ``Authorization: Bearer <token>`` (never logged).

Responses come back as parsed JSON (a list of ``{label, score}``, a list of
``{generated_text}``, detection boxes...) or, for audio/image answers, as
``RemoteBlob(content_type, data)``. Every failure is a ``ToolExecutionError``
naming the ``<tool>_endpoint`` setting, so it becomes an observation.
"""

from __future__ import annotations

import json
import mimetypes
import os
from dataclasses import dataclass
from typing import Any

from ..errors import ToolExecutionError

__all__ = ["RemoteEndpoint", "RemoteBlob"]


@dataclass(frozen=True)
class RemoteBlob:
    """A binary answer (generated audio or image)."""

    content_type: str
    data: bytes


class RemoteEndpoint:
    """One endpoint URL. ``setting`` (e.g. ``image_captioning_endpoint``) names it in errors."""

    def __init__(self, url: str, *, token: str | None = None, setting: str = "endpoint",
                 timeout: float = 120.0, proxy: str | None = None):
        self.url = url.strip()
        self.token = token or None
        self.setting = setting
        self.timeout = float(timeout)
        self.proxies = {"http": proxy, "https": proxy} if proxy else None

    def __repr__(self) -> str:  # never shows the token
        return f"RemoteEndpoint({self.url!r})"

    def post_json(self, inputs: Any, parameters: dict | None = None) -> Any:
        body: dict[str, Any] = {"inputs": inputs}
        if parameters:
            body["parameters"] = parameters
        return self._post(json.dumps(body).encode("utf-8"), "application/json")

    def post_file(self, path: str | os.PathLike) -> Any:
        """POST a file's bytes with its content type (by extension)."""
        content_type = mimetypes.guess_type(str(path))[0] or "application/octet-stream"
        if content_type == "audio/x-wav":
            content_type = "audio/wav"
        with open(path, "rb") as fh:
            return self._post(fh.read(), content_type)

    def _post(self, data: bytes, content_type: str) -> Any:
        import requests  # a core dependency, imported when first needed

        headers = {"Content-Type": content_type, "Accept": "application/json, */*"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            response = requests.post(self.url, data=data, headers=headers, timeout=self.timeout,
                                     proxies=self.proxies)
        except requests.RequestException as exc:
            raise ToolExecutionError(f"the remote endpoint ({self.setting}) could not be reached: "
                                     f"{type(exc).__name__}") from None
        if response.status_code >= 400:
            raise ToolExecutionError(self._http_error(response))
        answer_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if answer_type.startswith(("audio/", "image/")) or answer_type == "application/octet-stream":
            return RemoteBlob(answer_type, response.content)
        try:
            return response.json()
        except ValueError:
            raise ToolExecutionError(f"the remote endpoint ({self.setting}) answered with something that is "
                                     f"not JSON ({answer_type or 'no content type'})") from None

    def _http_error(self, response: Any) -> str:
        detail = ""
        try:
            payload = response.json()
            if isinstance(payload, dict):
                detail = str(payload.get("error") or payload.get("message") or "")
                if payload.get("estimated_time"):
                    detail += f" (ready in about {float(payload['estimated_time']):.0f}s; try again later)"
        except ValueError:
            detail = response.text.strip()
        detail = " ".join(detail.split())[:200]
        hint = {401: "check hf_token", 403: "check hf_token", 404: f"check {self.setting}"}.get(
            response.status_code)
        message = f"the remote endpoint ({self.setting}) failed with HTTP {response.status_code}"
        if detail:
            message += f": {detail}"
        return message + (f"; {hint}" if hint else "")
