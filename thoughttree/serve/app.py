"""The OpenAI-compatible HTTP API over one LM: ``create_app(lm, ServeConfig(...))`` is an ASGI app.

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models`` and
``GET /health`` (KV pool use and engine counters; ``?check=true`` also checks the KV tree's
invariants between two steps). Every request becomes one :class:`scheduler.Job` per prompt; all
jobs share the scheduler's decode batch. Seeds: choice ``j`` of prompt ``p`` (``p`` = 0 for a
single prompt) of a request with ``seed`` s decodes with ``derive_seed(0, s, (p,), j)`` under
``Sampling(seed=s)``: the seed ``ThoughtTree(lm, prompt, seed=0).expand([root], n, sampling)``
gives its ``j``-th child, so the server and an offline expand draw the same tokens.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any, AsyncIterator, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from ..runtime.detokenize import Detokenizer
from ..runtime.lm import LM
from .protocol import ChatRequest, CompletionRequest, OpenAIError, error_response, validation_message
from .run import Answer, RequestPlan, collect, plan_jobs, stream_chunks, submit
from .scheduler import Scheduler

PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass(frozen=True)
class ServeConfig:
    """How the server answers: the model's public name, an API key (None: no key needed), the
    most choices one request may ask for, how many requests may wait for KV room before the
    server answers 429, and the chat template (None: the tokenizer's own; "plain" or a Jinja
    string otherwise)."""

    model_name: str = "thoughttree"
    api_key: str | None = None
    max_n: int = 64
    max_waiting: int = 256
    chat_template: str | None = None

    def __post_init__(self) -> None:
        if self.max_n < 1:
            raise ValueError(f"max_n must be >= 1, got {self.max_n}")
        if self.max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0, got {self.max_waiting}")
        if self.api_key == "":
            raise ValueError("api_key must not be empty; leave it out for a server without a key")


def create_app(lm: LM, config: ServeConfig | None = None) -> FastAPI:
    config = config or ServeConfig()
    scheduler = Scheduler(lm, max_waiting=config.max_waiting)
    # The handlers tokenise on the event loop's thread while the scheduler's thread decodes stop
    # windows: each thread gets its own tokenizer object.
    tokenizer = copy.deepcopy(lm.tokenizer)
    detokenize = Detokenizer(tokenizer)
    template = PLAIN_CHAT_TEMPLATE if config.chat_template == "plain" else config.chat_template
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        yield
        await asyncio.to_thread(scheduler.close)

    app = FastAPI(title="thoughttree", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.scheduler = scheduler

    @app.exception_handler(OpenAIError)
    async def _openai_error(_: Request, exc: OpenAIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(list(exc.errors()))
        return error_response(400, message, param=param)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    def check_key(request: Request) -> None:
        if config.api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {config.api_key}".encode()):
            raise OpenAIError(
                401, "incorrect or missing API key (send 'Authorization: Bearer KEY')", code="invalid_api_key"
            )

    def check_model(name: str) -> None:
        if name != config.model_name:
            raise OpenAIError(
                404,
                f"model {name!r} does not exist; this server serves {config.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def encode(text: str) -> list[int]:
        bos = getattr(tokenizer, "bos_token", None)
        add_bos = not (bos and text.startswith(bos))
        return list(tokenizer(text, add_special_tokens=add_bos, verbose=False)["input_ids"])

    async def answer(request: Request, plan: RequestPlan) -> Any:
        submit(plan, scheduler, detokenize)
        if plan.stream:
            chunks = stream_chunks(request, scheduler, plan, detokenize)
            return StreamingResponse(chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        result: Answer | None = await collect(request, scheduler, plan)
        if result is None:  # the client went away: nobody reads this
            return JSONResponse({}, status_code=499)
        return result.body(detokenize)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        check_key(request)
        check_model(body.model)
        body.unsupported()
        if body.echo or body.suffix:
            raise OpenAIError(400, "echo and suffix are not supported", param="echo" if body.echo else "suffix")
        prompt = body.prompt
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
            prompts = [prompt]
        else:
            prompts = list(cast("list[str | list[int]]", prompt))
        if not prompts:
            raise OpenAIError(400, "prompt is empty", param="prompt")
        token_lists = [encode(p) if isinstance(p, str) else list(p) for p in prompts]
        plan = plan_jobs(body, token_lists, lm, config, chat=False, model=config.model_name, created=created)
        return await answer(request, plan)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest, request: Request) -> Any:
        check_key(request)
        check_model(body.model)
        body.unsupported()
        if template is None and not getattr(tokenizer, "chat_template", None):
            raise OpenAIError(
                400,
                f"model {config.model_name!r} has no chat template; use /v1/completions, or start "
                "the server with --chat-template plain (or a Jinja template file)",
                param="messages",
                code="no_chat_template",
            )
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            text = tokenizer.apply_chat_template(
                messages, chat_template=template, tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:  # jinja raises many types for a template that cannot render these messages
            raise OpenAIError(400, f"the chat template cannot render these messages: {exc}", param="messages") from exc
        plan = plan_jobs(body, [encode(text)], lm, config, chat=True, model=config.model_name, created=created)
        return await answer(request, plan)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        check_key(request)
        return {
            "object": "list",
            "data": [
                {
                    "id": config.model_name,
                    "object": "model",
                    "created": created,
                    "owned_by": "thoughttree",
                    "max_model_len": lm.max_context,
                }
            ],
        }

    @app.get("/health")
    async def health(check: bool = False) -> Any:
        body: dict[str, Any] = {
            "status": "ok",
            "model": config.model_name,
            "kv": scheduler.usage(),
            "engine": asdict(lm.stats),
        }
        if check:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[Any] = loop.create_future()

            def settle(result: Any, error: BaseException | None) -> None:
                if done.done():
                    return
                if error is not None:
                    done.set_exception(error)
                else:
                    done.set_result(result)

            def finished(result: Any, error: BaseException | None) -> None:
                loop.call_soon_threadsafe(settle, result, error)

            def checked() -> dict[str, int]:
                lm.kv.check_integrity(None)
                return scheduler.usage()

            scheduler.call(checked, finished)
            try:
                body["kv"] = await done
            except AssertionError as exc:
                return error_response(500, f"KV integrity check failed: {exc}")
            body["integrity"] = "ok"
        return body

    return app
