"""``tool-hub mcp``: an app's tools as an MCP server, over stdio (default) or streamable HTTP.

``tool-hub mcp [--tools python,url-get] [--allow-dangerous]`` speaks MCP on
stdin/stdout (what Claude Desktop and other MCP hosts start);
``--http [--host 127.0.0.1] [--port 8765]`` serves streamable HTTP at
``http://HOST:PORT/mcp`` instead. The tools, their calls and what is left out
are :class:`~.mcp_host.ToolHost`'s; this module is the official ``mcp`` SDK's
low-level server around it (``pip install "chatgpt-tool-hub[mcp]"``).

Over HTTP, a loopback address gets the SDK's DNS-rebinding protection (Host
and Origin checked); another address needs a bearer key
(``mcp_host_api_key`` / MCP_HOST_API_KEY) that every request must carry.
Nothing but MCP messages is ever written to stdout: what the command says goes
to stderr.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import ipaddress
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the tool host (the apps) loads when the command runs, not when the parser is built
    from .mcp_host import HostResult, ToolHost

__all__ = ["add_mcp_command", "cmd_mcp", "build_mcp_server", "http_app", "INSTALL_HINT", "DEFAULT_PORT"]

EXIT_OK, EXIT_ERROR, EXIT_CONFIG = 0, 1, 2
DEFAULT_PORT = 8765
INSTALL_HINT = 'tool-hub mcp needs the optional "mcp" package: pip install "chatgpt-tool-hub[mcp]"'
MAX_IMAGE_BYTES = 2 * 1024 * 1024  # an image file a call wrote is attached up to this size, else only named
_IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                ".webp": "image/webp"}


def add_mcp_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``mcp`` to the ``tool-hub`` command's subparsers."""
    mcp = subparsers.add_parser(
        "mcp", help="offer the tools to MCP hosts (Claude Desktop ...) over stdio or streamable HTTP",
        description="Offer this configuration's tools as an MCP server: over stdio (what an MCP host such as "
                    "Claude Desktop starts), or streamable HTTP with --http. Dangerous tools are left out "
                    "unless --allow-dangerous. Needs pip install \"chatgpt-tool-hub[mcp]\".")
    mcp.add_argument("--tools", default=argparse.SUPPRESS, help="comma-separated tool names to add")
    mcp.add_argument("--allow-dangerous", action="store_true", default=None,
                     help="offer the dangerous tools too (MCP_HOST_ALLOW_DANGEROUS): the MCP host then asks you "
                          "before each call")
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp, not stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="--http: the address to bind (default 127.0.0.1; another "
                                                         "address needs MCP_HOST_API_KEY)")
    mcp.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"--http: the port (default {DEFAULT_PORT})")
    mcp.set_defaults(func=cmd_mcp)
    return mcp


def cmd_mcp(args: argparse.Namespace) -> int:
    """Build the tool host from the configuration and serve it until the host goes away (or Ctrl-C)."""
    try:
        import mcp.server  # noqa: F401
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_CONFIG
    from ..apps.factory import AppFactory
    from ..errors import ConfigError
    from ..runtime.hardening import harden_server_process, scrub_secret_env
    from .mcp_host import ToolHost

    settings: dict[str, Any] = {}
    if getattr(args, "model", None):
        settings["model_name"] = args.model
    tools = [name.strip() for name in args.tools.split(",") if name.strip()] if getattr(args, "tools", None) \
        else None
    factory = AppFactory()
    try:
        api_key = str(factory.resolve_settings(**settings).get("mcp_host_api_key") or "")
        if args.http and not api_key and not _loopback(args.host):
            raise ConfigError(f"tool-hub mcp --http on {args.host} (not a loopback address) needs a bearer key: set "
                              f"MCP_HOST_API_KEY (mcp_host_api_key), or bind 127.0.0.1", key="mcp_host_api_key")
        harden_server_process()  # this command owns its process: the code its tools run cannot read its memory
        host = ToolHost.build(tools, allow_dangerous=args.allow_dangerous, factory=factory, **settings)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        scrub_secret_env()  # read and held now: nothing started from here on inherits them
        print(f"tool-hub mcp: {host.summary()}", file=sys.stderr)
        server = build_mcp_server(host)
        if args.http:
            _serve_http(server, args.host, args.port, api_key)
        else:
            _serve_stdio(server)
    except KeyboardInterrupt:
        pass
    finally:
        host.close()
    return EXIT_OK


def build_mcp_server(host: "ToolHost") -> Any:
    """The SDK's low-level ``Server`` answering ``tools/list`` and ``tools/call`` from ``host``."""
    import anyio
    import mcp.types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    from .. import __version__
    from .mcp_host import UnknownTool

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        return types.ListToolsResult(tools=[
            types.Tool(name=item["name"], description=item["description"], input_schema=item["input_schema"],
                       annotations=types.ToolAnnotations(destructive_hint=True) if item["dangerous"] else None)
            for item in host.listing()])

    async def call_tool(_ctx: Any, params: Any) -> Any:
        try:
            result = await anyio.to_thread.run_sync(host.call, params.name, params.arguments or {})
        except UnknownTool as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        return types.CallToolResult(content=_content(result, types), is_error=result.is_error)

    return Server("tool-hub", version=__version__, instructions="chatgpt_tool_hub's tools; files they write are "
                  "named with their paths in the results.", on_list_tools=list_tools, on_call_tool=call_tool)


def _content(result: "HostResult", types: Any) -> list[Any]:
    """The result's text, and the images it wrote (small ones) as image content."""
    blocks: list[Any] = [types.TextContent(type="text", text=result.text)]
    for path in result.files:
        mime = _IMAGE_TYPES.get(path.suffix.lower())
        try:
            if mime is None or path.stat().st_size > MAX_IMAGE_BYTES:
                continue
            data = base64.b64encode(path.read_bytes()).decode()
        except OSError:
            continue
        blocks.append(types.ImageContent(type="image", data=data, mime_type=mime))
    return blocks


def _serve_stdio(server: Any) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


def http_app(server: Any, host: str = "127.0.0.1", api_key: str = "") -> Any:
    """The ASGI app of streamable HTTP at ``/mcp``; with ``api_key``, requests without it get HTTP 401."""
    app = server.streamable_http_app(host=host)
    return _BearerKey(app, api_key) if api_key else app


def _serve_http(server: Any, host: str, port: int, api_key: str) -> None:
    import uvicorn

    shown = f"[{host}]" if ":" in host else host
    print(f"tool-hub mcp: streamable HTTP at http://{shown}:{port}/mcp"
          + (" (send Authorization: Bearer <mcp_host_api_key>)" if api_key else ""), file=sys.stderr)
    uvicorn.Server(uvicorn.Config(http_app(server, host, api_key), host=host, port=port, log_level="warning",
                                  lifespan="on")).run()


class _BearerKey:
    """ASGI middleware: HTTP requests must carry ``Authorization: Bearer <key>``."""

    def __init__(self, app: Any, key: str):
        self.app, self.key = app, key.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, token = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
                from starlette.responses import JSONResponse

                response = JSONResponse({"error": "a valid key is needed: send Authorization: Bearer "
                                                  "<mcp_host_api_key>"}, 401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
