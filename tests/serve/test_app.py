"""The ASGI app in this process: the answers that need a server configured otherwise than the shared one."""

from __future__ import annotations

from fastapi.testclient import TestClient

from thoughttree.serve.app import ServeConfig, create_app

PROMPT = "Use 4 5 6 10 to make 24.\n"


def test_chat_without_a_template_and_a_full_queue(local_lm) -> None:
    app = create_app(local_lm, ServeConfig(model_name="game24", max_waiting=0, max_n=256))
    with TestClient(app) as http:
        messages = [{"role": "user", "content": "hi"}]
        chat = http.post("/v1/chat/completions", json={"model": "game24", "messages": messages})
        assert chat.status_code == 400 and chat.json()["error"]["code"] == "no_chat_template"
        busy = http.post("/v1/completions", json={"model": "game24", "prompt": PROMPT, "max_tokens": 4})
        assert busy.status_code == 429
        assert busy.json()["error"] | {"message": ""} == {
            "message": "",
            "type": "rate_limit_error",
            "param": None,
            "code": "server_busy",
        }
        too_big = http.post("/v1/completions", json={"model": "game24", "prompt": PROMPT, "max_tokens": 200, "n": 256})
        assert too_big.status_code == 400 and "lower n" in too_big.json()["error"]["message"]
        assert http.get("/health").json()["kv"]["pages_used"] == 0
