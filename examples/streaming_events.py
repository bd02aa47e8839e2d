"""Watch a run as it happens: app.stream() and its typed events.

Run it from the repository root (no key, no network):

    python examples/streaming_events.py

A ScriptedLLM plays the model. Its first reply is malformed (an Action without
an Action Input), so the engine sends format feedback and emits an error
event; then the model calls the real python tool and answers. Every event is
printed with its kind: token, thought, action, observation, error, answer.
The same events reach callbacks (create_app(callbacks=[...]) or
app.run(question, callbacks=[...])).
"""

from __future__ import annotations

import tempfile

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM


def main() -> None:
    llm = ScriptedLLM([
        "I will compute it.\nAction: python",  # no Action Input: the parser's feedback goes back
        "Thought: Do I need to use a tool? Yes\nAction: python\nAction Input: print(2 ** 10)",
        lambda messages: "Thought: Do I need to use a tool? No\nAI: 2 to the 10th is "
                         + messages[-1]["content"].removeprefix("Observation:").strip() + ".",
    ], chunk_size=4)

    seen: list[str] = []
    with tempfile.TemporaryDirectory(prefix="streaming-") as workspace:
        app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=workspace)
        for event in app.stream("What is 2 to the 10th?"):
            if event.kind not in seen:
                seen.append(event.kind)
            if event.kind == "token":
                print(f"[token] {event.text!r}")
            elif event.kind == "thought":
                print(f"[thought] {event.text}")
            elif event.kind == "action":
                print(f"[action] {event.tool} <- {event.tool_input!r}")
            elif event.kind == "observation":
                print(f"[observation] {event.tool} -> {event.observation}")
            elif event.kind == "error":
                first_line = event.message.splitlines()[0]
                print(f"[error] {event.error_type}: {first_line}")
            elif event.kind == "answer":
                print(f"[answer] {event.text} (stopped by {event.stopped_by})")
        app.close()
    print("kinds seen:", ", ".join(seen))


if __name__ == "__main__":
    main()
