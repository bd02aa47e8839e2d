"""Expert-model management shared by every model-backed tool: the manager (one load per model,
LRU under a memory budget), device placement, the loading code with its errors, and the progress spinner."""
