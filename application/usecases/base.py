"""What every use case needs, and helpers they share."""

from __future__ import annotations

import attrs

from selfctx.application.ports.files import FileReader, FileSnapshot, SourceUnavailable
from selfctx.application.runner import SessionRunner
from selfctx.application.settings import Settings
from selfctx.domain.errors import InvalidContent
from selfctx.domain.hashing import file_hash, text_bytes
from selfctx.domain.mounts import MountTable
from selfctx.domain.objects import FileObject, Source

__all__ = ["Deps", "observe_source", "observe_text", "version_of"]


@attrs.frozen
class Deps:
    """The ports and policies use cases are built from (wired once, in the composition root)."""

    runner: SessionRunner
    files: FileReader
    mounts: MountTable
    settings: Settings


def observe_text(
    deps: Deps, source: Source, content: str | bytes, where: str, reporter: str
) -> FileObject:
    """A version built from content the harness of session ``reporter`` handed over (an agent
    read's tool output). It is checked against the source when the source can be read here: the
    same bytes make an ordinary version; otherwise the version is marked as that session's
    report (``reported_by``, decision 0031), never served to other sessions as the file's."""
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
    # the file_hash of handed-over text equals its content_hash (decision 0029).
    raw = text_bytes(content)
    if len(raw) > deps.settings.max_output_bytes:
        raise InvalidContent(
            where, f"{len(raw)} bytes is over the limit of {deps.settings.max_output_bytes}"
        )
    reported = file_hash(raw)
    try:
        on_disk: str | None = deps.files.read(source, deps.settings.max_file_bytes).file_hash
    except SourceUnavailable:
        on_disk = None  # a container's file, a file gone since: only the harness saw it
    marked = None if on_disk == reported else reporter
    return FileObject.build(source, content=content, file_hash=reported, reported_by=marked)


def observe_source(deps: Deps, source: Source) -> FileObject:
    """Read ``source`` through the file reader and build the version it shows: text, or
    metadata only (binary, too large). Raises the reader's SourceUnavailable errors."""
    return version_of(source, deps.files.read(source, deps.settings.max_file_bytes))


def version_of(source: Source, snap: FileSnapshot) -> FileObject:
    """The version of ``source`` that one read of it (``snap``) shows: text, or metadata only
    (binary, too large). Its ``file_hash`` is the read's; a caller that only compares hashes
    need not build it (a resume's reconciliation, decision 0146)."""
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
