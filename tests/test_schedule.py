"""Scheduled questions: time rules, SQLite persistence, restarts, the daemon thread, the terminal command.

Time is a fake clock (no test waits for a schedule to come due); the daemon thread is woken by hand.
"""

from __future__ import annotations

import datetime as dt
import gc
import threading
import time

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.apps.schedule import (
    DB_NAME,
    Cron,
    Interval,
    Scheduler,
    ScheduleStore,
    parse_command,
    parse_when,
    scheduler_for,
    terminal_command,
)
from chatgpt_tool_hub.errors import UserError
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import answer

START = dt.datetime(2026, 3, 2, 10, 2, 0).timestamp()  # a Monday, 10:02 local time


class Clock:
    def __init__(self, now: float = START):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_app(replies=(), **kwargs):
    llm = ScriptedLLM(list(replies))
    return AppFactory().create_app(tools_list=[], llm=llm, no_default=True, workspace_dir="workspace", **kwargs), llm


def wait_for(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


# ---- time rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("every 10m", 600), ("30s", 30), ("every 2 hours", 7200),
                                          ("1h30m", 5400), ("every minute", 60), ("every day", 86400),
                                          ("Every 1.5 Hours", 5400), ("2w", 1209600)])
def test_intervals(text, seconds):
    assert parse_when(text) == Interval(seconds)


def test_cron_rules_and_what_is_refused():
    pytest.importorskip("croniter")
    assert parse_when("*/5 * * * *") == Cron("*/5 * * * *")
    assert parse_when("0 9 * * mon-fri") == Cron("0 9 * * mon-fri") and parse_when("@daily") == Cron("@daily")
    with pytest.raises(UserError, match="not a valid cron rule"):
        parse_when("61 * * * *")
    with pytest.raises(UserError, match="cannot read 'tomorrow-ish' as a time rule"):
        parse_when("tomorrow-ish")
    with pytest.raises(UserError, match="shorter than a second"):
        parse_when("every 0.5s")


def test_an_interval_keeps_its_phase_and_cron_its_times():
    rule = Interval(600)
    assert rule.next_after(1000.0) == 1600.0
    assert rule.next_after(5000.0, previous=1600.0) == 5200.0          # missed ones are skipped, the phase kept
    assert rule.describe() == "every 10 minutes" and Interval(3600).describe() == "every hour"
    pytest.importorskip("croniter")
    assert dt.datetime.fromtimestamp(Cron("*/5 * * * *").next_after(START)).strftime("%H:%M") == "10:05"
    weekday = dt.datetime.fromtimestamp(Cron("0 9 * * mon-fri").next_after(START))
    assert (weekday.strftime("%a %H:%M")) == "Tue 09:00"


# ---- asking on time ----------------------------------------------------------------------------------


def test_a_due_question_is_asked_in_its_session_and_reported(isolated_env):
    clock = Clock()
    app, llm = make_app([answer("Nothing new."), answer("Still nothing.")])
    scheduler = scheduler_for(app, clock=clock, autostart=False)
    seen = []
    schedule = app.schedule("every 10m", "What is new?", session_id="alice",
                            on_result=lambda s, result: seen.append((s.id, result.output, s.runs)))
    assert schedule.next_run == START + 600 and (isolated_env / "workspace" / DB_NAME).is_file()
    assert scheduler.run_due() == [] and llm.calls == 0              # not due yet
    clock.advance(601)
    [(ran, result)] = scheduler.run_due()
    assert ran.id == schedule.id and result.output == "Nothing new."
    assert seen == [(schedule.id, "Nothing new.", 1)]
    assert [m["content"] for m in app.history("alice")] == ["What is new?", "Nothing new."]   # the session's memory
    stored = app.schedules()[0]
    assert (stored.runs, stored.last_output, stored.last_error, stored.next_run) == (1, "Nothing new.", None,
                                                                                     START + 1200)
    assert scheduler.run_due() == []                                  # once per due time
    clock.advance(600)
    assert [r.output for _, r in scheduler.run_due()] == ["Still nothing."]
    app.close()


def test_remember_false_keeps_the_answer_out_of_the_sessions_memory(isolated_env):
    clock = Clock()
    app, _ = make_app([answer("42")])
    scheduler = scheduler_for(app, clock=clock, autostart=False)
    app.schedule("30s", "The answer?", session_id="bob", remember=False)
    clock.advance(31)
    assert [r.output for _, r in scheduler.run_due()] == ["42"]
    assert app.history("bob") == [] and app.schedules()[0].last_output == "42"
    app.close()


def test_a_failing_run_is_recorded_and_reported_and_the_schedule_goes_on(isolated_env):
    clock = Clock()
    app, _ = make_app([])                                              # the LLM has no reply: the run fails
    scheduler = scheduler_for(app, clock=clock, autostart=False)
    failures = []
    app.schedule("every 1m", "Hello?", on_result=lambda s, result: failures.append(result))
    clock.advance(61)
    scheduler.run_due()
    assert type(failures[0]).__name__ == "ScriptExhaustedError"
    stored = app.schedules()[0]
    assert stored.last_error.startswith("ScriptExhaustedError: ScriptedLLM ran out of replies")
    assert stored.runs == 1 and stored.next_run == START + 120
    app.close()


def test_a_name_makes_scheduling_idempotent_and_reattaches_the_callback(isolated_env):
    clock = Clock()
    app, _ = make_app([answer("fine")])
    scheduler = scheduler_for(app, clock=clock, autostart=False)
    first = app.schedule("every 1h", "Check the news", name="news")
    got = []
    again = app.schedule("every 1h", "Check the news twice", name="news", on_result=lambda s, r: got.append(s.id))
    assert again.id == first.id and again.next_run == first.next_run and len(app.schedules()) == 1
    assert app.schedules()[0].question == "Check the news twice"
    clock.advance(3601)
    scheduler.run_due()
    assert got == [first.id]
    moved = app.schedule("every 2h", "Check the news twice", name="news")
    assert moved.next_run == clock.now + 7200                          # a new rule: a new time
    app.close()


def test_unschedule_by_id_or_name(isolated_env):
    app, _ = make_app()
    scheduler_for(app, clock=Clock(), autostart=False)
    one = app.schedule("every 1m", "one")
    app.schedule("every 1m", "two", name="second")
    assert app.unschedule(one.id).question == "one"
    assert app.unschedule("second").question == "two" and app.schedules() == []
    with pytest.raises(UserError, match=r"no schedule 'nope'; the schedules are: \(none\)"):
        app.unschedule("nope")
    app.close()


def test_two_schedulers_on_one_workspace_ask_a_due_question_once(isolated_env):
    clock = Clock()
    first, llm_one = make_app([answer("from one")])
    second, llm_two = make_app([answer("from two")])
    one = scheduler_for(first, clock=clock, autostart=False)
    two = scheduler_for(second, clock=clock, autostart=False)
    first.schedule("every 5m", "Ping?")
    clock.advance(301)
    asked = one.run_due() + two.run_due()
    assert len(asked) == 1 and llm_one.calls + llm_two.calls == 1
    first.close()
    second.close()


# ---- restarts and the thread --------------------------------------------------------------------------


def test_schedules_survive_a_restart_and_the_new_app_asks_the_due_ones(isolated_env):
    old, _ = make_app()
    scheduler_for(old, clock=Clock(1_000_000.0), autostart=False)     # planned long ago: due for a real clock
    old.schedule("every 10m", "Anything to report?", session_id="ops", name="report")
    old.close()
    del old
    new, llm = make_app([answer("All quiet.")])                         # the same workspace: resumed at once
    scheduler = scheduler_for(new)
    assert scheduler.running
    assert wait_for(lambda: new.schedules()[0].runs == 1)
    stored = new.schedules()[0]
    assert stored.last_output == "All quiet." and llm.calls == 1        # asked once, not once per missed time
    assert stored.next_run > time.time() and (stored.next_run - 1_000_600.0) % 600 == 0   # the phase is kept
    assert wait_for(lambda: new.history("ops") != [])
    new.close()
    assert not scheduler.running                                       # close() stops the thread


def test_schedules_resume_off_leaves_the_stored_schedules_alone(isolated_env):
    old, _ = make_app()
    scheduler_for(old, clock=Clock(1_000_000.0), autostart=False)
    old.schedule("every 10m", "Anything to report?", name="report")
    old.close()
    del old
    new, llm = make_app([answer("no")], schedules_resume=False)
    time.sleep(0.3)
    assert llm.calls == 0 and not scheduler_for(new).running
    assert [s.name for s in new.schedules()] == ["report"]  # still there, for an app that resumes them
    new.close()


def test_the_server_never_starts_schedules_a_users_code_planted(tmp_path):
    from chatgpt_tool_hub.server import create_server
    from chatgpt_tool_hub.server.users import User

    llm = ScriptedLLM([answer("planted run")] * 3)
    server = create_server(llm=llm, tools_list=[], no_default=True, serve_workspace_root=str(tmp_path / "users"))
    apps = server.state.tool_hub.apps
    user = User("key", "mallory")
    planter = AppFactory().create_app(tools_list=[], llm=ScriptedLLM([]), no_default=True,
                                      workspace_dir=str(apps.workspace(user)))  # what the user's code could write
    scheduler_for(planter, clock=Clock(1_000_000.0), autostart=False)
    planter.schedule("every 1m", "Spend the operator's tokens", name="planted")
    planter.close()
    app = apps.acquire(user, "victorinox")
    try:
        time.sleep(0.3)
        assert llm.calls == 0 and not scheduler_for(app).running
    finally:
        apps.release(user, "victorinox")
        apps.close()


def test_the_thread_asks_when_woken_after_the_clock_moved(isolated_env):
    clock = Clock()
    app, _ = make_app([answer("tick")])
    scheduler = scheduler_for(app, clock=clock)                         # autostart: app.schedule starts the thread
    done = threading.Event()
    app.schedule("every 1m", "Tick?", on_result=lambda s, r: done.set())
    assert scheduler.running and not done.wait(0.1)
    clock.advance(61)
    scheduler.wake()
    assert done.wait(30)
    app.close()
    assert not scheduler.running


def test_a_dropped_app_ends_its_schedulers_thread(isolated_env):
    app, _ = make_app()
    scheduler = scheduler_for(app, clock=Clock())
    app.schedule("every 1h", "later")
    thread = scheduler._thread
    assert thread.is_alive()
    del app
    gc.collect()
    scheduler.wake()
    thread.join(30)
    assert not thread.is_alive()


def test_a_workspace_without_schedules_starts_no_thread_and_a_broken_file_breaks_no_app(isolated_env):
    before = {t.name for t in threading.enumerate()}
    app, _ = make_app()
    assert "tool-hub-schedules" not in {t.name for t in threading.enumerate()} - before
    app.close()
    broken = isolated_env / "workspace" / DB_NAME
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_bytes(b"this is not a database" * 100)
    app, _ = make_app()                                                  # built all the same
    with pytest.raises(UserError, match="schedules.sqlite3 cannot be used .* move it away"):
        app.schedule("every 1m", "x")
    app.close()


def test_options_for_a_scheduler_that_exists_are_refused_not_ignored(isolated_env):
    app, _ = make_app()
    first = scheduler_for(app, clock=Clock(), autostart=False)
    assert scheduler_for(app) is first
    with pytest.raises(UserError, match="has its scheduler already .* clock cannot be set now"):
        scheduler_for(app, clock=Clock())
    app.close()


def test_the_store_claims_a_due_time_once(tmp_path):
    store = ScheduleStore(tmp_path / "s.sqlite3")
    from chatgpt_tool_hub.apps.schedule import Schedule

    store.put(Schedule("abc", "every 1m", "q", next_run=100.0))
    assert store.claim("abc", 100.0, 160.0) is True
    assert store.claim("abc", 100.0, 160.0) is False
    assert store.get("abc").next_run == 160.0


def test_a_scheduler_works_for_any_app_with_run(isolated_env):
    app, _ = make_app([answer("planned")])
    own = Scheduler(app, clock=Clock(), autostart=False)
    own.add("5s", "hi")
    own.clock.advance(6)
    assert [r.output for _, r in own.run_due()] == ["planned"]
    app.close()


# ---- the terminal -------------------------------------------------------------------------------------


@pytest.mark.parametrize("arg,expected", [
    ("every 10m What is new?", ("every 10m", "What is new?")),
    ("every 10 minutes What is new?", ("every 10 minutes", "What is new?")),
    ("30s ping", ("30s", "ping")),
    ("every hour check mail", ("every hour", "check mail")),
    ("1h 30m stretch", ("1h 30m", "stretch")),
    ("'*/15 * * * *' check the weather", ("*/15 * * * *", "check the weather")),
    ("*/15 * * * * check the weather", ("*/15 * * * *", "check the weather")),
    ("@daily summarise the news", ("@daily", "summarise the news")),
])
def test_parse_command(arg, expected):
    if "*" in arg or "@" in arg:
        pytest.importorskip("croniter")
    assert parse_command(arg) == expected


@pytest.mark.parametrize("arg", ["", "every 10m", "soon do it", "'every 10m unclosed"])
def test_parse_command_says_how_to_use_it(arg):
    with pytest.raises(UserError):
        parse_command(arg)


def test_terminal_command_adds_lists_and_removes(isolated_env):
    app, _ = make_app()
    scheduler_for(app, clock=Clock(), autostart=False)
    assert terminal_command(app, "").startswith("no schedules; add one with /schedule")
    added = terminal_command(app, "every 10m What is new?")
    assert added.startswith("scheduled ") and "every 10 minutes, session 'default': What is new?" in added
    schedule_id = app.schedules()[0].id
    assert terminal_command(app, "list").startswith(f"{schedule_id}: every 10 minutes")
    assert terminal_command(app, f"remove {schedule_id}") == f"removed schedule {schedule_id}: What is new?"
    with pytest.raises(UserError, match="usage: /schedule"):
        terminal_command(app, "remove")
    app.close()


def test_the_example_runs_and_carries_on_after_a_restart(tmp_path):
    from test_examples import EXAMPLES, ok, run_python

    out = ok(run_python(EXAMPLES / "scheduled_questions.py", tmp_path))
    assert "scheduled: " in out and "(report): every second, session 'ops': Anything to report?" in out
    assert "[report #1] first app check 1: all quiet." in out and "[report #2] first app check 2" in out
    assert "session 'ops' remembers: ['Anything to report?', 'first app check 2: all quiet.']" in out
    assert "restarted app check" in out and "schedules left: []" in out
