"""Bad input: each refusal is a typed error naming the offending value, and changes nothing.

Every case runs through ``ContextService`` on a session that already holds a read file, a stub,
tool calls and a second session, and compares both sessions' states, their contexts and what the
store holds before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from selfctx.application.ports.files import SourceMissing
from selfctx.application.service import ContextService
from selfctx.domain.chat import ToolCallRequest
from selfctx.domain.errors import (
    DuplicateObject,
    InvalidContent,
    InvalidInput,
    InvalidPath,
    NotAContentObject,
    SelfContextError,
    SessionExists,
    SessionNotFound,
    UnknownObject,
)
from selfctx.domain.mounts import MountMapping
from selfctx.domain.session.state import CollapseWindow
from tests.support import FakeFileReader, StoreProbe, WrappedStore, file_id


@attrs.frozen
class World:
    service: ContextService
    store: WrappedStore
    s1: str
    s2: str
    file: str
    """A file read in s1."""
    stub: str
    """A stub discovered in s1 (its source does not exist)."""
    foreign_file: str
    """A file only s2 has read."""
    foreign_call: str
    """A tool call only s2 has recorded."""


@pytest.fixture
def world(
    service: ContextService, store: WrappedStore, files: FakeFileReader, ns: str, host_id: str
) -> World:
    s1, s2 = f"{ns}s1", f"{ns}s2"
    service.start_session(s1, "prompt one")
    service.start_session(s2, "prompt two")
    files.write("/p/mine.py", "mine")
    mine = service.index_file(s1, "/p/mine.py").object_id
    stub = service.discover(s1, ["/p/unwritten.py"]).found[0].object_id
    service.record_user_message(s1, "go")
    service.record_assistant_message(s1, "", [ToolCallRequest("tc-1", "bash", {})])
    service.record_tool_call(s1, "tc-1", tool="bash", args={}, output="ok")
    foreign = service.index_file(s2, "/p/theirs.py", "theirs").object_id
    service.record_tool_call(s2, "tc-foreign", tool="bash", args={}, output="secret")
    assert foreign == file_id(host_id, "/p/theirs.py")
    return World(service, store, s1, s2, mine, stub, foreign, "tc-foreign")


@attrs.frozen
class Snapshot:
    states: tuple[Any, ...]
    contexts: tuple[Any, ...]
    positions: tuple[int, ...]
    probe: StoreProbe


def snapshot(w: World) -> Snapshot:
    sessions = (w.s1, w.s2)
    return Snapshot(
        states=tuple(w.service.state(s) for s in sessions),
        contexts=tuple(w.service.assemble(s) for s in sessions),
        positions=tuple(w.service.log_position(s) for s in sessions),
        probe=StoreProbe.of(w.store),
    )


@pytest.fixture
def refused(world: World) -> Iterator[Callable[..., SelfContextError]]:
    """``refused(error, value, call)``: ``call()`` raises ``error`` naming ``value``, and nothing
    changed. Returns the error for further checks."""

    def check(error: type[SelfContextError], value: object, call: Callable[[], object]) -> Any:
        before = snapshot(world)
        with pytest.raises(error) as raised:
            call()
        assert type(raised.value) is error, raised.value
        message = str(raised.value)
        assert repr(value) in message or (isinstance(value, str) and value in message), message
        assert snapshot(world) == before
        return raised.value

    yield check


# -- ids the session may not use ---------------------------------------------------------------

TOOLS = ("activate", "deactivate", "pin", "unpin")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("object_id", ["nope", "", "tc-2", "0" * 64])
def test_unknown_ids_are_refused(world: World, refused: Any, tool: str, object_id: str) -> None:
    err = refused(
        UnknownObject, object_id, lambda: getattr(world.service, tool)(world.s1, object_id)
    )
    assert (err.object_id, err.session_id) == (object_id, world.s1)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("which", ["foreign_file", "foreign_call"])
def test_another_sessions_ids_are_refused_as_unknown(
    world: World, refused: Any, tool: str, which: str
) -> None:
    object_id = getattr(world, which)
    err = refused(
        UnknownObject, object_id, lambda: getattr(world.service, tool)(world.s1, object_id)
    )
    # The message must not reveal that the object exists elsewhere.
    assert str(err) == f"no object {object_id!r} in session {world.s1!r}"
    with pytest.raises(UnknownObject):
        world.service.object(world.s1, object_id)


def test_another_sessions_file_becomes_usable_once_encountered(world: World) -> None:
    world.service.discover(world.s1, ["/p/theirs.py"])
    world.service.activate(world.s1, world.foreign_file)
    assert world.service.assemble(world.s1).active[-1].content == "theirs"


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("prefix", ["chat:", "system_prompt:", "session:"])
@pytest.mark.parametrize("owner", ["s1", "s2"])
def test_infrastructure_objects_cannot_be_activated_or_pinned(
    world: World, refused: Any, tool: str, prefix: str, owner: str
) -> None:
    object_id = prefix + getattr(world, owner)
    err = refused(
        NotAContentObject, object_id, lambda: getattr(world.service, tool)(world.s1, object_id)
    )
    assert err.object_id == object_id


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("object_id", [42, None, b"tc-1", ["tc-1"]])
def test_non_string_object_ids_are_refused(
    world: World, refused: Any, tool: str, object_id: object
) -> None:
    err = refused(
        InvalidInput, object_id, lambda: getattr(world.service, tool)(world.s1, object_id)
    )
    assert err.value == object_id


# -- content ------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"\xff\xfeabc", b"caf\xe9", bytearray(b"\xc3")])
def test_non_utf8_bytes_are_refused_as_content(world: World, refused: Any, content: bytes) -> None:
    err = refused(
        InvalidContent,
        "/p/new.txt",
        lambda: world.service.index_file(world.s1, "/p/new.txt", content),
    )
    assert "not UTF-8" in str(err)
    # Nor may they replace a file the session already read.
    refused(
        InvalidContent,
        "/p/mine.py",
        lambda: world.service.index_file(world.s1, "/p/mine.py", content),
    )


@pytest.mark.parametrize("content", [42, 1.5, ["text"], {"a": 1}])
def test_non_text_content_is_refused(world: World, refused: Any, content: object) -> None:
    refused(
        InvalidContent,
        "/p/new.txt",
        lambda: world.service.index_file(world.s1, "/p/new.txt", content),  # type: ignore[arg-type]
    )


def test_oversized_content_is_refused(make_service: Any, world: World, refused: Any) -> None:
    from selfctx.application.settings import Settings

    small = make_service(settings=Settings(policy="ssot", max_output_bytes=8))
    small.resume_session(world.s1)
    before = StoreProbe.of(world.store)
    with pytest.raises(InvalidContent, match="over the limit of 8"):
        small.index_file(world.s1, "/p/big.txt", "123456789")
    with pytest.raises(InvalidContent, match="over the limit of 8"):
        small.record_tool_call(world.s1, "tc-big", tool="t", args={}, output="123456789")
    assert StoreProbe.of(world.store) == before


def test_reading_a_missing_source_is_refused(world: World, refused: Any) -> None:
    refused(
        SourceMissing, "/p/absent.txt", lambda: world.service.index_file(world.s1, "/p/absent.txt")
    )


# -- paths --------------------------------------------------------------------------------------

BAD_PATHS = ["", "relative/x.py", "./x.py", "x.py", "/p/nul\x00.py", "~/x.py"]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_bad_paths_are_refused_for_reads(world: World, refused: Any, path: str) -> None:
    err = refused(InvalidPath, path, lambda: world.service.index_file(world.s1, path, "x"))
    assert err.path == path


@pytest.mark.parametrize("path", BAD_PATHS)
def test_bad_paths_are_refused_for_strict_discovery(world: World, refused: Any, path: str) -> None:
    refused(InvalidPath, path, lambda: world.service.discover(world.s1, ["/p/ok.py", path]))


@pytest.mark.parametrize("path", [None, 42, b"/p/x.py"])
def test_non_string_paths_are_refused(world: World, refused: Any, path: object) -> None:
    refused(InvalidPath, path, lambda: world.service.index_file(world.s1, path, "x"))  # type: ignore[arg-type]
    refused(InvalidPath, path, lambda: world.service.discover(world.s1, [path]))  # type: ignore[list-item]


@pytest.mark.parametrize("paths", ["/p/a.py", b"/p/a.py", None, 42])
def test_discovery_needs_a_collection_of_paths(world: World, refused: Any, paths: object) -> None:
    refused(InvalidInput, paths, lambda: world.service.discover(world.s1, paths))  # type: ignore[arg-type]
    refused(InvalidInput, paths, lambda: world.service.discover(world.s1, paths, strict=False))  # type: ignore[arg-type]


def test_lenient_discovery_reports_bad_paths_and_indexes_the_rest(
    world: World, host_id: str
) -> None:
    report = world.service.discover(world.s1, ["rel.py", "", "/p/ok.py"], strict=False)
    assert report.refused == (
        ("rel.py", "an absolute path is required here"),
        ("", "a path must not be empty"),
    )
    assert [r.object_id for r in report.found] == [file_id(host_id, "/p/ok.py")]


def test_lenient_discovery_of_only_bad_paths_writes_nothing(world: World) -> None:
    before = snapshot(world)
    report = world.service.discover(world.s1, ["rel.py"], strict=False)
    assert report.found == ()
    assert snapshot(world) == before


@pytest.mark.parametrize("prefix", ["", "relative", "/ok\x00"])
def test_mount_mappings_need_absolute_prefixes(prefix: str) -> None:
    with pytest.raises(InvalidPath) as raised:
        MountMapping(prefix, "/home/u", "fs")
    assert raised.value.path == prefix
    with pytest.raises(InvalidPath):
        MountMapping("/workspace", prefix, "fs")


# -- chat messages and tool calls --------------------------------------------------------------


@pytest.mark.parametrize("text", [None, 42, b"hi", ["hi"]])
def test_non_string_messages_are_refused(world: World, refused: Any, text: object) -> None:
    refused(InvalidInput, text, lambda: world.service.record_user_message(world.s1, text))  # type: ignore[arg-type]
    refused(InvalidInput, text, lambda: world.service.record_assistant_message(world.s1, text))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("calls", "value"),
    [
        ([{"id": "tc-9", "name": "bash"}], {"id": "tc-9", "name": "bash"}),
        (["tc-9"], "tc-9"),
        ([ToolCallRequest("tc-9", "bash"), ToolCallRequest("tc-9", "ls")], ["tc-9", "tc-9"]),
        ([ToolCallRequest(9, "bash")], 9),  # type: ignore[arg-type]
        ([ToolCallRequest("", "bash")], ""),
        ([ToolCallRequest("tc-9", "")], ""),
        ([ToolCallRequest("tc-9", "x", {"n": float("inf")})], {"n": float("inf")}),
        ("tc-9", "tc-9"),
        (None, None),
    ],
)
def test_malformed_tool_call_requests_are_refused(
    world: World, refused: Any, calls: Any, value: object
) -> None:
    err = refused(
        InvalidInput, value, lambda: world.service.record_assistant_message(world.s1, "t", calls)
    )
    if not isinstance(value, dict):
        assert err.value == value


@pytest.mark.parametrize(
    ("kwargs", "value"),
    [
        ({"toolcall_id": ""}, ""),
        ({"toolcall_id": 7}, 7),
        ({"toolcall_id": "chat:x"}, "chat:x"),
        ({"toolcall_id": "session:s1"}, "session:s1"),
        ({"tool": ""}, ""),
        ({"tool": None}, None),
        ({"status": "maybe"}, "maybe"),
        ({"args": ["not", "an", "object"]}, ["not", "an", "object"]),
        ({"args": {"x": float("nan")}}, {"x": float("nan")}),
    ],
)
def test_malformed_tool_calls_are_refused(
    world: World, refused: Any, kwargs: dict[str, Any], value: object
) -> None:
    call: dict[str, Any] = {"toolcall_id": "tc-new", "tool": "bash", "args": {}, "output": "o"}
    call.update(kwargs)
    toolcall_id = call.pop("toolcall_id")
    err = refused(
        InvalidInput, value, lambda: world.service.record_tool_call(world.s1, toolcall_id, **call)
    )
    assert isinstance(err, InvalidInput)


@pytest.mark.parametrize(
    ("kwargs", "value"),
    [
        ({"file_refs": "abc"}, "abc"),
        ({"file_refs": [1, 2]}, [1, 2]),
        ({"file_refs": ["ok", None]}, ["ok", None]),
        ({"args_display": 5}, 5),
        ({"args_display": ["x"]}, ["x"]),
    ],
)
def test_malformed_tool_call_extras_are_refused(
    world: World, refused: Any, kwargs: dict[str, Any], value: object
) -> None:
    refused(
        InvalidInput,
        value,
        lambda: world.service.record_tool_call(
            world.s1, "tc-new", tool="t", args={}, output="o", **kwargs
        ),
    )


def test_non_text_tool_output_is_refused(world: World, refused: Any) -> None:
    refused(
        InvalidContent,
        "tc-new",
        lambda: world.service.record_tool_call(world.s1, "tc-new", tool="t", args={}, output=b"o"),  # type: ignore[arg-type]
    )


def test_tool_call_ids_reused_across_sessions_are_refused(world: World, refused: Any) -> None:
    err = refused(
        DuplicateObject,
        "tc-foreign",
        lambda: world.service.record_tool_call(
            world.s1, "tc-foreign", tool="bash", args={}, output="secret"
        ),
    )
    assert err.object_id == "tc-foreign"
    assert world.service.history("tc-foreign")[0].document["chat_ref"] == f"chat:{world.s2}"


def test_a_tool_call_id_that_names_a_file_is_refused(world: World, refused: Any) -> None:
    # A file's id is 64 hex digits: no toolcall id can have that form (decision 0030), so it is
    # refused before the store is read, whether or not the file exists.
    for object_id in (world.foreign_file, world.file):
        refused(
            InvalidInput,
            object_id,
            lambda object_id=object_id: world.service.record_tool_call(
                world.s1, object_id, tool="t", args={}, output="o"
            ),
        )
        refused(
            InvalidInput,
            object_id,
            lambda object_id=object_id: world.service.record_assistant_message(
                world.s1, "", [ToolCallRequest(object_id, "t", {})]
            ),
        )


@pytest.mark.parametrize("object_id", ["log:x:000000001", "log:", "a" * 41, "a:b", "a/b"])
def test_a_tool_call_id_of_a_reserved_form_is_refused(
    world: World, refused: Any, object_id: str
) -> None:
    refused(
        InvalidInput,
        object_id,
        lambda: world.service.record_tool_call(world.s1, object_id, tool="t", args={}, output="o"),
    )
    refused(
        InvalidInput,
        object_id,
        lambda: world.service.record_assistant_message(
            world.s1, "", [ToolCallRequest(object_id, "t", {})]
        ),
    )


def test_a_tool_call_id_reused_in_a_session_with_other_content_is_refused(
    world: World, refused: Any
) -> None:
    refused(
        DuplicateObject,
        "tc-1",
        lambda: world.service.record_tool_call(
            world.s1, "tc-1", tool="bash", args={}, output="other"
        ),
    )
    # The very same call again is a harmless retry.
    before = snapshot(world)
    assert (
        world.service.record_tool_call(world.s1, "tc-1", tool="bash", args={}, output="ok")
        == "tc-1"
    )
    assert snapshot(world) == before


# -- sessions -----------------------------------------------------------------------------------

BAD_SESSION_IDS: list[Any] = ["", " s", "a b", "../etc", "-lead", "x" * 201, "s:1", "é", 5, None]


@pytest.mark.parametrize("session_id", BAD_SESSION_IDS)
def test_bad_session_ids_are_refused(world: World, refused: Any, session_id: object) -> None:
    s = world.service
    refused(InvalidInput, session_id, lambda: s.start_session(session_id, "p"))  # type: ignore[arg-type]
    refused(InvalidInput, session_id, lambda: s.resume_session(session_id))  # type: ignore[arg-type]
    refused(InvalidInput, session_id, lambda: s.open_session(session_id))  # type: ignore[arg-type]
    refused(InvalidInput, session_id, lambda: s.record_user_message(session_id, "x"))  # type: ignore[arg-type]
    refused(InvalidInput, session_id, lambda: s.activate(session_id, "tc-1"))  # type: ignore[arg-type]
    refused(InvalidInput, session_id, lambda: s.state_at(session_id, 1))  # type: ignore[arg-type]
    assert s.sessions() == sorted([world.s1, world.s2])


@pytest.mark.parametrize("session_id", ["ghost", "s3"])
def test_unknown_sessions_are_refused(world: World, refused: Any, ns: str, session_id: str) -> None:
    sid = ns + session_id
    s = world.service
    refused(SessionNotFound, sid, lambda: s.resume_session(sid))
    refused(SessionNotFound, sid, lambda: s.record_user_message(sid, "x"))
    refused(SessionNotFound, sid, lambda: s.index_file(sid, "/p/mine.py", "x"))
    refused(SessionNotFound, sid, lambda: s.assemble(sid))
    refused(SessionNotFound, sid, lambda: s.state_at(sid, 1))
    refused(SessionNotFound, sid, lambda: s.context_at(sid, 1))


def test_starting_an_existing_session_is_refused(world: World, refused: Any) -> None:
    refused(SessionExists, world.s1, lambda: world.service.start_session(world.s1, "again"))


def test_a_non_text_system_prompt_is_refused(world: World, refused: Any, ns: str) -> None:
    refused(InvalidInput, 42, lambda: world.service.start_session(ns + "s9", 42))  # type: ignore[arg-type]
    assert ns + "s9" not in world.service.sessions()


@pytest.mark.parametrize("text", [None, 42, b"prompt"])
def test_a_non_text_system_prompt_update_is_refused(
    world: World, refused: Any, text: object
) -> None:
    refused(InvalidInput, text, lambda: world.service.set_system_prompt(world.s1, text))  # type: ignore[arg-type]


@pytest.mark.parametrize(("per_turn", "turns"), [(0, 3), (5, 0), (-1, -1)])
def test_a_collapse_window_below_one_is_refused(per_turn: int, turns: int) -> None:
    with pytest.raises(InvalidInput) as raised:
        CollapseWindow(per_turn=per_turn, turns=turns)
    assert raised.value.value == (per_turn, turns)


@pytest.mark.parametrize("seq", ["1", 1.5, None])
def test_non_integer_log_positions_are_refused(world: World, refused: Any, seq: object) -> None:
    refused(InvalidInput, seq, lambda: world.service.state_at(world.s1, seq))  # type: ignore[arg-type]
    refused(InvalidInput, seq, lambda: world.service.context_at(world.s1, seq))  # type: ignore[arg-type]
