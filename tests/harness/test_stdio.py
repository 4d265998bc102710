"""``selfctx serve --stdio``, driven as a subprocess the way a harness in another language would.

The workspace is a small real project in a temporary directory; the "agent" runs real shell
commands there and hands their outputs over in OpenAI or Anthropic form. Store failures and
internal errors, which cannot be provoked from outside the process, are checked in-process on the
same server class with a store that fails on purpose.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.render import validate_anthropic, validate_openai
from selfctx.adapters.harness.stdio import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
    StdioServer,
)
from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.store import (
    ConflictError,
    Document,
    Receipt,
    StoreError,
    StoreProtocolError,
    StoreRejected,
    StoreUnavailable,
)
from selfctx.domain.identifiers import toolcall_object_id
from tests.harness.conftest import bash, o_assistant, o_tool, o_user
from tests.support import CountingClock, CountingIds, FakeFileReader, WrappedStore

REPO = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "selfctx.adapters.cli.main", "serve", "--stdio"]
TIMEOUT = 60.0
"""Longest wait for one answer: a guard against a hung server, not a performance bound."""

FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "README.md": "# calc\n\nA tiny calculator.\n",
    "pkg/util.py": "def double(x):\n    return 2 * x\n",
    "pkg/other.py": "VALUE = 1\n",
}


class Server:
    """A ``selfctx serve --stdio`` subprocess; stdout is read by a thread into a queue."""

    def __init__(self, workspace: Path, *args: str) -> None:
        self.stderr_path = workspace.parent / f"stderr-{id(self)}.log"
        with self.stderr_path.open("wb") as stderr:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [*SERVE, "--workspace", str(workspace), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=workspace,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")  # end of output

    def send(self, line: str | bytes) -> None:
        assert self.proc.stdin is not None
        raw = line.encode() if isinstance(line, str) else line
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def read(self) -> Any:
        line = self.lines.get(timeout=TIMEOUT)
        assert line, f"the server ended its output; stderr:\n{self.log()}"
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        return json.loads(line)

    def request(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.send(
            json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        )
        response = self.read()
        assert response["jsonrpc"] == "2.0" and response["id"] == self.next_id
        return dict(response)

    def call(self, method: str, **params: Any) -> Any:
        response = self.request(method, **params)
        assert "error" not in response, response["error"]
        return response["result"]

    def error(self, method: str, **params: Any) -> dict[str, Any]:
        response = self.request(method, **params)
        assert "result" not in response, response["result"]
        return dict(response["error"])

    def notify(self, method: str, **params: Any) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    def finish(self) -> int:
        """Close stdin (EOF) and wait for the process to exit; its exit code."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=TIMEOUT)

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "outside.txt").write_text("not in the workspace\n")
    return root.resolve()


@pytest.fixture
def server(workspace: Path) -> Iterator[Server]:
    running = Server(workspace)
    yield running
    running.kill()


def run(workspace: Path, command: str) -> str:
    """Run a shell command in the workspace the way an agent's tool would; its output."""
    done = subprocess.run(
        command, shell=True, cwd=workspace, capture_output=True, text=True, timeout=TIMEOUT
    )
    return done.stdout + done.stderr


class Conversation:
    """A harness's message list in one provider format, grown by real tool calls."""

    def __init__(self, fmt: str, workspace: Path, system: str) -> None:
        self.fmt = fmt
        self.workspace = workspace
        self.system = system
        self.messages: list[dict[str, Any]] = (
            [{"role": "system", "content": system}] if fmt == "openai" else []
        )
        self.outputs: dict[str, str] = {}

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def bash(self, call_id: str, command: str) -> str:
        output = run(self.workspace, command)
        self.outputs[call_id] = output
        if self.fmt == "openai":
            arguments = json.dumps({"command": command})
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": "bash", "arguments": arguments},
            }
            self.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            use = {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": command}}
            result = {"type": "tool_result", "tool_use_id": call_id, "content": output}
            self.messages.append({"role": "assistant", "content": [use]})
            self.messages.append({"role": "user", "content": [result]})
        return output

    def ingest_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"messages": self.messages, "format": self.fmt}
        if self.fmt == "anthropic":
            params["system"] = self.system
        return params


def tc(session_id: str, call_id: str, occurrence: int = 1) -> str:
    """The object id a harness's call is stored and shown under (decision 0030)."""
    return toolcall_object_id(session_id, call_id, occurrence)


def active_ids(request: dict[str, Any]) -> list[str]:
    text = json.dumps(request["messages"])
    return [part.split("\\n", 1)[0] for part in text.split("ACTIVE_CONTENT id=")[1:]]


def file_id(server: Server, session: str, path: Path) -> str:
    """A file object's id, from the metadata line that names its path."""
    request = server.call("assemble", session_id=session, format="openai")
    for line in request["messages"][1]["content"].splitlines():
        if f" path={path} " in line:
            return str(line.split()[0].removeprefix("id="))
    raise AssertionError(f"no metadata line for {path}")


# -- the happy path, in both formats --------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_a_session_from_open_to_close(fmt: str, server: Server, workspace: Path) -> None:
    validate = validate_openai if fmt == "openai" else validate_anthropic
    sid = f"s-{fmt}"
    tools = server.call("tools", format=fmt)["tools"]
    names = [t["function"]["name"] if fmt == "openai" else t["name"] for t in tools]
    assert names == ["activate", "deactivate", "pin", "unpin", "search"]

    opened = server.call(
        "session.open", session_id=sid, system_prompt="You fix bugs.", policy="ssot", format=fmt
    )
    assert opened.pop("digest").startswith("0.")  # the empty list, for an append
    assert opened == {
        "session_id": sid, "resumed": False, "format": fmt, "policy": "ssot", "recorded": 0
    }  # fmt: skip

    chat = Conversation(fmt, workspace, "You fix bugs.")
    chat.user("add() subtracts. Fix it.")
    chat.bash("call_cat", "cat calc.py")
    answer = server.call("ingest", session_id=sid, **chat.ingest_params())
    assert answer.pop("digest").startswith("3.")  # the chat: the system prompt is apart
    assert answer == {"consumed": 3, "diverged": False, "total": 3}

    request = server.call("assemble", session_id=sid, format=fmt)
    validate(request)
    calc = file_id(server, sid, workspace / "calc.py")
    text = json.dumps(request)
    # The whole-file read became the file object, active with the content on disk; the tool
    # call is in the chat as a reference only (decision 0006).
    assert active_ids(request) == [calc]
    assert json.dumps(FILES["calc.py"])[1:-1] in text
    assert f"toolcall_ref id={tc(sid, 'call_cat')} tool=bash status=ok" in text
    assert request["stats"] | {"chars": 0, "log_position": 0, "cached_chars": 0} == {
        "index": 2, "pool": 2, "active": 1, "pinned": 0, "collapsed": 1, "files": 1,
        "toolcalls": 1, "turns": 2, "messages": len(request["messages"]), "chars": 0,
        "log_position": 0, "cached_chars": 0,
    }  # fmt: skip
    assert request["stats"]["chars"] > len(FILES["calc.py"])
    # the file's content is held in memory (the content budget is far away)
    assert request["stats"]["cached_chars"] >= len(FILES["calc.py"])
    assert ("system" in request) == (fmt == "anthropic")

    # More work in the same turn: a listing, a search, then six small commands, so that the
    # first outputs leave the window of the last five tool calls of the turn.
    chat.bash("call_ls", "ls pkg")
    chat.bash("call_grep", "grep -rn def .")
    for n in range(6):
        chat.bash(f"call_echo{n}", f"echo step {n}")
    answer = server.call("ingest", session_id=sid, **chat.ingest_params())
    assert answer.pop("digest")
    assert answer == {"consumed": 16, "diverged": False, "total": 19}
    assert server.call("ingest", session_id=sid, **chat.ingest_params())["consumed"] == 0

    request = server.call("assemble", session_id=sid, format=fmt)
    validate(request)
    listed = request["messages"][1]["content"] if fmt == "openai" else request["system"][1]["text"]
    assert f"path={workspace}/pkg/other.py file_type=py [unread]" in listed
    assert f"path={workspace}/pkg/util.py file_type=py [unread]" in listed
    assert active_ids(request) == [calc] + [tc(sid, f"call_echo{n}") for n in range(1, 6)]
    assert f"toolcall_ref id={tc(sid, 'call_echo0')} tool=bash status=ok" in json.dumps(request)

    # The model's context tools.
    for method, expected in [("activate", True), ("pin", True), ("unpin", True)]:
        # The harness's id of the call maps to the object the model is shown.
        result = server.call(method, session_id=sid, id="call_echo0")
        assert result["ok"] is expected and tc(sid, "call_echo0") in result["message"]
    request = server.call("assemble", session_id=sid, format=fmt)
    assert tc(sid, "call_echo0") in active_ids(request)
    assert "step 0" in json.dumps(request)
    assert server.call("deactivate", session_id=sid, id=calc)["ok"] is True
    relayed = server.call("tools.call", session_id=sid, name="activate", arguments={"id": "nope"})
    assert relayed["ok"] is False and "nope" in relayed["message"]

    # Files the harness reports itself.
    readme = server.call("index_file", session_id=sid, path=str(workspace / "README.md"))
    assert readme["outcome"] == "created" and readme["path"] == str(workspace / "README.md")
    (workspace / "notes.txt").write_text("remember\n")  # what the agent read, also on disk
    given = server.call(
        "index_file", session_id=sid, path=str(workspace / "notes.txt"), content="remember\n"
    )
    assert given["outcome"] == "created"
    found = server.call(
        "discover",
        session_id=sid,
        paths=[str(workspace / "pkg/more.py"), str(workspace.parent / "outside.txt")],
    )
    assert [f["path"] for f in found["found"]] == [str(workspace / "pkg/more.py")]
    assert [r["path"] for r in found["refused"]] == [str(workspace.parent / "outside.txt")]
    request = server.call("assemble", session_id=sid, format=fmt)
    validate(request)
    assert readme["object_id"] in active_ids(request) and given["object_id"] in active_ids(request)
    assert calc not in active_ids(request)
    assert "# calc" in json.dumps(request) and "remember" in json.dumps(request)

    # The other format renders the same session too.
    other = "anthropic" if fmt == "openai" else "openai"
    (validate_anthropic if other == "anthropic" else validate_openai)(
        server.call("assemble", session_id=sid, format=other)
    )

    # Close, then resume: nothing is recorded twice when the harness sends its list again.
    before = server.call("assemble", session_id=sid)
    assert server.call("session.close", session_id=sid) == {"closed": True}
    assert server.error("assemble", session_id=sid)["data"]["kind"] == "session_not_found"
    reopened = server.call("session.open", session_id=sid, format=fmt)
    assert reopened["resumed"] is True and reopened["recorded"] == 19
    assert reopened["reconciled"]["unchanged"] >= 1
    assert server.call("ingest", session_id=sid, **chat.ingest_params())["consumed"] == 0
    after = server.call("assemble", session_id=sid)
    assert after["messages"] == before["messages"]

    assert server.finish() == 0
    assert "Traceback" not in server.log()


# -- errors ---------------------------------------------------------------------------------


@pytest.fixture
def busy(server: Server, workspace: Path) -> tuple[Server, str]:
    """A server with one session holding a little of everything."""
    server.call("session.open", session_id="busy", system_prompt="Be brief.")
    chat = Conversation("openai", workspace, "Be brief.")
    chat.user("look around")
    chat.bash("call_a", "cat calc.py")
    chat.bash("call_b", "echo hello")
    server.call("ingest", session_id="busy", **chat.ingest_params())
    return server, "busy"


def lines(request: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", **request})


ORPHAN = [{"role": "tool", "tool_call_id": "call_zzz", "content": "x"}]

# (what is wrong, the raw line, expected code, expected data.kind)
PROTOCOL_ERRORS = [
    ("truncated JSON", '{"jsonrpc": "2.0", "id": 1, "method": "tools"', PARSE_ERROR, "parse_error"),
    ("not JSON at all", "hello there", PARSE_ERROR, "parse_error"),
    ("not UTF-8", b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', PARSE_ERROR, "parse_error"),
    ("a number", "42", INVALID_REQUEST, "invalid_request"),
    ("an empty batch", "[]", INVALID_REQUEST, "invalid_request"),
    ("no jsonrpc", '{"id": 7, "method": "tools"}', INVALID_REQUEST, "invalid_request"),
    ("jsonrpc 1.0", '{"jsonrpc": "1.0", "id": 7, "method": "tools"}', INVALID_REQUEST,
     "invalid_request"),
    ("no method", '{"jsonrpc": "2.0", "id": 7}', INVALID_REQUEST, "invalid_request"),
    ("an object id", '{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools"}', INVALID_REQUEST,
     "invalid_request"),
    ("a boolean id", '{"jsonrpc": "2.0", "id": true, "method": "tools"}', INVALID_REQUEST,
     "invalid_request"),
    ("scalar params", '{"jsonrpc": "2.0", "id": 7, "method": "tools", "params": 3}',
     INVALID_REQUEST, "invalid_request"),
    ("no such method", lines({"id": 7, "method": "session.delete"}), METHOD_NOT_FOUND,
     "method_not_found"),
    ("positional params", lines({"id": 7, "method": "tools", "params": ["openai"]}),
     INVALID_PARAMS, "invalid_params"),
    ("a missing param", lines({"id": 7, "method": "tools", "params": {}}), INVALID_PARAMS,
     "invalid_params"),
    ("an unknown param", lines({"id": 7, "method": "assemble",
     "params": {"session_id": "busy", "sessionId": "busy"}}), INVALID_PARAMS, "invalid_params"),
    ("a wrong type", lines({"id": 7, "method": "ingest",
     "params": {"session_id": "busy", "messages": "hi"}}), INVALID_PARAMS, "invalid_params"),
    ("an unknown format", lines({"id": 7, "method": "assemble",
     "params": {"session_id": "busy", "format": "xml"}}), INVALID_PARAMS, "invalid_params"),
    ("an unknown policy", lines({"id": 7, "method": "session.open",
     "params": {"session_id": "p", "policy": "greedy"}}), INVALID_PARAMS, "invalid_params"),
    ("paths not strings", lines({"id": 7, "method": "discover",
     "params": {"session_id": "busy", "paths": [1]}}), INVALID_PARAMS, "invalid_params"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("line", "code", "kind"),
    [pytest.param(line, code, kind, id=what) for what, line, code, kind in PROTOCOL_ERRORS],
)
def test_protocol_errors_are_answered_and_change_nothing(
    busy: tuple[Server, str], line: str | bytes, code: int, kind: str
) -> None:
    server, sid = busy
    before = server.call("assemble", session_id=sid)
    server.send(line)
    response = server.read()
    error = response["error"]
    assert (error["code"], error["data"]["kind"]) == (code, kind)
    assert isinstance(error["message"], str) and error["message"]
    raw = line.decode(errors="replace") if isinstance(line, bytes) else line
    # The id is echoed when it could be read, null otherwise.
    expected_id = 7 if '"id": 7' in raw and code != PARSE_ERROR else None
    assert response["id"] == expected_id
    assert server.call("assemble", session_id=sid) == before  # still serving, unchanged
    if kind == "invalid_params" and "policy" in raw:
        assert error["data"]["policies"] == ["inline", "relevance", "ssot"]
        assert "greedy" in error["message"]


def project_error_cases(workspace: Path) -> list[tuple[str, str, dict[str, Any], str]]:
    huge = "x" * (8 * 1024 * 1024 + 1)
    return [
        ("bad session id", "session.open", {"session_id": "no spaces please"}, "invalid_input"),
        ("relative cwd", "session.open", {"session_id": "p", "cwd": "src"}, "invalid_path"),
        ("relative path", "index_file", {"path": "calc.py"}, "invalid_path"),
        ("huge content", "index_file", {"path": str(workspace / "big.txt"), "content": huge},
         "invalid_content"),
        ("orphan result", "ingest", {"messages": ORPHAN}, "malformed_message"),
        ("unknown role", "ingest", {"messages": [{"role": "wizard", "content": "x"}]},
         "malformed_message"),
        ("non-string content", "ingest", {"messages": [{"role": "user", "content": 5}]},
         "malformed_message"),
        ("anthropic tool role", "ingest", {"format": "anthropic", "messages": ORPHAN},
         "malformed_message"),
        ("unknown object", "activate", {"id": "call_nope"}, "unknown_object"),
        ("another session's id", "pin", {"id": "call_elsewhere"}, "unknown_object"),
        ("the chat", "deactivate", {"id": "chat:busy"}, "not_a_content_object"),
        ("the system prompt", "pin", {"id": "system_prompt:busy"}, "not_a_content_object"),
        ("not open", "assemble", {"session_id": "never-opened"}, "session_not_found"),
        ("opened twice", "session.open", {}, "session_exists"),
        ("missing file", "index_file", {"path": str(workspace / "gone.py")}, "source_missing"),
        ("a directory", "index_file", {"path": str(workspace / "pkg")}, "source_unreachable"),
        ("no such directory", "index_file", {"path": str(workspace / "nodir/x.py")},
         "source_unreachable"),
        ("outside the roots", "index_file", {"path": str(workspace.parent / "outside.txt")},
         "path_outside_roots"),
        ("discover a relative path", "discover", {"paths": ["pkg/x.py"]}, "invalid_path"),
    ]  # fmt: skip


def test_every_project_error_kind_is_data_kind_and_changes_nothing(
    busy: tuple[Server, str], workspace: Path
) -> None:
    server, sid = busy
    # Another session owns call_elsewhere.
    server.call("session.open", session_id="elsewhere")
    server.call(
        "ingest",
        session_id="elsewhere",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_elsewhere",
             "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_elsewhere", "content": "original"},
        ],
    )  # fmt: skip
    for what, method, params, kind in project_error_cases(workspace):
        before = server.call("assemble", session_id=sid)
        error = server.error(method, **{"session_id": sid, **params})
        assert error["code"] == SERVER_ERROR, what
        assert error["data"]["kind"] == kind, (what, error)
        assert error["message"], what
        after = server.call("assemble", session_id=sid)
        assert after == before, what
    details = server.error("ingest", session_id=sid, messages=[{}, {"role": "x"}])["data"]
    assert details["kind"] == "malformed_message" and details["index"] == 0
    details = server.error("activate", session_id=sid, id="call_nope")["data"]
    assert details["object_id"] == "call_nope" and details["session_id"] == sid
    details = server.error("index_file", session_id=sid, path=str(workspace / "gone.py"))["data"]
    assert details["path"] == str(workspace / "gone.py")
    assert server.finish() == 0


# -- notifications, batches, invalid lines, shutdown ----------------------------------------


def test_notifications_run_and_are_never_answered(busy: tuple[Server, str]) -> None:
    server, sid = busy
    server.notify("pin", session_id=sid, id="call_b")
    server.notify("no.such.method", x=1)  # an error in a notification is not answered either
    server.notify("activate", session_id=sid, id="call_nope")
    stats = server.call("assemble", session_id=sid)["stats"]  # the next line answers this
    assert stats["pinned"] == 1
    assert server.finish() == 0
    assert server.lines.get(timeout=TIMEOUT) == b""  # nothing else was written


def test_a_batch_is_answered_with_an_array(busy: tuple[Server, str]) -> None:
    server, sid = busy
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "tools", "params": {"format": "openai"}},
        {"jsonrpc": "2.0", "method": "pin", "params": {"session_id": sid, "id": "call_b"}},
        1,
        {"jsonrpc": "2.0", "id": "b", "method": "nope"},
        {"jsonrpc": "2.0", "id": "c", "method": "assemble", "params": {"session_id": sid}},
    ]
    server.send(json.dumps(batch))
    answers = server.read()
    assert isinstance(answers, list)
    assert [a["id"] for a in answers] == ["a", None, "b", "c"]
    assert len(answers[0]["result"]["tools"]) == 5
    assert answers[1]["error"]["data"]["kind"] == "invalid_request"
    assert answers[2]["error"]["data"]["kind"] == "method_not_found"
    assert answers[3]["result"]["stats"]["pinned"] == 1  # in order: the pin ran first

    only_notifications = [
        {"jsonrpc": "2.0", "method": "unpin", "params": {"session_id": sid, "id": "call_b"}}
    ]
    server.send(json.dumps(only_notifications))  # nothing is due: no line at all
    assert server.call("assemble", session_id=sid)["stats"]["pinned"] == 0


def test_invalid_lines_are_answered_with_id_null_and_serving_goes_on(server: Server) -> None:
    broken: list[str | bytes] = ["{", '{"jsonrpc": "2.0", "id": 1,}', "[1, 2", "nul", b"\xc3\x28"]
    for line in broken:
        server.send(line)
        response = server.read()
        assert response["id"] is None and response["error"]["code"] == PARSE_ERROR
    server.send("")  # blank lines are skipped
    server.send("   ")
    assert len(server.call("tools", format="anthropic")["tools"]) == 5


def test_stdout_carries_only_the_protocol_and_eof_shuts_down(server: Server) -> None:
    server.call("session.open", session_id="short")
    server.call(
        "ingest", session_id="short", messages=[{"role": "user", "content": "hi"}], format="openai"
    )
    assert server.finish() == 0
    assert server.lines.get(timeout=TIMEOUT) == b""
    log = server.log()
    assert "ready" in log and "Traceback" not in log


def test_without_stdio_the_command_refuses(workspace: Path) -> None:
    done = subprocess.run(
        SERVE[:-1],
        capture_output=True,
        text=True,
        cwd=workspace,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=TIMEOUT,
    )
    assert done.returncode == 2 and "--stdio" in done.stderr and done.stdout == ""


def test_an_unreachable_store_stops_the_server_before_it_serves(workspace: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    running = Server(workspace, "--store", f"xtdb://127.0.0.1:{port}")
    try:
        code = running.finish()
    finally:
        running.kill()
    assert code == 2
    assert running.lines.get(timeout=TIMEOUT) == b""
    assert "selfctx: error:" in running.log()


@pytest.mark.xtdb
def test_the_default_log_level_does_not_log_every_store_request(
    workspace: Path, xtdb_node: Any
) -> None:
    url = "xtdb://" + xtdb_node.url.removeprefix("http://")
    for level, quiet in (("info", True), ("debug", False)):
        running = Server(workspace, "--store", url, "--no-track", "--log-level", level)
        try:
            sid = f"log-{level}-{os.getpid()}"
            running.call("session.open", session_id=sid, policy="ssot")
            chat = Conversation("openai", workspace, "You fix bugs.")
            for n in range(3):
                chat.bash(f"call_{n}", "cat calc.py")
                running.call("ingest", session_id=sid, **chat.ingest_params())
                running.call("assemble", session_id=sid)
            assert running.finish() == 0
        finally:
            running.kill()
        requests = running.log().count("HTTP Request")
        assert (requests == 0) if quiet else (requests > 10), (level, running.log()[-2000:])


# -- in-process: store failures and internal errors -------------------------------------------


class FailingStore(WrappedStore):
    """Fails every commit with ``error`` while ``failing`` is set."""

    def __init__(self, error: Exception) -> None:
        super().__init__(MemoryStore())
        self.error = error
        self.failing = False

    def commit(self, puts: Any, expect: Any = ()) -> Receipt:
        if self.failing:
            raise self.error
        return super().commit(puts, expect)


def in_process(store: WrappedStore) -> StdioServer:
    files = FakeFileReader("host")
    files.write("/w/a.py", "x = 1\n")
    service = build_service(
        store=store, files=files, host_id="host", clock=CountingClock(), ids=CountingIds()
    )
    return StdioServer(service, cwd="/w", roots=["/w"])


def ask(server: StdioServer, method: str, **params: Any) -> dict[str, Any]:
    line = server.handle_line(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    )
    assert line is not None
    return dict(json.loads(line))


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailable("node down", url="http://127.0.0.1:1", operation="commit"),
        StoreRejected("bad request", status=400, operation="commit"),
        StoreProtocolError("truncated body", operation="commit"),
        ConflictError(["session:s"]),
    ],
    ids=lambda e: e.kind,
)
def test_store_failures_are_reported_with_their_kind(error: StoreError) -> None:
    store = FailingStore(error)
    server = in_process(store)
    assert "result" in ask(server, "session.open", session_id="s")
    before = ask(server, "assemble", session_id="s")
    store.failing = True
    response = ask(server, "ingest", session_id="s", messages=[{"role": "user", "content": "hi"}])
    assert response["error"]["code"] == SERVER_ERROR
    assert response["error"]["data"]["kind"] == error.kind
    assert response["error"]["data"]["consumed"] == 0
    response = ask(server, "index_file", session_id="s", path="/w/a.py")
    assert response["error"]["data"]["kind"] == error.kind
    store.failing = False
    assert ask(server, "assemble", session_id="s") == before
    assert (
        ask(server, "ingest", session_id="s", messages=[{"role": "user", "content": "hi"}])[
            "result"
        ]["consumed"]
        == 1
    )


class BrokenStore(WrappedStore):
    """A store with a bug: reads of session logs blow up."""

    def session_log(self, session_id: str, after_seq: int = 0) -> list[Document]:
        raise RuntimeError("bug in the store")


def test_an_internal_error_is_answered_and_serving_goes_on() -> None:
    server = in_process(BrokenStore(MemoryStore()))
    assert "result" in ask(server, "session.open", session_id="s")
    server.service.close_session("s")
    server.sessions.clear()
    response = ask(server, "session.open", session_id="s")  # resuming reads the log
    assert response["error"]["code"] == INTERNAL_ERROR
    assert response["error"]["data"]["kind"] == "internal_error"
    assert "bug in the store" in response["error"]["message"]
    assert "result" in ask(server, "tools", format="openai")


def test_an_assembly_runs_with_the_collector_paused_and_restores_it() -> None:
    """Decision 0098: the cyclic collector is off while a prompt is built (it would walk every
    object of a long session), on again after, also when the assembly fails."""
    import gc

    server = in_process(WrappedStore(MemoryStore()))
    assert "result" in ask(server, "session.open", session_id="s")
    seen: list[bool] = []
    assemble = server.service.assemble

    def watched(session_id: str, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        if len(seen) > 1:
            raise RuntimeError("a bug in assembly")
        return assemble(session_id, **kwargs)

    server.service.assemble = watched  # type: ignore[method-assign]
    assert gc.isenabled()
    assert "result" in ask(server, "assemble", session_id="s", format="anthropic")
    assert seen == [False] and gc.isenabled()
    assert ask(server, "assemble", session_id="s", format="anthropic")["error"]
    assert seen == [False, False] and gc.isenabled()


def test_a_resume_runs_with_the_collector_paused_and_restores_it() -> None:
    """Decision 0104: the cyclic collector is off while a session is resumed (full collections
    would walk the whole session being built and free nothing), on again after, also when the
    resume fails."""
    import gc

    store = WrappedStore(MemoryStore())
    first = in_process(store)
    assert "result" in ask(first, "session.open", session_id="s")
    server = in_process(store)
    seen: list[bool] = []
    resume = server.service.resume_session

    def watched(session_id: str) -> Any:
        seen.append(gc.isenabled())
        if len(seen) > 1:
            raise RuntimeError("a bug in the resume")
        return resume(session_id)

    server.service.resume_session = watched  # type: ignore[method-assign]
    assert gc.isenabled()
    assert ask(server, "session.open", session_id="s")["result"]["resumed"] is True
    assert seen == [False] and gc.isenabled()
    server.service.close_session("s")
    server.sessions.clear()
    assert ask(server, "session.open", session_id="s")["error"]
    assert seen == [False, False] and gc.isenabled()


def test_a_resumed_session_is_opened_with_its_first_request_prepared() -> None:
    """Decision 0110: ``session.open`` of a stored session renders and encodes its request as the
    state is, so that the first ``assemble`` encodes nothing it had; a new session does not."""
    store = WrappedStore(MemoryStore())
    first = in_process(store)
    assert "result" in ask(first, "session.open", session_id="s")
    listing = [o_user("Run it."), o_assistant("", bash("c1", "ls")), o_tool("c1", "a.py")]
    assert "result" in ask(first, "ingest", session_id="s", messages=listing)
    expected = ask(first, "assemble", session_id="s")["result"]["messages"]
    server = in_process(store)
    assert ask(server, "session.open", session_id="s")["result"]["resumed"] is True
    prepared = server.sessions["s"].harness._requests._items
    assert len(prepared) == 3  # the user's message, the call, its result: encoded
    assert ask(server, "assemble", session_id="s")["result"]["messages"] == expected


def test_a_resumed_session_is_set_aside_from_the_collector_until_a_session_is_closed() -> None:
    """Decision 0116: what the process holds once a session is resumed and its first request
    prepared is frozen (``gc.freeze``): no collection walks it then, nor later, and closing a
    session (or the server) hands it back to the collector. A resume leaves no cycle unreachable
    (what freezing would keep)."""
    import gc

    store = WrappedStore(MemoryStore())
    first = in_process(store)
    assert "result" in ask(first, "session.open", session_id="s")
    listing = [o_user("Run it."), o_assistant("", bash("c1", "ls")), o_tool("c1", "a.py")]
    assert "result" in ask(first, "ingest", session_id="s", messages=listing)
    first.close()
    assert gc.get_freeze_count() == 0
    server = in_process(store)
    assert "result" in ask(server, "session.open", session_id="s2")  # a new session: nothing
    assert gc.get_freeze_count() == 0
    gc.disable()
    try:
        gc.collect()
        assert ask(server, "session.open", session_id="s")["result"]["resumed"] is True
        frozen = gc.get_freeze_count()
        assert frozen > 0
        state = server.service.state("s")
        assert not any(o is state for o in gc.get_objects())  # set aside: no walk reaches it
        gc.unfreeze()
        assert gc.collect() == 0  # nothing the resume made was cyclic garbage
        gc.freeze()
    finally:
        gc.enable()
    assert "result" in ask(server, "assemble", session_id="s")
    assert ask(server, "session.close", session_id="s2")["result"] == {"closed": True}
    assert gc.get_freeze_count() == 0  # handed back
    assert "result" in ask(server, "assemble", session_id="s")
    server.close()
    assert gc.get_freeze_count() == 0
