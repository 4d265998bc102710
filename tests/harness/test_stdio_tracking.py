"""The stdio server watches the files its sessions read: an external edit shows up in the next
context without the agent reading the file again (tracking through the stdio server)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.harness.test_stdio import TIMEOUT, Server


def _lines(server: Server, sid: str) -> str:
    request = server.call("assemble", session_id=sid, format="openai")
    return "\n".join(str(m.get("content") or "") for m in request["messages"])


def test_an_external_edit_reaches_the_context_and_no_track_turns_it_off(tmp_path: Path) -> None:
    workspace = (tmp_path / "project").resolve()
    workspace.mkdir()
    source = workspace / "notes.txt"
    source.write_text("first\n")
    for args, expect_seen in (((), True), (("--no-track",), False)):
        server = Server(workspace, *args)
        try:
            sid = f"s{len(args)}"
            server.call("session.open", session_id=sid, policy="ssot")
            server.call("index_file", session_id=sid, path=str(source))
            assert "char_count=6" in _lines(server, sid)
            source.write_text("a longer second version\n")
            deadline = time.monotonic() + TIMEOUT
            seen = False
            while time.monotonic() < deadline and not seen:
                seen = "char_count=24" in _lines(server, sid)
                if not expect_seen:
                    # Without tracking nothing would ever change it; give a watcher the time
                    # a tracking server needs, then check it stayed as it was.
                    time.sleep(1.0)
                    break
            assert seen is expect_seen, server.log()
            assert server.finish() == 0
        finally:
            server.kill()
        source.write_text("first\n")
