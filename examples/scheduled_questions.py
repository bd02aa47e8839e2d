"""Scheduled questions: an app asks itself a question every second, and a restarted app carries on.

Run it from the repository root (no key, no network; it takes a few seconds):

    python examples/scheduled_questions.py

A ScriptedLLM plays the model. The app schedules "Anything to report?" every
second in the session "ops" (kept in SQLite in a temporary workspace); the
scheduler's daemon thread asks it and the on_result callback prints each
answer, which also lands in the session's memory. Then the app is closed
(its thread stops) and a new app is built on the same workspace: it finds the
schedule, re-attaches a callback by scheduling the same name again, and
carries on. With a real LLM, use app.schedule("0 9 * * mon-fri", ...) and the
like (cron rules need: pip install "chatgpt-tool-hub[schedule]").
"""

from __future__ import annotations

import tempfile
import threading

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM


def build_app(workspace: str, label: str):
    llm = ScriptedLLM([f"AI: {label} check {n}: all quiet." for n in range(1, 20)])
    return AppFactory().create_app(tools_list=[], llm=llm, no_default=True, workspace_dir=workspace)


def collect(wanted: int):
    """An on_result callback that prints, and an event set after ``wanted`` results."""
    done = threading.Event()
    seen: list[str] = []

    def on_result(schedule, result) -> None:
        text = getattr(result, "output", None) or f"failed: {result}"
        seen.append(text)
        print(f"  [{schedule.name} #{schedule.runs}] {text}")
        if len(seen) >= wanted:
            done.set()

    return on_result, done


def main() -> None:
    workspace = tempfile.mkdtemp(prefix="tool-hub-schedules-")
    app = build_app(workspace, "first app")
    on_result, done = collect(2)
    schedule = app.schedule("every 1s", "Anything to report?", session_id="ops", name="report",
                            on_result=on_result)
    print(f"scheduled: {schedule.describe()}")
    if not done.wait(20):
        raise SystemExit("the scheduler did not ask in time")
    print("session 'ops' remembers:", [m["content"] for m in app.history("ops")][-2:])
    app.close()  # stops the scheduler's thread
    print("closed the first app; the schedule stays in", f"{workspace}/.tool-hub/schedules.sqlite3")

    again = build_app(workspace, "restarted app")  # finds the schedule and starts its own thread
    on_result, done = collect(1)
    again.schedule("every 1s", "Anything to report?", session_id="ops", name="report", on_result=on_result)
    if not done.wait(20):
        raise SystemExit("the restarted app did not ask in time")
    runs = again.schedules()[0].runs
    print(f"after the restart: {len(again.schedules())} schedule, {runs} runs in all")
    again.unschedule("report")
    again.close()
    print("schedules left:", again.schedules())


if __name__ == "__main__":
    main()
