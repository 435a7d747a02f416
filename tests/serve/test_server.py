"""``thoughttree serve`` in a subprocess, spoken to with the official ``openai`` client."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from thoughttree import Sampling, ThoughtTree
from thoughttree.serve.run import choice_seed

PROMPT = "Use 4 5 6 10 to make 24.\n"
PROMPTS = [PROMPT, "Use 1 1 4 6 to make 24.\n"]


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=60)


def _ids(choice) -> list[int]:
    return [int(t.removeprefix("token_id:")) for t in choice.logprobs.tokens]


def _offline(lm, prompt: str, n: int, sampling: Sampling) -> list:
    with ThoughtTree(lm, prompt=prompt, seed=0) as tree:
        kids = tree.expand([tree.root], n=n, sampling=sampling)[0]
    return kids


def test_models_and_health(client, server) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["game24"]
    body = server.health()
    assert body["status"] == "ok" and body["kv"]["pages_total"] > 0


@pytest.mark.parametrize("n", [1, 4, 16])
def test_seeded_completion_draws_the_tokens_of_offline_expand(client, local_lm, n: int) -> None:
    answer = client.completions.create(
        model="game24",
        prompt=PROMPT,
        n=n,
        max_tokens=40,
        seed=7 + n,
        stop=["\n"],
        logprobs=0,
        extra_body={"return_tokens_as_token_ids": True},
    )
    kids = _offline(local_lm, PROMPT, n, Sampling(max_tokens=40, stop="\n", seed=7 + n))
    assert [c.index for c in answer.choices] == list(range(n))
    for choice, kid in zip(answer.choices, kids):
        assert _ids(choice) == kid.tokens
        assert choice.logprobs.token_logprobs == pytest.approx(kid.metadata["token_logprobs"], abs=1e-4)
        # OpenAI's text ends before the stop string; the node's keeps it
        assert choice.text == kid.text.removesuffix("\n")
        assert choice.finish_reason == ("length" if kid.metadata["finish_reason"] == "length" else "stop")
    assert answer.usage.completion_tokens == sum(len(k.tokens) for k in kids)


def test_stop_string_kept_on_request(client, local_lm) -> None:
    answer = client.completions.create(
        model="game24", prompt=PROMPT, max_tokens=40, seed=3, stop="\n", extra_body={"include_stop_str_in_output": True}
    )
    kid = _offline(local_lm, PROMPT, 1, Sampling(max_tokens=40, stop="\n", seed=3))[0]
    assert answer.choices[0].text == kid.text and kid.text.endswith("\n")


def test_streamed_completion_equals_the_whole_answer(client) -> None:
    whole = client.completions.create(model="game24", prompt=PROMPT, n=3, max_tokens=40, seed=11, stop="\n")
    pieces = {0: "", 1: "", 2: ""}
    finish = {}
    for chunk in client.completions.create(
        model="game24", prompt=PROMPT, n=3, max_tokens=40, seed=11, stop="\n", stream=True
    ):
        for c in chunk.choices:
            pieces[c.index] += c.text
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert [pieces[i] for i in range(3)] == [c.text for c in whole.choices]
    assert [finish[i] for i in range(3)] == [c.finish_reason for c in whole.choices]


def test_chat_whole_and_streamed(client) -> None:
    messages = [{"role": "user", "content": "Use 4 5 6 10 to make 24."}]
    whole = client.chat.completions.create(model="game24", messages=messages, max_tokens=24, seed=5, n=2)
    assert len(whole.choices) == 2 and all(c.message.role == "assistant" for c in whole.choices)
    assert whole.choices[0].message.content
    text = ""
    for chunk in client.chat.completions.create(
        model="game24", messages=messages, max_tokens=24, seed=5, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        else:
            assert chunk.usage.completion_tokens > 0
    assert text == whole.choices[0].message.content


def test_best_of_keeps_the_most_likely(client, local_lm) -> None:
    answer = client.completions.create(
        model="game24",
        prompt=PROMPT,
        n=2,
        best_of=6,
        max_tokens=30,
        seed=9,
        logprobs=0,
        extra_body={"return_tokens_as_token_ids": True},
    )
    kids = _offline(local_lm, PROMPT, 6, Sampling(max_tokens=30, seed=9))
    best = sorted(sorted(kids, key=lambda k: -k.logprob)[:2], key=lambda k: k.id)
    assert [_ids(c) for c in answer.choices] == [k.tokens for k in best]


def test_64_concurrent_clients(server, local_lm) -> None:
    sampling = Sampling(max_tokens=32, stop="\n")

    async def ask(aclient: openai.AsyncOpenAI, i: int) -> list[int]:
        answer = await aclient.completions.create(
            model="game24",
            prompt=PROMPTS[i % 2],
            max_tokens=32,
            seed=100 + i,
            stop="\n",
            logprobs=0,
            extra_body={"return_tokens_as_token_ids": True},
        )
        return _ids(answer.choices[0])

    async def main() -> list[list[int]]:
        async with openai.AsyncOpenAI(
            base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=120
        ) as ac:
            return await asyncio.gather(*(ask(ac, i) for i in range(64)))

    before = server.health()["engine"]["prefill_tokens"]
    got = asyncio.run(main())
    prefilled = server.health()["engine"]["prefill_tokens"] - before
    unshared = sum(len(local_lm.encode(PROMPTS[i % 2])) for i in range(64))
    assert prefilled < unshared / 4  # the clients' common prompts are stored and computed once, not 64 times
    for p, prompt in enumerate(PROMPTS):  # the same draws, offline, in one batch per prompt
        with ThoughtTree(local_lm, prompt=prompt) as tree:
            seeds = [choice_seed(100 + i, 0, 0) for i in range(p, 64, 2)]
            gens = local_lm.generate([tree.root], [len(seeds)], sampling, [seeds])[0]
            for g in gens:
                local_lm.release(g.kv)
        assert [got[i] for i in range(p, 64, 2)] == [g.tokens for g in gens]
    server.wait_idle()


def test_disconnected_stream_frees_its_kv(server) -> None:
    body = {
        "model": "game24",
        "prompt": PROMPT,
        "n": 16,
        "max_tokens": 200,
        "ignore_eos": True,
        "stream": True,
        "temperature": 1.0,
    }
    with httpx.Client(
        base_url=f"http://127.0.0.1:{server.port}", timeout=60, headers={"Authorization": f"Bearer {server.api_key}"}
    ) as http:
        with http.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert any(line.startswith("data: ") for line in got)
            busy = server.health()["kv"]
            assert busy["running"] == 1 and busy["pages_used"] > 0
    idle = server.wait_idle(timeout_s=10)  # well before 200 tokens of 16 choices would finish
    assert idle["integrity"] == "ok"
    assert idle["engine"]["generated_tokens"] < 16 * 200 + 10_000


def test_a_client_that_stops_waiting_for_a_whole_answer_frees_its_kv(server) -> None:
    body = {"model": "game24", "prompt": PROMPT, "n": 16, "max_tokens": 200, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        server.http.post("/v1/completions", json=body, timeout=1.0)
    idle = server.wait_idle(timeout_s=10)
    assert idle["integrity"] == "ok"


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    assert body["error"]["message"]
    return body["error"]


def test_bad_requests_get_openai_errors_and_the_server_goes_on(server, client) -> None:
    http = server.http
    ok = {"model": "game24", "prompt": PROMPT, "max_tokens": 4}
    error = _error(
        http.post("/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"}), 400
    )
    assert "JSON" in error["message"]
    assert _error(http.post("/v1/completions", json={**ok, "bogus": 1}), 400)["param"] == "bogus"
    assert _error(http.post("/v1/completions", json={**ok, "max_tokens": 10**9}), 400)["param"] == "max_tokens"
    assert _error(http.post("/v1/completions", json={**ok, "n": 1000}), 400)["param"] == "n"
    long = _error(http.post("/v1/completions", json={**ok, "prompt": [5] * 400}), 400)
    assert long["code"] == "context_length_exceeded"
    assert _error(http.post("/v1/completions", json={**ok, "temperature": -1}), 400)
    assert _error(http.post("/v1/completions", json={**ok, "model": "gpt-4"}), 404)["code"] == "model_not_found"
    assert _error(http.post("/v1/completions", json={k: v for k, v in ok.items() if k != "prompt"}), 400)
    assert _error(http.post("/v1/chat/completions", json={"model": "game24", "messages": []}), 400)
    wrong = httpx.post(f"{server.base_url}/completions", json=ok, headers={"Authorization": "Bearer nope"})
    assert _error(wrong, 401)["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="nope", max_retries=0).completions.create(
            model="game24", prompt=PROMPT, max_tokens=2
        )
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="game24", prompt=PROMPT, max_tokens=2, extra_body={"bogus": True})
    answer = client.completions.create(model="game24", prompt=PROMPT, max_tokens=4)
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert json.loads(server.http.get("/health").text)["kv"]["pages_used"] == 0
