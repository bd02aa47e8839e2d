"""Talk to ``tool-hub serve`` with the official ``openai`` client: an answer, a streamed answer with its
inner monologue, and an image handed over.

Offline by default: it starts a server in this process on 127.0.0.1, with a scripted LLM behind it, and
runs the real python tool:

    python examples/serve_client.py

Against a running server (``tool-hub serve``; needs pip install "chatgpt-tool-hub[server]"):

    python examples/serve_client.py --url http://127.0.0.1:8000/v1 --key <one of SERVE_API_KEYS>
"""

from __future__ import annotations

import argparse
import base64
import socket
import tempfile
import threading
import time

import openai


def start_offline_server() -> tuple[str, object, str]:
    import uvicorn

    from chatgpt_tool_hub.server import create_server
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        "Thought: Do I need to use a tool? Yes\nAction: python\nAction Input: print(sum(range(101)))",
        "Thought: Do I need to use a tool? No\nAI: The sum of 1 to 100 is 5050.",
        "Thought: Do I need to use a tool? Yes\nAction: python\nAction Input: print(2 ** 64)",
        "Thought: Do I need to use a tool? No\nAI: 2 to the 64th is 18446744073709551616.",
        lambda messages: "AI: I was handed " + messages[-3]["content"].split(" named ")[1].split(".")[0] + ".png",
    ], chunk_size=2)
    app = create_server(llm=llm, tools_list=["python"], no_default=True,
                        serve_workspace_root=tempfile.mkdtemp(prefix="tool-hub-users-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1", server, app.state.tool_hub.settings.local_token


def tiny_png() -> str:
    try:
        import io

        from PIL import Image
    except ImportError:
        return ""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server's base URL, ending in /v1 (default: start one here)")
    parser.add_argument("--key", default="none", help="an API key of the server (SERVE_API_KEYS, or the token "
                                                      "a keyless tool-hub serve printed)")
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        url, server, args.key = start_offline_server()  # a keyless server's key is its local token
        print("mode: offline (a server in this process, a scripted LLM, the real python tool)")
    client = openai.OpenAI(base_url=url, api_key=args.key, max_retries=0)
    print("models:", [m.id for m in client.models.list().data])

    reply = client.chat.completions.create(model="tool-hub", messages=[
        {"role": "user", "content": "What is the sum of the integers from 1 to 100?"}])
    print("answer:", reply.choices[0].message.content)
    print("reasoning:", (reply.choices[0].message.model_extra or {}).get("reasoning_content", "").replace("\n", " | "))
    print("usage:", reply.usage.total_tokens, "tokens")

    print("streamed:", end=" ", flush=True)
    for chunk in client.chat.completions.create(model="tool-hub", stream=True,
                                                messages=[{"role": "user", "content": "What is 2 ** 64?"}]):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and (delta.model_extra or {}).get("reasoning_content"):
            print("·", end="", flush=True)  # the monologue: a dot per piece
        if delta is not None and delta.content:
            print(delta.content, end="", flush=True)
    print()

    image = tiny_png()
    if image:
        reply = client.chat.completions.create(model="tool-hub", messages=[{"role": "user", "content": [
            {"type": "text", "text": "What did I send you?"}, {"type": "image_url", "image_url": {"url": image}}]}])
        print("image:", reply.choices[0].message.content.splitlines()[0])
    if server is not None:
        server.should_exit = True


if __name__ == "__main__":
    main()
