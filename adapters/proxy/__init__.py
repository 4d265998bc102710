"""``selfctx proxy``: a model-API proxy that puts the context manager between any agent and its
model, for Anthropic Messages, OpenAI Chat Completions and OpenAI Responses."""

from selfctx.adapters.proxy.app import UI_PATH, Proxy, ProxyConfig

__all__ = ["UI_PATH", "Proxy", "ProxyConfig"]
