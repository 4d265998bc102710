"""``selfctx sessions``, ``show SESSION``, ``history OBJECT_ID``: what a store holds.

- ``sessions``: every session with its turns, log position and object counts.
- ``show SESSION [--at-turn N | --at-position P]``: the exact context the model saw, rebuilt from
  stored versions: after turn N is right before the user message that began turn N+1 (turn 0 is
  what precedes the first user message); without an option, the latest.
- ``history OBJECT_ID``: every stored version of an object with its hashes and times.

They read a persistent store (``--store xtdb://HOST:PORT`` or ``auto``, or ``$SELFCTX_STORE``):
the in-memory store lives and dies with one process, so there is nothing to inspect in it.
Nothing is written: sessions are rebuilt from their log, never resumed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.cli.stores import persistent_store
from selfctx.adapters.harness.render import to_anthropic, to_openai
from selfctx.application.persistence import entry_events
from selfctx.application.ports.store import ObjectStore
from selfctx.application.service import ContextService
from selfctx.domain.errors import InvalidInput, SelfContextError, SessionNotFound

_HASHES = ("identity_hash", "object_hash", "content_hash", "metadata_hash", "file_hash")


def _service(spec: str | None) -> ContextService:
    spec = persistent_store(
        spec,
        "replay or run the agent with --store auto (or xtdb://HOST:PORT) and inspect with the "
        "same --store",
    )
    store: ObjectStore = open_store(spec)
    return build_service(store=store, default_filesystem_id="selfctx-inspect")


def last_position(service: ContextService, session_id: str) -> int:
    """The session's latest log position."""
    entries = service.store.session_log(session_id)
    if not entries:
        if session_id not in service.sessions():
            raise SessionNotFound(session_id)
        return 1
    return int(entries[-1]["seq"])


def turn_end(service: ContextService, session_id: str, turn: int) -> tuple[int, int]:
    """``(log position after turn ``turn``, number of turns)``: the position of the last command
    before the user message that began turn ``turn + 1``, or the last one if there is none."""
    if turn < 0:
        raise InvalidInput("turn", turn, "turns are numbered from 0")
    entries = service.store.session_log(session_id)
    if not entries and session_id not in service.sessions():
        raise SessionNotFound(session_id)
    starts = [
        int(entry["seq"])
        for entry in entries
        for event in entry_events(entry)
        if event["event"] == "UserMessageRecorded"
    ]
    if turn > len(starts):
        raise InvalidInput("turn", turn, f"session {session_id!r} has turns 0 to {len(starts)}")
    if turn < len(starts):
        return starts[turn] - 1, len(starts)
    return (int(entries[-1]["seq"]) if entries else 1), len(starts)


def _sessions(args: argparse.Namespace) -> int:
    service = _service(args.store)
    rows: list[dict[str, Any]] = []
    for session_id in service.sessions():
        try:
            position = last_position(service, session_id)
            state = service.state_at(session_id, position).state
        except SelfContextError as exc:  # one damaged session does not hide the others
            rows.append({"session": session_id, "error": {"kind": exc.kind, "message": str(exc)}})
            continue
        rows.append(
            {
                "session": session_id,
                "turns": state.current_turn,
                "log_position": position,
                "objects": len(state.index),
                "active": len(state.active),
                "pinned": len(state.pinned),
            }
        )
    if args.json:
        print(json.dumps(rows))
        return 1 if any("error" in r for r in rows) else 0
    if not rows:
        print("no sessions in this store")
        return 0
    width = max(len(r["session"]) for r in rows)
    print(
        f"{'session':<{width}} {'turns':>6} {'log':>6} {'objects':>8} {'active':>7} {'pinned':>7}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['session']:<{width}} unreadable: {r['error']['message']}")
            continue
        print(
            f"{r['session']:<{width}} {r['turns']:>6} {r['log_position']:>6} "
            f"{r['objects']:>8} {r['active']:>7} {r['pinned']:>7}"
        )
    return 1 if any("error" in r for r in rows) else 0


def _show(args: argparse.Namespace) -> int:
    service = _service(args.store)
    sid = args.session
    if args.at_turn is not None and args.at_position is not None:
        raise InvalidInput("--at-turn", args.at_turn, "give --at-turn or --at-position, not both")
    if args.at_turn is not None:
        position, turns = turn_end(service, sid, args.at_turn)
        where = f"after turn {args.at_turn} (turns 0 to {turns}), "
    else:
        position = args.at_position or last_position(service, sid)
        where = "latest, " if args.at_position is None else ""
    past = service.state_at(sid, position)
    context = service.context_at(sid, position)
    if args.format == "openai":
        print(json.dumps(to_openai(context), indent=2, ensure_ascii=False))
        return 0
    if args.format == "anthropic":
        print(json.dumps(to_anthropic(context), indent=2, ensure_ascii=False))
        return 0
    state = past.state
    budget = service.budget_of(context, state.policy)
    compaction = (
        ("needs compacting" if budget.needs_compaction else "no compaction needed")
        if budget.compaction_enabled
        else "compaction off"
    )
    print(
        f"session {sid}, {where}at log position {position} (transaction {past.tx_id}): "
        f"{len(state.index)} objects, {len(state.active)} active, "
        f"{len(state.pool) - len(state.active)} collapsed, {len(state.pinned)} pinned\n"
        f"budget: chat {budget.history_tokens:,} of {budget.max_history_tokens:,} tokens, "
        f"prompt {budget.prompt_tokens:,} of {budget.max_input_tokens:,} "
        f"({budget.remaining:,} remaining), {compaction}\n",
        file=sys.stdout,
    )
    print(context.to_text())
    return 0


def _history(args: argparse.Namespace) -> int:
    service = _service(args.store)
    versions = service.history(args.object_id)
    if not versions:
        raise InvalidInput("object id", args.object_id, "this store holds no version of it")
    rows: list[dict[str, Any]] = []
    for n, version in enumerate(versions, 1):
        doc = version.document
        row: dict[str, Any] = {
            "version": n,
            "tx_id": version.tx_id,
            "tx_time": version.tx_time,
            "type": doc.get("type"),
        }
        row.update({h: doc.get(h) for h in _HASHES if h in doc})
        content = doc.get("content")
        row["chars"] = len(content) if isinstance(content, str) else None
        if isinstance(doc.get("source"), dict):
            row["path"] = doc["source"].get("path")
        if doc.get("content_status"):
            row["content_status"] = doc["content_status"]
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return 1 if any("error" in r for r in rows) else 0
    print(f"{args.object_id}: {len(rows)} version(s)")
    for row in rows:
        head = f"#{row['version']} tx {row['tx_id']} at {row['tx_time']} type={row['type']}"
        if row.get("path"):
            head += f" path={row['path']}"
        head += " content=none" if row["chars"] is None else f" content={row['chars']:,} chars"
        if row.get("content_status"):
            head += f" [{row['content_status']}]"
        print(head)
        for h in _HASHES:
            if h in row:
                print(f"    {h:<14} {row[h]}")
    return 0


def register(subparsers: Any) -> None:
    store_help = "xtdb://HOST:PORT or auto (default: $SELFCTX_STORE); memory has nothing to show"
    sessions = subparsers.add_parser(
        "sessions",
        help="list the sessions a store holds (exit status 1 when one could not be read: its row"
        " says why)",
    )
    sessions.add_argument("--store", help=store_help)
    sessions.add_argument("--json", action="store_true", help="print JSON")
    sessions.set_defaults(handler=_sessions)

    show = subparsers.add_parser(
        "show", help="print a session's context, as it was after a turn or now"
    )
    show.add_argument("session", help="session id (see selfctx sessions)")
    show.add_argument("--at-turn", type=int, metavar="N", help="as it was after turn N")
    show.add_argument("--at-position", type=int, metavar="P", help="after log position P")
    show.add_argument(
        "--format",
        choices=("text", "openai", "anthropic"),
        default="text",
        help="text (default) or the provider request as JSON",
    )
    show.add_argument("--store", help=store_help)
    show.set_defaults(handler=_show)

    history = subparsers.add_parser(
        "history", help="every stored version of an object, with hashes and times"
    )
    history.add_argument("object_id")
    history.add_argument("--store", help=store_help)
    history.add_argument("--json", action="store_true", help="print JSON")
    history.set_defaults(handler=_history)
