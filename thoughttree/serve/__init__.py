"""Serving and remote models: the OpenAI-compatible server on the tree runtime (:mod:`.app`) and
the backend that runs searches against any OpenAI-compatible completions endpoint (:mod:`.remote`).

Imported on demand: the server needs the ``serve`` extra (FastAPI, uvicorn), the remote backend httpx.
"""
