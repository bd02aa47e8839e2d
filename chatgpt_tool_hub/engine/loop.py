"""The ReAct loop.

``Engine.iter_run`` is a generator of typed events whose return value is the
:class:`RunResult`. The loop itself fits on a screen; each kind of step is a
small method. The engine is re-entrant: all per-run state is in ``RunState``.

With ``tool_calling="native"`` the LLM gets the tools as function schemas and
answers with tool calls (see :mod:`.native`); each call is dispatched exactly
like a text-protocol action, through :func:`.dispatch.dispatch`, the one place
that resolves, approves, charges, runs, redacts, strips and truncates.

The model's own text is redacted like observations wherever it leaves the run:
thoughts, action inputs (in events and ``RunResult.steps``; the tool gets the
input as written), the answer, parse feedback and streamed tokens (held back by
the longest form of a secret, so one split over chunks is hidden too).
Untrusted results reach the model fenced as data (``Outcome.for_llm``); the
run's taint state (:mod:`chatgpt_tool_hub.run.taint`) is shared by every
engine of the run through its :class:`RunBudget`.

The loop never calls the LLM itself: it yields an ``_LLMCall`` and gets the
response back, so the same loop has two drivers. ``iter_run`` (a generator)
makes the calls with ``complete`` / ``stream``; ``aiter_run`` (an async
generator) awaits ``acomplete`` / ``astream`` on the event loop and runs only
the tool calls in threads (tools block). A :class:`RunBudget` makes a run
cancellable: after ``cancel()`` the next charge raises :class:`RunCancelled`,
a pending LLM call is abandoned, the tools' kill hooks run, and the run ends
with ``stopped_by="cancelled"`` and the steps so far.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import logging
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Callable, Generator, Iterable, Sequence

from ..errors import OutputParserError, ToolInputError, UserError
from ..events import ActionEvent, AnswerEvent, ErrorEvent, Event, ObservationEvent, ThoughtEvent
from ..llm.base import LLM, LLMResponse, Message, ToolCall, with_options
from ..redact import Redactor
from ..run.budget import Budget, BudgetExceeded
from ..run.control import RunBudget, RunCancelled
from ..run.external import ANY_TOOL, ExternalCall, ExternalTurn, Paused
from ..run.steps import ParseFailureStep, RunResult, RunState, ToolStep
from ..run.taint import EgressPolicy, RunTaint
from ..runtime.bridge import await_in_thread
from ..tools.base import Tool, ToolContext
from . import answers, constrained, native
from .dispatch import Outcome, clean_observation, dispatch, redact_value, resolve_tool, truncate_observation
from .drivers import allm_reply, control_of, llm_reply
from .parser import Action, Finish, parse_output
from .prompts import PromptSet, detect_language, load_prompts, rules_for, tool_block

__all__ = ["Engine", "EngineSettings", "truncate_observation", "STOP_SEQUENCES", "RunBudget", "RunCancelled"]

log = logging.getLogger("chatgpt_tool_hub.engine")
STOP_SEQUENCES = ["\nObservation:", "\nObservation："]
Approver = Callable[..., bool]  # (tool name, tool input) -> allowed; see ``run.context.Approver``
RunGen = Generator[Event, None, RunResult]
_CANCELLED = {"en": "The run was cancelled before it finished.", "zh": "运行在完成前被取消。"}
_LAST_OBSERVATION = {"en": "The last observation was:", "zh": "最后的观察结果："}


@dataclass(frozen=True)
class _LLMCall:
    """What the loop asks its driver for: one LLM call (the driver yields the tokens of a stream)."""

    messages: list
    tools: list | None
    stream: bool
    schema: dict | None = None  # constrained decoding: the JSON schema the reply must follow


_TOOL_START = object()  # the loop is about to run a tool: the async driver moves to a thread
_TOOL_END = object()    # back from the tool


@dataclass
class EngineSettings:
    think_depth: int = 3
    max_parse_retries: int = 2
    observation_max_chars: int = 4000
    prompt_language: str = "auto"
    bot_name: str = "LLM-OS"
    depth: int = 0  # nesting depth, for subtree engines
    tool_calling: str = "text"  # "text": the Thought/Action protocol; "native": the API's tool calls
    tool_prompt_max_tokens: int = 3000  # the tool list of the text-protocol prompt is shortened past this
    untrusted_egress: str = "ask"  # egress after untrusted content: "ask" (the approver), "allow" or "deny"
    untrusted_egress_code: bool = False  # code tools (python, terminal) count as egress after untrusted content

    def __post_init__(self) -> None:
        _ = self.egress_policy  # a bad untrusted_egress is a ConfigError where the settings are made

    @property
    def egress_policy(self) -> EgressPolicy:
        return EgressPolicy.of(self.untrusted_egress, self.untrusted_egress_code)


class Engine:
    """A ReAct engine over one LLM and a fixed set of tools."""

    def __init__(self, llm: LLM, tools: Iterable[Tool] = (), settings: EngineSettings | None = None, *,
                 approve: Approver | None = None, budget: Budget | None = None,
                 redactor: Redactor | None = None, secrets: Sequence[str] = (), taint: RunTaint | None = None,
                 external: ExternalTurn | None = None):
        self.llm = llm
        self.taint = taint  # a nested engine's: its caller's run state (else the budget's, else one per run)
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        # tools the caller runs (a chat client's own): a call of one pauses the run (see run.external)
        self.external = external if external is not None and not external.empty else None
        if self.external is not None:
            for extra in self.external.tools:
                self.tools.pop(next((n for n in self.tools if n.lower() == extra.name.lower()), ""), None)
                self.tools[extra.name] = extra
        self.settings = settings or EngineSettings()
        self.approve = approve
        self.budget = budget
        # configured keys: replaced by *** in observations, which go to the LLM and into RunResult
        self.redactor = redactor.with_secrets(secrets) if redactor is not None and secrets else (
            redactor if redactor is not None else Redactor(secrets))
        mode = (self.settings.tool_calling or "text").strip().lower()
        if mode not in ("text", "native"):
            raise UserError(f"tool_calling must be 'text' or 'native', not {self.settings.tool_calling!r}")
        # native mode needs tools to call; without any it is the text protocol's no-tools prompt
        self.native = mode == "native" and bool(self.tools)
        self._schemas: list[dict] | None = None
        self._schema: dict | None = None  # the reply schema of constrained decoding, made on first use
        self._sent_names: dict[str, str] = {}
        if self.native:
            self._schemas, self._sent_names = native.tool_schemas(self.tools.values())

    # ---- the loop ------------------------------------------------------------

    def iter_run(self, query: str, history: Sequence[Message] = (), *, stream: bool = False,
                 session_id: str = "default") -> RunGen:
        """The run as a generator of events; its return value is the :class:`RunResult`."""
        steps = self._steps(query, history, stream, session_id)
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    item = steps.throw(error) if error is not None else steps.send(value)
                except StopIteration as stop:
                    return stop.value
                value = error = None
                if isinstance(item, _LLMCall):
                    try:  # with a RunBudget, cancel() ends the wait for the LLM
                        value = yield from llm_reply(self._llm_for(item), item.messages, control=control_of(self.budget),
                                                     stream=item.stream, stop=STOP_SEQUENCES, tools=item.tools,
                                                     depth=self.settings.depth, redactor=self.redactor)
                    except Exception as exc:  # the loop decides: cancelled, budget, or up to the caller
                        error = exc
                elif item is not _TOOL_START and item is not _TOOL_END:
                    yield item
        finally:
            steps.close()

    async def aiter_run(self, query: str, history: Sequence[Message] = (), *, stream: bool = False,
                        session_id: str = "default", executor: Any = None) -> AsyncGenerator[Any, None]:
        """The run for asyncio: yields the events, then the :class:`RunResult` as the last item.

        LLM calls are awaited (``acomplete`` / ``astream``; an LLM without them runs in
        ``executor``); tool calls run in ``executor`` (None: the loop's default). When the
        consuming task is cancelled, the run's :class:`RunBudget` is cancelled (the tools'
        processes are killed) and the tool call in flight is waited for before
        ``CancelledError`` goes on: nothing the run started is left running.
        """
        ask = getattr(self.llm, "aconstrains_replies", None)
        if callable(ask) and not self.native and self.tools:  # find out what the server is without blocking
            await ask()
        steps = self._steps(query, history, stream, session_id)
        value: Any = None
        error: BaseException | None = None
        threaded = False
        try:
            while True:
                step = functools.partial(_advance, steps, value, error)
                ended, item = (await await_in_thread(step, executor, on_abandon=self._abandon)) if threaded else step()
                if ended:
                    yield item
                    return
                value = error = None
                if item is _TOOL_START or item is _TOOL_END:
                    threaded = item is _TOOL_START
                elif isinstance(item, _LLMCall):
                    threaded = False
                    reply = allm_reply(self._llm_for(item), item.messages, control=control_of(self.budget), stream=item.stream,
                                       stop=STOP_SEQUENCES, tools=item.tools, depth=self.settings.depth,
                                       executor=executor, redactor=self.redactor)
                    try:
                        async with aclosing(reply) as pieces:
                            async for piece in pieces:
                                if isinstance(piece, LLMResponse):
                                    value = piece
                                else:
                                    yield piece
                    except Exception as exc:
                        error = exc
                else:
                    yield item
        finally:
            steps.close()

    def _abandon(self) -> None:
        """The async caller went away during a tool call: cancel the run, which kills what the tool started."""
        cancel = getattr(self.budget, "cancel", None)
        if callable(cancel):
            cancel("the caller went away")

    def _steps(self, query: str, history: Sequence[Message], stream: bool,
               session_id: str) -> Generator[Any, Any, RunResult]:
        language = detect_language(query, self.settings.prompt_language)
        schema = self._reply_schema()
        state = RunState(query=query, messages=self._initial_messages(query, history, language, schema is not None),
                         language=language, session_id=session_id, reply_schema=schema)
        state.scratch_start = len(state.messages)
        if self.external is not None and self.external.resume is not None:
            self._resume(state, self.external.resume, self.external.results)
        try:
            return (yield from self._loop(state, stream))
        except RunCancelled:
            return (yield from self._cancelled(state))
        except BudgetExceeded as exc:
            return (yield from self._out_of_budget(state, exc))

    def _loop(self, state: RunState, stream: bool) -> RunGen:
        while True:
            reply = yield from self._call_llm(state, stream, self._schemas)
            if self.native and reply.tool_calls:
                result = yield from self._run_tool_calls(state, reply, stream)
                if result is not None:
                    return result
                if state.pending:
                    return (yield from self._pause(state))
                continue
            try:
                decision = self._decide(state, reply.text)
            except OutputParserError as err:
                if len(state.parse_failures) >= self.settings.max_parse_retries:
                    return (yield from self._give_up_on_parsing(state, reply.text, err))
                yield from self._send_feedback(state, reply.text, err)
                continue
            if reply.finish_reason == "length" and isinstance(decision, Action) and _cut_mid_input(reply.text,
                                                                                                  decision):
                cut = OutputParserError("the reply was cut off at the output token limit inside the action input",
                                        feedback=self._prompts(state).render("cut_off_action"), llm_output=reply.text)
                if len(state.parse_failures) >= self.settings.max_parse_retries:
                    return (yield from self._give_up_on_parsing(state, reply.text, cut))
                yield from self._send_feedback(state, reply.text, cut)
                continue
            if isinstance(decision, Finish):
                decision, refused = self._checked_answer(state, decision)
                if refused is not None:
                    if len(state.parse_failures) >= self.settings.max_parse_retries:
                        return (yield from self._give_up_on_parsing(state, reply.text, refused))
                    yield from self._send_feedback(state, reply.text, refused)
                    continue
            if decision.thought:
                yield ThoughtEvent(self._hide(decision.thought), self.settings.depth)
            if isinstance(decision, Finish):
                output = decision.output
                if reply.finish_reason == "length":  # the model ran out of tokens: say so, never pass it off as whole
                    output = f"{output.rstrip()} …\n\n{self._prompts(state).render('cut_off_answer')}"
                return (yield from self._answer(state, output, "answer"))
            if state.tool_calls >= self.settings.think_depth:
                return (yield from self._finish_at_depth(state, decision.log or reply.text, stream))
            yield from self._act(state, decision)
            if state.pending:
                return (yield from self._pause(state))

    def run(self, query: str, history: Sequence[Message] = (), *,
            callbacks: Sequence[Callable[[Event], None]] = ()) -> RunResult:
        gen = self.iter_run(query, history)
        while True:
            try:
                event = next(gen)
            except StopIteration as stop:
                return stop.value
            for callback in callbacks:
                callback(event)

    # ---- one step each ---------------------------------------------------------

    def _call_llm(self, state: RunState, stream: bool, tools: list[dict] | None = None, *,
                  final: bool = False) -> Generator[Any, Any, LLMResponse]:
        if self.budget is not None:
            self.budget.charge_llm()
        started = time.perf_counter()
        schema = None
        if state.reply_schema is not None and not tools:  # constrained: an action or the answer; at the end, the answer
            schema = constrained.final_schema() if final else state.reply_schema
        response = yield _LLMCall(state.messages, tools, stream, schema)  # made by the driver
        state.usage.calls.append(response.usage)
        log.debug("llm call %d: %d chars, finish=%s, %.3fs", state.usage.llm_calls, len(response.text or ""),
                  response.finish_reason, time.perf_counter() - started)
        return response

    def _send_feedback(self, state: RunState, text: str, err: OutputParserError) -> Generator[Event, None, None]:
        failure = ParseFailureStep(self._hide(text), self._hide(err.feedback))
        state.parse_failures.append(failure)
        state.messages.extend(failure.render())
        yield ErrorEvent(failure.feedback, "OutputParserError", self.settings.depth)

    def _give_up_on_parsing(self, state: RunState, text: str, err: OutputParserError) -> RunGen:
        state.parse_failures.append(ParseFailureStep(self._hide(text), self._hide(err.feedback)))  # the last
        yield ErrorEvent(self._hide(err.feedback), "OutputParserError", self.settings.depth)  # one too
        output = text.strip() or self._prompts(state).render("empty_reply")
        return (yield from self._answer(state, output, "parse_error"))

    def _act(self, state: RunState, action: Action, call_id: str | None = None) -> Generator[Any, None, None]:
        """Run one action; its observation goes back as a ``tool`` message when it answers a native call."""
        waiting = self._external_call(action, call_id)
        if waiting is not None:  # the caller runs it: the run pauses once the reply's calls are seen
            state.pending.append(waiting)
            yield ActionEvent(waiting.tool, redact_value(waiting.arguments, self.redactor), self.settings.depth)
            return
        context = state.tool_context
        if context is None:  # one per run: nothing in it changes from step to step
            context = state.tool_context = ToolContext(
                session_id=state.session_id, depth=self.settings.depth, budget=self.budget, llm=self.llm,
                emit=state.emit, approve=self.approve, usage=state.usage, redactor=self.redactor,
                taint=self._run_taint())
        repeated = self._repeat_of(state, action)
        if repeated is not None:  # the same call as the last one: its result again, not a second run
            yield ActionEvent(repeated.tool, redact_value(action.tool_input, self.redactor), self.settings.depth)
            note = self._prompts(state).render("repeated_call", tool=repeated.tool)
            outcome = dataclasses.replace(repeated, observation=f"{note}\n{repeated.observation}", seconds=0.0)
            yield ObservationEvent(outcome.tool, outcome.observation, self.settings.depth)
        else:
            yield _TOOL_START  # the async driver runs the call in a thread, until _TOOL_END (or the next LLM call)
            outcome = yield from dispatch(self.tools, action.tool, action.tool_input, context,
                                          prompts=self._prompts(state), max_chars=self.settings.observation_max_chars,
                                          native=call_id is not None, nested=state.drain_nested)
            yield _TOOL_END
        state.last_call = (_call_key(action.tool, action.tool_input), outcome)
        step = ToolStep(outcome.tool, redact_value(action.tool_input, self.redactor), outcome.observation,
                        self._hide(action.thought), self._hide(action.log or ""), outcome.status, outcome.seconds,
                        call_id)
        state.steps.append(step)
        if call_id is None:
            message = self._prompts(state).render("observation", observation=outcome.for_llm)
            state.messages.extend(step.render(message))
        else:
            state.messages.append(native.tool_message(call_id, outcome.for_llm))

    def _finish_at_depth(self, state: RunState, pending_output: str | None, stream: bool) -> RunGen:
        """One last LLM call, without tools, for the final answer (``pending_output``: the reply whose
        action was not run, or None when it is already in the messages)."""
        prompts = self._prompts(state)
        depth = self.settings.think_depth
        if pending_output is not None:
            state.messages.append({"role": "assistant", "content": pending_output})
        section = "final_request_native" if self.native else (
            "final_request_json" if state.reply_schema is not None else "final_request")
        state.messages.append({"role": "user", "content": prompts.render(section, think_depth=depth)})
        reply = yield from self._call_llm(state, stream, final=True)
        try:
            decision = self._decide(state, reply.text)
        except OutputParserError:
            decision = None
        if isinstance(decision, Finish) and decision.output.strip():
            return (yield from self._answer(state, decision.output, "think_depth"))
        last = state.steps[-1].observation if state.steps else ""
        output = (prompts.render("depth_fallback", think_depth=depth, observation=last) if last
                  else prompts.render("depth_fallback_empty", think_depth=depth))
        return (yield from self._answer(state, output, "think_depth"))

    def _out_of_budget(self, state: RunState, exc: BudgetExceeded) -> RunGen:
        last = state.steps[-1].observation if state.steps else ""
        output = self._prompts(state).render("budget_fallback", reason=str(exc), observation=last or "-")
        return (yield from self._answer(state, output, "budget"))

    def _cancelled(self, state: RunState) -> RunGen:
        """The run was cancelled: what was observed so far, and the steps."""
        language = "zh" if state.language == "zh" else "en"
        output = _CANCELLED[language]
        last = state.steps[-1].observation if state.steps else ""
        if last:
            output = f"{output} {_LAST_OBSERVATION[language]}\n{last}"
        return (yield from self._answer(state, output, "cancelled"))

    def _answer(self, state: RunState, output: str, stopped_by: str) -> RunGen:
        output = self._hide(output)
        yield AnswerEvent(output, stopped_by, self.settings.depth)
        return state.result(output, stopped_by)  # type: ignore[arg-type]

    # ---- native tool calls ---------------------------------------------------------

    def _run_tool_calls(self, state: RunState, reply: LLMResponse, stream: bool) -> Generator[Event, None, Any]:
        """Run a reply's tool calls in order, each one counting against think depth; the RunResult when
        the limit ends the run, else None. Calls past the limit are answered "not run"."""
        calls = native.with_ids(reply.tool_calls)
        state.messages.append(native.assistant_message(reply.text, calls))
        thought = (reply.text or "").strip()
        if thought:
            yield ThoughtEvent(self._hide(thought), self.settings.depth)
        for i, call in enumerate(calls):
            if state.tool_calls + len(state.pending) >= self.settings.think_depth:
                not_run = self._prompts(state).render("not_run_native", think_depth=self.settings.think_depth)
                state.messages.extend(native.tool_message(c.id, not_run) for c in calls[i:])
                return (yield from self._finish_at_depth(state, None, stream))
            yield from self._act(state, self._action_of(call, thought), call.id)
        return None

    # ---- tools the caller runs ------------------------------------------------------

    def _external_call(self, action: Action, call_id: str | None) -> ExternalCall | None:
        """The call as one the caller runs, when its tool is external and its arguments follow its schema
        (arguments that do not go to ``dispatch``, which tells the model what is wrong)."""
        if self.external is None:
            return None
        tool = resolve_tool(self.tools, action.tool)
        if tool is None or not getattr(tool, "external", False):
            return None
        try:
            arguments = tool.arguments_for(action.tool_input)  # type: ignore[attr-defined]
        except ToolInputError:
            return None
        return ExternalCall(call_id or native.new_call_id(), tool.name, arguments, self._hide(action.thought or ""),
                            action.log or "")

    def _pause(self, state: RunState) -> RunGen:
        """End the run waiting for the caller's results of ``state.pending`` (no answer text: the reply's
        thought went out as a thought)."""
        paused = Paused(messages=list(state.messages[state.scratch_start:]), steps=list(state.steps),
                        rounds=[list(state.pending)], native=self.native, announced=self.native)
        yield AnswerEvent("", "tool_calls", self.settings.depth)
        result = state.result("", "tool_calls")
        result.paused = paused
        return result

    def _resume(self, state: RunState, paused: Paused, results: Any) -> None:
        """Put a paused run's work back into ``state``, each call of its rounds answered from ``results``."""
        state.messages.extend(paused.messages)
        state.steps.extend(paused.steps)
        prompts = self._prompts(state)
        limit = self.settings.observation_max_chars
        for i, calls in enumerate(paused.rounds):
            written = paused.announced and i == len(paused.rounds) - 1
            if self.native and not written and calls:
                state.messages.append(native.assistant_message(calls[0].thought, [
                    ToolCall(c.id, c.tool, c.arguments) for c in calls]))
            for call in calls:
                given = results.get(call.id) if hasattr(results, "get") else None
                text_in = given if isinstance(given, str) else prompts.render("no_result", tool=call.tool)
                observation = clean_observation(text_in, self.redactor, limit)[1]  # as a tool's result is
                text = call.llm_output or native.written_action(call.tool, call.arguments, call.thought)
                step = ToolStep(call.tool, redact_value(call.arguments, self.redactor), observation,
                                call.thought, self._hide(text), "ok", 0.0, call.id if self.native else None)
                state.steps.append(step)
                if self.native:
                    state.messages.append(native.tool_message(call.id, observation))
                else:
                    state.messages.extend(step.render(prompts.render("observation", observation=observation)))

    def _checked_answer(self, state: RunState, decision: Finish) -> tuple[Finish, OutputParserError | None]:
        """The answer, and why it cannot end the run (the caller wants a tool called, or the answer in a JSON
        shape) as the error whose feedback asks again (None when it can). An answer in the shape is kept as
        its JSON, without a code fence around it."""
        external = self.external
        if external is None:
            return decision, None
        prompts = self._prompts(state)
        if external.must_call is not None:
            names = [t.name for t in external.tools] if external.must_call == ANY_TOOL else [external.must_call]
            return decision, OutputParserError("the caller wants a tool called, not an answer",
                                               llm_output=decision.output,
                                               feedback=prompts.render("must_call", tools=" or ".join(names)))
        if external.answer_schema is not None:
            text, problem = answers.checked_answer(decision.output, external.answer_schema)
            if problem is not None:
                return decision, OutputParserError(f"the answer is not in the asked shape: {problem}",
                                                   llm_output=decision.output,
                                                   feedback=prompts.render("answer_invalid", problem=problem))
            return dataclasses.replace(decision, output=text), None
        return decision, None

    def _repeat_of(self, state: RunState, action: Action) -> Outcome | None:
        """The outcome of the run's last call when ``action`` is the same call again and it succeeded (a model
        that does not see its result, or does not trust it, calls again and again)."""
        last = state.last_call
        if last is None or last[1].status != "ok" or last[0] != _call_key(action.tool, action.tool_input):
            return None
        return last[1]

    def _reply_schema(self) -> dict | None:
        """The JSON schema replies are kept to (text mode, when the LLM constrains replies), else None."""
        if self.native or not self.tools:
            return None
        ask = getattr(self.llm, "constrains_replies", None)
        try:
            on = callable(ask) and bool(ask())
        except Exception as exc:  # noqa: BLE001 - a question about the server never fails the run
            log.debug("constrained decoding not used: %s", exc)
            on = False
        if not on:
            return None
        if self._schema is None:
            self._schema = constrained.reply_schema(self.tools.values())
        return self._schema

    def _llm_for(self, call: _LLMCall) -> Any:
        """The LLM for one call: with its reply schema when the call is constrained."""
        return with_options(self.llm, response_schema=call.schema) if call.schema is not None else self.llm

    def _action_of(self, call: ToolCall, thought: str) -> Action:
        name = self._sent_names.get(call.name, call.name)
        tool_input = native.tool_input(call, resolve_tool(self.tools, name))
        return Action(name, tool_input, thought=thought, log=native.describe(call, thought))

    def _decide(self, state: RunState, text: str) -> Action | Finish:
        """A reply read as an action or an answer (native mode: plain text is the answer)."""
        if not self.native:
            return parse_output(text, list(self.tools))
        return native.decide(text, list(self.tools), self._prompts(state).render("empty_native"))

    # ---- helpers -----------------------------------------------------------------

    def _prompts(self, state: RunState) -> PromptSet:
        return load_prompts(state.language)

    def _hide(self, text: str) -> str:
        """The model's text as it leaves the run (events, steps, the answer): configured secrets hidden."""
        return redact_value(text, self.redactor)

    def _run_taint(self) -> RunTaint:
        """This run's taint state: the caller's (a nested engine), the run budget's, or a new one."""
        if self.taint is not None:
            return self.taint
        if isinstance(self.budget, RunBudget):
            return self.budget.taint_with(self.settings.egress_policy)
        return RunTaint(self.settings.egress_policy)

    def _initial_messages(self, query: str, history: Sequence[Message], language: str,
                          constrained_replies: bool = False) -> list[Message]:
        prompts = load_prompts(language)
        values: dict[str, Any] = {"bot_name": self.settings.bot_name, "date": _dt.date.today().isoformat()}
        if self.tools:
            values["rules"] = rules_for(prompts, list(self.tools.values()), self.native)
        if self.native:  # the tools travel as function schemas
            system = prompts.render("system_native", **values)
        elif self.tools:
            values["tools"] = tool_block(list(self.tools.values()), self.settings.tool_prompt_max_tokens)
            values["tool_names"] = ", ".join(self.tools)
            system = prompts.render("system_json" if constrained_replies else "system", **values)
        else:
            system = prompts.render("system_no_tools", **values)
        if self.external is not None and self.external.answer_schema is not None:
            system += "\n\n" + prompts.render("answer_format", schema=answers.schema_text(self.external.answer_schema))
        return [{"role": "system", "content": system}, *history, {"role": "user", "content": query}]


def _advance(steps: Generator[Any, Any, Any], value: Any, error: BaseException | None) -> tuple[bool, Any]:
    """One step of the loop: ``(False, item)``, or ``(True, result)`` when it returned (a StopIteration
    cannot cross the future of a thread step)."""
    try:
        return False, (steps.throw(error) if error is not None else steps.send(value))
    except StopIteration as stop:
        return True, stop.value


def _call_key(tool: str, tool_input: Any) -> tuple[str, str]:
    """A call as a comparable key: the tool's name (any case) and its input (a dict in a stable order)."""
    try:
        text = tool_input if isinstance(tool_input, str) else json.dumps(tool_input, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(tool_input)
    return (str(tool).strip().lower(), " ".join(str(text).split()))


def _cut_mid_input(text: str, action: Action) -> bool:
    """True when a reply cut off at the token limit ends inside its action's input (the input is not whole:
    a JSON input that parsed is whole, text that runs to the cut is not)."""
    if isinstance(action.tool_input, dict):
        return False
    tail = (text or "").rstrip()
    value = str(action.tool_input).strip()
    return not value or tail.endswith(value)


def _one_line(text: str) -> str:
    return " ".join((text or "").split())
