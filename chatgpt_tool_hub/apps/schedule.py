"""Scheduled questions: ``app.schedule("every 10m", "question")``, kept in SQLite in the workspace.

A schedule is a question, a session and a time rule: an interval (``every
10m``, ``30s``, ``every 2 hours``, ``1h30m``) or a cron expression
(``*/5 * * * *``, ``0 9 * * mon-fri``, ``@daily``; these need ``croniter``:
``pip install "chatgpt-tool-hub[schedule]"``), read in local time.

* **Persistence.** Schedules live in ``<workspace>/.tool-hub/schedules.sqlite3``.
  An app built on a workspace that has schedules starts its scheduler at once,
  so they survive a restart: a schedule that came due while no app ran runs
  once (not once per missed time), then keeps its rhythm (an interval keeps
  its phase; a cron rule its next time).
* **Running.** One daemon thread per app wakes at the next due time (at least
  every ``POLL_SECONDS``, to see schedules another process added) and asks the
  questions in turn with ``app.run(question, session_id=...)``: the answer
  lands in that session's memory like any question's (``remember=False`` asks
  with a history of its own instead), the app's callbacks see its events, and
  each ``on_result(schedule, result)`` callback gets the ``RunResult`` (or the
  exception when the run failed). Several apps (or processes) on one workspace
  never run the same due time twice: a run is claimed in the database first.
  ``app.close()`` stops the thread; an app that is dropped stops it too (the
  thread holds the app weakly).
* **Identity.** Each schedule has a short id; a ``name`` makes ``schedule``
  idempotent: scheduling a name again updates that schedule (and attaches the
  new callback), which is how a program re-attaches its callbacks after a
  restart.

:func:`parse_command` and :func:`terminal_command` serve the terminal's
``/schedule`` command; :class:`Scheduler` takes a ``clock`` so that tests run
on a fake one.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import logging
import math
import re
import sqlite3
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..config import get_typed
from ..errors import UserError

__all__ = ["Schedule", "Scheduler", "ScheduleStore", "parse_when", "parse_command", "scheduler_for",
           "resume_schedules", "stop_schedules", "describe_schedules", "terminal_command", "SCHEDULE_HINT",
           "DB_NAME", "POLL_SECONDS"]

log = logging.getLogger("chatgpt_tool_hub.apps")
SCHEDULE_HINT = 'pip install "chatgpt-tool-hub[schedule]"'
DB_NAME = ".tool-hub/schedules.sqlite3"
POLL_SECONDS = 30.0
_MAX_OUTPUT = 4000
OnResult = Callable[["Schedule", Any], None]
_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
          "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
          "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)?\s*([a-z]+)", re.I)
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?\s*[a-z]+\s*)+$|^[a-z]+$", re.I)
_CRON_FIELD = re.compile(r"^[\d*/,\-?LW#A-Za-z]+$")
USAGE = ("usage: /schedule                      list the schedules\n"
         "       /schedule <when> <question>    e.g. /schedule every 10m What is new? or "
         "/schedule */30 * * * * Check the weather\n"
         "       /schedule remove <id or name>  stop one")


# ---- when --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    seconds: float

    def next_after(self, now: float, previous: float | None = None) -> float:
        """The first time after ``now``, in the rhythm of ``previous`` (the last planned time) when given."""
        if previous is None or previous > now:
            return now + self.seconds if previous is None else previous
        return previous + (math.floor((now - previous) / self.seconds) + 1) * self.seconds

    def describe(self) -> str:
        for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
            if self.seconds % size == 0:
                count = int(self.seconds // size)
                return f"every {count} {unit}{'s' if count != 1 else ''}" if count != 1 else f"every {unit}"
        return "every second" if self.seconds == 1 else f"every {self.seconds:g} seconds"


@dataclass(frozen=True)
class Cron:
    expression: str

    def next_after(self, now: float, previous: float | None = None) -> float:
        from croniter import croniter

        start = _dt.datetime.fromtimestamp(now).astimezone()  # local time, with its offset
        return float(croniter(self.expression, start).get_next(float))

    def describe(self) -> str:
        return f"cron {self.expression}"


def parse_when(text: str) -> Interval | Cron:
    """An interval (``every 10m``, ``30s``, ``1h30m``, ``every hour``) or a cron rule (``*/5 * * * *``,
    ``@daily``); a ``UserError`` saying what is accepted otherwise."""
    raw = " ".join(str(text or "").split())
    lowered = raw.lower()
    body = lowered[6:].strip() if lowered.startswith("every ") else lowered
    if body and _DURATION.match(body):
        seconds = 0.0
        for number, unit in _PART.findall(body):
            if unit.lower() not in _UNITS:
                break
            seconds += float(number or 1) * _UNITS[unit.lower()]
        else:
            if seconds < 1:
                raise UserError(f"the interval {raw!r} is shorter than a second; schedule at most once a second")
            return Interval(seconds)
    fields = raw.split()
    if raw.startswith("@") or (len(fields) in (5, 6) and all(_CRON_FIELD.match(f) for f in fields)):
        try:
            from croniter import croniter
        except ImportError:
            raise UserError(f"cron rules need croniter, which is not installed: {SCHEDULE_HINT}; intervals such "
                            f"as 'every 10m' work without it") from None
        if croniter.is_valid(raw):
            return Cron(raw)
        raise UserError(f"{raw!r} is not a valid cron rule (minute hour day month weekday, e.g. '*/15 * * * *' "
                        f"or '0 9 * * mon-fri', or @hourly / @daily / @weekly)")
    raise UserError(f"cannot read {raw[:60]!r} as a time rule: give an interval ('every 10m', '30s', 'every 2 "
                    f"hours') or a cron rule ('*/15 * * * *', '0 9 * * mon-fri', '@daily')")


# ---- the schedules and their table ------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    id: str
    when: str                 # the rule as given
    question: str
    session_id: str = "default"
    name: str | None = None
    remember: bool = True     # the answer goes into the session's memory
    created: float = 0.0
    next_run: float = 0.0     # seconds since the epoch
    last_run: float | None = None
    last_output: str | None = None
    last_error: str | None = None
    runs: int = 0

    @property
    def rule(self) -> Interval | Cron:
        return parse_when(self.when)

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        label = f"{self.id}" + (f" ({self.name})" if self.name else "")
        due = _dt.datetime.fromtimestamp(self.next_run).strftime("%Y-%m-%d %H:%M:%S")
        last = ""
        if self.last_run is not None:
            outcome = f"error: {self.last_error}" if self.last_error else f"answer: {_one_line(self.last_output)}"
            last = f"; run {self.runs} time{'s' if self.runs != 1 else ''}, last {outcome}"
        return (f"{label}: {self.rule.describe()}, session {self.session_id!r}: {_one_line(self.question)} "
                f"(next {due}{' (due)' if self.next_run <= now else ''}{last})")


_COLUMNS = ("id", "name", "spec", "question", "session_id", "remember", "created", "next_run", "last_run",
            "last_output", "last_error", "runs")


class ScheduleStore:
    """The schedules table in a SQLite file; one short connection per operation (any thread may call)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            connection = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            connection.execute("CREATE TABLE IF NOT EXISTS schedules (id TEXT PRIMARY KEY, name TEXT UNIQUE, "
                               "spec TEXT NOT NULL, question TEXT NOT NULL, session_id TEXT NOT NULL, remember "
                               "INTEGER NOT NULL, created REAL NOT NULL, next_run REAL NOT NULL, last_run REAL, "
                               "last_output TEXT, last_error TEXT, runs INTEGER NOT NULL DEFAULT 0)")
        except sqlite3.DatabaseError as exc:
            raise UserError(f"the schedules file {self.path} cannot be used ({exc}); move it away to start "
                            f"afresh") from None
        return connection

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        connection = self._connect()
        try:
            return connection.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise UserError(f"the schedules file {self.path} cannot be used ({exc}); move it away to start "
                            f"afresh") from None
        finally:
            connection.close()

    def all(self) -> list[Schedule]:
        rows = self._query(f"SELECT {', '.join(_COLUMNS)} FROM schedules ORDER BY created, id")
        return [_from_row(row) for row in rows]

    def get(self, key: str) -> Schedule | None:
        rows = self._query(f"SELECT {', '.join(_COLUMNS)} FROM schedules WHERE id = ? OR name = ?", (key, key))
        return _from_row(rows[0]) if rows else None

    def put(self, schedule: Schedule) -> None:
        s = schedule
        self._query(f"INSERT OR REPLACE INTO schedules ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * 12)})",
                    (s.id, s.name, s.when, s.question, s.session_id, int(s.remember), s.created, s.next_run,
                     s.last_run, s.last_output, s.last_error, s.runs))

    def delete(self, schedule_id: str) -> None:
        self._query("DELETE FROM schedules WHERE id = ?", (schedule_id,))

    def claim(self, schedule_id: str, planned: float, following: float) -> bool:
        """Move a due schedule to its next time, unless another scheduler did first; True when this one did."""
        connection = self._connect()
        try:
            cursor = connection.execute("UPDATE schedules SET next_run = ? WHERE id = ? AND next_run = ?",
                                        (following, schedule_id, planned))
            return cursor.rowcount == 1
        finally:
            connection.close()

    def record(self, schedule_id: str, ran: float, output: str | None, error: str | None) -> None:
        self._query("UPDATE schedules SET last_run = ?, last_output = ?, last_error = ?, runs = runs + 1 "
                    "WHERE id = ?", (ran, (output or "")[:_MAX_OUTPUT] if error is None else None,
                                     error[:_MAX_OUTPUT] if error else None, schedule_id))


def _from_row(row: tuple) -> Schedule:
    values = dict(zip(_COLUMNS, row, strict=False))
    return Schedule(id=values["id"], when=values["spec"], question=values["question"],
                    session_id=values["session_id"], name=values["name"], remember=bool(values["remember"]),
                    created=values["created"], next_run=values["next_run"], last_run=values["last_run"],
                    last_output=values["last_output"], last_error=values["last_error"], runs=values["runs"])


# ---- the scheduler ------------------------------------------------------------------------------


class Scheduler:
    """An app's schedules and the daemon thread that asks them (see the module docstring)."""

    def __init__(self, app: Any, *, store: ScheduleStore | None = None, clock: Callable[[], float] = time.time,
                 autostart: bool = True, poll_seconds: float = POLL_SECONDS):
        self._app = weakref.ref(app)
        self.store = store or ScheduleStore(Path(app.context.workspace) / DB_NAME)
        self.clock = clock
        self.autostart = autostart
        self.poll_seconds = max(0.01, float(poll_seconds))
        self.listeners: list[OnResult] = []  # called for every schedule's result
        self._callbacks: dict[str, list[OnResult]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running: set[str] = set()

    # ---- schedules -------------------------------------------------------------------------

    def add(self, when: str, question: str, *, session_id: str = "default", name: str | None = None,
            remember: bool = True, on_result: OnResult | None = None) -> Schedule:
        if not isinstance(question, str) or not question.strip():
            raise UserError("a schedule needs a question: app.schedule('every 10m', 'What is new?')")
        rule = parse_when(when)
        name = str(name).strip() if name is not None and str(name).strip() else None
        now = self.clock()
        existing = self.store.get(name) if name else None
        if existing is not None and existing.name == name:
            schedule = replace(existing, when=" ".join(str(when).split()), question=question.strip(),
                               session_id=str(session_id), remember=bool(remember))
            if existing.when != schedule.when:
                schedule = replace(schedule, next_run=rule.next_after(now))
        else:
            schedule = Schedule(uuid.uuid4().hex[:8], " ".join(str(when).split()), question.strip(), str(session_id),
                                name, bool(remember), created=now, next_run=rule.next_after(now))
        self.store.put(schedule)
        if on_result is not None:
            with self._lock:
                self._callbacks.setdefault(schedule.id, []).append(on_result)
        if self.autostart:
            self.start()
        self._wake.set()
        return schedule

    def list(self) -> list[Schedule]:
        return self.store.all()

    def get(self, key: str) -> Schedule:
        schedule = self.store.get(str(key))
        if schedule is None:
            have = ", ".join(s.name or s.id for s in self.store.all()) or "(none)"
            raise UserError(f"no schedule {key!r}; the schedules are: {have}")
        return schedule

    def remove(self, key: str) -> Schedule:
        schedule = self.get(key)
        self.store.delete(schedule.id)
        with self._lock:
            self._callbacks.pop(schedule.id, None)
        self._wake.set()
        return schedule

    # ---- running -----------------------------------------------------------------------------

    def run_due(self, now: float | None = None) -> builtins.list[tuple[Schedule, Any]]:  # list: the method above
        """Ask every schedule that is due at ``now`` (claimed first), in turn; ``[(schedule, result)]``."""
        now = self.clock() if now is None else now
        done = []
        for schedule in self.store.all():
            if schedule.next_run > now or self._stop.is_set():
                continue
            try:
                following = schedule.rule.next_after(now, schedule.next_run)
            except UserError as exc:  # e.g. croniter uninstalled since: say so, try again later
                log.warning("schedule %s cannot be planned: %s", schedule.id, exc)
                following = now + self.poll_seconds
            if not self.store.claim(schedule.id, schedule.next_run, following):
                continue  # another scheduler on this workspace took it
            done.append((schedule, self._ask(replace(schedule, next_run=following))))
        return done

    def _ask(self, schedule: Schedule) -> Any:
        app = self._app()
        if app is None:
            return None
        started = self.clock()
        try:
            if schedule.remember:
                result: Any = app.run(schedule.question, session_id=schedule.session_id)
            else:
                result = app.run(schedule.question, [])
            self.store.record(schedule.id, started, str(getattr(result, "output", result)), None)
        except Exception as exc:  # a failed run is recorded and reported, never the scheduler's end
            log.warning("scheduled question %s failed: %s", schedule.id, exc)
            self.store.record(schedule.id, started, None, f"{type(exc).__name__}: {exc}")
            result = exc
        del app
        latest = self.store.get(schedule.id) or schedule
        with self._lock:
            callbacks = [*self._callbacks.get(schedule.id, ()), *self.listeners]
        for callback in callbacks:
            try:
                callback(latest, result)
            except Exception:
                log.warning("the on_result callback %r raised", callback, exc_info=True)
        return result

    def start(self) -> None:
        """Start the daemon thread (once)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="tool-hub-schedules", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Look at the schedules now (after the clock moved, in tests)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread; a question being asked finishes first (up to ``timeout`` seconds are waited)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self._app() is None:
                return  # the app was dropped
            try:
                self.run_due()
                pending = [s.next_run for s in self.store.all()]
            except Exception:  # a locked or broken database: try again later
                log.warning("the scheduler could not read its schedules", exc_info=True)
                pending = []
            wait = min([max(0.0, t - self.clock()) for t in pending] + [self.poll_seconds])
            self._wake.wait(wait)
            self._wake.clear()


# ---- per app --------------------------------------------------------------------------------------

_SCHEDULERS: "weakref.WeakKeyDictionary[Any, Scheduler]" = weakref.WeakKeyDictionary()
_SCHEDULERS_LOCK = threading.Lock()


def scheduler_for(app: Any, **options: Any) -> Scheduler:
    """The app's scheduler, made on first use (``options`` go to :class:`Scheduler` then; given again once it
    exists, they are refused rather than ignored)."""
    with _SCHEDULERS_LOCK:
        scheduler = _SCHEDULERS.get(app)
        if scheduler is None:
            scheduler = _SCHEDULERS[app] = Scheduler(app, **options)
        elif options:
            raise UserError(f"this app has its scheduler already (made by an earlier call, or started for the "
                            f"schedules in its workspace), so {', '.join(sorted(options))} cannot be set now; "
                            f"call scheduler_for(app, ...) before anything else uses the app's schedules")
        return scheduler


def resume_schedules(app: Any) -> Scheduler | None:
    """Start the scheduler of an app whose workspace holds schedules (a restart); nothing otherwise."""
    workspace = getattr(getattr(app, "context", None), "workspace", None)
    if workspace is None or not (Path(workspace) / DB_NAME).is_file():
        return None
    if not get_typed(getattr(app, "config", None) or {}, "schedules_resume", True):
        log.info("the schedules in %s are not started: schedules_resume is off", workspace)
        return None
    try:
        scheduler = scheduler_for(app)
        if scheduler.list():
            scheduler.start()
        return scheduler
    except Exception as exc:  # a broken file never stops an app from being built
        log.warning("the schedules in %s were not resumed: %s", workspace, exc)
        return None


def stop_schedules(app: Any) -> None:
    """Stop the app's scheduler thread, if it has one (``app.close()``)."""
    with _SCHEDULERS_LOCK:
        scheduler = _SCHEDULERS.get(app)
    if scheduler is not None:
        scheduler.stop()


# ---- the terminal ----------------------------------------------------------------------------------


def parse_command(arg: str) -> tuple[str, str]:
    """``/schedule``'s argument as ``(when, question)``: a quoted rule, ``@daily``, an interval (``every 10m``,
    ``30s``, ``every 2 hours``) or five cron fields, then the question."""
    text = str(arg or "").strip()
    if not text:
        raise UserError(USAGE)
    if text[0] in "\"'":
        end = text.find(text[0], 1)
        if end < 0:
            raise UserError(f"the quote in {text[:60]!r} is not closed; {USAGE}")
        when, question = text[1:end], text[end + 1:].strip()
    else:
        words = text.split()
        when, taken = "", 0
        if words[0].startswith("@"):
            when, taken = words[0], 1
        elif words[0].lower() == "every" or _DURATION.match(words[0]) and words[0][0].isdigit():
            taken = 1 if words[0].lower() == "every" else 0
            while taken < len(words) and _is_duration_word(words[taken], words[taken + 1:]):
                taken += 1
            when = " ".join(words[:taken])
        elif len(words) > 5 and all(_CRON_FIELD.match(w) for w in words[:5]):
            when, taken = " ".join(words[:5]), 5
        question = " ".join(words[taken:]) if when else ""
    if not when or not question:
        raise UserError(USAGE)
    parse_when(when)  # a bad rule is said now
    return when, question


def _is_duration_word(word: str, rest: list[str]) -> bool:
    low = word.lower()
    if low in _UNITS:
        return True
    if re.fullmatch(r"(?:\d+(?:\.\d+)?[a-z]+)+", low):
        return all(unit in _UNITS for _, unit in _PART.findall(low))
    return bool(re.fullmatch(r"\d+(?:\.\d+)?", low)) and bool(rest) and rest[0].lower() in _UNITS


def describe_schedules(app: Any) -> str:
    """The app's schedules, one per line (the terminal's ``/schedule``)."""
    schedules = scheduler_for(app).list()
    if not schedules:
        return "no schedules; add one with /schedule <when> <question>, e.g. /schedule every 1h What is new?"
    return "\n".join(s.describe() for s in schedules)


def terminal_command(app: Any, arg: str, on_result: OnResult | None = None, *, session_id: str = "default") -> str:
    """Run ``/schedule <arg>`` (list, add, ``remove <id>``) and return what to print; a ``UserError``
    carries the usage. ``on_result`` receives the results of a schedule added here."""
    text = str(arg or "").strip()
    if not text or text.lower() in ("list", "ls"):
        return describe_schedules(app)
    head, _, rest = text.partition(" ")
    if head.lower() in ("remove", "rm", "delete", "stop"):
        if not rest.strip():
            raise UserError(USAGE)
        removed = scheduler_for(app).remove(rest.strip())
        return f"removed schedule {removed.id}: {_one_line(removed.question)}"
    when, question = parse_command(text)
    schedule = app.schedule(when, question, session_id=session_id, on_result=on_result) if hasattr(
        app, "schedule") else scheduler_for(app).add(when, question, session_id=session_id, on_result=on_result)
    return f"scheduled {schedule.describe()}"


def _one_line(text: Any, limit: int = 80) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
