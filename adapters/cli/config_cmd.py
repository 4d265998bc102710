"""``selfctx config``: every setting, its value and where the value comes from.

- ``selfctx config`` (or ``config show``): one line per setting set by a variable or a file, then
  the files read; ``--all`` lists the defaults too; ``--json`` prints it all as one object.
- ``selfctx config files``: the configuration files, in the order they are read.

Secrets (``proxy.token``, ``summarizer.key``) are never printed, only whether they are set.
See docs/configuration.md.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from selfctx.adapters.config import SETTINGS, config_files, load_config

__all__ = ["register"]


def _show(args: argparse.Namespace) -> int:
    config = load_config()
    rows = []
    for item in SETTINGS:
        value, source, where = config.lookup(item.key)
        if source == "default" and not args.all:
            continue
        shown = "(set)" if item.secret and value else value
        if source == "default" and value is None:
            shown = item.describe_default()
        rows.append({"key": item.key, "value": shown, "source": source, "from": where})
    files = [{"path": str(p), "exists": p.is_file()} for p in config.files]
    if args.json:
        print(json.dumps({"settings": rows, "files": files}))
        return 0
    for row in rows:
        origin = f" ({row['source']}{': ' + row['from'] if row['from'] else ''})"
        print(f"{row['key']} = {_text(row['value'])}{origin}")
    if not rows:
        print("every setting has its default (selfctx config --all lists them)")
    for file in files:
        print(f"# {'read' if file['exists'] else 'absent'}: {file['path']}")
    return 0


def _text(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _files(args: argparse.Namespace) -> int:
    for path in config_files():
        print(f"{path}{'' if path.is_file() else ' (absent)'}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``selfctx config``."""
    parser = subparsers.add_parser(
        "config", help="show the settings and where they come from (docs/configuration.md)"
    )
    parser.add_argument("--all", action="store_true", help="list the defaults too")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=_show)
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION")
    show = actions.add_parser("show", help="the settings (the default action)")
    show.add_argument("--all", action="store_true", help="list the defaults too")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=_show)
    files = actions.add_parser("files", help="the configuration files, in the order read")
    files.set_defaults(handler=_files)
