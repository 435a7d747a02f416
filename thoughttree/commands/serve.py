"""``thoughttree serve``: the OpenAI-compatible server on the tree runtime."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .common import CliError, at_least
from .model import ATTENTION, load_model

if TYPE_CHECKING:
    from .common import Subparsers

API_KEY_ENV = "THOUGHTTREE_API_KEY"


def add_serve(sub: Subparsers) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model over the OpenAI HTTP API (completions, chat, streaming)",
        description="Serve a model over the OpenAI HTTP API. Requests from all clients share one "
        "KV tree and one decode batch per step.",
    )
    p.add_argument("--model", default="bundled", help="'bundled' (default) or a local Hugging Face model directory")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), help="weights and KV dtype")
    p.add_argument("--attention", choices=ATTENTION, default="auto", help="tree-attention backend (see game24 --help)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=at_least(1), default=8000, help="port (default 8000)")
    p.add_argument("--served-model-name", help="the model name clients send (default: the model directory's name)")
    p.add_argument("--api-key", help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV} when set)")
    p.add_argument(
        "--chat-template",
        help="'plain' (role: content lines) or a Jinja template file, for models whose tokenizer has no chat template",
    )
    p.add_argument("--max-n", type=at_least(1), default=64, help="most choices (n, best_of) one request may ask for")
    p.add_argument(
        "--max-waiting",
        type=at_least(0),
        default=256,
        help="requests that may wait for KV room before the server answers 429 (default 256)",
    )
    p.add_argument("--kv-pages", type=at_least(1), help="KV pool pages (default: sized from memory)")
    p.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..serve.app import ServeConfig, create_app
    except ImportError as exc:
        raise CliError(
            f"serve needs the serve extra ({exc.name} is missing): pip install 'thoughttree[serve]'"
        ) from None
    template = args.chat_template
    if template is not None and template != "plain":
        try:
            template = Path(template).read_text()
        except OSError as exc:
            raise CliError(f"--chat-template {args.chat_template}: {exc.strerror}") from None
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    lm = load_model(args.model, args.device, args.dtype, args.attention, num_pages=args.kv_pages)
    name = args.served_model_name or ("game24" if args.model == "bundled" else Path(args.model).resolve().name)
    try:
        config = ServeConfig(
            model_name=name, api_key=key, max_n=args.max_n, max_waiting=args.max_waiting, chat_template=template
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    app = create_app(lm, config)
    print(f"thoughttree serve: {name} on {lm.device} at http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0
