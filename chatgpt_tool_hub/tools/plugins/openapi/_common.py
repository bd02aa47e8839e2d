"""What every part of the OpenAPI loader shares: the settings key, the logger, the two error kinds."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from ....errors import ConfigError

KEY = "openapi_plugins"
log = logging.getLogger("chatgpt_tool_hub.tools.openapi")

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
SAFE_METHODS = ("get", "head", "options", "trace")  # RFC 9110 "safe": they change nothing on the server
PARAM_PLACES = ("path", "query", "header", "cookie")


def bad(label: str, problem: str) -> ConfigError:
    """A ``ConfigError`` about the whole source ``label``."""
    return ConfigError(f"OpenAPI source {label}: {problem}", key=KEY)


def object_at(node: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``node[key]`` when it is a JSON object, else an empty one: a document may give any field any shape."""
    value = node.get(key)
    return value if isinstance(value, dict) else {}


class OperationError(Exception):
    """One operation cannot become a tool; the message says why. The loader leaves it out and says so."""
