"""LocalLLM on a tiny randomly initialised GPT-2 saved to a temp folder and loaded by the real code."""

from __future__ import annotations

import string
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from chatgpt_tool_hub.errors import LLMError, UserError  # noqa: E402
from chatgpt_tool_hub.llm import LLMResponse, StreamChunk, collect_stream  # noqa: E402
from chatgpt_tool_hub.llm.local import LocalLLM  # noqa: E402

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def _build(folder, *, chat_template: str | None) -> str:
    from tokenizers import Tokenizer, decoders, models
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for ch in string.ascii_letters + string.digits + string.punctuation + " \n":
        vocab.setdefault(ch, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))  # no merges: characters
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                        bos_token="<eos>", unk_token="<unk>")
    if chat_template:
        tokenizer.chat_template = chat_template
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=256, vocab_size=len(vocab),
                        bos_token_id=1, eos_token_id=1, pad_token_id=0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("tiny-gpt2"), chat_template=None)


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("tiny-gpt2-chat"), chat_template=CHAT_TEMPLATE)


def test_import_is_light():
    code = "import sys, chatgpt_tool_hub.llm.local as m; m.LocalLLM('local:x'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_complete_plain_prompt(tiny_model):
    llm = LocalLLM(f"local:{tiny_model}", device="cpu", max_new_tokens=12)
    assert llm.model_name == f"local:{tiny_model}"
    resp = llm.complete(MSGS)
    assert isinstance(resp, LLMResponse)
    assert isinstance(resp.text, str)
    assert resp.finish_reason in ("stop", "length")
    assert resp.usage.estimated is False
    assert resp.usage.prompt_tokens == len("system: Be brief.\nuser: hello there\nassistant:")  # char vocab
    assert 1 <= resp.usage.completion_tokens <= 12
    assert resp.model == llm.model_name
    assert llm.loaded and llm.load_count == 1


def test_chat_template_is_used(tiny_chat_model):
    llm = LocalLLM(tiny_chat_model, device="cpu", max_new_tokens=4)
    resp = llm.complete(MSGS)
    assert resp.usage.prompt_tokens == len("<system>Be brief.\n<user>hello there\n<assistant>")
    assert resp.usage.completion_tokens <= 4


def test_greedy_is_deterministic_and_length_finish(tiny_model):
    llm = LocalLLM(tiny_model, device="cpu", max_new_tokens=20)
    first, second = llm.complete(MSGS), llm.complete(MSGS)
    assert first.text == second.text
    assert first.finish_reason == ("length" if first.usage.completion_tokens == 20 else "stop")


def test_stop_sequences_cut_the_text(tiny_model):
    llm = LocalLLM(tiny_model, device="cpu", max_new_tokens=30)
    full = llm.complete(MSGS).text
    candidates = [ch for ch in dict.fromkeys(full) if full.index(ch) > 0]
    if not candidates:
        pytest.skip(f"greedy output {full!r} has no usable stop character")
    stop = candidates[0]
    resp = llm.complete(MSGS, stop=["never-there", stop])
    assert resp.text == full[: full.index(stop)]
    assert resp.finish_reason == "stop"
    assert resp.usage.completion_tokens < 30  # the stopping criterion ended generation early


def test_stream_matches_complete(tiny_model):
    llm = LocalLLM(tiny_model, device="cpu", max_new_tokens=16)
    expected = llm.complete(MSGS)
    chunks = list(llm.stream(MSGS))
    assert all(isinstance(c, StreamChunk) for c in chunks)
    folded = collect_stream(iter(chunks))
    assert folded.text == expected.text
    assert chunks[-1].finish_reason == expected.finish_reason
    assert chunks[-1].usage == expected.usage


def test_stream_with_stop_and_early_close(tiny_model):
    llm = LocalLLM(tiny_model, device="cpu", max_new_tokens=30)
    full = llm.complete(MSGS).text
    if len(full) > 2:
        stop = full[2:4]
        folded = collect_stream(llm.stream(MSGS, stop=[stop]))
        assert folded.text == full[: full.index(stop)]
        assert folded.finish_reason == "stop"
    gen = llm.stream(MSGS)
    next(gen)
    gen.close()  # the generation thread is cancelled and joined
    assert llm.complete(MSGS).text == full  # the lock was released


def test_single_load_across_threads(tiny_model, monkeypatch):
    calls = []
    original = transformers.AutoModelForCausalLM.from_pretrained

    def counting(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", counting)
    llm = LocalLLM(tiny_model, device="cpu", max_new_tokens=3)
    barrier = threading.Barrier(6)
    results, errors = [], []

    def work():
        barrier.wait()
        try:
            results.append(llm.complete(MSGS))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 6 and len({r.text for r in results}) == 1
    assert len(calls) == 1 and llm.load_count == 1


def test_missing_folder_names_the_setting(tmp_path):
    llm = LocalLLM(f"local:{tmp_path / 'nope'}")
    with pytest.raises(LLMError, match=r"model_name=local:"):
        llm.complete(MSGS)


def test_unknown_hub_id_offline_names_the_setting(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    llm = LocalLLM("local:no-such-org/no-such-model-xyz")
    with pytest.raises(LLMError, match=r"model_name=local:no-such-org/no-such-model-xyz"):
        llm.complete(MSGS)


def test_folder_without_model_names_the_setting(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(LLMError, match="model_name=local:"):
        LocalLLM(str(tmp_path / "empty")).complete(MSGS)


def test_missing_torch_is_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UserError, match=r'pip install "chatgpt-tool-hub\[experts\]"'):
        LocalLLM("local:whatever").complete(MSGS)


def test_bad_arguments():
    with pytest.raises(UserError):
        LocalLLM("local:")
    with pytest.raises(UserError):
        LocalLLM("local:x", max_new_tokens=0)


def test_create_app_with_a_local_model(tiny_model):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.llm.local import LocalLLM as Local

    app = AppFactory().create_app(model_name=f"local:{tiny_model}", local_device="cpu", local_max_new_tokens="8",
                                  no_default=True)
    assert isinstance(app.llm, Local) and app.llm.max_new_tokens == 8
    result = app.run("hello")  # a random model: whatever it says is read as an answer or a parse failure
    assert isinstance(result.output, str) and result.output
    assert result.stopped_by in ("answer", "parse_error")
    assert 1 <= result.usage.llm_calls <= 3 and result.usage.total.completion_tokens >= 1


def test_stream_with_tools_is_the_clear_no_native_tools_error():
    with pytest.raises(UserError, match="does not support native tool calls"):
        list(LocalLLM("local:x").stream(MSGS, tools=[{"type": "function", "function": {"name": "f"}}]))
