"""One HTTP request's jobs: checked and planned, submitted, then collected whole or streamed.

Whichever way the answer goes out, a request whose client disconnects is cancelled: the
streaming generator's ``finally`` (Starlette closes it when the client goes) and, for a request
that waits for its whole answer, a task that listens for the ASGI ``http.disconnect`` message
both cancel its jobs, and the scheduler frees their KV before its next step.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from fastapi import Request

from ..config import Sampling
from ..tree.thought_tree import derive_seed
from .output import ChoiceText, chat_logprobs, completion_logprobs, pick_best
from .protocol import ChatRequest, CompletionRequest, OpenAIError
from .scheduler import AdmissionError, Job, Scheduler

if TYPE_CHECKING:
    from ..runtime.lm import LM
    from .app import ServeConfig


def choice_seed(seed: int, prompt: int, choice: int) -> int:
    """The decode seed of choice ``choice`` of prompt ``prompt``: that of child ``choice`` of root
    ``prompt`` in ``ThoughtTree(lm, seed=0)`` expanded with ``Sampling(seed=seed)``."""
    return derive_seed(0, seed, (prompt,), choice)


@dataclass
class RequestPlan:
    chat: bool
    stream: bool
    include_usage: bool
    n: int  # choices returned per prompt
    top: int  # top log-probabilities per token (0: none)
    want_logprobs: bool
    as_ids: bool
    model: str
    created: int
    jobs: list[Job]
    prompt_tokens: int
    states: list[list[ChoiceText]] = field(default_factory=list)
    queue: asyncio.Queue[tuple[int, Any]] | None = None
    id: str = field(default_factory=lambda: secrets.token_hex(12))


def plan_jobs(
    body: CompletionRequest | ChatRequest,
    prompts: list[list[int]],
    lm: LM,
    config: ServeConfig,
    *,
    chat: bool,
    model: str,
    created: int,
) -> RequestPlan:
    """Check a request against the model and the server's limits; OpenAIError (400) when it cannot run."""
    ctx, vocab = lm.max_context, lm.config.vocab_size
    if not 1 <= body.n <= config.max_n:
        raise OpenAIError(400, f"n must be between 1 and {config.max_n}, got {body.n}", param="n")
    k = body.n
    if isinstance(body, CompletionRequest) and body.best_of is not None:
        if not body.n <= body.best_of <= config.max_n:
            raise OpenAIError(
                400, f"best_of must be between n ({body.n}) and {config.max_n}, got {body.best_of}", param="best_of"
            )
        if body.stream and body.best_of > body.n:
            raise OpenAIError(400, "best_of > n cannot be streamed", param="best_of")
        k = body.best_of
    for i, tokens in enumerate(prompts):
        if not tokens:
            raise OpenAIError(400, f"prompt {i} is empty", param="prompt")
        if len(tokens) >= ctx:
            raise OpenAIError(
                400,
                f"prompt {i} has {len(tokens)} tokens, which leaves no room in the model's "
                f"context of {ctx} tokens; shorten it",
                param="prompt",
                code="context_length_exceeded",
            )
        if any(not 0 <= t < vocab for t in tokens):
            raise OpenAIError(400, f"prompt {i} has token ids outside the vocabulary of {vocab}", param="prompt")
    max_tokens = body.max_tokens
    if isinstance(body, ChatRequest) and body.max_completion_tokens is not None:
        max_tokens = body.max_completion_tokens
    if max_tokens is None:
        max_tokens = ctx - max(map(len, prompts))
    if not 1 <= max_tokens <= ctx:
        raise OpenAIError(
            400, f"max_tokens must be between 1 and the model's context of {ctx}, got {max_tokens}", param="max_tokens"
        )
    seed = body.seed if body.seed is not None else secrets.randbits(63)
    try:
        sampling = Sampling(
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            min_p=body.min_p,
            stop=body.stops,
            ignore_eos=body.ignore_eos,
            seed=seed,
        )
    except ValueError as exc:
        raise OpenAIError(400, str(exc).removeprefix("invalid Sampling: ")) from None
    if isinstance(body, ChatRequest):
        top, want = (body.top_logprobs or 0) if body.logprobs else 0, body.logprobs
    else:
        top, want = body.logprobs or 0, body.logprobs is not None
    given = body.decode_seeds
    if given is not None and (len(given) != k or len(prompts) != 1):
        raise OpenAIError(
            400,
            f"decode_seeds needs one prompt and one seed per choice ({k}), got {len(given)} seeds "
            f"for {len(prompts)} prompts",
            param="decode_seeds",
        )
    jobs = [
        Job(
            tokens,
            sampling,
            list(given) if given is not None else [choice_seed(seed, p, j) for j in range(k)],
            emit=_unset,
            top_logprobs=top,
        )
        for p, tokens in enumerate(prompts)
    ]
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    plan = RequestPlan(
        chat,
        body.stream,
        include_usage,
        body.n,
        top,
        want,
        body.return_tokens_as_token_ids,
        model,
        created,
        jobs,
        sum(map(len, prompts)),
    )
    keep = body.include_stop_str_in_output
    plan.states = [[ChoiceText(j, lm.decode, body.stops, keep) for j in range(k)] for _ in jobs]
    return plan


def _unset(_: object) -> None:
    raise RuntimeError("a job was run before it was submitted")


def submit(plan: RequestPlan, scheduler: Scheduler, decode: Callable[[list[int]], str]) -> None:
    """Queue the plan's jobs; OpenAIError (400 or 429) when the scheduler refuses one."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    plan.queue = queue
    for states in plan.states:
        for s in states:
            s.decode = decode

    def emitter(i: int) -> Callable[[Any], None]:
        def emit(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (i, item))
            except RuntimeError:  # the event loop has closed: a server shutting down has no one left to tell
                pass

        return emit

    for i, job in enumerate(plan.jobs):
        job.emit = emitter(i)
        try:
            scheduler.submit(job)
        except AdmissionError as exc:
            cancel(plan, scheduler)
            raise OpenAIError(exc.status, str(exc), code="server_busy" if exc.status == 429 else None) from None


def cancel(plan: RequestPlan, scheduler: Scheduler) -> None:
    for job in plan.jobs:
        scheduler.cancel(job)


def _unfinished(plan: RequestPlan) -> int:
    return sum(not s.done for states in plan.states for s in states)


async def _next(plan: RequestPlan) -> tuple[int, list[Any]]:
    assert plan.queue is not None
    i, item = await plan.queue.get()
    if isinstance(item, BaseException):
        raise OpenAIError(500, f"the model failed on this request: {item}")
    for update in item:
        plan.states[i][update.index].add(update)
    return i, item


@dataclass
class Answer:
    """A finished request, whose OpenAI response body :meth:`body` builds."""

    plan: RequestPlan

    def body(self, decode: Callable[[list[int]], str]) -> dict[str, Any]:
        plan = self.plan
        choices = []
        for p, states in enumerate(plan.states):
            for j, s in enumerate(pick_best(states, plan.n) if len(states) > plan.n else states):
                index = p * plan.n + j
                text = s.text()
                if plan.chat:
                    lp = chat_logprobs(s, 0, len(s.tokens), decode, plan.as_ids) if plan.want_logprobs else None
                    choices.append(
                        {
                            "index": index,
                            "message": {"role": "assistant", "content": text},
                            "logprobs": lp,
                            "finish_reason": s.openai_finish,
                        }
                    )
                else:
                    lp = completion_logprobs(s, 0, len(s.tokens), decode, plan.as_ids) if plan.want_logprobs else None
                    choices.append({"index": index, "text": text, "logprobs": lp, "finish_reason": s.openai_finish})
        return {
            "id": ("chatcmpl-" if plan.chat else "cmpl-") + plan.id,
            "object": "chat.completion" if plan.chat else "text_completion",
            "created": plan.created,
            "model": plan.model,
            "choices": choices,
            "usage": _usage(plan),
        }


def _usage(plan: RequestPlan) -> dict[str, int]:
    done = sum(len(s.tokens) for states in plan.states for s in states)
    return {"prompt_tokens": plan.prompt_tokens, "completion_tokens": done, "total_tokens": plan.prompt_tokens + done}


async def _disconnected(request: Request) -> None:
    """Return once the client has gone (the ASGI server reports ``http.disconnect``)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def collect(request: Request, scheduler: Scheduler, plan: RequestPlan) -> Answer | None:
    """Wait for every choice to finish; None (the jobs cancelled) when the client went away."""
    finished = False
    getter: asyncio.Future[Any] | None = None
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        while _unfinished(plan):
            if getter is None:
                getter = asyncio.ensure_future(_next(plan))
            done, _ = await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                ready = getter
                getter = None
                ready.result()
            elif gone in done:
                return None
        finished = True
        return Answer(plan)
    finally:
        for task in (getter, gone):
            if task is not None:
                task.cancel()
        if not finished:
            cancel(plan, scheduler)


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


async def stream_chunks(
    request: Request, scheduler: Scheduler, plan: RequestPlan, decode: Callable[[list[int]], str]
) -> AsyncIterator[str]:
    """The answer as server-sent events, one chunk per choice that moved in a step, then ``[DONE]``."""
    kind = "chat.completion.chunk" if plan.chat else "text_completion"
    head = {
        "id": ("chatcmpl-" if plan.chat else "cmpl-") + plan.id,
        "object": kind,
        "created": plan.created,
        "model": plan.model,
    }
    finished = False
    try:
        if plan.chat:
            first = [
                {
                    "index": p * plan.n + j,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
                for p in range(len(plan.jobs))
                for j in range(plan.n)
            ]
            yield _sse({**head, "choices": first})
        while _unfinished(plan):
            try:
                p, updates = await _next(plan)
            except OpenAIError as exc:
                yield _sse({"error": {"message": exc.message, "type": "server_error", "param": None, "code": None}})
                return
            for j in dict.fromkeys(u.index for u in updates):
                s = plan.states[p][j]
                start = s.sent_tokens
                piece, _ = s.delta()
                if not piece and not s.done and not plan.want_logprobs:
                    continue
                index = p * plan.n + j
                if plan.chat:
                    lp = chat_logprobs(s, start, len(s.tokens), decode, plan.as_ids) if plan.want_logprobs else None
                    choice = {
                        "index": index,
                        "delta": {"content": piece} if piece else {},
                        "logprobs": lp,
                        "finish_reason": s.openai_finish,
                    }
                else:
                    lp = (
                        completion_logprobs(s, start, len(s.tokens), decode, plan.as_ids)
                        if plan.want_logprobs
                        else None
                    )
                    choice = {"index": index, "text": piece, "logprobs": lp, "finish_reason": s.openai_finish}
                yield _sse({**head, "choices": [choice]})
        if plan.include_usage:
            yield _sse({**head, "choices": [], "usage": _usage(plan)})
        yield "data: [DONE]\n\n"
        finished = True
    finally:
        if not finished:
            cancel(plan, scheduler)
