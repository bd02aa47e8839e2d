"""Answers in a required shape: a JSON value that follows a JSON schema (OpenAI's ``response_format``).

:func:`checked_answer` reads a model's answer as JSON (a markdown code fence around it is taken off)
and checks it against the schema; the engine sends the problem back to the model and asks again.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["checked_answer", "schema_text"]

_FENCE = re.compile(r"\A\s*(`{3,}|~{3,})[^\n]*\n(.*?)\n\s*\1\s*\Z", re.DOTALL)
_MAX_PROBLEMS = 3


def checked_answer(text: str, schema: dict[str, Any]) -> tuple[str, str | None]:
    """``(answer, problem)``: the answer as JSON text (a fence around it taken off) and None when it is a
    JSON value that follows ``schema``; else the text as given and what is wrong with it, in words."""
    import jsonschema  # local import: only a run asked for an answer shape pays for it

    raw = (text or "").strip()
    fenced = _FENCE.match(raw)
    body = fenced.group(2).strip() if fenced else raw
    try:
        value = json.loads(body)
    except ValueError as exc:
        return text, f"it is not valid JSON ({exc})"
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        validator_class = jsonschema.Draft202012Validator  # a schema the validator cannot read: JSON is enough
        schema = {}
    errors = sorted(validator_class(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        problems = [_problem(e) for e in errors[:_MAX_PROBLEMS]]
        return text, "it does not follow the schema: " + "; ".join(problems)
    return body, None


def schema_text(schema: dict[str, Any], limit: int = 4000) -> str:
    """The schema as the model reads it (compact JSON, cut at ``limit`` characters)."""
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + " …"


def _problem(error: Any) -> str:
    """One of jsonschema's validation errors, where and what."""
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or 'the value'}: {error.message[:200]}"
