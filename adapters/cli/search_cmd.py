"""``selfctx search QUERY``: ranked search over what the sessions of a store have seen.

Every term of the query must occur, as a case-insensitive substring ("quoted phrases" stay
whole); hits are ranked by BM25. Without ``--session`` the whole store is searched (the
operator's view); with it, only what that session has seen. The index is a SQLite file built from
the store's transaction log and kept between runs (``--index``, default under the user's cache
folder, one per store address), so each run only reads what was committed since the last one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.cli.stores import persistent_store
from selfctx.adapters.config import setting
from selfctx.adapters.harness.tools import hit_to_json
from selfctx.application.ports.search import KINDS, MAX_LIMIT, ROLES
from selfctx.application.service import ContextService

INDEX_ENV = "SELFCTX_SEARCH_INDEX"


def default_index_path(store_spec: str) -> Path:
    """Where the search index of a store is kept: one file per store address, under
    ``$XDG_CACHE_HOME/self-context-manager/search`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    name = hashlib.sha256(store_spec.encode("utf-8")).hexdigest()[:16]
    return Path(base) / "self-context-manager" / "search" / f"{name}.sqlite"


def search_service(store_spec: str | None, index: str | None) -> ContextService:
    """A service over a persistent store with its search index on disk."""
    spec = persistent_store(
        store_spec, "search a persistent store (--store auto or xtdb://HOST:PORT)"
    )
    chosen = setting("search.index", index)
    path = Path(chosen or default_index_path(spec))
    if chosen is None:  # the folders of the default place are ours: the owner's alone
        for folder in (path.parent.parent, path.parent):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if folder.stat().st_uid == os.geteuid():
                folder.chmod(0o700)
    else:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return build_service(
        store=open_store(spec), default_filesystem_id="selfctx-search", search_path=str(path)
    )


def _print_hits(hits: list[dict[str, Any]], query: str, session: str | None) -> None:
    scope = f"session {session}" if session else "every session"
    if not hits:
        print(f"nothing in {scope} matches {query!r}")
        return
    print(f"{len(hits)} hit(s) for {query!r} in {scope}, best first:")
    for n, hit in enumerate(hits, 1):
        if hit["type"] == "message":
            where = f"{hit['session_id']} turn {hit['turn']} {hit['role']} (position {hit['seq']})"
            head = f"message  {where}"
        elif hit["type"] == "toolcall":
            head = f"toolcall {hit['object_id']} [{hit['session_id']}, turn {hit['turn']}]"
            head += f" {hit['title']}"
        else:
            latest = "latest" if hit["latest"] else "not the latest"
            head = f"file     {hit['title']} version {hit['version']} ({latest}) {hit['object_id']}"
            reporter = hit.get("reported_by")
            if reporter is not None and reporter != session:  # decision 0031
                head += f" [reported by session {reporter}'s harness; not read from the file]"
        print(f"{n:>3}. {head}")
        print(f"       {hit['snippet']}")


def _search(args: argparse.Namespace) -> int:
    service = search_service(args.store, args.index)
    try:
        hits = service.search(
            args.query,
            session_id=args.session,
            role=args.role,
            kind=args.type,
            limit=args.limit,
        )
    finally:
        service.close()
        service.store.close()
    rows = [hit_to_json(hit) for hit in hits]
    if args.json:
        print(json.dumps({"hits": rows}, ensure_ascii=False))  # the RPC method's shape
    else:
        _print_hits(rows, args.query, args.session)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "search", help="ranked search over messages, tool outputs and file versions"
    )
    parser.add_argument("query", help='words (each must occur) or "a phrase"')
    parser.add_argument("--session", metavar="ID", help="only what this session has seen")
    parser.add_argument("--role", choices=ROLES, help="only messages of this role (tool: outputs)")
    parser.add_argument("--type", choices=KINDS, help="only this kind of hit")
    parser.add_argument(
        "--limit", type=int, default=20, metavar="N", help=f"at most N hits (1-{MAX_LIMIT})"
    )
    parser.add_argument("--store", help="xtdb://HOST:PORT or auto (default: $SELFCTX_STORE)")
    parser.add_argument(
        "--index",
        metavar="PATH",
        help="the search index file (default: $SELFCTX_SEARCH_INDEX, or one per store under "
        "~/.cache/self-context-manager/search)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_search)
