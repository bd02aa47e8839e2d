"""LLM layer: the protocol, the OpenAI-compatible client, a local backend, token counting.

Concrete clients are imported lazily so ``import chatgpt_tool_hub`` stays light.
"""

from .base import LLM, BaseLLM, LLMResponse, Message, StreamChunk, ToolCall, Usage, collect_stream

__all__ = ["LLM", "BaseLLM", "LLMResponse", "Message", "StreamChunk", "ToolCall", "Usage", "collect_stream"]
