"""Logging for apps: the debug switch, and redaction of the live apps' secrets in the package's own logs.

Nothing here changes logging for the rest of the process: no record factory
is replaced and no other library's logger or handler is touched. The package's
own loggers carry the filter (a logger filter runs where a record is made,
before any handler sees it), and the package's root logger ``chatgpt_tool_hub``
carries a handler that redacts every record passing through it -- also those of
``chatgpt_tool_hub.*`` loggers made later, such as a tool plugin's -- before
the record propagates to the application's handlers. That handler prints
nothing itself, except what Python's last-resort handler would have printed
(warnings and errors when no handler is configured anywhere).

The secrets are those of the apps (and factories) alive now: each registers
its :class:`~chatgpt_tool_hub.redact.Redactor` with :func:`guard_logs`, held
weakly, so the set shrinks again when an app is dropped. To redact other
libraries' records too (urllib3 logs request URLs at DEBUG), attach
:func:`redaction_filter` to your own handler.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Iterable

from ..redact import Redactor

__all__ = ["configure_logging", "guard_logs", "redaction_filter", "SecretFilter", "PACKAGE_LOGGERS"]

_ROOT = "chatgpt_tool_hub"
# every logger the package creates (a test checks that no module uses another name); a logger's filters
# do not see records of its children, so each one carries the filter itself
PACKAGE_LOGGERS = (_ROOT, *(f"{_ROOT}.{child}" for child in (
    "llm", "engine", "tools", "apps", "cli", "experts", "planner", "tools.mcp", "tools.openapi", "tools.plugins",
    "server", "web", "runtime")))


class SecretFilter(logging.Filter):
    """Replaces the secrets of the registered redactors with ``***`` in log records."""

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self._redactors: weakref.WeakSet[Redactor] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._own = Redactor(secrets)  # secrets given to this filter itself (kept as long as it lives)

    def register(self, redactor: Redactor) -> None:
        if redactor:
            with self._lock:
                self._redactors.add(redactor)

    def redactors(self) -> list[Redactor]:
        with self._lock:
            found = list(self._redactors)
        return [self._own, *found] if self._own else found

    @property
    def secrets(self) -> frozenset[str]:
        """The secret values redacted now (for diagnostics and tests)."""
        return frozenset(s for r in self.redactors() for s in r.secrets)

    def redact(self, text: str, redactors: Iterable[Redactor] | None = None) -> str:
        for redactor in self.redactors() if redactors is None else redactors:
            text = redactor.redact(text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        redactors = self.redactors()
        if not redactors:
            return True

        def redact(text: str) -> str:
            return self.redact(text, redactors)

        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler's error reporting
            return True
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        # a traceback carries exception messages (a URL with ?key=..., a header): when one holds a
        # secret, hand the handlers the redacted text instead of the exception
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            redacted = redact(text)
            if redacted != text:
                record.exc_text, record.exc_info = redacted, None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class _RedactingHandler(logging.Handler):
    """On the package's root logger: redacts each record in place (before the application's handlers get it),
    and stands in for ``logging.lastResort`` when there is no other handler (it would otherwise be skipped)."""

    def __init__(self, secret_filter: SecretFilter):
        super().__init__(logging.NOTSET)
        self.addFilter(secret_filter)

    def emit(self, record: logging.LogRecord) -> None:
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and not _other_handlers(record.name, self):
            last.handle(record)


def _other_handlers(name: str, mine: logging.Handler) -> bool:
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        if any(h is not mine for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent  # type: ignore[assignment]
    return False


_filter = SecretFilter()
_redacting = _RedactingHandler(_filter)
_handler: logging.Handler | None = None


def redaction_filter() -> SecretFilter:
    """The filter that hides the live apps' secrets; add it to your own handlers to cover other libraries."""
    return _filter


def guard_logs(redactor: Redactor) -> None:
    """Hide ``redactor``'s secrets in the package's logs for as long as the caller keeps ``redactor``."""
    _filter.register(redactor)
    _attach()


def _attach() -> None:
    for name in PACKAGE_LOGGERS:
        logger = logging.getLogger(name)
        if _filter not in logger.filters:
            logger.addFilter(_filter)
    root = logging.getLogger(_ROOT)
    if _redacting not in root.handlers:
        root.handlers.insert(0, _redacting)  # first: the handlers after it get the redacted record


def configure_logging(debug: bool) -> None:
    """The package's loggers carry the redaction filter; ``debug`` turns on its DEBUG logs (once) on stderr."""
    global _handler
    _attach()
    if debug:
        logger = logging.getLogger(_ROOT)
        logger.setLevel(logging.DEBUG)
        if _handler is None and not any(h is not _redacting for h in logger.handlers):
            _handler = logging.StreamHandler()
            _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            _handler.addFilter(_filter)
            logger.addHandler(_handler)
