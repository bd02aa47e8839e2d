"""What every part of the OpenAPI loader shares: the settings key, the logger, the two error kinds."""

from __future__ import annotations

import logging

from ....errors import ConfigError

KEY = "openapi_plugins"
log = logging.getLogger("chatgpt_tool_hub.tools.openapi")

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
SAFE_METHODS = ("get", "head", "options", "trace")  # RFC 9110 "safe": they change nothing on the server
PARAM_PLACES = ("path", "query", "header", "cookie")


def bad(label: str, problem: str) -> ConfigError:
    """A ``ConfigError`` about the whole source ``label``."""
    return ConfigError(f"OpenAPI source {label}: {problem}", key=KEY)


class OperationError(Exception):
    """One operation cannot become a tool; the message says why. The loader leaves it out and says so."""
