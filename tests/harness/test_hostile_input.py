"""Input no server may die of, and roots a session may not silently index nothing under .

A line of deeply nested brackets, deep tool arguments, ``#`` and thousands of digits,
numbers too long for ``int`` in tool outputs, and a symlink swapped while the reader resolves it
each get a typed error (or are taken as they are), and the server answers the next request with
every open session intact. ``session.open`` refuses roots no file system can be asked
about, its default roots work when the agent sees mounted paths, and it warns when a session can
index nothing.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.filesystem.reader import LocalFileReader
from selfctx.adapters.harness.messages import MAX_ARGUMENT_NESTING, MalformedMessage
from selfctx.adapters.harness.rpc import INVALID_PARAMS, INVALID_REQUEST, MAX_NESTING, SERVER_ERROR
from selfctx.adapters.harness.stdio import StdioServer
from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.files import SourceUnreachable
from selfctx.domain.chat import AssistantMessage
from selfctx.domain.mounts import MountMapping
from selfctx.domain.objects import FileObject, FilesystemSource, ToolcallObject
from tests.harness.conftest import bash, mini, o_assistant, o_call, o_tool, o_user, open_harness
from tests.harness.test_stdio import Server, workspace  # noqa: F401 (a fixture)
from tests.support import CountingClock, CountingIds

# -- the stdio server survives every line ------------------------------------------------------


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` levels of arrays around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_no_line_ends_the_server(workspace: Path) -> None:  # noqa: F811 (the fixture)
    server = Server(workspace)
    try:
        server.call("session.open", session_id="keep", policy="ssot")
        server.call("ingest", session_id="keep", messages=[o_user("remember me")])
        hostile = [
            "[" * 10_000 + "]" * 10_000,
            '{"a":' * 10_000 + "1" + "}" * 10_000,
            '{"jsonrpc": "2.0", "id": 5, "method": "tools", "params": {"format": '
            + "[" * 900
            + "]" * 900
            + "}}",
        ]
        for line in hostile:
            server.send(line)
            error = server.read()["error"]
            assert (error["code"], error["data"]["kind"]) in {
                (INVALID_REQUEST, "invalid_request"),
                (INVALID_PARAMS, "invalid_params"),
            }, error
            assert "nested" in error["message"]
        # Deep, but within what the parser reads: a typed -32602 naming the params.
        deep = nested(MAX_NESTING + 5)
        error = server.error("ingest", session_id="keep", messages=[deep])
        assert (error["code"], error["data"]["kind"]) == (INVALID_PARAMS, "invalid_params")
        # A tool call's arguments as JSON text nested deeper than Python parses: kept as text.
        deep_text = "[" * 5_000 + "]" * 5_000
        calls = [o_user("go"), o_assistant("", o_call("c1", "f")), o_tool("c1", "ok")]
        calls[1]["tool_calls"][0]["function"]["arguments"] = deep_text
        assert server.call("ingest", session_id="keep", messages=[o_user("remember me"), *calls])
        # Handles made of thousands of digits, or of digits int() refuses.
        for ref in ["#" + "9" * 5_000, "#²", "#" + "0" * 5_000]:
            error = server.error("activate", session_id="keep", id=ref)
            assert error["data"]["kind"] in {"unknown_object"}, (ref, error)
            relayed = server.call(
                "tools.call", session_id="keep", name="pin", arguments={"id": ref}
            )
            assert relayed["ok"] is False
        # Everything open is still open, and still answers.
        request = server.call("assemble", session_id="keep", format="openai")
        assert "remember me" in json.dumps(request)
        assert server.finish() == 0
    finally:
        server.kill()


def test_deep_tool_arguments_are_typed_in_process() -> None:
    h = open_harness()
    too_deep = {"x": nested(MAX_ARGUMENT_NESTING)}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": too_deep}}
    with pytest.raises(MalformedMessage, match="nested more than"):
        h.ingest([o_user("go"), {"role": "assistant", "content": "", "tool_calls": [call]}])
    as_text = dict(call, function={"name": "f", "arguments": json.dumps(nested(900))})
    h.ingest([o_user("go"), {"role": "assistant", "content": "", "tool_calls": [as_text]}])
    message = h.service.state("s1").turns[-1].messages[-1]
    assert isinstance(message, AssistantMessage)
    assert set(message.tool_calls[0].arguments) == {"_raw", "_error"}


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("python x.py", f"<returncode>{'1' * 5_000}</returncode>\n<output>\nx\n</output>"),
        (f"head -n {'9' * 5_000} a.py", mini("x\n")),
        (f"head -{'9' * 5_000} a.py", mini("x\n")),
        (f"sed -n 1,{'9' * 5_000}p a.py", mini("x\n")),
        ("head -n ² a.py", mini("x\n")),
    ],
)
def test_numbers_too_long_for_int_in_tool_outputs(command: str, output: str) -> None:
    h = open_harness()
    messages = [o_user("go"), o_assistant("", bash("c1", command)), o_tool("c1", output)]
    assert h.ingest(messages).consumed == 3
    assert isinstance(h.service.object("s1", h.ids.answer("c1") or ""), ToolcallObject)


def test_a_line_number_too_long_for_int_in_an_editor_view() -> None:
    h = open_harness()
    view = o_call("c1", "str_replace_editor", command="view", path="/testbed/a.py")
    output = f"Here's the result of running `cat -n` on /testbed/a.py:\n{'1' * 5_000}\tx\n"
    assert h.ingest([o_user("go"), o_assistant("", view), o_tool("c1", output)]).consumed == 3


def test_a_symlink_swapped_while_it_resolves_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "real.py").write_text("x = 1\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "real.py")
    reader = LocalFileReader("host", [str(tmp_path)])
    source = FilesystemSource("host", str(tmp_path / "link.py"))

    def swapped(path: Any, *args: Any, **kwargs: Any) -> str:
        # lstat saw a link; by the time it is read, it is a plain file again.
        raise OSError(22, "Invalid argument", str(path))

    monkeypatch.setattr(os, "readlink", swapped)
    with pytest.raises(SourceUnreachable):
        reader.canonical(source)
    with pytest.raises(SourceUnreachable):
        reader.read(source, 1024)


def test_a_path_the_os_cannot_encode_is_a_typed_error(tmp_path: Path) -> None:
    reader = LocalFileReader("host", [str(tmp_path)])
    with pytest.raises(SourceUnreachable):
        reader.canonical(FilesystemSource("host", f"{tmp_path}/\ud800.py"))


# -- roots -------------------------------------------------------------------------------------


def serve(tmp_path: Path, mounted: bool) -> tuple[StdioServer, Path]:
    """An in-process server whose workspace is a host directory; with ``mounted``, the agent sees
    it as /workspace (a container's bind mount)."""
    project = (tmp_path / "project").resolve()
    project.mkdir(parents=True)
    (project / "a.py").write_text("x = 1\n")
    mounts = [MountMapping("/workspace", str(project), "host")] if mounted else []
    service = build_service(
        store=MemoryStore(),
        workspace=str(project),
        host_id="host",
        default_filesystem_id="container-1" if mounted else None,
        mounts=mounts,
        clock=CountingClock(),
        ids=CountingIds(),
    )
    return StdioServer(service, cwd=str(project), roots=[str(project)]), project


def ask(server: StdioServer, method: str, **params: Any) -> dict[str, Any]:
    line = server.handle_line(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    )
    assert line is not None
    return dict(json.loads(line))


@pytest.mark.parametrize(
    "roots", [["/w/\x00etc"], ["/w/\ud800"], ["relative"], ["/w", "/x\x00"]], ids=repr
)
def test_roots_that_name_no_directory_are_refused(tmp_path: Path, roots: list[str]) -> None:
    server, _ = serve(tmp_path, mounted=False)
    error = ask(server, "session.open", session_id="s", roots=roots)["error"]
    assert (error["code"], error["data"]["kind"]) == (SERVER_ERROR, "invalid_path")
    assert "s" not in server.sessions and server.service.sessions() == []
    error = ask(server, "session.open", session_id="s", cwd="/w/\ud800x")["error"]
    assert error["data"]["kind"] == "invalid_path"


def test_default_roots_work_when_the_agent_sees_mounted_paths(tmp_path: Path) -> None:
    server, project = serve(tmp_path, mounted=True)
    opened = ask(server, "session.open", session_id="s", policy="ssot")["result"]
    assert "warnings" not in opened
    cat = [
        o_user("look"),
        o_assistant("", bash("c1", "cat a.py")),  # relative to the agent's cwd, /workspace
        o_tool("c1", mini("x = 1\n")),
        o_assistant("", bash("c2", "ls /workspace")),
        o_tool("c2", mini("a.py\nb.py\n")),
    ]
    assert ask(server, "ingest", session_id="s", messages=cat)["result"]["consumed"] == 5
    service = server.service
    a_py = service.object_id_for("/workspace/a.py")
    assert a_py == FileObject.identity_of(FilesystemSource("host", str(project / "a.py")))
    assert service.state("s").in_index(a_py)
    assert service.state("s").in_index(service.object_id_for("/workspace/b.py"))


def test_a_session_that_can_index_nothing_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server, project = serve(tmp_path, mounted=True)
    caplog.set_level(logging.WARNING, logger="selfctx.serve")
    # The host path as the root, while the agent names /workspace/...: nothing would be indexed.
    opened = ask(server, "session.open", session_id="s", roots=[str(project)], cwd="/workspace")
    warnings = opened["result"]["warnings"]
    assert any("/workspace is under none of the roots" in w for w in warnings), warnings
    assert any("under none of the roots" in r.getMessage() for r in caplog.records)
    opened = ask(server, "session.open", session_id="t", roots=[])
    assert opened["result"]["warnings"] == ["no roots: no path in a tool output can be indexed"]
    # A host root the server may not read from.
    plain, project = serve(tmp_path / "plain", mounted=False)
    outside = ask(plain, "session.open", session_id="u", roots=[str(project), "/etc"])
    assert [w for w in outside["result"]["warnings"] if "/etc" in w] == [
        "root /etc cannot be read: cannot read /etc (filesystem host): resolves to /etc, outside "
        f"the allowed roots ['{project}']"
    ]
