"""The ReAct engine: prompts, parser, loop, memory."""
