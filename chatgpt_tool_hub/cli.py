"""``tool-hub``: ask, the LLM-OS terminal, run one tool, list tools, offline demo.

The view (``console``: event panels, the approval prompt, the tool table) is an
observer of the engine's events; library code never prints.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from . import __version__
from .console import EventView, console_approver, make_console, print_tools
from .errors import ConfigError, RunError, ToolHubError, UserError

EXIT_OK, EXIT_ERROR, EXIT_CONFIG = 0, 1, 2
HISTORY_FILE = os.path.join(os.path.expanduser("~"), ".tool_hub_history")

HELP = """Commands:
  /tools        list the tools of this session
  /reset        forget the conversation
  /depth N      allow N tool calls per question
  /model NAME   switch the chat model
  /image PATH   hand an image (or WAV audio) to the conversation
  /help         this text
  /exit         leave (Ctrl-D works too)"""


# ---- commands ----------------------------------------------------------------------------


def _create_app(args, console, **extra: Any):
    from .apps import AppFactory

    kwargs: dict[str, Any] = dict(extra)
    if getattr(args, "model", None):
        kwargs["model_name"] = args.model
    if getattr(args, "depth", None) is not None:
        kwargs["think_depth"] = args.depth
    tools = args.tools.split(",") if getattr(args, "tools", None) else None
    return AppFactory().create_app(tools_list=tools, approve=console_approver(console), **kwargs)


def cmd_ask(args) -> int:
    console = make_console()
    app = _create_app(args, console)
    view = EventView(console, verbose=args.verbose)
    try:
        for event in app.stream(" ".join(args.question), files=args.file or ()):
            view(event)
    finally:
        view.close()
        app.close()
    return EXIT_OK


def cmd_repl(args) -> int:
    console = make_console()
    app = _create_app(args, console)
    _load_readline()
    from rich.markup import escape

    console.print(f"[bold]LLM-OS[/] · chatgpt_tool_hub {__version__} · model "
                  f"[cyan]{escape(str(getattr(app.llm, 'model_name', '?')))}[/] · tools: "
                  f"{escape(', '.join(app.tool_names)) or '(none)'}")
    console.print("Type a question, or /help. Ctrl-D to leave.\n")
    view = EventView(console, verbose=True)
    try:
        while True:
            try:
                line = input("you> ").strip()
            except (EOFError, KeyboardInterrupt):
                console.print()
                break
            if not line:
                continue
            if line.startswith("/"):
                if _repl_command(line, app, console):
                    break
                continue
            try:
                for event in app.stream(line):
                    view(event)
            except KeyboardInterrupt:
                console.print("[red]interrupted[/]")
            except (RunError, UserError) as exc:
                from rich.markup import escape

                console.print(f"[red]{type(exc).__name__}:[/] {escape(str(exc))}", markup=True, soft_wrap=True)
            finally:
                view.close()
    finally:
        _save_readline()
        app.close()
    return EXIT_OK


def _repl_command(line: str, app, console) -> bool:
    """Handle a /command; True means leave."""
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name in ("/exit", "/quit"):
        return True
    if name == "/tools":
        print_tools(console, [(t.name, t.description, []) for t in app.tools])
    elif name == "/reset":
        app.reset()
        console.print("conversation forgotten")
    elif name == "/depth":
        if not arg.isdigit():
            console.print("usage: /depth N (a whole number >= 0)")
        else:
            app.set_think_depth(int(arg))
            console.print(f"think depth is now {arg}")
    elif name == "/model":
        if not arg:
            console.print(f"model: {getattr(app.llm, 'model_name', '?')}; usage: /model NAME")
        else:
            try:
                app.set_model(arg)
                console.print(f"model is now {arg}")
            except ToolHubError as exc:
                console.print(f"cannot switch model: {exc}", markup=False)
    elif name in ("/image", "/file", "/audio"):
        if not arg:
            console.print(f"usage: {name} PATH", markup=False)
        else:
            try:
                saved = app.add_file(arg.strip("'\""))
                console.print(f"received: saved as {saved} in the workspace", markup=False)
            except ToolHubError as exc:
                console.print(f"cannot use that file: {exc}", markup=False)
    elif name == "/help":
        console.print(HELP, markup=False)
    else:
        console.print(f"unknown command {name}; /help lists them", markup=False)
    return False


def cmd_run(args) -> int:
    from .apps.factory import env_prefixes
    from .apps.settings import load_settings
    from .tools.tool_register import main_tool_register

    registry = main_tool_register
    config = load_settings({}, tool_prefixes=env_prefixes(registry))
    tool = registry.build(args.tool, **config.values)
    try:
        print(tool.run(" ".join(args.input)))
    finally:
        tool.close()
    return EXIT_OK


def cmd_tools(args) -> int:
    from .tools.tool_register import main_tool_register

    rows = [(e.name, e.description, e.required_keys, e.default) for e in main_tool_register.entries()]
    print_tools(make_console(), rows)
    return EXIT_OK


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(make_console(), workspace=args.workspace)


# ---- entry point ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool-hub", description="A tool engine for LLMs: ask, chat, run tools.")
    parser.add_argument("--version", action="version", version=f"chatgpt_tool_hub {__version__}")
    parser.add_argument("--model", help="chat model (overrides MODEL_NAME)")
    parser.add_argument("--tools", help="comma-separated tool names to add")
    parser.add_argument("--depth", type=int, help="max tool calls per question (THINK_DEPTH)")
    sub = parser.add_subparsers(dest="command")
    ask = sub.add_parser("ask", help="answer one question")
    ask.add_argument("question", nargs="+")
    ask.add_argument("-v", "--verbose", action="store_true", help="show the inner monologue")
    ask.add_argument("-f", "--file", action="append", help="an image or WAV file to hand over (repeatable)")
    ask.set_defaults(func=cmd_ask)
    run = sub.add_parser("run", help="run one tool on an input (pure mode, no LLM)")
    run.add_argument("tool")
    run.add_argument("input", nargs="*", default=[])
    run.set_defaults(func=cmd_run)
    tools = sub.add_parser("tools", help="list the registered tools")
    tools.set_defaults(func=cmd_tools)
    demo = sub.add_parser("demo", help="offline demo: a scripted controller drives the real tools")
    demo.add_argument("--workspace", default=None, help="folder for the tools (default: a temporary one)")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func = getattr(args, "func", cmd_repl)
    err = make_console(stderr=True)
    try:
        return func(args)
    except ConfigError as exc:  # soft_wrap: messages stay greppable, never broken mid-phrase
        err.print(f"configuration error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_CONFIG
    except ToolHubError as exc:
        err.print(f"{type(exc).__name__}: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


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
