"""Is a chat request a chat UI's own task prompt rather than a user's question?

Open WebUI asks the chat's model for a title, tags, follow-up questions,
search queries and autocompletions after (or while) the user chats. Each such
request is one user message that is a filled-in template: it starts with
``### Task:``, has further sections (``### Guidelines:``, ``### Output:``,
``### Chat History:`` …), quotes the chat inside ``<chat_history>`` tags and
asks for a JSON object (``{ "title": ... }``, ``{ "tags": [...] }``,
``{ "follow_ups": [...] }``, ``{ "queries": [...] }``, ``{ "text": ... }``).
Running them through the tool engine costs a whole run each and answers
worse; :func:`task_kind` recognises them, so the server sends them to the
LLM as they are.

The rule is strict on purpose: a question that mentions ``### Task:`` in its
prose, one asked within a conversation (any assistant turn), or one that
brings tools of its own is a question.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["task_kind", "TASK_PREFIX"]

TASK_PREFIX = "### Task:"
# the sections of Open WebUI's templates: "### Guidelines:", "### **Output Rules**:", "#### Output:" …
_SECTION = re.compile(r"^#{3,4}[ \t]*\**[ \t]*(?:guidelines|output(?: rules)?|instructions|examples|chat history|"
                      r"context)[ \t]*\**[ \t]*:", re.IGNORECASE | re.MULTILINE)
_HISTORY = re.compile(r"<chat_history>.*?</chat_history>", re.DOTALL)
_JSON_ASKED = re.compile(r"\bJSON\b")
# the key of the JSON object a template asks for -> the kind of task
_KINDS = {"title": "title", "tags": "tags", "follow_ups": "follow_ups", "queries": "queries",
          "text": "autocomplete", "prompt": "image_prompt"}
_ANSWER_KEY = re.compile(r'\{\s*"(' + "|".join(_KINDS) + r')"\s*:')


def _text(content: Any) -> str | None:
    """A message's text (OpenAI's string or text parts), or None when it is neither."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, Mapping)]
        if parts and all(isinstance(text, str) for text in parts):
            return "\n".join(parts)  # type: ignore[arg-type]
    return None


def _task_text(body: Mapping[str, Any]) -> str | None:
    """The one user message of a request made of system messages and that message, else None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        return None
    turns = [m for m in messages if m.get("role") not in ("system", "developer")]
    if len(turns) != 1 or turns[0].get("role") != "user" or messages[-1] is not turns[0]:
        return None
    return _text(turns[0].get("content"))


def task_kind(body: Any) -> str | None:
    """The kind of a chat UI's task prompt (``"title"``, ``"tags"``, ``"follow_ups"``, ``"queries"``,
    ``"autocomplete"``, ``"image_prompt"``; ``"task"`` for another template of the same shape), or None for
    a request that is a question. A task prompt is a request with no tools whose only non-system message is
    the user's, whose text starts with ``### Task:``, has at least one more of the templates' sections and
    quotes the chat in ``<chat_history>`` tags or asks for JSON."""
    if not isinstance(body, Mapping) or body.get("tools") or body.get("functions"):
        return None
    text = _task_text(body)
    if text is None:
        return None
    text = text.lstrip()
    if not text.startswith(TASK_PREFIX) or not _SECTION.search(text):
        return None
    if not (_HISTORY.search(text) or _JSON_ASKED.search(text)):
        return None
    found = _ANSWER_KEY.search(text)
    return _KINDS[found.group(1)] if found else "task"
