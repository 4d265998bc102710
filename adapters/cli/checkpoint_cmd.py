"""``selfctx checkpoints SESSION``, ``checkpoint SESSION``, ``rollback SESSION --to LABEL``.

- ``checkpoints``: every checkpoint of a stored session, with the log position it restores.
- ``checkpoint [--label L]``: take one now.
- ``rollback --to LABEL [--conversation | --files | --both] [--dry-run]``: go back. The
  conversation (sets and chat, the default), the files the session wrote since (``--files``), or
  both; files someone else changed since are refused and listed. ``--dry-run`` lists what would
  change and changes nothing. Files are written only inside ``--root`` (default: the current
  directory), and only on this machine's filesystem.

They work on a persistent store (``--store xtdb://HOST:PORT`` or ``auto``, or ``$SELFCTX_STORE``);
the session is read from its log, not resumed, and an agent holding it open catches up.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.cli.stores import persistent_store
from selfctx.adapters.harness.stdio import checkpoint_to_json, rollback_to_json
from selfctx.application.service import ContextService
from selfctx.application.usecases.checkpoints import Mode


def _service(spec: str | None, roots: list[str] | None = None) -> ContextService:
    spec = persistent_store(spec, "use a persistent store (--store auto or xtdb://HOST:PORT)")
    return build_service(store=open_store(spec), roots=roots or [os.getcwd()])


def _checkpoints(args: argparse.Namespace) -> int:
    service = _service(args.store)
    rows = [checkpoint_to_json(cp) for cp in service.checkpoints(args.session)]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
        return 0
    if not rows:
        print(f"session {args.session} has no checkpoints")
        return 0
    width = max(len(r["label"]) for r in rows)
    print(f"{'label':<{width}} {'position':>8} {'turn':>5}  {'taken':<8} at")
    for r in rows:
        taken = "auto" if r["auto"] else "asked"
        print(f"{r['label']:<{width}} {r['position']:>8} {r['turn']:>5}  {taken:<8} {r['at']}")
    return 0


def _checkpoint(args: argparse.Namespace) -> int:
    service = _service(args.store)
    service.resume_session(args.session)
    created = service.checkpoint(args.session, args.label)
    print(json.dumps(checkpoint_to_json(created)) if args.json else f"checkpoint {created.label}")
    return 0


def _rollback(args: argparse.Namespace) -> int:
    mode: Mode = "files" if args.files else "both" if args.both else "conversation"
    service = _service(args.store, args.root)
    report = service.rollback(args.session, args.to, mode=mode, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(rollback_to_json(report), ensure_ascii=False))
        return 0
    would = "would " if report.dry_run else ""
    print(
        f"{args.session}: {would}roll back to {report.label} (position {report.position}), {mode}"
    )
    if mode != "files":
        print(
            f"  chat: {report.turns_before} turns -> {report.turns_after}; "
            f"{len(report.leaving)} objects {would}leave the metadata pool"
        )
    for plan in report.files:
        reason = f" ({plan.reason})" if plan.reason else ""
        print(f"  {plan.action:<9} {plan.path}{reason}")
    if report.saved_as:
        print(f"  the session as it was is checkpoint {report.saved_as} (roll back to it to undo)")
    return 0


def register(subparsers: Any) -> None:
    store_help = "xtdb://HOST:PORT or auto (default: $SELFCTX_STORE)"
    listing = subparsers.add_parser("checkpoints", help="list a session's checkpoints")
    listing.add_argument("session")
    listing.add_argument("--store", help=store_help)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_checkpoints)

    take = subparsers.add_parser("checkpoint", help="take a checkpoint of a session now")
    take.add_argument("session")
    take.add_argument("--label", help="its name (default checkpoint-N)")
    take.add_argument("--store", help=store_help)
    take.add_argument("--json", action="store_true", help="print JSON")
    take.set_defaults(handler=_checkpoint)

    back = subparsers.add_parser(
        "rollback", help="go back to a checkpoint: conversation, files or both"
    )
    back.add_argument("session")
    back.add_argument("--to", required=True, metavar="LABEL", help="the checkpoint")
    what = back.add_mutually_exclusive_group()
    what.add_argument(
        "--conversation", action="store_true", help="the sets and chat only (the default)"
    )
    what.add_argument("--files", action="store_true", help="the files the session wrote only")
    what.add_argument("--both", action="store_true", help="conversation and files")
    back.add_argument("--dry-run", action="store_true", help="list what would change")
    back.add_argument(
        "--root",
        action="append",
        metavar="PATH",
        help="a folder files may be written in (repeatable; default: the current directory)",
    )
    back.add_argument("--store", help=store_help)
    back.add_argument("--json", action="store_true", help="print JSON")
    back.set_defaults(handler=_rollback)
