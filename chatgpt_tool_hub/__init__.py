"""chatgpt_tool_hub: a tool engine that gives an LLM hands and feet.

Start with ``from chatgpt_tool_hub.apps import AppFactory``. Importing this
package is light: no LLM client, tool or model is loaded until it is used.
"""

__version__ = "1.0.0"

__all__ = ["__version__"]
