"""What the tiny-model builders share: the folder helper, label maps, byte-level BPE vocabularies, word lists."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["VOCAB", "LABELS", "TEXT_VOCAB", "CHARS", "folder_of", "labels", "byte_bpe"]

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "a", "photo", "of", "cat", "dog", "the",
         "on", "in", "red", "blue", "picture", "man", "woman", "car", "sitting", "grass"]
LABELS = ["cat", "dog", "car", "bird", "tree", "house", "boat", "person"]
TEXT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "i", "love", "hate", "it", "this", "movie", "good",
              "bad", "the", "is", "was", "not", "##s", "##ly"]
CHARS = list(" abcdefghijklmnopqrstuvwxyz'")  # the letters of the tiny speech models


def labels(names: list[str]) -> dict:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


def byte_bpe(folder: Path, words: list[str], specials: list[str], end_of_word: bool = False) -> dict[str, int]:
    """Write ``vocab.json`` + ``merges.txt`` of a byte-level BPE (GPT-2/Whisper/CLIP style): the 256 byte symbols
    (and their ``</w>`` forms for CLIP), merges that spell ``words``, then ``specials``; returns the vocab."""
    symbols = _byte_symbols()
    vocab = {c: i for i, c in enumerate(symbols)}
    if end_of_word:
        vocab.update((c + "</w>", len(symbols) + i) for i, c in enumerate(symbols))
    merges: list[str] = []
    for word in words:
        current = word[0]
        for char in word[1:]:
            merges.append(f"{current} {char}")
            current += char
            vocab.setdefault(current, len(vocab))
    for token in specials:
        vocab.setdefault(token, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in dict.fromkeys(merges)))
    return vocab


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values (``bytes_to_unicode``), in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
                 *range(ord("\xae"), ord("\xff") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def folder_of(folder: str | Path) -> Path:
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


# tool name -> builder of a tiny model for it
