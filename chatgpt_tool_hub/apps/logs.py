"""Logging set-up for apps: debug switch and a filter that redacts secrets."""

from __future__ import annotations

import logging
from typing import Iterable

__all__ = ["configure_logging", "SecretFilter"]

_ROOT = "chatgpt_tool_hub"
# every logger the package creates; a logger's filters do not see records of its children, so each
# one needs the filter itself (configure_logging also sweeps loggers created under the root since)
_CHILDREN = ("llm", "engine", "tools", "apps", "cli", "experts", "planner", "tools.mcp", "tools.openapi",
             "tools.plugins")


class SecretFilter(logging.Filter):
    """Replaces known secret values in log records with ``***``."""

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self.secrets: frozenset[str] = frozenset()
        self._ordered: tuple[str, ...] = ()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        # rebind, never mutate: other threads may be redacting right now
        found = {t for s in secrets if isinstance(s, str) for t in (s, s.strip()) if len(t) >= 4}  # as pasted, and as used
        self.secrets = self.secrets | found
        self._ordered = tuple(sorted(self.secrets, key=len, reverse=True))  # longest first

    def redact(self, text: str) -> str:
        for secret in self._ordered:
            text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler's error reporting
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        # a traceback carries exception messages (a URL with ?key=..., a header): when one holds a
        # secret, hand the handlers the redacted text instead of the exception
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            redacted = self.redact(text)
            if redacted != text:
                record.exc_text, record.exc_info = redacted, None
        elif record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


_filter = SecretFilter()
_factory_installed = False


def _install_record_factory() -> None:
    """Redact records of every ``chatgpt_tool_hub.*`` logger as they are made, including loggers created
    after ``configure_logging`` ran (a tool plugin's own module logger). Chains the previous factory."""
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        name = getattr(record, "name", "")
        if isinstance(name, str) and (name == _ROOT or name.startswith(_ROOT + ".")):
            _filter.filter(record)
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


def configure_logging(debug: bool, secrets: Iterable[str] = ()) -> None:
    """Turn on debug logs of the package (once), always with secret redaction."""
    logger = logging.getLogger(_ROOT)
    _filter.add(secrets)
    if _filter.secrets:
        _install_record_factory()
    # logger filters do not see records of child loggers, so attach to each one
    names = {_ROOT, *(f"{_ROOT}.{child}" for child in _CHILDREN)}
    names.update(name for name in list(logging.Logger.manager.loggerDict) if name.startswith(_ROOT + "."))
    for name in names:
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
