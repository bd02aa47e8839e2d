"""Built-in tools, registered through the same entry-point door as plugins.

Every factory imports its module only when the tool is built, so listing tools
stays light. ``default=True`` tools are added to every app unless
``no_default`` is set; dangerous ones (terminal, write-file) never are.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

# name -> (module, class, required keys, default, one-line description)
BUILTIN_TOOLS: dict[str, tuple[str, str, list[str], bool, str]] = {
    "python": ("chatgpt_tool_hub.tools.builtin.python_tool", "PythonTool", [], True,
               "Run Python code in a separate process; variables persist per session."),
    "terminal": ("chatgpt_tool_hub.tools.builtin.terminal", "TerminalTool", [], False,
                 "Run a shell command in the workspace (dangerous: asks for approval)."),
    "read-file": ("chatgpt_tool_hub.tools.builtin.files", "ReadFileTool", [], True,
                  "Read a text file inside the workspace."),
    "write-file": ("chatgpt_tool_hub.tools.builtin.files", "WriteFileTool", [], False,
                   "Write a text file inside the workspace (dangerous: asks for approval)."),
    "list-dir": ("chatgpt_tool_hub.tools.builtin.files", "ListDirTool", [], True,
                 "List a folder inside the workspace."),
    "url-get": ("chatgpt_tool_hub.tools.builtin.url_get", "UrlGetTool", [], True,
                "Fetch a public web page and return its readable text."),
    "meteo-weather": ("chatgpt_tool_hub.tools.plugins.meteo", "MeteoWeatherTool", [], True,
                      "Weather forecast for a place (open-meteo, no key)."),
    "wikipedia": ("chatgpt_tool_hub.tools.plugins.wikipedia", "WikipediaTool", [], False,
                  "Search Wikipedia and return page summaries."),
    "arxiv": ("chatgpt_tool_hub.tools.plugins.arxiv", "ArxivTool", [], False,
              "Search arXiv papers."),
    "bing-search": ("chatgpt_tool_hub.tools.plugins.search", "BingSearchTool", ["bing_subscription_key"], False,
                    "Web search with Bing."),
    "google-search": ("chatgpt_tool_hub.tools.plugins.search", "GoogleSearchTool",
                      ["google_api_key", "google_cse_id"], False, "Web search with Google Programmable Search."),
    "searxng-search": ("chatgpt_tool_hub.tools.plugins.search", "SearxngSearchTool", ["searxng_search_host"],
                       False, "Web search through a SearXNG instance."),
    "wolfram-alpha": ("chatgpt_tool_hub.tools.plugins.wolfram", "WolframAlphaTool", ["wolfram_alpha_appid"], False,
                      "Answers from Wolfram|Alpha (math, science, units)."),
    "summary": ("chatgpt_tool_hub.tools.plugins.summary", "SummaryTool", [], False,
                "Summarise long text, a workspace file or a URL (map-reduce with the LLM)."),
    "browser": ("chatgpt_tool_hub.tools.subtree", "BrowserTool", [], False,
                "A sub-agent that browses the web with url-get and summary (tool-in-tool)."),
    # ---- the names chatgpt-tool-hub 0.5 registered (news, email, sms, speech, visual ...)
    "news-api": ("chatgpt_tool_hub.tools.plugins.news", "NewsApiTool", ["news_api_key"], False,
                 "Top headlines and news search (NewsAPI.org)."),
    "morning-news": ("chatgpt_tool_hub.tools.plugins.news", "MorningNewsTool", ["morning_news_api_key"], False,
                     "Today's 60-second morning news digest, in Chinese (ALAPI)."),
    "finance-news": ("chatgpt_tool_hub.tools.plugins.finance_news", "FinanceNewsTool", [], False,
                     "Real-time financial flash news (no key)."),
    "news": ("chatgpt_tool_hub.tools.subtree", "NewsTool", [], False,
             "A sub-agent over news-api, morning-news and finance-news (tool-in-tool)."),
    "email": ("chatgpt_tool_hub.tools.plugins.email_tool", "EmailTool", ["email_sender", "email_authorization_code"],
              False, "Send an email over SMTP (dangerous: asks for approval)."),
    "sms": ("chatgpt_tool_hub.tools.plugins.sms", "SmsTool", ["sms_username", "sms_apikey"], False,
            "Send a text message to a phone in mainland China via smsbao (dangerous: asks for approval)."),
    "stt": ("chatgpt_tool_hub.tools.plugins.speech", "SttTool", [], False,
            "Transcribe a WAV file with Azure Speech (stt_api_key; speech-recognition needs none)."),
    "tts": ("chatgpt_tool_hub.tools.plugins.speech", "TtsTool", [], False,
            "Read a text aloud into a WAV file with Azure Speech (tts_api_key; text-to-speech needs none)."),
    "visual": ("chatgpt_tool_hub.tools.plugins.visual", "VisualTool", ["caption_api_key"], False,
               "Ask a vision LLM about an image (any OpenAI-compatible multimodal endpoint)."),
    "wechat": ("chatgpt_tool_hub.tools.plugins.wechat", "WechatTool", [], False,
               "Not offered (0.5's WeChat client was missing from its wheel): building it says why."),

    # ---- documents, media and tool making
    "read-document": ("chatgpt_tool_hub.tools.builtin.documents", "ReadDocumentTool", [], False,
                      "Read a PDF, DOCX, HTML, Markdown or text document (a workspace file or a URL) by pages or "
                      "sections, or summarise it."),
    "document-qa": ("chatgpt_tool_hub.tools.builtin.documents", "DocumentQATool", [], False,
                    "Find the passages of a long document that answer a question, with page/section references."),
    "image-crop": ("chatgpt_tool_hub.tools.builtin.media", "ImageCropTool", [], False,
                   "Cut a rectangle out of an image in the workspace (Pillow)."),
    "image-resize": ("chatgpt_tool_hub.tools.builtin.media", "ImageResizeTool", [], False,
                     "Make an image in the workspace larger or smaller."),
    "image-rotate": ("chatgpt_tool_hub.tools.builtin.media", "ImageRotateTool", [], False,
                     "Rotate or mirror an image in the workspace."),
    "image-convert": ("chatgpt_tool_hub.tools.builtin.media", "ImageConvertTool", [], False,
                      "Save an image in another format (png, jpeg, webp ...) or colour mode."),
    "image-grid": ("chatgpt_tool_hub.tools.builtin.media", "ImageGridTool", [], False,
                   "Compose several images into one grid picture."),
    "video-frames": ("chatgpt_tool_hub.tools.builtin.media", "VideoFramesTool", [], False,
                     "Extract evenly spaced frames of a video as PNG images."),
    "frames-to-video": ("chatgpt_tool_hub.tools.builtin.media", "FramesToVideoTool", [], False,
                        "Join images into an animated GIF or an MP4 video."),
    "tool-maker": ("chatgpt_tool_hub.tools.builtin.toolmaker", "ToolMakerTool", [], False,
                   "Make a tool from a Python function for this session, run in the sandbox (dangerous: asks "
                   "for approval)."),

}


def _factory(module: str, cls: str) -> Callable[..., Any]:
    def build(context: Any):
        return getattr(import_module(module), cls).from_context(context)

    build.__qualname__ = f"{cls}.from_context"
    return build


def register_tools(registry) -> None:
    """Entry point ``chatgpt_tool_hub.tools:builtin``."""
    for name, (module, cls, keys, default, description) in BUILTIN_TOOLS.items():
        registry.register_tool(name, _factory(module, cls), keys, default=default, description=description,
                               takes_context=True)
