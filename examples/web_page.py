"""The LLM-OS web page of ``tool-hub serve``, offline: a scripted LLM drives the real python tool.

    python examples/web_page.py                 # then open http://127.0.0.1:8000/
    python examples/web_page.py --port 8080

Ask it arithmetic ("what is 2 ** 64?") and it computes it with the python tool; attach an image and it
makes a grey copy with the python tool, shown in the chat. With LLM_API_KEY (or LLM_API_BASE_URL) set it
uses that LLM instead, like ``tool-hub serve`` does.

A screenshot of the page answering a question and an uploaded image, then exit (headless Chromium:
apt-get install -y chromium chromium-driver; pip install selenium):

    python examples/web_page.py --screenshot benchmarks/out/web.png

Needs pip install "chatgpt-tool-hub[web]". Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

_EXPRESSION = re.compile(r"[\d(][\d\s+\-*/().%]*[\d)]")
_ANNOUNCED = re.compile(r"named (image/\S+\.png)")


def offline_reply(messages: list) -> str:
    """What the scripted LLM says: compute arithmetic with python, grey an image it was handed, else chat."""
    last = messages[-1]["content"]
    if last.startswith("Observation:"):
        result = last.split("Observation:", 1)[1].strip().splitlines()[0] if last.strip() != "Observation:" else ""
        return f"Thought: Do I need to use a tool? No\nAI: The python tool says: {result}"
    images = _ANNOUNCED.findall(" ".join(str(m["content"]) for m in messages[-3:]))
    if images:
        name = images[-1]
        grey = name.replace(".png", "-grey.png")
        return ("Thought: Do I need to use a tool? Yes\nAction: python\nAction Input: from PIL import Image\n"
                f"Image.open('{name}').convert('L').save('{grey}')\nprint('{grey}')")
    expression = _EXPRESSION.search(last)
    if expression and any(op in expression.group() for op in "+-*/%"):
        return ("Thought: Do I need to use a tool? Yes\nAction: python\n"
                f"Action Input: print({expression.group().strip()})")
    return ("Thought: Do I need to use a tool? No\nAI: (offline demo) Ask me some arithmetic, or attach an "
            "image; set LLM_API_KEY for a real model.")


def build_server(root: str):
    from chatgpt_tool_hub.server import create_server

    if os.environ.get("LLM_API_KEY") or os.environ.get("LLM_API_BASE_URL"):
        return create_server(web=True, serve_workspace_root=root)
    from chatgpt_tool_hub.testing import ScriptedLLM

    return create_server(llm=ScriptedLLM([offline_reply] * 100_000, chunk_size=2), web=True, tools_list=["python"],
                         no_default=True, serve_workspace_root=root)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def screenshot(url: str, path: Path) -> None:
    """Open the page in headless Chromium, ask a question, hand over an image, save a screenshot."""
    from PIL import Image
    from selenium.common.exceptions import ElementClickInterceptedException
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    chromium, driver_path = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        sys.exit("a screenshot needs Chromium and its driver: apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--window-size=1400,1250",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    wait = WebDriverWait(driver, 30, poll_frequency=0.05).until
    try:
        driver.get(url)
        box = wait(lambda d: d.find_elements("css selector", "#tool-hub-ask textarea"))[0]
        wait(lambda d: "python" in d.find_element("id", "tool-hub-tools").text)

        def chat() -> str:
            return driver.find_element("id", "tool-hub-chat").text

        box.send_keys("What is 2 ** 64?", Keys.ENTER)
        wait(lambda d: "The python tool says" in chat())
        with tempfile.TemporaryDirectory() as folder:
            picture = Path(folder) / "sunset.png"
            Image.new("RGB", (96, 64), (240, 120, 40)).save(picture)
            driver.find_element("css selector", "#tool-hub-ask input[type=file]").send_keys(str(picture))
            wait(lambda d: d.find_elements("css selector", "#tool-hub-ask img"))
            wait(lambda d: box.is_enabled())
            box.send_keys("Make this picture grey", Keys.ENTER)
            wait(lambda d: chat().count("The python tool says") == 2 and
                 any("grey" in (i.get_attribute("src") or "") for i in d.find_elements("css selector",
                                                                                      "#tool-hub-chat img")))
        steps = [e for e in driver.find_elements("css selector", "#tool-hub-chat .thought-group .title")
                 if "Step 1" in e.text]
        # unfold the last step (the action, its input, the observation); the chat may still be
        # scrolling to its new end, so the title is brought to the middle and clicked once it is free
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", steps[-1])
        WebDriverWait(driver, 10, poll_frequency=0.1, ignored_exceptions=(ElementClickInterceptedException,)).until(
            lambda d: steps[-1].click() or True)
        wait(lambda d: "Observation" in chat())
        driver.execute_script("document.querySelectorAll('#tool-hub-chat *').forEach("
                              "e => { if (e.scrollHeight > e.clientHeight) e.scrollTop = e.scrollHeight; });")
        time.sleep(0.3)  # the scroll is drawn
        path.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path))
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--screenshot", type=Path, help="save a screenshot of the page there, then exit")
    args = parser.parse_args()
    import uvicorn

    root = tempfile.mkdtemp(prefix="tool-hub-web-users-")
    port = free_port() if args.screenshot else args.port
    app = build_server(root)
    token = app.state.tool_hub.settings.local_token  # the page's link carries it once, then a cookie keeps it
    link = f"http://127.0.0.1:{port}/" + (f"?token={token}" if token else "")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    if not args.screenshot:
        print(f"the page: {link}  (Ctrl-C stops it)")
        server.run()
        return 0
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        screenshot(link, args.screenshot)
    finally:
        server.should_exit = True
        thread.join(30)
    print(f"screenshot: {args.screenshot.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
