"""HTTP to an OpenAI-compatible server: one JSON POST or GET with retries, many at once.

Retries: a 429, any 5xx, a timeout or a dropped connection is retried up to ``retries`` times,
waiting ``backoff_s * 2**attempt`` (at most ``max_backoff_s``; a ``Retry-After`` header of a
few seconds is obeyed) with a random share added so many clients do not retry in step. Other
statuses fail at once with the server's own message. ``map`` runs requests on a pool of
``max_concurrency`` threads sharing one connection pool.
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import httpx

T = TypeVar("T")
R = TypeVar("R")


class RemoteError(RuntimeError):
    """A remote server that refused or failed a request (after retries), or answered in a way
    this client cannot use."""


@dataclass(frozen=True)
class RemoteConfig:
    """Where the remote model is and how to talk to it.

    ``base_url`` ends in ``/v1`` (``http://host:port/v1``); ``model`` is the name the server
    serves. The API key is read from the environment variable ``api_key_env`` (none sent when it
    is unset). ``tokenizer`` is a local tokenizer directory matching the server's model: prompts
    then go out as token ids and nodes hold the server's token ids; without one, nodes hold the
    UTF-8 bytes of their text and prompts go out as text. ``max_context`` overrides the context
    length the server reports (``max_model_len`` in ``/v1/models``). ``extensions`` sends the
    request fields vLLM, SGLang and thoughttree accept beyond OpenAI's (token ids in log-probs,
    stop strings kept in the text); turn it off for a server that refuses unknown fields.
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    tokenizer: str | None = None
    max_context: int | None = None
    timeout_s: float = 300.0
    retries: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_concurrency: int = 64
    top_logprobs: int = 20
    extensions: bool = True

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the model the server serves (--remote-model NAME)")
        for name in ("timeout_s", "backoff_s", "max_backoff_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        if not 1 <= self.top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be between 1 and 20, got {self.top_logprobs}")
        if self.max_context is not None and self.max_context < 2:
            raise ValueError(f"max_context must be >= 2, got {self.max_context}")


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body["error"]["message"] if isinstance(body.get("error"), dict) else body.get("error", body))
    except (ValueError, KeyError, TypeError, AttributeError):
        return response.text[:300] or response.reason_phrase


class Client:
    """JSON requests to one server with retries and a bounded number in flight."""

    def __init__(
        self,
        config: RemoteConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = config
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(config.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(max_connections=config.max_concurrency, max_keepalive_connections=config.max_concurrency)
        self.http = httpx.Client(
            base_url=config.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=config.timeout_s,
            limits=limits,
            transport=transport,
        )
        self.pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="thoughttree-remote")
        self._sleep = sleep
        self.requests = 0
        self.retried = 0

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.http.close()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        cfg = self.config
        for attempt in range(cfg.retries + 1):
            last = attempt == cfg.retries
            try:
                response = self.http.request(method, path.lstrip("/"), json=body)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if last:
                    raise RemoteError(
                        f"{method} {cfg.base_url}/{path.lstrip('/')}: {type(exc).__name__}: {exc} "
                        f"(after {cfg.retries} retries)"
                    ) from exc
                self._wait(attempt, None)
                continue
            self.requests += 1
            if response.status_code < 400:
                try:
                    return response.json()
                except ValueError as exc:
                    raise RemoteError(
                        f"{method} {path}: the server's answer is not JSON: {response.text[:200]!r}"
                    ) from exc
            if not _retryable(response.status_code) or last:
                tried = f" (after {cfg.retries} retries)" if last and _retryable(response.status_code) else ""
                raise RemoteError(
                    f"{method} {cfg.base_url}/{path.lstrip('/')}: HTTP {response.status_code}: "
                    f"{_message(response)}{tried}"
                )
            self._wait(attempt, response.headers.get("retry-after"))
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        self.retried += 1
        cfg = self.config
        delay = min(cfg.max_backoff_s, cfg.backoff_s * 2**attempt)
        try:
            if retry_after is not None:
                delay = min(cfg.max_backoff_s, max(delay, float(retry_after)))
        except ValueError:
            pass
        self._sleep(delay * (1 + 0.25 * random.random()))

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(x) for x in items]`` with up to ``max_concurrency`` running at once."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        return list(self.pool.map(fn, items))
