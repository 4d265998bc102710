"""Server-sent events as the model APIs stream them: parsed from an upstream, written to a client.

An event is kept with its raw text, so an event the proxy does not change reaches the client byte
for byte; only events it must change (renumbered blocks, a filtered final response) are written
anew.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs

__all__ = ["Event", "encode", "iter_events", "parse_block"]


@attrs.frozen
class Event:
    """One SSE event: its ``event:`` name (None if it had none), its ``data`` decoded as JSON
    (None for ``[DONE]`` and other non-JSON data) and its text as received."""

    name: str | None
    data: Any
    raw: str

    @property
    def done(self) -> bool:
        """OpenAI's end-of-stream marker, ``data: [DONE]``."""
        return self.data is None and self.raw.rstrip().endswith("[DONE]")


def parse_block(block: str) -> Event | None:
    """An event from one block of lines (without its blank-line terminator); None for a block of
    comments only (a keep-alive)."""
    name = None
    data_lines: list[str] = []
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data_lines.append(value)
    if name is None and not data_lines:
        return None
    text = "\n".join(data_lines)
    try:
        data = json.loads(text) if text and text != "[DONE]" else None
    except json.JSONDecodeError:
        data = None
    return Event(name, data, block + "\n\n")


async def iter_events(chunks: AsyncIterator[str], limit: int) -> AsyncIterator[Event]:
    """Events from a stream of decoded text chunks. ``limit`` bounds the characters of one event:
    an upstream that never ends an event is cut off with :class:`ValueError`."""
    buffer = ""
    async for chunk in chunks:
        buffer += chunk.replace("\r\n", "\n")
        while True:
            end = buffer.find("\n\n")
            if end < 0:
                if len(buffer) > limit:
                    raise ValueError(f"an upstream event is longer than {limit} characters")
                break
            block, buffer = buffer[:end], buffer[end + 2 :]
            event = parse_block(block)
            if event is not None:
                yield event
    event = parse_block(buffer.strip("\n")) if buffer.strip() else None
    if event is not None:
        yield event


def encode(data: Mapping[str, Any] | str, name: str | None = None) -> str:
    """One event as SSE text (``data`` a JSON object, or a literal such as ``[DONE]``)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {text}\n\n"
