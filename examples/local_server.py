"""Use a local OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio) as the LLM.

This one needs a running server. For example:

    ollama serve &  ollama pull llama3.1
    python examples/local_server.py

    vllm serve Qwen/Qwen2.5-7B-Instruct
    python examples/local_server.py --base-url http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct

    python examples/local_server.py --question "How many days are there between 2000-01-01 and 2024-12-31?"

No key is needed for a server that is not OpenAI's. The defaults come from
LLM_API_BASE_URL and MODEL_NAME when they are set, else Ollama's
http://localhost:11434/v1 and llama3.1. The request is made with
max_retries=0 and a short timeout, so when no server answers the script says
so at once and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import LLMAuthError, LLMConnectionError, LLMError

DEFAULT_BASE_URL = "http://localhost:11434/v1"  # Ollama
DEFAULT_MODEL = "llama3.1"
QUESTION = "What is the sum of the integers from 1 to 100? Use the python tool to compute it."


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("LLM_API_BASE_URL") or DEFAULT_BASE_URL,
                        help="the server's OpenAI-compatible base URL (default: %(default)s)")
    parser.add_argument("--model", default=os.environ.get("MODEL_NAME") or DEFAULT_MODEL,
                        help="a model the server has (default: %(default)s)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for each reply (default: %(default)s)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    print(f"server: {args.base_url}  model: {args.model}")
    with tempfile.TemporaryDirectory(prefix="local-server-") as workspace:
        app = AppFactory().create_app(
            tools_list=["python"],
            llm_api_base_url=args.base_url,
            model_name=args.model,
            max_retries=0,                 # fail at once instead of backing off
            request_timeout=args.timeout,
            workspace_dir=workspace,
        )
        try:
            print(f"\nuser> {args.question}")
            for event in app.stream(args.question):
                if event.kind == "action":
                    print(f"  [action] {event.tool}: {event.tool_input}")
                elif event.kind == "observation":
                    print(f"  [observation] {event.observation}")
                elif event.kind == "error":
                    print(f"  [format problem, asking the model again] {event.message.splitlines()[0]}")
                elif event.kind == "answer":
                    print(f"\nAI> {event.text}")
        except LLMConnectionError:
            print(f"\nNo OpenAI-compatible server answered at {args.base_url}.\n"
                  "Start one, for example:\n"
                  f"  ollama serve  (and once: ollama pull {args.model})\n"
                  "  vllm serve <model>              (then --base-url http://localhost:8000/v1)\n"
                  "  llama-server -m <model.gguf>    (then --base-url http://localhost:8080/v1)\n"
                  "or pass --base-url with the address of your server.", file=sys.stderr)
            return 1
        except LLMAuthError as err:  # 401/403/404: a wrong key, model name or URL path
            print(f"\nThe server answered but refused the request: {err}\n"
                  f"Check --model (the models your server has) and --base-url (it usually ends in /v1).",
                  file=sys.stderr)
            return 1
        except LLMError as err:
            print(f"\nThe server failed: {err}", file=sys.stderr)
            return 1
        finally:
            app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
