"""Recorded client sessions: every request a real agent sent to its model, in order, for
``selfctx bench cache`` to replay.

A recording is an xz-compressed file of JSON lines. The first line describes it (``client``,
``version``, ``steps``: what was recorded and how); each further line is one request: ``at``
(seconds since the first), ``api`` (``anthropic``, ``openai`` or ``responses``), ``path``, and
the body as a change of the previous request's body: ``same`` (how many items of its
conversation, ``messages`` or ``input``, it shares at the start), ``tail`` (the items after
those), ``set`` (other fields whose value changed or appeared) and ``unset`` (fields gone).
Consecutive requests of an agent repeat their whole conversation, so this keeps a long session
small; xz's large window removes most of what is left.
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = ["Recorded", "Recording", "read_recording", "write_recording"]

_CONVERSATION = ("messages", "input")


@attrs.frozen
class Recorded:
    """One request as the client sent it."""

    at: float
    api: str
    path: str
    body: Mapping[str, Any]


@attrs.frozen
class Recording:
    meta: Mapping[str, Any]
    requests: tuple[Recorded, ...]


def _conversation_key(body: Mapping[str, Any]) -> str | None:
    for key in _CONVERSATION:
        if isinstance(body.get(key), list):
            return key
    return None


def _lines(meta: Mapping[str, Any], requests: Iterable[Recorded]) -> Iterator[str]:
    yield json.dumps(dict(meta), ensure_ascii=False)
    previous: Mapping[str, Any] = {}
    for request in requests:
        body = request.body
        key = _conversation_key(body)
        old_items = previous.get(key, []) if key else []
        items = body[key] if key else []
        same = 0
        for a, b in zip(old_items, items, strict=False):
            if a != b:
                break
            same += 1
        line: dict[str, Any] = {"at": round(request.at, 3), "api": request.api}
        line["path"] = request.path
        if key:
            line.update(key=key, same=same, tail=items[same:])
        line["set"] = {
            k: v for k, v in body.items() if k != key and (k not in previous or previous[k] != v)
        }
        line["unset"] = [k for k in previous if k not in body and k != key]
        yield json.dumps(line, ensure_ascii=False)
        previous = body


def write_recording(path: Path, meta: Mapping[str, Any], requests: Iterable[Recorded]) -> None:
    """Write ``requests`` (in order) to ``path``."""
    text = "\n".join(_lines(meta, requests)) + "\n"
    path.write_bytes(lzma.compress(text.encode("utf-8", "surrogatepass"), preset=9))


def read_recording(path: Path) -> Recording:
    """The recording at ``path``, each request's body whole again."""
    lines = lzma.decompress(path.read_bytes()).decode("utf-8", "surrogatepass").split("\n")
    meta = json.loads(lines[0])
    requests = []
    previous: dict[str, Any] = {}
    for text in filter(None, lines[1:]):
        line = json.loads(text)
        body = {k: v for k, v in previous.items() if k not in line["unset"]}
        key = line.get("key")
        for old_key in _CONVERSATION:
            body.pop(old_key, None)
        body.update(line["set"])
        if key:
            old = previous.get(key)
            old_items: list[Any] = old if isinstance(old, list) else []
            body[key] = [*old_items[: line["same"]], *line["tail"]]
        requests.append(Recorded(line["at"], line["api"], line["path"], body))
        previous = body
    return Recording(meta, tuple(requests))
