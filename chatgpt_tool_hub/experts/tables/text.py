"""Text expert tools (HuggingGPT's NLP tasks): classification, zero-shot classification, named entities,
question answering, summarization, translation, text2text generation and sentence similarity.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

TOOLS: dict[str, tuple[str, str, str]] = {
    "text-classification": ("chatgpt_tool_hub.experts.text", "TextClassificationTool",
             "Sentiment (or other labels) of a text with scores (DistilBERT SST-2; expert model)."),
    "zero-shot-classification": ("chatgpt_tool_hub.experts.text", "ZeroShotClassificationTool",
             "Score a text against labels you choose, no training needed (BART-MNLI; expert model)."),
    "token-classification": ("chatgpt_tool_hub.experts.text", "TokenClassificationTool",
             "Named entities in a text: people, places, organisations (BERT NER; expert model)."),
    "question-answering": ("chatgpt_tool_hub.experts.qa", "QuestionAnsweringTool",
             "Find the answer to a question inside a given text (RoBERTa SQuAD2; expert model)."),
    "summarization": ("chatgpt_tool_hub.experts.nlp", "SummarizationTool",
             "Summarise a long text (BART-CNN; expert model)."),
    "translation": ("chatgpt_tool_hub.experts.nlp", "TranslationTool",
             "Translate a text between 200 languages (NLLB-200; expert model)."),
    "text2text-generation": ("chatgpt_tool_hub.experts.nlp", "Text2TextGenerationTool",
             "Follow a short instruction about a text: rewrite, correct, extract (Flan-T5; expert model)."),
    "sentence-similarity": ("chatgpt_tool_hub.experts.similarity", "SentenceSimilarityTool",
             "Cosine similarity of sentences to a source sentence (all-MiniLM-L6-v2; expert model)."),
}
