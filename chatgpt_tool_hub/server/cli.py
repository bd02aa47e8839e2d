"""``tool-hub serve [--host 127.0.0.1] [--port 8000] [--web/--no-web]``: the server, run with uvicorn.

The ``tool-hub`` command adds it with ``add_serve_command(subparsers)``;
``python -m chatgpt_tool_hub.server.cli`` runs it alone. SIGTERM or Ctrl-C
stops taking connections and waits up to ``serve_shutdown_timeout_s`` for the
runs in flight; then every user's app is closed (their python workers end).
``--web`` / ``--no-web`` (``serve_web``) turn the web page at ``/`` on or off;
by default it is served when Gradio is installed (the ``[web]`` extra).
"""

from __future__ import annotations

import argparse
import gc
import sys
from typing import Any, Sequence

__all__ = ["add_serve_command", "cmd_serve", "main", "collect_less_often", "announce_links"]

EXIT_OK, EXIT_ERROR, EXIT_CONFIG = 0, 1, 2
GC_YOUNG_THRESHOLD = 20_000  # new objects between two collections of the youngest generation (Python: 700)


def collect_less_often() -> None:
    """Raise the youngest generation's collection threshold to ``GC_YOUNG_THRESHOLD``.

    A server makes and drops many small objects per request. With Python's
    default a collection runs every 700 of them, and with a few hundred requests
    in flight their objects are often still alive then: they are moved to the
    older generations, whose collections walk every object the server holds
    (all its users' apps). At 200 streaming clients that was a sixth of the
    server's CPU time. Reference cycles are still collected, only in larger
    batches. A disabled collector (threshold 0) stays disabled."""
    young, middle, old = gc.get_threshold()
    if 0 < young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def add_serve_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to the ``tool-hub`` command's subparsers."""
    serve = subparsers.add_parser("serve", help="serve the engine over HTTP (OpenAI's chat API)",
                                  description="Serve OpenAI's chat completions API (and JARVIS's planner API) "
                                              "over this machine's tools. Needs pip install "
                                              '"chatgpt-tool-hub[server]".')
    serve.add_argument("--host", help="address to bind (SERVE_HOST; default 127.0.0.1; another address needs "
                                      "SERVE_API_KEYS)")
    serve.add_argument("--port", type=int, help="port (SERVE_PORT; default 8000)")
    _add_web_flag(serve)
    serve.set_defaults(func=cmd_serve)
    return serve


def _add_web_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--web", action=argparse.BooleanOptionalAction, default=None,
                        help="the web page at / (SERVE_WEB; default: on when Gradio is installed, "
                             'pip install "chatgpt-tool-hub[web]")')


def uvicorn_config(app: Any, settings: Any, **extra: Any) -> Any:
    """uvicorn's configuration for the server: X-Forwarded-For / -Proto are read only when the operator trusts
    the proxy in front (``serve_trust_proxy``), as the links' base is (uvicorn alone would read them from any
    client on 127.0.0.1)."""
    import uvicorn

    return uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info",
                          timeout_graceful_shutdown=max(1, int(settings.shutdown_timeout_s)), lifespan="on",
                          proxy_headers=bool(settings.trust_proxy), **extra)


def cmd_serve(args: argparse.Namespace) -> int:
    """Build the server from the configuration and run it until it is stopped."""
    try:
        import uvicorn
    except ImportError:
        print('tool-hub serve needs FastAPI and uvicorn: pip install "chatgpt-tool-hub[server]"', file=sys.stderr)
        return EXIT_CONFIG
    from ..errors import ConfigError
    from ..runtime.hardening import harden_server_process, scrub_secret_env
    from . import create_server

    harden_server_process()  # this command owns its process: the code its tools run cannot read its memory
    kwargs: dict[str, Any] = {}
    if getattr(args, "host", None):
        kwargs["serve_host"] = args.host
    if getattr(args, "port", None):
        kwargs["serve_port"] = args.port
    if getattr(args, "model", None):
        kwargs["model_name"] = args.model
    if getattr(args, "depth", None) is not None:
        kwargs["think_depth"] = args.depth
    tools = args.tools.split(",") if getattr(args, "tools", None) else None
    try:
        app = create_server(tools_list=tools, web=getattr(args, "web", None), **kwargs)
        settings = app.state.tool_hub.settings
        settings.check_bind()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    scrub_secret_env()  # read and held by the server now: nothing started from here on inherits them
    from .connections import guarded_protocol, quiet_access_log, raise_open_files_limit

    announce_links(app, settings)
    raise_open_files_limit(settings.max_connections + 1024)  # the connections and the runs' own files
    config = uvicorn_config(app, settings, http=guarded_protocol(settings.max_connections, settings.header_timeout_s))
    quiet_access_log()  # after uvicorn configured its loggers: no session id, token or signature in the log
    server = uvicorn.Server(config)
    collect_less_often()  # this command owns its process; an application embedding create_server keeps its own
    server.run()
    return EXIT_OK if server.started else EXIT_ERROR


def announce_links(app: Any, settings: Any) -> None:
    """Print where the page and the API are; a keyless server's links carry its local token (the page's
    link sets it in a cookie at the first visit, API clients send it as the bearer key)."""
    host = settings.host
    shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else (f"[{host}]" if ":" in host else host)
    where = f"http://{shown}:{settings.port}"
    token = settings.local_token
    if getattr(app.state, "tool_hub_web", None) is not None:
        page = f"{where}/?token={token}" if token else f"{where}/"
        print(f"tool-hub serve: open the web page at {page}", file=sys.stderr)
    if token:
        print(f"tool-hub serve: the API at {where}/v1 wants the bearer key {token} (made at start; "
              f"set serve_api_keys for keys of your own)", file=sys.stderr)
    else:
        print(f"tool-hub serve: the API at {where}/v1", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tool-hub-serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--model", help="chat model (overrides MODEL_NAME)")
    parser.add_argument("--tools", help="comma-separated tool names")
    parser.add_argument("--depth", type=int, help="max tool calls per question (THINK_DEPTH)")
    _add_web_flag(parser)
    return cmd_serve(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

