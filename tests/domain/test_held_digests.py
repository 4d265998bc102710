"""A tool call is held for the whole session (one object a call): its four hashes are held as
32-byte digests, their hex made only where a document, JSON or a log shows them (decision
0163)."""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc

import attrs

from selfctx.domain.documents import from_document, to_document, toolcall_without_content
from selfctx.domain.objects import ToolcallObject, digest_hex, held_digest


def _call(i: int) -> ToolcallObject:
    return ToolcallObject.build(
        f"call_{i:06d}",
        tool="bash",
        args={"cmd": "ls"},
        output=f"out {i}",
        status="ok",
        chat_ref="chat:s",
    )


def _hashes(obj: ToolcallObject) -> list[str]:
    hashes = [obj.identity_hash, obj.metadata_hash, obj.object_hash, obj.content_hash]
    return [h for h in hashes if h is not None]


def test_a_tool_call_holds_its_four_hashes_in_32_bytes_each() -> None:
    # read back from a document, as a session reads its older calls from the store
    obj = toolcall_without_content(json.loads(json.dumps(to_document(_call(1)))))
    hexes = set(_hashes(obj))
    assert len(hexes) == 4 and all(len(h) == 64 for h in hexes)
    held = [
        v
        for v in attrs.astuple(obj, recurse=False)
        if (isinstance(v, bytes) and v.hex() in hexes) or (isinstance(v, str) and v in hexes)
    ]
    assert len(held) == 4
    # 32 bytes each: 65 bytes an object; as 64-character strings they were 113 each
    assert sum(sys.getsizeof(v) for v in held) <= 4 * sys.getsizeof(bytes(32)), held


def test_the_calls_a_session_holds_grow_by_the_digests_not_their_hex() -> None:
    n = 2_000
    text = json.dumps([to_document(_call(i)) for i in range(n)])
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        docs = json.loads(text)
        held = [toolcall_without_content(doc) for doc in docs]
        del docs
        gc.collect()
        per_call = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert len(held) == n
    # measured: 627 bytes a call (the object, its id, arguments and digests); with its four
    # hashes as hex strings, 819
    assert per_call < 720, per_call


def test_the_hashes_read_back_are_the_ones_given_and_written_again_as_given() -> None:
    obj = _call(2)
    doc = to_document(obj)
    again = from_document(json.loads(json.dumps(doc)))
    assert again == obj and to_document(again) == doc
    assert all(doc[k] == getattr(obj, k) for k in ("identity_hash", "content_hash", "object_hash"))
    # a hash that is not a SHA-256 in lowercase hex is held as it was given
    for odd in ("h2", "A" * 64, "g" * 64, ""):
        assert digest_hex(held_digest(odd)) == odd  # type: ignore[arg-type]
    assert held_digest(None) is None
    given = attrs.evolve(obj, content_hash="AB" * 32, metadata_hash="m1")
    assert given.content_hash == "AB" * 32 and given.metadata_hash == "m1"
