"""Logging set-up for apps: debug switch and a filter that redacts secrets."""

from __future__ import annotations

import logging
from typing import Iterable

__all__ = ["configure_logging", "SecretFilter"]

_ROOT = "chatgpt_tool_hub"
_CHILDREN = ("llm", "engine", "tools", "apps", "cli", "experts", "planner")


class SecretFilter(logging.Filter):
    """Replaces known secret values in log records with ``***``."""

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self.secrets = {s for s in secrets if isinstance(s, str) and len(s) >= 4}

    def add(self, secrets: Iterable[str]) -> None:
        self.secrets |= {s for s in secrets if isinstance(s, str) and len(s) >= 4}

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        redacted = message
        for secret in self.secrets:
            redacted = redacted.replace(secret, "***")
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


_filter = SecretFilter()


def configure_logging(debug: bool, secrets: Iterable[str] = ()) -> None:
    """Turn on debug logs of the package (once), always with secret redaction."""
    logger = logging.getLogger(_ROOT)
    _filter.add(secrets)
    # logger filters do not see records of child loggers, so attach to each one
    for name in (_ROOT, *(f"{_ROOT}.{child}" for child in _CHILDREN)):
        child_logger = logging.getLogger(name)
        if _filter not in child_logger.filters:
            child_logger.addFilter(_filter)
    for handler in logger.handlers:
        if _filter not in handler.filters:
            handler.addFilter(_filter)
    if debug:
        logger.setLevel(logging.DEBUG)
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            handler.addFilter(_filter)
            logger.addHandler(handler)
