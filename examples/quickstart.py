"""Quick start: one question that the model answers with the python tool.

Run it from the repository root (or anywhere the package is installed):

    python examples/quickstart.py
    python examples/quickstart.py "How many days are there between 2000-01-01 and 2024-12-31?"

With a real model configured it uses that model: set LLM_API_KEY for OpenAI,
or LLM_API_BASE_URL (and MODEL_NAME) for any OpenAI-compatible server such as
Ollama (http://localhost:11434/v1), in the environment or in a .env file.
Without one it says so and runs offline: a ScriptedLLM plays the model with
prepared replies, while the python tool really runs. The first line of output
says which mode it is in.

It shows AppFactory().create_app(), app.run() and the RunResult: the answer,
the tool steps, the token usage and why the run stopped.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError, RunError
from chatgpt_tool_hub.testing import ScriptedLLM

QUESTION = "What is the 30th Fibonacci number?"

FIBONACCI_CODE = """\
a, b = 0, 1
for _ in range(30):
    a, b = b, a + b
print(a)"""


def offline_llm() -> ScriptedLLM:
    """Replies a model could give: call the python tool, then answer from the observation."""

    def answer_from_observation(messages: list[dict]) -> str:
        observation = messages[-1]["content"].removeprefix("Observation:").strip()
        return f"Thought: Do I need to use a tool? No\nAI: The 30th Fibonacci number is {observation}."

    return ScriptedLLM([
        f"Thought: Do I need to use a tool? Yes\nAction: python\nAction Input:\n{FIBONACCI_CODE}",
        answer_from_observation,
    ])


def main() -> int:
    question = " ".join(sys.argv[1:]) or QUESTION
    with tempfile.TemporaryDirectory(prefix="quickstart-") as workspace:
        factory = AppFactory()
        try:
            # the model comes from LLM_API_KEY / LLM_API_BASE_URL / MODEL_NAME (environment, .env, config.json)
            app = factory.create_app(tools_list=["python"], workspace_dir=workspace)
            print(f"mode: real model ({app.llm.model_name})")
        except ConfigError as err:
            if err.key != "llm_api_key":
                raise
            print("mode: offline. No LLM is configured (set LLM_API_KEY, or LLM_API_BASE_URL for a local")
            print("      server), so a ScriptedLLM plays the model; the python tool really runs.")
            if question != QUESTION:
                print(f"      (the offline script only knows the question: {QUESTION})")
                question = QUESTION
            app = factory.create_app(tools_list=["python"], workspace_dir=workspace, llm=offline_llm())

        print(f"\nquestion: {question}")
        try:
            result = app.run(question)
        except RunError as err:  # the LLM could not be reached, or refused the key
            print(f"the model could not answer: {err}", file=sys.stderr)
            return 1
        finally:
            app.close()

    for number, step in enumerate(result.steps, 1):
        print(f"\nstep {number}: {step.tool} ({step.status}, {step.seconds:.2f} s)")
        print("  input:")
        print(textwrap.indent(str(step.tool_input), "    "))
        print(f"  observation: {step.observation}")
    total = result.usage.total
    print(f"\nanswer: {result.output}")
    print(f"stopped by: {result.stopped_by}")
    print(f"LLM calls: {result.usage.llm_calls}, tokens: {total.prompt_tokens} prompt + "
          f"{total.completion_tokens} completion{' (estimated)' if total.estimated else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
