"""A local transformers chat model as an LLM: ``model_name="local:<hub id or path>"``.

torch and transformers are imported on the first call, never at import time.
The model is loaded once (even when many threads make their first call
together) and generation is serialised on it.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import nullcontext
from typing import Any, Iterator, Sequence

from ..errors import LLMError, UserError
from ..loadlock import CALL_GATE, PROCESS_LOAD_LOCK
from .base import BaseLLM, LLMResponse, Message, StreamChunk, Usage
from .stops import StopCutter, cut_at_stop

__all__ = ["LocalLLM", "LOCAL_PREFIX"]

logger = logging.getLogger("chatgpt_tool_hub.llm")

LOCAL_PREFIX = "local:"
_INSTALL_HINT = 'pip install "chatgpt-tool-hub[experts]"'
_STREAM_POLL_S = 0.1


def _import_backend() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise UserError(
            f"local models (model_name=local:...) need torch and transformers, which are not installed: "
            f"{_INSTALL_HINT}"
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


class LocalLLM(BaseLLM):
    """An in-process transformers causal LM behind the LLM protocol.

    ``model`` is ``"local:<hub id or path>"`` (the prefix is optional).
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
            raise UserError("model_name=local:<hub id or path> needs a model after 'local:'")
        if max_new_tokens <= 0:
            raise UserError("max_new_tokens must be > 0")
        self.source = source
        self.model_name = LOCAL_PREFIX + source
        self.device = device or None
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature or 0.0)
        self._model: Any = None
        self._tokenizer: Any = None
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
        source = os.path.expanduser(self.source)
        is_dir = os.path.isdir(source)
        if not is_dir and (os.path.exists(source) or _looks_like_path(self.source)):
            raise LLMError(f"local model folder {self.source!r} not found (or not a folder) -- check {setting}")
        device = self._pick_device(torch)
        major = int(str(transformers.__version__).split(".")[0])
        dtype: Any = torch.float32 if device == "cpu" else "auto"
        model_kwargs: dict[str, Any] = {"dtype" if major >= 5 else "torch_dtype": dtype}

        def load(local_only: bool) -> tuple[Any, Any]:
            label = f"the local LLM {self.source}"
            with PROCESS_LOAD_LOCK.hold(label):  # never beside another model's load
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
                if is_dir or _offline():
                    raise
                logger.info("local model %s not in the Hugging Face cache; downloading", self.source)
                tokenizer, model = load(False)
        except ImportError as exc:
            raise UserError(f"loading {setting} needs a package that is missing ({exc}): {_INSTALL_HINT}") from exc
        except (OSError, ValueError, KeyError) as exc:
            where = "in that folder" if is_dir else "locally, and it could not be downloaded (offline?)"
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
        self.device = device
        self._tokenizer = tokenizer
        self.load_count += 1
        self._model = model  # last: other threads see a complete object
        logger.info("loaded local model %s on %s", self.source, device)

    # -- prompt and generation ---------------------------------------------------------

    def _encode(self, messages: Sequence[Message]) -> dict[str, Any]:
        tokenizer = self._tokenizer
        chat = [{"role": str(m.get("role", "user")), "content": _content_text(m.get("content"))} for m in messages]
        if getattr(tokenizer, "chat_template", None):
            enc = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)
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
        if len(generated) and tokenizer.eos_token_id is not None and int(generated[-1]) == tokenizer.eos_token_id:
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
