"""What every use case needs, and helpers they share."""

from __future__ import annotations

import attrs

from selfctx.application.ports.files import FileReader
from selfctx.application.runner import SessionRunner
from selfctx.application.settings import Settings
from selfctx.domain.errors import InvalidContent
from selfctx.domain.hashing import file_hash, text_bytes
from selfctx.domain.mounts import MountTable
from selfctx.domain.objects import FileObject, Source

__all__ = ["Deps", "observe_source", "observe_text"]


@attrs.frozen
class Deps:
    """The ports and policies use cases are built from (wired once, in the composition root)."""

    runner: SessionRunner
    files: FileReader
    mounts: MountTable
    settings: Settings


def observe_text(deps: Deps, source: Source, content: str | bytes, where: str) -> FileObject:
    """A version built from content a harness handed over (an agent read's tool output)."""
    if isinstance(content, bytes | bytearray):
        try:
            content = bytes(content).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidContent(
                where, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from exc
    if not isinstance(content, str):
        raise InvalidContent(where, f"content must be text, got {type(content).__name__}")
    # The bytes every hash of text hashes: a lone surrogate is U+FFFD, as in content_hash, so
    # the file_hash of handed-over text equals its content_hash (issue 18 item 1).
    raw = text_bytes(content)
    if len(raw) > deps.settings.max_output_bytes:
        raise InvalidContent(
            where, f"{len(raw)} bytes is over the limit of {deps.settings.max_output_bytes}"
        )
    return FileObject.build(source, content=content, file_hash=file_hash(raw))


def observe_source(deps: Deps, source: Source) -> FileObject:
    """Read ``source`` through the file reader and build the version it shows: text, or
    metadata only (binary, too large). Raises the reader's SourceUnavailable errors."""
    snap = deps.files.read(source, deps.settings.max_file_bytes)
    if snap.data is None:
        return FileObject.build(
            source, content=None, file_hash=snap.file_hash, content_status="too_large"
        )
    if b"\x00" in snap.data[:8192]:
        return FileObject.build(
            source, content=None, file_hash=snap.file_hash, content_status="binary"
        )
    try:
        text = snap.data.decode("utf-8")
    except UnicodeDecodeError:
        return FileObject.build(
            source, content=None, file_hash=snap.file_hash, content_status="binary"
        )
    return FileObject.build(source, content=text, file_hash=snap.file_hash)
