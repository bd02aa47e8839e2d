"""``visual``: ask a multimodal (vision) LLM about an image, through any OpenAI-compatible endpoint.

One chat-completions request whose user message holds the question as a
``text`` part and the image as an ``image_url`` part: a workspace file is sent
inline as a ``data:`` URI, an ``http(s)`` URL as it is (the model's server
fetches it). The endpoint defaults to DashScope's OpenAI-compatible mode with
``qwen-vl-plus`` (what chatgpt-tool-hub 0.5's ``visual`` used, through the
DashScope SDK); ``caption_api_base_url`` and ``caption_model_name`` point it at
any other vision model: OpenAI, a vLLM or Ollama server, ...

``caption_api_key`` is the key chatgpt-on-wechat's plugin passes; a server
that takes no key accepts any value.
"""

from __future__ import annotations

import base64
import os
import re
from typing import Any, Mapping

from ...errors import ConfigError, LLMAuthError, LLMConnectionError, LLMError, ToolExecutionError, ToolInputError
from ...runtime.filenames import relative, resolve_input
from ...runtime.http import HttpSettings, host_of
from ..base import Tool, ToolResult, maybe_object

__all__ = ["VisualTool", "DEFAULT_BASE_URL", "DEFAULT_MODEL", "image_mime"]

DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"
DEFAULT_MODEL = "qwen-vl-plus"
DEFAULT_QUESTION = "Describe this image in detail."
MAX_IMAGE_BYTES = 10_000_000
_URL = re.compile(r"^https?://\S+$", re.I)
_IMAGE_NAME = re.compile(r"\.(png|jpe?g|gif|webp|bmp)$", re.I)
_HINT = re.compile(r"\s+--\s+.*$", re.S)  # the LLM client's own hint names llm_* settings: not these


def image_mime(data: bytes) -> str | None:
    """The MIME type of an image from its first bytes (PNG, JPEG, GIF, WebP, BMP), or ``None``."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"BM"):
        return "image/bmp"
    return None


class VisualTool(Tool):
    name = "visual"
    description = (
        "visual: ask a vision model about an image (what it shows, the text in it, people, objects, details). "
        'Input: {"image": "<path of an image file from an earlier observation, or an http(s) URL>", '
        '"question": "<what to ask; default: describe it>"}. Output: the model\'s answer.'
    )
    parameters = {
        "type": "object",
        "properties": {
            "image": {"type": "string", "description": "an image file in the workspace (e.g. image/1a2b3c4d.png) "
                                                       "or an http(s) URL"},
            "question": {"type": "string", "description": "the question about the image"},
        },
        "required": ["image"],
    }

    def __init__(self, api_key: str, *, base_url: str = DEFAULT_BASE_URL, model_name: str = DEFAULT_MODEL,
                 workspace: str = "./workspace", timeout: float = 120.0, max_retries: int = 2,
                 proxy: str | None = None, max_image_bytes: int = MAX_IMAGE_BYTES, llm: Any = None):
        self._key = "" if api_key is None else str(api_key).strip()
        self.base_url = str(base_url or DEFAULT_BASE_URL).strip()
        self.model_name = str(model_name or DEFAULT_MODEL).strip()
        self.workspace = str(workspace)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.proxy = proxy
        self.max_image_bytes = max(1, int(max_image_bytes))
        self._llm = llm  # built on first use

    @classmethod
    def from_context(cls, context: Any) -> "VisualTool":
        settings = context.settings
        http: HttpSettings = context.http
        return cls(
            settings.get("caption_api_key", ""),
            base_url=settings.get("caption_api_base_url", DEFAULT_BASE_URL),
            model_name=settings.get("caption_model_name", DEFAULT_MODEL),
            workspace=str(context.workspace),
            timeout=settings.get("request_timeout", 120.0),
            max_retries=settings.get("max_retries", 2),
            proxy=http.proxy,
            max_image_bytes=settings.get("visual_max_image_bytes", MAX_IMAGE_BYTES),
        )

    def __repr__(self) -> str:  # never the key
        return f"<VisualTool {self.name!r} model={self.model_name!r} at {host_of(self.base_url)}>"

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(tool_input, Mapping):
            arguments = dict(tool_input)
        else:
            text = str(tool_input or "").strip()
            arguments = maybe_object(text) or self._split_text(text)
        for name, aliases in (("image", ("image_path", "image_url", "path", "url", "file")),
                              ("question", ("query", "prompt", "text"))):
            for alias in aliases:
                if name not in arguments and alias in arguments:
                    arguments[name] = arguments.pop(alias)
        return self._prepared(arguments)

    def _split_text(self, text: str) -> dict[str, Any]:
        """``"image/x.png what is it?"``: the first word that names an image (a URL, an image file name, a file
        of the workspace) is the image, the rest the question."""
        words = text.split()
        for i, word in enumerate(words):
            clean = word.strip("'\"`,;")
            if _URL.match(clean) or _IMAGE_NAME.search(clean) or os.path.isfile(os.path.join(self.workspace, clean)):
                rest = " ".join(words[:i] + words[i + 1:]).strip()
                return {"image": clean, **({"question": rest} if rest else {})}
        if not text:
            raise ToolInputError('the visual tool needs an image, e.g. {"image": "image/1a2b3c4d.png", '
                                 '"question": "what is in it?"}')
        return {"image": text}

    def _image_part(self, image: str) -> tuple[dict, str]:
        image = image.strip().strip("'\"`")
        if _URL.match(image):
            return {"type": "image_url", "image_url": {"url": image}}, image
        path = resolve_input(image, self.workspace, "image")
        name = relative(path, self.workspace)
        size = os.path.getsize(path)
        if size > self.max_image_bytes:
            raise ToolInputError(f"{name} is {size} bytes; at most {self.max_image_bytes} are sent "
                                 f"(visual_max_image_bytes): use a smaller image")
        with open(path, "rb") as handle:
            data = handle.read()
        mime = image_mime(data)
        if mime is None:
            raise ToolInputError(f"{name} is not a PNG, JPEG, GIF, WebP or BMP image")
        uri = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        return {"type": "image_url", "image_url": {"url": uri}}, name

    def _client(self) -> Any:
        if self._llm is None:
            from ...llm.openai_client import OpenAICompatibleLLM

            try:
                self._llm = OpenAICompatibleLLM(self.model_name, api_key=self._key or None, base_url=self.base_url,
                                                timeout=self.timeout, max_retries=self.max_retries, proxy=self.proxy)
            except ConfigError as exc:
                raise ToolExecutionError(f"the visual tool is misconfigured: {exc}") from None
        return self._llm

    def _run(self, image: str, question: str = "", **_ignored: Any) -> str:
        part, shown = self._image_part(image)
        question = " ".join(str(question or "").split()) or DEFAULT_QUESTION
        messages = [{"role": "user", "content": [{"type": "text", "text": question}, part]}]
        host = host_of(self.base_url)
        try:
            response = self._client().complete(messages)
        except LLMAuthError as exc:
            raise ToolExecutionError(f"{_HINT.sub('', str(exc))} -- check caption_api_key, caption_model_name and "
                                     f"caption_api_base_url") from None
        except LLMConnectionError as exc:
            raise ToolExecutionError(f"could not reach the vision model at {host}: {_HINT.sub('', str(exc))} -- "
                                     f"check caption_api_base_url and proxy") from None
        except (LLMError, ConfigError) as exc:
            raise ToolExecutionError(f"the vision model {self.model_name!r} at {host} failed: "
                                     f"{_HINT.sub('', str(exc))}") from None
        answer = (response.text or "").strip()
        if not answer:
            reason = getattr(response, "finish_reason", "") or "empty"
            raise ToolExecutionError(f"the vision model {self.model_name!r} answered nothing about {shown} ({reason})")
        return ToolResult(f"{shown}: {answer}", value=answer)
