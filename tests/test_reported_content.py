"""Content a harness handed over is that session's report, not the file's truth for another
session (decision 0031). Runs on every store kind.

Session A's harness indexes a file with content that was never on disk. Session B, discovering
and activating the file, must not be shown A's content as the file's: B reads the source when it
can, and where it cannot (a container's file), the content is marked as another agent's report.
"""

from __future__ import annotations

from selfctx.adapters.harness.tools import handle_context_tool
from selfctx.application.service import ContextService
from selfctx.domain.mounts import MountMapping
from selfctx.domain.objects import FileObject
from selfctx.domain.rendering import REPORTED_NOTE
from selfctx.domain.session.state import PolicyConfig
from tests.conftest import MakeService
from tests.support import FakeFileReader


def file(service: ContextService, sid: str, object_id: str) -> FileObject:
    obj = service.object(sid, object_id)
    assert isinstance(obj, FileObject)
    return obj


def line_of(service: ContextService, sid: str, object_id: str) -> str:
    context = service.assemble(sid)
    return next(line for line in context.metadata if line.startswith(f"id={object_id} "))


def two_sessions(service: ContextService, ns: str) -> tuple[str, str]:
    a, b = f"{ns}a", f"{ns}b"
    service.start_session(a, "")
    service.start_session(b, "")
    return a, b


def test_a_readable_file_is_read_by_the_other_session_not_taken_from_the_report(
    service: ContextService, files: FakeFileReader, ns: str
) -> None:
    a, b = two_sessions(service, ns)
    files.write("/p/conf.py", "TRUTH = 1\n")
    claimed = service.index_file(a, "/p/conf.py", "TRUTH = 666  # never on disk\n").object_id
    assert file(service, a, claimed).reported_by == a  # what A's agent saw, marked as such
    assert "[reported" not in line_of(service, a, claimed)  # A is not told about its own view
    service.discover(b, ["/p/conf.py"])
    assert REPORTED_NOTE in line_of(service, b, claimed)
    assert service.activate(b, claimed).ok
    truth = file(service, b, claimed)
    assert truth.content == "TRUTH = 1\n" and truth.reported_by is None
    block = next(blk for blk in service.assemble(b).active if blk.object_id == claimed)
    assert block.content == "TRUTH = 1\n"
    assert REPORTED_NOTE not in line_of(service, b, claimed)


def test_a_report_that_matches_the_source_is_an_ordinary_version(
    service: ContextService, files: FakeFileReader, ns: str
) -> None:
    a, b = two_sessions(service, ns)
    files.write("/p/same.py", "x = 1\n")
    object_id = service.index_file(a, "/p/same.py", "x = 1\n").object_id
    assert file(service, a, object_id).reported_by is None
    service.discover(b, ["/p/same.py"])
    assert REPORTED_NOTE not in line_of(service, b, object_id)


def test_a_container_file_is_shown_to_others_as_a_report(
    make_service: MakeService, files: FakeFileReader, ns: str
) -> None:
    # The agents' files live in a container the context manager cannot read.
    service = make_service(default_filesystem_id=f"{ns}container")
    a, b = two_sessions(service, ns)
    object_id = service.index_file(a, "/app/main.py", "print('A saw this')\n").object_id
    assert file(service, a, object_id).reported_by == a
    service.discover(b, ["/app/main.py"])
    assert REPORTED_NOTE in line_of(service, b, object_id)
    assert service.activate(b, object_id).ok  # nothing to read it from: shown, marked
    assert REPORTED_NOTE in line_of(service, b, object_id)
    # The inline layout says so where it shows the content: the activation's answer.
    c = f"{ns}c"
    service.start_session(c, "", policy=PolicyConfig("inline"))
    service.discover(c, ["/app/main.py"])
    answer = handle_context_tool(service, c, "activate", {"id": object_id})
    assert answer.ok and REPORTED_NOTE in answer.message.split("\n", 1)[0]


def test_a_resumed_session_checks_a_report_against_the_source(
    make_service: MakeService, files: FakeFileReader, ns: str
) -> None:
    service = make_service()
    a, b = two_sessions(service, ns)
    files.write("/p/m.py", "real\n")
    service.discover(b, ["/p/m.py"])
    object_id = service.index_file(a, "/p/m.py", "claimed\n").object_id
    service.close_session(b)
    again = make_service()
    again.resume_session(b)
    assert file(again, b, object_id).content == "real\n"
    assert file(again, b, object_id).reported_by is None


def test_the_mark_survives_the_store(make_service: MakeService, ns: str) -> None:
    service = make_service(
        default_filesystem_id=f"{ns}container",
        mounts=(MountMapping("/mnt/unused", "/nowhere", f"{ns}other"),),
    )
    a, b = two_sessions(service, ns)
    object_id = service.index_file(a, "/app/x.py", "y\n").object_id
    history = service.history(object_id)
    assert history[-1].document["reported_by"] == a
    reloaded = make_service(default_filesystem_id=f"{ns}container")
    reloaded.resume_session(b)
    reloaded.discover(b, ["/app/x.py"])
    assert file(reloaded, b, object_id).reported_by == a
