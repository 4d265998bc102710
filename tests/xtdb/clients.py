"""Client processes for the multi-process tests on a real node: each one a ``ContextService`` of
its own, in an OS process of its own, talking to the node over HTTP.

* :func:`agent` is the target of ``test_multi_agent`` (``multiprocessing``, spawn): one session
  that indexes the same files as its siblings, pass after pass, in step with the test.
* ``python -m tests.xtdb.clients replay ...`` is the client ``test_client_crash`` kills: it
  resumes (or starts) a session and carries a recorded trajectory on from wherever the session
  is. After every commit the store acknowledges, it appends the commit's documents to an
  acknowledgement file and prints one line, so the test knows what was acknowledged before the
  kill. ``--arm-after C --kill-at N`` makes it SIGKILL itself around the N-th HTTP request after
  its C-th command (before sending it, or after its answer arrived and before anyone reads it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tools import is_context_tool
from selfctx.adapters.harness.trajectories import Trajectory, load
from selfctx.adapters.xtdb import XtdbClient, XtdbStore, open_store, secret
from selfctx.application.persistence import LOG_TYPE, log_entries
from selfctx.application.ports.store import Document, Expect, ObjectStore, Receipt, Version
from selfctx.application.service import ContextService
from selfctx.application.settings import Settings
from selfctx.domain.errors import SelfContextError

PASSES = 3
"""How many times each agent indexes every file (the test changes files between passes)."""


# -- the multi-agent test ------------------------------------------------------------------------


def agent(
    url: str,
    host_id: str,
    workspace: str,
    session_id: str,
    paths: Sequence[str],
    calls: Mapping[str, Sequence[str]],
    barrier: Any,
    results: Any,
) -> None:
    """Index ``paths`` (in an order of this agent's own) once per pass, record one tool call per
    pass, and wait at ``barrier`` after each pass twice: once for every agent to finish, once for
    the test to change files. Then try the other sessions' tool calls, and report."""
    try:
        store = open_store(url, timeout=60.0)
        service = build_service(
            store=store, workspace=workspace, host_id=host_id, settings=Settings(policy="ssot")
        )
        service.start_session(session_id)
        order = list(paths)
        rng = random.Random(session_id)
        outcomes: list[dict[str, str]] = []
        for n, call_id in zip(range(PASSES), calls[session_id], strict=True):
            rng.shuffle(order)
            seen = {path: service.index_file(session_id, path).outcome.value for path in order}
            outcomes.append(seen)
            service.record_tool_call(
                session_id, call_id, tool="bash", args={"pass": n}, output=f"pass {n}"
            )
            barrier.wait(timeout=300)  # every agent has finished this pass
            barrier.wait(timeout=300)  # the test has changed the files for the next one
        refused = {}
        for other, their_calls in calls.items():
            if other == session_id:
                continue
            for call_id in their_calls:
                for tool in (service.activate, service.pin):
                    try:
                        tool(session_id, call_id)
                    except SelfContextError as exc:
                        refused[f"{tool.__name__} {call_id}"] = type(exc).__name__
                    else:
                        refused[f"{tool.__name__} {call_id}"] = "accepted"
        state = service.state(session_id)
        results.put(
            (
                session_id,
                {
                    "index": list(state.index),
                    "pool": sorted(state.pool),
                    "active": sorted(state.active),
                    "log": service.log_position(session_id),
                    "refused": refused,
                    "outcomes": outcomes,
                },
            )
        )
        store.close()
    except BaseException:
        barrier.abort()  # siblings and the test stop waiting at once
        results.put((session_id, {"error": traceback.format_exc()}))
        raise


# -- the crash test --------------------------------------------------------------------------


def doc_digest(doc: Mapping[str, Any]) -> str:
    """A version's fingerprint: SHA-256 of its canonical JSON."""
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class KillingTransport(httpx.BaseTransport):
    """Once armed, counts HTTP requests and SIGKILLs this process at the ``at``-th one:
    ``before`` sending it, or ``after`` its answer arrived (say, a commit the node applied but
    nobody acknowledged)."""

    def __init__(self, inner: httpx.BaseTransport, at: int, when: str, armed: bool) -> None:
        self.inner = inner
        self.at = at
        self.when = when
        self.armed = armed
        self.count = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.count += self.armed
        if self.count == self.at and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        response = self.inner.handle_request(request)
        if self.count == self.at and self.when == "after":
            response.read()
            os.kill(os.getpid(), signal.SIGKILL)
        return response

    def close(self) -> None:
        self.inner.close()


class AckingStore(ObjectStore):
    """Writes down every commit the store acknowledged: one JSON line per commit in ``acks``
    (appended with a single ``write``, so a kill leaves whole lines) and ``ack <command>`` on
    stdout for each command it holds; ``on_ack`` is told each command's name."""

    def __init__(
        self, inner: ObjectStore, acks: str, on_ack: Callable[[str], None] = lambda _: None
    ) -> None:
        self.inner = inner
        self.on_ack = on_ack
        self.fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def commit(self, puts: Sequence[Document], expect: Sequence[Expect] = ()) -> Receipt:
        receipt = self.inner.commit(puts, expect)
        # A commit holds every command of one ingest (decision 0077), their log entries in one
        # document (decision 0134): the entries' ids are listed as well as the documents'.
        held = [e for d in puts if d.get("type") == LOG_TYPE for e in log_entries(d)]
        line = json.dumps(
            {
                "tx": receipt.tx_id,
                "docs": {d["xt/id"]: doc_digest(d) for d in puts},
                "entries": [e["xt/id"] for e in held],
            }
        )
        os.write(self.fd, (line + "\n").encode())
        # One line per command.
        for command in [str(e["command"]) for e in held] or [""]:
            print("ack", command, flush=True)
            self.on_ack(command)
        return receipt

    def get(self, object_id: str) -> Document | None:
        return self.inner.get(object_id)

    def get_many(self, object_ids: Any) -> dict[str, Document]:
        return self.inner.get_many(object_ids)

    def history(self, object_id: str) -> list[Version]:
        return self.inner.history(object_id)

    def get_as_of(self, object_id: str, tx_id: int) -> Document | None:
        return self.inner.get_as_of(object_id, tx_id)

    def get_many_as_of(self, object_ids: Any, tx_id: int) -> dict[str, Document]:
        return self.inner.get_many_as_of(object_ids, tx_id)

    def session_log(self, session_id: str, after_seq: int = 0) -> list[Document]:
        return self.inner.session_log(session_id, after_seq)

    def ids_of_type(self, doc_type: str) -> list[str]:
        return self.inner.ids_of_type(doc_type)

    def latest_tx(self) -> Receipt | None:
        return self.inner.latest_tx()

    def changes(self, after_tx_id: int | None = None, limit: int = 500) -> Any:
        return self.inner.changes(after_tx_id, limit)

    def close(self) -> None:
        os.close(self.fd)
        self.inner.close()


def replay_service(store: ObjectStore, workspace: str, filesystem: str) -> ContextService:
    """The service every replay of the crash test runs on (the reference one included)."""
    return build_service(
        store=store,
        workspace=workspace,
        default_filesystem_id=filesystem,
        settings=Settings(policy="ssot"),
    )


def carry_on(trajectory: Trajectory, service: ContextService, session_id: str) -> None:
    """Open the session (start it, or resume it as a restarted harness would) and hand it the
    trajectory's message lists call by call, as ``selfctx.adapters.harness.replay`` does; the
    ingestion cursor skips what the stored chat already holds. A context tool whose result is
    recorded already is not run again."""
    session = HarnessSession(
        service, session_id, "openai", cwd=trajectory.cwd, roots=[trajectory.workspace]
    )
    messages = list(trajectory.messages)
    context_calls = {
        call["id"]: (call["function"]["name"], _arguments(call["function"].get("arguments")))
        for message in messages
        for call in message.get("tool_calls") or ()
        if is_context_tool(call["function"]["name"])
    }
    done = 0
    for end in [call.position for call in trajectory.calls] + [len(messages)]:
        for index in range(done, end):
            call_id = str(messages[index].get("tool_call_id"))
            if call_id not in context_calls:
                continue
            session.ingest(messages[:index])
            if session.ids.answer(call_id) not in session.ids.answered:
                answer = session.handle(*context_calls[call_id]).message
                messages[index] = {**messages[index], "content": answer}
        session.ingest(messages[:end])
        service.assemble(session_id)
        done = max(done, end)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    parsed = json.loads(raw or "{}")
    return parsed if isinstance(parsed, dict) else {}


def _replay_main(args: argparse.Namespace) -> int:
    trajectory = load(args.trajectory)[0]
    transport = KillingTransport(
        httpx.HTTPTransport(), args.kill_at, args.kill_when, armed=args.arm_after <= 0
    )
    commands = 0

    def arm(command: str) -> None:
        nonlocal commands
        commands += command != "Resume"
        transport.armed = transport.armed or commands >= args.arm_after

    http = httpx.Client(
        base_url=args.url, headers={"Accept": "application/json"}, transport=transport
    )
    client = XtdbClient(http, key=lambda: secret.read_key(args.url))
    node = XtdbStore(client, timeout=30.0, owns_http=True)
    # As open_store does: see every transaction submitted before, also by the client killed last.
    node.client.sync(wait=25.0, timeout=30.0)
    store = AckingStore(node, args.acks, arm)
    service = replay_service(store, args.workspace, args.filesystem)
    carry_on(trajectory, service, args.session)
    store.close()
    print("done", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.xtdb.clients")
    commands = parser.add_subparsers(dest="command", required=True)
    replay = commands.add_parser("replay", help="carry a trajectory on into a session")
    replay.add_argument("--url", required=True)
    replay.add_argument("--trajectory", required=True)
    replay.add_argument("--session", required=True)
    replay.add_argument("--filesystem", required=True)
    replay.add_argument("--workspace", required=True)
    replay.add_argument("--acks", required=True)
    replay.add_argument(
        "--arm-after", type=int, default=0, help="count requests after N commands (resumes aside)"
    )
    replay.add_argument("--kill-at", type=int, default=0, help="SIGKILL at the N-th request")
    replay.add_argument("--kill-when", choices=("before", "after"), default="before")
    args = parser.parse_args(argv)
    return _replay_main(args)


if __name__ == "__main__":
    sys.exit(main())
