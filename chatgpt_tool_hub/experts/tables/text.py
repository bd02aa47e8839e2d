"""Text expert tools (HuggingGPT's NLP tasks): classification.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

TOOLS: dict[str, tuple[str, str, str]] = {
    "text-classification": ("chatgpt_tool_hub.experts.text", "TextClassificationTool",
             "Sentiment (or other labels) of a text with scores (DistilBERT SST-2; expert model)."),
}
