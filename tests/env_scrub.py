"""Which environment variables could change what an app reads (the suite removes them for every test)."""

from __future__ import annotations

import os
from typing import Mapping

# Besides the app's own settings: where settings files are looked for, the OpenAI client's own
# variables, and proxies (the LLM client honours them, which would route the local chat server's
# traffic through a developer's proxy).
_LOADER_NAMES = ("CONFIG_PATH", "ENV_FILE")
_EXTRA_PREFIXES = ("openai_", "http_proxy", "https_proxy", "all_proxy", "no_proxy")


def settings_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names in ``environ`` (default ``os.environ``) that could change what an app reads.

    Derived from the code, not listed here: every name of the settings table
    (``Setting.env_names``), every prefix and key the factory reads for the
    registered tools and the shared services (``apps.factory.env_prefixes``),
    the loader's ``CONFIG_PATH`` / ``ENV_FILE``, ``OPENAI_*`` and proxies.
    """
    from chatgpt_tool_hub.apps.factory import env_prefixes
    from chatgpt_tool_hub.config import SETTINGS
    from chatgpt_tool_hub.tools.tool_register import main_tool_register

    environ = os.environ if environ is None else environ
    exact = {name.upper() for setting in SETTINGS.values() for name in setting.env_names}
    exact.update(_LOADER_NAMES)
    prefixes = tuple(p.lower() for p in env_prefixes(main_tool_register)) + _EXTRA_PREFIXES
    return [name for name in environ if name.upper() in exact or name.lower().startswith(prefixes)]
