"""What the text expert tools share: text arguments (or a workspace text file), token limits and chunks.

* :func:`text_argument` — a text parameter's text, or the contents of a text
  file in the workspace when the value is the name of one (``docs/report.txt``).
* :func:`token_limit` — how many tokens a model reads (the tokenizer's
  ``model_max_length`` when it is real, else the model's positions).
* :func:`split_chunks` — a long text cut into pieces that each fit the model,
  at sentence ends where possible (then at spaces, then anywhere).
* :func:`preview` — the start of a text, for observations.

Nothing heavy is imported here: tokenizers are passed in.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import ToolInputError
from ..runtime import filenames as files
from ..runtime.models.loading import token_limit  # how many tokens a model reads (shared with the embedder)

__all__ = ["TEXT_FILE", "MAX_TEXT_FILE_BYTES", "text_argument", "token_limit", "count_tokens", "split_chunks",
           "preview", "cut_note", "as_arguments", "fit_tokenizer"]

# a value that names a text file rather than being the text: one short token with a text extension
TEXT_FILE = re.compile(r"[\w./\\-]{1,250}\.(txt|md|text)", re.I)
MAX_TEXT_FILE_BYTES = 2_000_000
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[\u3002\uff01\uff1f\uff1b])|\n+")


def text_argument(value: Any, workspace: str | os.PathLike, *, tool: str, what: str, example: str) -> str:
    """The stripped text of a parameter, read from a workspace text file when ``value`` names one.

    ``ToolInputError`` when it is empty (naming ``what`` and showing ``example``),
    when the named file is missing or outside the workspace, or is not text.
    """
    text = str(value if value is not None else "").strip()
    if TEXT_FILE.fullmatch(text):
        path = files.resolve_input(text, workspace, "text")
        if os.path.getsize(path) > MAX_TEXT_FILE_BYTES:
            raise ToolInputError(f"file '{text}' is larger than {MAX_TEXT_FILE_BYTES // 1_000_000} MB; "
                                 f"{tool} reads smaller text files")
        with open(path, "rb") as fh:
            raw = fh.read()
        if b"\0" in raw[:4096]:
            raise ToolInputError(f"file '{text}' is not a text file")
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            raise ToolInputError(f"file '{value}' is empty; {tool} needs {what}")
    if not text:
        raise ToolInputError(f"{tool} needs {what}, e.g. {example}")
    return text


def count_tokens(tokenizer: Any, texts: list[str]) -> list[int]:
    """Tokens of each text without special tokens."""
    if not texts:
        return []
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]


def split_chunks(tokenizer: Any, text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` tokens each, cut at sentence ends, else at spaces, else anywhere."""
    limit = max(1, int(limit))
    if count_tokens(tokenizer, [text])[0] <= limit:
        return [text]
    return _pack(tokenizer, [s for s in _SENTENCE_END.split(text) if s and s.strip()], limit, level=0)


def _pack(tokenizer: Any, pieces: list[str], limit: int, level: int) -> list[str]:
    joiner = "" if level == 2 else " "
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    # each piece counted with the space that joins it to the one before (" b" may be two tokens where "b" is one)
    for piece, size in zip(pieces, count_tokens(tokenizer, [joiner + p for p in pieces]), strict=False):
        if size > limit and level < 2:  # a sentence longer than the limit: by words, a word: by characters
            if current:
                chunks.append(joiner.join(current))
                current, used = [], 0
            chunks.extend(_pack(tokenizer, _smaller(piece, level), limit, level + 1))
            continue
        if current and used + size > limit:
            chunks.append(joiner.join(current))
            current, used = [], 0
        current.append(piece.strip() if level < 2 else piece)
        used += size
    if current:
        chunks.append(joiner.join(current))
    chunks = [c for c in chunks if c.strip()]
    if level < 2:  # joined pieces can merge into more tokens than counted: cut such a chunk finer
        sizes = count_tokens(tokenizer, chunks)
        if any(size > limit for size in sizes):
            return [part for chunk, size in zip(chunks, sizes, strict=False)
                    for part in ([chunk] if size <= limit else _pack(tokenizer, _smaller(chunk, level), limit,
                                                                     level + 1))]
    return chunks


def _smaller(piece: str, level: int) -> list[str]:
    return piece.split() if level == 0 else list(piece)


def preview(text: str, size: int = 60) -> str:
    """The start of a text on one line (``...`` when cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= size else flat[: size - 3] + "..."


def cut_note(tool: str, tokens: int, limit: int) -> str:
    return (f"Note: the text is {tokens} tokens long; {tool} read only the first {limit} tokens "
            f"(the model's limit). Split the text to cover the rest.")


def as_arguments(tool_input: Any) -> dict | None:
    """``tool_input`` as a dict when it is a mapping or the text of a JSON object, else None."""
    from collections.abc import Mapping

    from ..tools.base import maybe_object

    if isinstance(tool_input, Mapping):
        return dict(tool_input)
    return maybe_object(str(tool_input)) if isinstance(tool_input, str) else None


def fit_tokenizer(tokenizer: Any, config: Any = None) -> Any:
    """Give a tokenizer without a real ``model_max_length`` (1e30) the model's positions, so that truncation
    works (a long text then never crashes the model); returns it."""
    limit = getattr(tokenizer, "model_max_length", None)
    if tokenizer is not None and not (isinstance(limit, int) and 0 < limit < 1_000_000):
        tokenizer.model_max_length = token_limit(tokenizer, config)
    return tokenizer
