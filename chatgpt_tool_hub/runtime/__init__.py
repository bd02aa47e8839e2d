"""The safety kernel: what tools, experts, apps and the server share, below all of them.

Each module has one job and imports only the ground floor (``errors``,
``config``, ``textutil``, ``redact`` ...) and other ``runtime`` modules:

* ``workspace`` -- keep paths inside a workspace (link-safe opening, hard links refused)
* ``filenames`` -- Visual ChatGPT's file names (``image/{uuid}.png``, chained outputs), WAV I/O
* ``video_io`` -- frames in and out of GIF / MP4
* ``urlcheck`` -- check a URL before a fetch (http(s) only, every resolved address public); no HTTP client
* ``netguard`` -- the SSRF guard: ``urlcheck``'s names, and connect only to the checked address (``requests``)
* ``http`` -- the plugin tools' request helper (timeouts, size limits, secrets scrubbed)
* ``webpage`` -- read a web page through ``netguard`` and turn it into text (url-get, summary, documents)
* ``sandbox`` / ``launcher`` -- start a process tree under limits, kill all of it
* ``python_worker`` -- the python tool's worker process (run as a script, standard library only)
* ``contained`` -- parse untrusted bytes in a killable child under limits (``contained_child`` is its script)
* ``shellwords`` / ``nsfc`` -- a shell lexer and the terminal's destructive-command filter
* ``bridge`` -- the thread <-> event-loop bridges
* ``models`` -- the expert-model manager: lazy loads, devices, memory budget, progress

Nothing is imported here: ``import chatgpt_tool_hub.runtime.sandbox`` loads that module alone.
"""
