"""Tiny text models: classification, seq2seq (BART, NLLB, T5), extractive QA, NER, NLI and a sentence encoder.

Vocabularies are written here by hand: WordPiece word lists for the BERT-style
models, a byte-level BPE (every byte is a token, so any text tokenizes) for
BART and a Unigram/BPE piece list for T5 and NLLB, built through the
tokenizers-backed classes of transformers 5. None of them needs sentencepiece.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._common import TEXT_VOCAB, byte_bpe, folder_of, labels

__all__ = ["build_distilbert", "build_bart", "build_bart_nli", "build_nllb", "build_t5", "build_bert_qa",
           "build_bert_ner", "build_sentence_encoder", "NER_LABELS", "NLI_LABELS", "BUILDERS"]

# the words the byte-level BPE of the tiny BART models merges (other text falls back to single bytes)
BPE_WORDS = ["\u0120the", "\u0120cat", "\u0120dog", "\u0120sat", "\u0120on", "\u0120mat", "\u0120a", "\u0120is",
             "\u0120news", "\u0120sports", "\u0120game", "\u0120won", "the", "cat"]
BART_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
# words of the BERT-style models (QA, NER, sentence encoder): the classifier's list and a few names and places
WORDS = TEXT_VOCAB + ["what", "where", "who", "did", "sat", "on", "mat", "cat", "dog", "a", "lives", "in",
                      "berlin", "paris", "wolfgang", "sarah", "and", "my", "name", "?", ".", ","]
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
NLI_LABELS = ["contradiction", "neutral", "entailment"]  # bart-large-mnli's order
T5_PIECES = ["\u2581the", "\u2581cat", "\u2581dog", "\u2581sat", "\u2581on", "\u2581mat", "\u2581a", "\u2581is",
             "\u2581translate", "\u2581English", "\u2581to", "\u2581German", "\u2581summarize", ":", "\u2581"]


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


def _bart_parts(folder: Path, positions: int):
    """A byte-level BPE tokenizer (RoBERTa/BART style) and the keyword arguments of a 1-layer ``BartConfig``."""
    from transformers import BartTokenizer

    vocab = byte_bpe(folder, BPE_WORDS, BART_SPECIALS)
    tokenizer = BartTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=positions)
    ids = dict(bos_token_id=vocab["<s>"], pad_token_id=vocab["<pad>"], eos_token_id=vocab["</s>"],
               decoder_start_token_id=vocab["</s>"], forced_bos_token_id=vocab["<s>"])
    config = dict(vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
                  max_position_embeddings=positions, **ids)
    return tokenizer, config, ids


def build_bart(folder: str | Path) -> str:
    """BART summarizer (the summarization default's architecture): byte-level BPE, 64 positions, one layer each
    side; generates at most 12 new tokens by default."""
    import torch
    from transformers import BartConfig, BartForConditionalGeneration, GenerationConfig

    folder = folder_of(folder)
    tokenizer, config, ids = _bart_parts(folder, 64)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(**config))
    model.generation_config = GenerationConfig(**ids, max_new_tokens=12, num_beams=1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def build_bart_nli(folder: str | Path) -> str:
    """BART sequence classifier with MNLI's labels (contradiction/neutral/entailment), like facebook/bart-large-mnli,
    which the zero-shot pipeline needs (it looks for the "entailment" label)."""
    import torch
    from transformers import BartConfig, BartForSequenceClassification

    folder = folder_of(folder)
    tokenizer, config, _ = _bart_parts(folder, 64)
    torch.manual_seed(0)
    BartForSequenceClassification(BartConfig(**config, **labels(NLI_LABELS))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def build_nllb(folder: str | Path) -> str:
    """NLLB translator (M2M100 architecture with the NLLB tokenizer and its 200 language codes, like
    facebook/nllb-200-distilled-600M): a few BPE pieces, 64 positions, one layer each side."""
    import torch
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    folder = folder_of(folder)
    pieces = ["<s>", "<pad>", "</s>", "<unk>", *list("abcdefghijklmnopqrstuvwxyz"),
              *(f"\u2581{c}" for c in "abcdefghijklmnopqrstuvwxyz"), "\u2581the", "\u2581cat", "\u2581"]
    vocab = {p: i for i, p in enumerate(pieces)}
    tokenizer = NllbTokenizer(vocab=vocab, merges=[], model_max_length=64)
    size = len(tokenizer)  # the pieces, the 200+ language codes and <mask>
    ids: dict[str, Any] = dict(bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2)
    config = M2M100Config(vocab_size=size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
                          max_position_embeddings=64, **ids)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config)
    model.generation_config = GenerationConfig(**ids, max_new_tokens=12, num_beams=1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    last_code = tokenizer.convert_tokens_to_ids(FAIRSEQ_LANGUAGE_CODES[-1])  # one token: one id
    assert isinstance(last_code, int) and last_code < size
    return str(folder)


def build_t5(folder: str | Path) -> str:
    """T5 (flan-t5's architecture) with a Unigram piece list, for text2text-generation and T5-style prompts
    ("translate English to German: ..."); 64 positions (relative attention), one layer each side."""
    import torch
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration, T5Tokenizer

    folder = folder_of(folder)
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    pieces += [(p, -2.0) for p in T5_PIECES] + [(c, -5.0) for c in "abcdefghijklmnopqrstuvwxyz"]
    tokenizer = T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=64)
    ids: dict[str, Any] = dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    # tie_word_embeddings goes to the config's __post_init__(**kwargs), which its typed signature leaves out
    config = T5Config(vocab_size=len(tokenizer), d_model=16, d_kv=8, d_ff=16, num_layers=1,  # type: ignore[call-arg]
                      num_decoder_layers=1, num_heads=2, relative_attention_num_buckets=8,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False, **ids)
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():  # never <pad> or </s> first: the random model then always says something
        model.lm_head.weight[:2] = 0
        model.lm_head.weight[:2, 0] = -1
    model.generation_config = GenerationConfig(**ids, max_new_tokens=12, num_beams=1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _bert(folder: Path, model_class, **extra) -> str:
    import torch
    from transformers import BertConfig, BertTokenizer

    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    tokenizer = BertTokenizer(str(folder / "vocab.txt"), do_lower_case=True, model_max_length=64)
    config = BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=64, **extra)
    torch.manual_seed(0)
    model_class(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def build_bert_qa(folder: str | Path) -> str:
    """BERT extractive question answering (start/end logits, like deepset/roberta-base-squad2), 64 positions."""
    from transformers import BertForQuestionAnswering

    return _bert(folder_of(folder), BertForQuestionAnswering)


def build_bert_ner(folder: str | Path) -> str:
    """BERT token classifier over CoNLL-2003's BIO labels (like dslim/bert-base-NER), 64 positions."""
    from transformers import BertForTokenClassification

    return _bert(folder_of(folder), BertForTokenClassification, **labels(NER_LABELS))


def build_sentence_encoder(folder: str | Path) -> str:
    """A sentence-transformers folder (like sentence-transformers/all-MiniLM-L6-v2): a BERT encoder plus
    ``modules.json`` and ``1_Pooling/config.json`` asking for mean pooling and normalised vectors."""
    from transformers import BertModel

    folder = folder_of(folder)
    _bert(folder, BertModel)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    pooling = folder_of(folder / "1_Pooling")
    (pooling / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 16, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, indent=2))
    folder_of(folder / "2_Normalize")
    return str(folder)


BUILDERS = {
    "text-classification": build_distilbert,
    "summarization": build_bart,
    "translation": build_nllb,
    "text2text-generation": build_t5,
    "question-answering": build_bert_qa,
    "zero-shot-classification": build_bart_nli,
    "token-classification": build_bert_ner,
    "sentence-similarity": build_sentence_encoder,
}
