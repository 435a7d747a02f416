"""thoughttree: LLM reasoning search on a shared-prefix KV runtime."""

__version__ = "0.1.0"
