"""Harness I/O: provider message streams in, provider requests out, the model's context tools."""

from selfctx.adapters.harness.ingest import Ingestor, IngestResult
from selfctx.adapters.harness.messages import MalformedMessage, Message, parse_messages
from selfctx.adapters.harness.render import (
    to_anthropic,
    to_openai,
    validate_anthropic,
    validate_openai,
)
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tools import ToolAnswer, handle_context_tool, tool_schemas

__all__ = [
    "HarnessSession",
    "IngestResult",
    "Ingestor",
    "MalformedMessage",
    "Message",
    "ToolAnswer",
    "handle_context_tool",
    "parse_messages",
    "to_anthropic",
    "to_openai",
    "tool_schemas",
    "validate_anthropic",
    "validate_openai",
]
