"""Plugin tools: tools that call remote services.

Service tools: weather (``meteo``), ``wikipedia``, ``arxiv``, web ``search``
(Bing, Google, SearXNG), ``wolfram`` Alpha, and ``summary`` (map-reduce with
the LLM); plus tools loaded from OpenAPI specs and MCP servers. The service
tools are registered by :mod:`chatgpt_tool_hub.tools.builtin`'s table and
imported only when built, so importing this package stays light. Their HTTP
goes through :mod:`._http`, which turns every network failure into a
``ToolExecutionError`` whose message is a clear observation without any key.
"""

__all__: list[str] = []
