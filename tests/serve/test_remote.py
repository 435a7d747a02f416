"""`RemoteLM` against ``thoughttree serve`` (the same trees as the local model) and against fakes."""

from __future__ import annotations

import json

import httpx
import pytest

from thoughttree.cli import main
from thoughttree.serve.client import Client, RemoteConfig, RemoteError
from thoughttree.serve.remote import RemoteLM
from thoughttree.tasks.evaluate import LabelProbs

BFS = [
    "game24",
    "--device",
    "cpu",
    "--method",
    "bfs",
    "--puzzle",
    "4 5 6 10",
    "--prompts",
    "compact",
    "--breadth",
    "2",
    "--samples",
    "4",
    "--seed",
    "3",
    "--no-distinct",  # a server samples each completion on its own: both runs sample with replacement
]


def _nodes(path) -> list[dict]:
    tree = json.loads(path.read_text())["problems"][0]["tree"]
    return tree["nodes"]


@pytest.mark.parametrize("value", ["samples", "lookahead"])
def test_game24_bfs_against_the_server_grows_the_local_tree(server, local_lm, tmp_path, monkeypatch, value) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
    local, remote = tmp_path / "local.json", tmp_path / "remote.json"
    assert main([*BFS, "--value", value, "--output", str(local)]) == 0
    assert (
        main(
            [
                *BFS,
                "--value",
                value,
                "--output",
                str(remote),
                "--model",
                server.base_url,
                "--remote-model",
                "game24",
                "--remote-tokenizer",
                "bundled",
            ]
        )
        == 0
    )
    mine, theirs = _nodes(local), _nodes(remote)
    assert len(mine) == len(theirs) > 4
    for a, b in zip(mine, theirs):
        assert (a["parent"], a["status"], a["text"], a["tokens"]) == (b["parent"], b["status"], b["text"], b["tokens"])
        if value == "samples":
            assert a["value"] == b["value"]
        else:  # label probabilities from the server's top log-probabilities
            assert a["value"] == (None if b["value"] is None else pytest.approx(b["value"], rel=1e-3, abs=1e-6))
    server.wait_idle()


def _fake(handler) -> RemoteLM:
    config = RemoteConfig("http://127.0.0.1:9/v1", "m", max_context=64, retries=3, backoff_s=0.01)
    client = Client(config, sleep=lambda s: None, transport=httpx.MockTransport(handler))
    return RemoteLM(config, client=client)


def _models(request: httpx.Request) -> httpx.Response | None:
    if request.url.path.endswith("/models"):
        return httpx.Response(200, json={"data": [{"id": "m", "object": "model"}]})
    return None


def test_retries_429_and_5xx_then_gives_up_with_the_servers_message() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        if (r := _models(request)) is not None:
            return r
        calls.append(json.loads(request.content))
        if len(calls) < 3:
            return httpx.Response(429 if len(calls) == 1 else 503, json={"error": {"message": "slow down"}})
        return httpx.Response(
            200,
            json={
                "choices": [{"index": 0, "text": "ab", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 2, "completion_tokens": 2},
            },
        )

    lm = _fake(handler)
    from thoughttree import Sampling

    gen = lm.complete(["hi"], Sampling(max_tokens=2), [5])[0]
    assert (gen.text, gen.tokens, gen.finish_reason) == ("ab", list(b"ab"), "length")
    assert len(calls) == 3 and calls[-1]["seed"] == 5 and calls[-1]["prompt"] == "hi"
    assert lm.client.retried == 2

    lm = _fake(lambda r: _models(r) or httpx.Response(500, json={"error": {"message": "boom"}}))
    with pytest.raises(RemoteError, match="HTTP 500: boom .after 3 retries"):
        lm.complete(["hi"], Sampling(max_tokens=2), [5])
    lm = _fake(lambda r: _models(r) or httpx.Response(400, json={"error": {"message": "bad field"}}))
    with pytest.raises(RemoteError, match="HTTP 400: bad field"):
        lm.complete(["hi"], Sampling(max_tokens=2), [5])


def test_tree_logits_without_logprobs_names_the_evaluators() -> None:
    lm = _fake(
        lambda r: (
            _models(r)
            or httpx.Response(
                200, json={"choices": [{"index": 0, "text": "a", "logprobs": None, "finish_reason": "length"}]}
            )
        )
    )
    with pytest.raises(RemoteError, match="LabelProbs and LogProb"):
        LabelProbs(prompt=lambda p, n: "x", labels={"a": 1.0, "b": 0.0}).score(lm, ["question"])


def test_unknown_model_and_missing_context_are_clear() -> None:
    config = RemoteConfig("http://x/v1", "m")
    other = httpx.MockTransport(lambda r: httpx.Response(200, json={"data": [{"id": "other"}]}))
    with pytest.raises(RemoteError, match="does not serve model 'm'.*serves: other"):
        RemoteLM(config, client=Client(config, transport=other))
    with pytest.raises(RemoteError, match="--remote-context"):
        RemoteLM(config, client=Client(config, transport=httpx.MockTransport(_models)))


def test_a_server_url_needs_its_model_name(capsys) -> None:
    assert main(["game24", "--model", "http://127.0.0.1:9/v1", "--puzzle", "4 5 6 10", "--method", "io"]) == 2
    assert "--remote-model NAME" in capsys.readouterr().err
    assert main(["bench", "--model", "http://127.0.0.1:9/v1", "--remote-model", "m"]) == 2
    assert "benchmarks/serve.py" in capsys.readouterr().err


def test_without_a_tokenizer_nodes_hold_bytes_and_the_text_matches(server, local_lm, monkeypatch) -> None:
    from thoughttree import Sampling, ThoughtTree

    monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
    remote = RemoteLM(RemoteConfig(server.base_url, "game24"))
    prompt, sampling = "Use 4 5 6 10 to make 24.\n", Sampling(max_tokens=30, stop="\n", seed=4)
    try:
        with ThoughtTree(remote, prompt=prompt, seed=1) as far, ThoughtTree(local_lm, prompt=prompt, seed=1) as near:
            theirs = far.expand([far.root], n=3, sampling=sampling)[0]
            mine = near.expand([near.root], n=3, sampling=sampling)[0]
    finally:
        remote.close()
    assert [k.text for k in theirs] == [k.text for k in mine]
    assert [k.tokens for k in theirs] == [list(k.text.encode()) for k in mine]
