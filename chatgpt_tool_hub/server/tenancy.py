"""What one tenant (an API key) of ``tool-hub serve`` may do to the others, and the settings that bound it.

* :func:`check_shared_trust`: a server with several keys refuses to serve
  tools that run code the model writes (``python``, ``terminal``,
  ``tool-maker``) unless ``serve_shared_trust`` says the key holders trust
  each other: such code runs as the server's user, so it can read the other
  tenants' folders and reach their worker processes.
* :func:`app_settings`: what the server adds to every user's app settings:
  the resolved secret settings (so the process environment can be scrubbed
  after start), one :class:`~chatgpt_tool_hub.runtime.worker_limit.WorkerLimit`
  for all users' python workers (``serve_max_python_workers``), and
  ``planner_request_files="workspace"``: a path a request names is read only
  inside that user's workspace, never elsewhere on the server's disk (another
  user's folder, /home, /tmp). The server passes it as a keyword, so the
  environment and config.json cannot turn it back; a request carries no settings.
* :func:`folder_size` / :func:`check_quota`: a user whose folder holds more
  than ``serve_user_quota_mb`` gets HTTP 429 ``insufficient_quota`` for new runs.
* :func:`too_many` builds the OpenAI-shaped 429 of a per-key cap.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from ..config import is_secret_key, is_unset
from ..errors import ConfigError
from ..runtime.worker_limit import WorkerLimit
from .asgi import ApiError

__all__ = ["CODE_TOOLS", "SERVER_PINNED", "served_code_tools", "check_shared_trust", "app_settings", "folder_size", "check_quota",
           "too_many"]

# tools that run code the model writes, on this machine
CODE_TOOLS = ("python", "terminal", "tool-maker")
# settings every user's app is built with, whatever the environment or config.json say
SERVER_PINNED: Mapping[str, Any] = MappingProxyType({"planner_request_files": "workspace"})


def served_code_tools(registry: Any, tools_list: Sequence[Any] | None, config: Any) -> list[str]:
    """The code-running tools the server's apps get: ``tools_list`` (else config.json's tools) plus the
    default tools unless ``no_default``; names resolved through ``registry`` (aliases, any case)."""
    listed: Iterable[Any] = tools_list if tools_list is not None else (getattr(config, "tools", None) or [])
    if isinstance(listed, str):
        listed = [name.strip() for name in listed.split(",") if name.strip()]
    names = [item if isinstance(item, str) else getattr(item, "name", "") for item in listed]
    if not config["no_default"]:
        names = [*registry.default_tool_names(), *names]
    resolved = {registry.resolve_name(name) or name for name in names}
    return [name for name in CODE_TOOLS if name in resolved]


def check_shared_trust(keys: Sequence[str], code_tools: Sequence[str], shared_trust: bool) -> None:
    """Refuse several keys with code-running tools unless ``serve_shared_trust`` (a ``ConfigError`` that
    says both ways out). No key or one key: one tenant, nothing to refuse."""
    if len(keys) < 2 or not code_tools or shared_trust:
        return
    raise ConfigError(
        f"refusing to serve {', '.join(code_tools)} to {len(keys)} API keys: code the model writes runs as this "
        f"server's user, so one key's code can read the other keys' files and python sessions. Serve these tools "
        f"with one key (or one server per tenant), leave them out (tools_list, no_default=true), or set "
        f"serve_shared_trust=true (SERVE_SHARED_TRUST=true) when every key holder trusts the others",
        key="serve_shared_trust")


def app_settings(values: Mapping[str, Any], max_python_workers: int) -> dict[str, Any]:
    """Settings every user's app gets from the server: the secret settings as resolved at start (the
    environment may be scrubbed afterwards), the shared cap on python workers, and the planner's request
    files confined to the user's workspace."""
    secrets = {key: value for key, value in values.items()
               if is_secret_key(key) and not key.startswith("serve_") and not is_unset(value)}
    return {**secrets, "python_worker_limit": WorkerLimit(max_python_workers), **SERVER_PINNED}


def folder_size(folder: Path, stop_after: int | None = None) -> int:
    """Bytes held by the files below ``folder`` (links not followed); counting stops once past
    ``stop_after``."""
    total = 0
    todo = [folder]
    while todo:
        try:
            entries = os.scandir(todo.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(Path(entry.path))
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
                if stop_after is not None and total > stop_after:
                    return total
    return total


def check_quota(folder: Path, quota_mb: int) -> None:
    """HTTP 429 ``insufficient_quota`` when ``folder`` holds more than ``quota_mb`` MiB (``<= 0``: no quota)."""
    if quota_mb <= 0:
        return
    limit = quota_mb * 1024 * 1024
    used = folder_size(folder, stop_after=limit)
    if used > limit:
        raise ApiError(429, f"your files on this server take more than {quota_mb} MiB (serve_user_quota_mb); "
                            f"remove some (e.g. ask the assistant to delete files it wrote) before asking again",
                       kind="insufficient_quota", code="insufficient_quota")


def too_many(what: str, limit: int, setting: str) -> ApiError:
    """The 429 of a per-key cap: OpenAI's ``rate_limit_exceeded``, naming the setting."""
    return ApiError(429, f"this API key already has {limit} {what} ({setting}); try again when one has ended",
                    kind="rate_limit_exceeded", code="rate_limit_exceeded", headers={"Retry-After": "1"})
