"""Tiny text models: classification."""

from __future__ import annotations

from pathlib import Path

from ._common import TEXT_VOCAB, folder_of, labels

__all__ = ["build_distilbert", "BUILDERS"]


def build_distilbert(folder: str | Path) -> str:
    """DistilBERT sentiment classifier (NEGATIVE/POSITIVE, like the SST-2 default), a hand-written WordPiece vocab."""
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, DistilBertTokenizer

    folder = folder_of(folder)
    (folder / "vocab.txt").write_text("\n".join(TEXT_VOCAB) + "\n")
    tokenizer = DistilBertTokenizer(str(folder / "vocab.txt"), do_lower_case=True, model_max_length=64)
    config = DistilBertConfig(vocab_size=len(TEXT_VOCAB), dim=16, n_layers=1, n_heads=2, hidden_dim=16,
                              max_position_embeddings=64, **labels(["NEGATIVE", "POSITIVE"]))
    torch.manual_seed(0)
    DistilBertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


BUILDERS = {
    "text-classification": build_distilbert,
}
