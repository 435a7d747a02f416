"""The OpenAI request bodies the server accepts, and its error bodies.

Unknown fields are refused (a misspelt parameter is an error, not a silent default). Besides the
OpenAI fields, requests may carry the extensions that vLLM and SGLang accept: ``top_k``, ``min_p``,
``ignore_eos``, ``include_stop_str_in_output`` and ``return_tokens_as_token_ids``; and
thoughttree's own ``decode_seeds``: the runtime seed of each choice, in place of the ones
derived from ``seed`` (the remote backend sends the seeds a local search would decode with).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

MAX_LOGPROBS = 20


class OpenAIError(Exception):
    """A request the server refuses, answered as ``{"error": {...}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, param=self.param, code=self.code)


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param=param, code=code), status_code=status)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Strict):
    include_usage: bool = False


class _Sampled(_Strict):
    """The fields completions and chat share."""

    model: str
    max_tokens: Optional[int] = None
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Union[str, list[str], None] = None
    seed: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Optional[dict[str, float]] = None
    user: Optional[str] = None
    top_k: int = 0
    min_p: float = 0.0
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    return_tokens_as_token_ids: bool = False
    decode_seeds: Optional[list[int]] = None

    def unsupported(self) -> None:
        """OpenAIError for a parameter this server does not implement, set to something other than its default."""
        if self.presence_penalty or self.frequency_penalty:
            raise OpenAIError(
                400,
                "presence_penalty and frequency_penalty are not supported; leave them at 0",
                param="presence_penalty",
            )
        if self.logit_bias:
            raise OpenAIError(400, "logit_bias is not supported; leave it out", param="logit_bias")

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


PromptType = Union[str, list[str], list[int], list[list[int]]]


class CompletionRequest(_Sampled):
    prompt: PromptType
    max_tokens: Optional[int] = 16
    best_of: Optional[int] = None
    logprobs: Optional[int] = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: Optional[str] = None


class ChatMessage(_Strict):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Union[str, list[dict[str, Any]], None] = None
    name: Optional[str] = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise OpenAIError(
                    400, "this server reads text message parts only ({'type': 'text', 'text': ...})", param="messages"
                )
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(_Sampled):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(default=None, ge=0, le=MAX_LOGPROBS)


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """One line for pydantic's errors of a request body, and the parameter at fault."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON ({first.get('ctx', {}).get('error', 'cannot parse it')})", None
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    where = ".".join(loc) or None
    param = loc[0] if loc else None  # the request's field (the rest may name a member of a union)
    if first.get("type") == "extra_forbidden":
        return f"unknown field {where!r}: this server does not accept it", where
    if first.get("type") == "missing":
        return f"{where} is required", where
    if param == "prompt" and len(loc) > 1 and not loc[1].isdigit():
        return "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists", param
    return f"{where or 'the body'}: {first.get('msg', 'invalid value')}", param
