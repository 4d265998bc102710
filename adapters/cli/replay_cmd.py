"""``selfctx replay FILE``: replay a recorded agent session through the context manager.

For every model call the original harness made, prints the size of the prompt it sent (naive)
beside the size of the prompt the context manager assembles (managed), the active and collapsed
object counts and what the model ran next, then totals, what the columns mean and where to look
next; every figure names the tokenizer that produced it. ``--show N`` prints the context the model
saw at call N (-1: the last). The in-memory store is the default (a fresh one per trajectory);
with ``--store xtdb://HOST:PORT`` or ``auto`` the sessions stay for ``selfctx sessions``, ``show``
and ``history``, and the table gives each call's log position (``selfctx show --at-position``).
Tool outputs are stored under ids of their own, ``tc_`` and 24 hex digits, derived from the
session, the harness's call id and how often the harness used it (decision 0030).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.cli.stores import STORE_HELP
from selfctx.adapters.config import load_config, setting
from selfctx.adapters.harness.replay import (
    ReplayReport,
    replay,
    replay_filesystem_id,
    session_id_for,
    totals,
)
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tokens import PromptCounter
from selfctx.adapters.harness.trajectories import ModelCall, Trajectory, load
from selfctx.adapters.memory import MemoryStore
from selfctx.adapters.tokenizer import default_tokenizer
from selfctx.application.policies import DEFAULT_POLICY, POLICIES
from selfctx.application.ports.store import ObjectStore
from selfctx.domain.errors import InvalidInput
from selfctx.domain.rendering import call_summary

SAMPLE_SESSION = Path(__file__).with_name("sample_session.json")
"""The example session the project ships (``make demo`` replays it)."""


class ProgressBar:
    """A one-line bar on a terminal: ``[#####.....] 12/64 name``."""

    WIDTH = 30

    def __init__(self, out: TextIO, label: str) -> None:
        self.out = out
        self.label = label
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        filled = self.WIDTH * done // max(total, 1)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.out.write(f"\r[{bar}] {done}/{total} {self.label}")
        self.out.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.out.write("\r" + " " * (self.WIDTH + len(self.label) + 16) + "\r")
            self.out.flush()


class ShowCall:
    """Keeps the context and request assembled at call ``number``."""

    def __init__(self, number: int | None) -> None:
        self.number = number
        self.text: str | None = None
        self.request: Mapping[str, Any] | None = None

    def __call__(
        self, number: int, call: ModelCall, session: HarnessSession, request: Mapping[str, Any]
    ) -> None:
        if number == self.number:
            self.text = session.service.assemble(session.session_id).to_text()
            self.request = request


def _sessions(trajectories: list[Trajectory], requested: str | None, persistent: bool) -> list[str]:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    if requested:
        if len(trajectories) == 1:
            return [requested]
        return [f"{requested}-{n}" for n in range(1, len(trajectories) + 1)]
    return [session_id_for(t, stamp if persistent else "") for t in trajectories]


def run_replays(
    trajectories: list[Trajectory],
    *,
    store_spec: str = "memory",
    request_format: str = "openai",
    session: str | None = None,
    show: int | None = None,
    progress: bool = False,
    err: TextIO | None = None,
    policy: str | None = None,
) -> tuple[list[ReplayReport], list[ShowCall], PromptCounter]:
    """Replay each trajectory into its own session; one tokenizer counts every figure."""
    counter = PromptCounter(default_tokenizer())
    chosen = load_config().policy(policy)  # --policy, else the policy settings
    persistent = store_spec != "memory"
    shared: ObjectStore | None = open_store(store_spec) if persistent else None
    reports, shown = [], []
    for trajectory, session_id in zip(
        trajectories, _sessions(trajectories, session, persistent), strict=True
    ):
        store = shared if shared is not None else MemoryStore()
        service = build_service(
            store=store,
            workspace=trajectory.workspace,
            default_filesystem_id=replay_filesystem_id(trajectory),
        )
        bar = ProgressBar(err or sys.stderr, trajectory.name) if progress else None
        keep = ShowCall(len(trajectory.calls) + 1 + show if show is not None and show < 0 else show)
        try:
            reports.append(
                replay(
                    trajectory,
                    service,
                    counter,
                    session_id=session_id,
                    request_format=request_format,
                    observe=keep,
                    progress=bar,
                    policy=chosen,
                )
            )
        finally:
            if bar is not None:
                bar.close()
        shown.append(keep)
    return reports, shown, counter


def _pct(new: int, old: int) -> str:
    return f"{(new - old) / old * 100:+.1f}%" if old else "n/a"


RAN_CHARS = 48
"""The width of the table's last column, what the model ran after each call."""


def ran(trajectory: Trajectory, number: int) -> str:
    """What the recorded model did with call ``number``: the tool calls it asked for (name and
    command), else the start of its answer."""
    message = trajectory.messages[trajectory.calls[number - 1].position]
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            arguments = function.get("arguments")
        calls.append(call_summary(str(function.get("name", "?")), arguments))
    text = "; ".join(calls) if calls else "answer: " + _content_text(message.get("content"))
    return text if len(text) <= RAN_CHARS else text[: RAN_CHARS - 1] + "…"


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return " ".join(str(content or "").split())


def print_table(
    report: ReplayReport, trajectory: Trajectory, out: TextIO, *, positions: bool = False
) -> None:
    """The per-call table; ``positions`` adds each call's log position (``selfctx show
    --at-position``), for a session a persistent store keeps."""
    recorded = any(c.recorded_prompt_tokens is not None for c in report.calls)
    print(
        f"\n{trajectory.name} ({trajectory.format}): {len(report.calls)} model calls, "
        f"session {report.session_id}",
        file=out,
    )
    for note in trajectory.notes:
        print(f"  note: {note}", file=out)
    head = f"{'call':>5}" + (f" {'pos':>6}" if positions else "")
    head += f" {'msgs':>5} {'naive':>9} {'managed':>9} {'change':>8} {'active':>7} "
    head += f"{'collapsed':>9} {'unread':>6}" + (f" {'recorded':>9}" if recorded else "")
    print(head + "  then the model ran", file=out)
    for c in report.calls:
        line = (
            f"{c.call:>5}"
            + (f" {c.log_position:>6}" if positions else "")
            + f" {c.messages:>5} {c.naive_tokens:>9,} {c.managed_tokens:>9,} "
            f"{_pct(c.managed_tokens, c.naive_tokens):>8} {c.active:>7} {c.collapsed:>9} "
            f"{c.unread:>6}"
        )
        if recorded:
            rec = c.recorded_prompt_tokens
            line += f" {rec:>9,}" if rec is not None else f" {'-':>9}"
        print(f"{line}  {ran(trajectory, c.call)}", file=out)
    _print_total(report.total(), report.tokenizer, out)


def _print_total(total: Mapping[str, Any], tokenizer: str, out: TextIO) -> None:
    naive, managed = total["naive_tokens"], total["managed_tokens"]
    print(
        f"total: naive {naive:,}, managed {managed:,} ({_pct(managed, naive)}); "
        f"peak naive {total['peak_naive']:,}, peak managed {total['peak_managed']:,} "
        f"({_pct(total['peak_managed'], total['peak_naive'])}); tokens: {tokenizer}",
        file=out,
    )
    if total.get("used"):
        print(
            f"recall: {total['visible']} of {total['used']} used lines visible "
            f"({total['recall']:.2f}; naive 1.00) — lines of the recorded responses copied from "
            "earlier tool outputs",
            file=out,
        )
    if total.get("recorded_prompt_tokens") is not None:
        print(
            f"recorded by the original harness: {total['recorded_prompt_tokens']:,} prompt tokens "
            "(its provider's tokenizer, tool schemas included)",
            file=out,
        )


def _run(args: argparse.Namespace) -> int:
    args.store = setting("store", args.store)
    path = Path(args.file)
    trajectories = load(path)
    if args.trajectory is not None:
        if not 1 <= args.trajectory <= len(trajectories):
            raise InvalidInput(
                "--trajectory", args.trajectory, f"{path.name} holds {len(trajectories)}"
            )
        trajectories = [trajectories[args.trajectory - 1]]
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    reports, shown, counter = run_replays(
        trajectories,
        store_spec=args.store,
        request_format=args.format,
        session=args.session,
        show=args.show,
        progress=progress and not args.json,
        policy=args.policy,
    )
    if args.show is not None and not any(s.text is not None for s in shown):
        calls = max(len(t.calls) for t in trajectories)
        raise InvalidInput("--show", args.show, f"the trajectory has calls 1 to {calls}")
    if args.json:
        print(json.dumps(_json(path, args, reports, shown, counter)))
        return 0
    out = sys.stdout
    persistent = args.store != "memory"
    print(f"replay of {path} on the {args.store} store; tokens: {counter.name}", file=out)
    for report, trajectory in zip(reports, trajectories, strict=True):
        print_table(report, trajectory, out, positions=persistent)
    if len(reports) > 1:
        print(f"\nall {len(reports)} trajectories:", file=out)
        _print_total(totals(reports), counter.name, out)
    _print_guide(reports, trajectories, args, out)
    for keep, report in zip(shown, reports, strict=True):
        if keep.text is not None:
            print(
                f"\n{'=' * 16} context at call {keep.number} of {report.trajectory} {'=' * 16}",
                file=out,
            )
            print(keep.text, file=out)
    return 0


def _say(text: str, out: TextIO) -> None:
    print(textwrap.fill(text, width=98, subsequent_indent="  ", break_on_hyphens=False), file=out)


def _print_guide(
    reports: list[ReplayReport],
    trajectories: list[Trajectory],
    args: argparse.Namespace,
    out: TextIO,
) -> None:
    """What the table's columns mean, why managed may cost more at first, where to look next."""
    print(file=out)
    _say(
        "the columns: naive = tokens of the prompt the harness sent (its whole message list, "
        "every output in full); managed = tokens of the prompt the context manager builds from "
        "the same history instead; change = managed against naive; active = objects (files, "
        "tool outputs) shown in full; collapsed = shown as one line; unread = files seen in a "
        "listing, never read; msgs = the harness's messages; then the model ran = what the "
        "recorded model did next",
        out,
    )
    for report in reports:
        first = next((c.call for c in report.calls if c.managed_tokens <= c.naive_tokens), None)
        if first is None or first == 1:
            continue
        name = f" of {report.trajectory}" if len(reports) > 1 else ""
        _say(
            f"why calls 1-{first - 1}{name} cost more managed than naive: the managed prompt adds "
            "what naive lacks, a guide to the context tools in the system prompt and a line per "
            "object the model has met (its handle, tool, size, files), while nothing has "
            f"collapsed yet; from call {first} on, collapsed outputs save more than that",
            out,
        )
    session = reports[0].session_id
    if args.store == "memory":
        where = (
            "with --store auto the sessions stay in a local XTDB node for selfctx sessions, "
            "show and history;"
        )
    else:
        turns = sum(1 for m in trajectories[0].messages if m.get("role") == "user")
        where = (
            f"selfctx show {session} --store {args.store} --at-position P rebuilds the context "
            f"of the call whose pos is P (--at-turn N counts user messages instead: this "
            f"session has {turns});"
        )
    _say(
        f"next: selfctx replay {args.file} --show N prints the context the model saw at call N; "
        f"{where} selfctx replay TRAJECTORY replays your own mini-swe-agent, SWE-agent or "
        "OpenHands runs (docs/harness.md)",
        out,
    )


def _json(
    path: Path,
    args: argparse.Namespace,
    reports: list[ReplayReport],
    shown: list[ShowCall],
    counter: PromptCounter,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "file": str(path),
        "store": args.store,
        "tokenizer": counter.name,
        "trajectories": [
            {
                "trajectory": r.trajectory,
                "format": r.format,
                "session": r.session_id,
                "calls": len(r.calls),
                "total": r.total(),
            }
            for r in reports
        ],
        "calls": [{"trajectory": r.trajectory, **c.to_json()} for r in reports for c in r.calls],
        "total": totals(reports),
    }
    for keep, report in zip(shown, reports, strict=True):
        if keep.request is not None:
            result.setdefault("show", []).append(
                {
                    "trajectory": report.trajectory,
                    "call": keep.number,
                    "format": args.format,
                    "request": keep.request,
                }
            )
    return result


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a recorded agent session: naive vs managed prompt size per model call",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "file",
        nargs="?",
        default=str(SAMPLE_SESSION),
        help="a trajectory: mini-swe-agent .traj.json, SWE-agent .traj, OpenHands .jsonl, or "
        "the project's openai-messages JSON (default: the shipped example session)",
    )
    parser.add_argument("--store", default=None, help=STORE_HELP)
    parser.add_argument(
        "--show", type=int, metavar="N", help="print the context at call N (-1: the last)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--session", help="session id (default: replay-<trajectory name>...)")
    parser.add_argument(
        "--trajectory", type=int, metavar="K", help="only the K-th trajectory of the file"
    )
    parser.add_argument(
        "--format",
        choices=("openai", "anthropic"),
        default="openai",
        help="provider format of the managed request (default openai)",
    )
    parser.add_argument(
        "--policy",
        choices=sorted(POLICIES),
        help="layout and collapse policy of the replayed session (default: the policy.name "
        f"setting, {DEFAULT_POLICY})",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    parser.set_defaults(handler=_run)
