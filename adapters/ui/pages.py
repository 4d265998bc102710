"""The inspector's pages as HTML. Every value is escaped where it is written; the only script is
the package's own ``static/ui.js`` (the pages work without it, less the live timeline, the
expanding of collapsed outputs in place and instant filtering)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from selfctx.adapters.ui.views import (
    MetView,
    ObjectView,
    PromptItem,
    RequestView,
    SearchView,
    SessionRow,
    TimelineView,
    record_json,
)
from selfctx.application.requests import PARTS

__all__ = [
    "error_page",
    "met_list",
    "met_page",
    "object_page",
    "request_page",
    "search_page",
    "sessions_page",
    "timeline_page",
]


_ESCAPED = re.compile("[&<>\"']").search
"""The characters ``html.escape(..., quote=True)`` replaces: text without them is as it is."""
_UNQUOTED = re.compile(r"[A-Za-z0-9_.\-~:@+=]*").fullmatch
"""What ``quote(..., safe=":@+=")`` leaves as it is (ASCII letters, digits, ``_.-~`` and the
safe ones): an object id, most often."""


def h(value: object) -> str:
    """Text as HTML (quotes too: safe inside attributes). A page writes some 50,000 values,
    most of them short and without a character to replace: those are returned as they are,
    which is what escaping gives them (decision 0103)."""
    text = str(value)
    return html.escape(text, quote=True) if _ESCAPED(text) else text


def q(value: str) -> str:
    """A value as one URL path segment (one that needs no quoting as it is)."""
    return value if _UNQUOTED(value) else quote(value, safe=":@+=")


def _n(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _cost(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "—"


def _time(value: str | None) -> str:
    if not value:
        return "—"
    return h(value.replace("T", " ")[:19])


def layout(base: str, title: str, crumbs: Sequence[tuple[str, str | None]], body: str) -> str:
    trail = " &rsaquo; ".join(
        f'<a href="{h(link)}">{h(text)}</a>' if link else f"<span>{h(text)}</span>"
        for text, link in [("sessions", f"{base}/"), *crumbs]
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{h(title)} · selfctx</title>"
        f'<link rel="stylesheet" href="{h(base)}/static/ui.css">'
        f'<script src="{h(base)}/static/ui.js" defer></script></head>'
        f"<body><header><b>selfctx</b> <nav>{trail}</nav></header><main>{body}</main>"
        "</body></html>"
    )


# -- sessions -------------------------------------------------------------------------------

SESSION_COLUMNS = (
    ("session", "session", "text"),
    ("client", "client", "text"),
    ("model", "model", "text"),
    ("requests", "requests", "num"),
    ("naive", "naive tokens", "num"),
    ("managed", "managed tokens", "num"),
    ("saved", "managed / naive", "num"),
    ("direct", "cost direct", "num"),
    ("cost", "cost managed", "num"),
    ("last", "last activity", "text"),
)


def _sort_key(row: SessionRow, column: str) -> Any:
    return {
        "session": row.session_id,
        "client": row.client or "",
        "model": row.model or "",
        "requests": row.requests,
        "naive": row.naive,
        "managed": row.managed,
        "saved": row.managed / row.naive if row.naive else 2.0,
        "direct": row.cost_direct,
        "cost": row.cost_managed,
        "last": row.last or "",
    }.get(column, row.last or "")


def sessions_page(
    base: str, rows: Sequence[SessionRow], query: str, sort: str, descending: bool
) -> str:
    shown = [
        r
        for r in rows
        if not query
        or query.lower() in " ".join([r.session_id, r.client or "", r.model or ""]).lower()
    ]
    shown.sort(key=lambda r: _sort_key(r, sort), reverse=descending)
    head = []
    for key, label, kind in SESSION_COLUMNS:
        flip = not descending if key == sort else kind == "num"
        link = "?" + urlencode({"q": query, "sort": key, "desc": int(flip)})
        mark = (" ▼" if descending else " ▲") if key == sort else ""
        head.append(
            f'<th class="{kind}" data-key="{key}"><a href="{h(link)}">{h(label)}{mark}</a></th>'
        )
    body = []
    for r in shown:
        text = " ".join([r.session_id, r.client or "", r.model or ""]).lower()
        cells = [
            f'<td><a href="{h(r.home or base)}/s/{q(r.session_id)}">{h(r.session_id)}</a></td>',
            f"<td>{h(r.client or '—')}</td>",
            f"<td>{h(r.model or '—')}</td>",
            f'<td class="num" data-v="{r.requests}">{_n(r.requests)}</td>',
            f'<td class="num" data-v="{r.naive}">{_n(r.naive)}</td>',
            f'<td class="num" data-v="{r.managed}">{_n(r.managed)}</td>',
            f'<td class="num" data-v="{_sort_key(r, "saved")}">{_ratio(r.managed, r.naive)}</td>',
            f'<td class="num" data-v="{r.cost_direct}">{_cost(r.cost_direct)}</td>',
            f'<td class="num" data-v="{r.cost_managed}">{_cost(r.cost_managed)}</td>',
            f"<td>{_time(r.last)}</td>",
        ]
        body.append(f'<tr data-text="{h(text)}">{"".join(cells)}</tr>')
    total_direct = sum(r.cost_direct for r in rows)
    total_managed = sum(r.cost_managed for r in rows)
    summary = (
        f"<p>{len(rows)} sessions, {sum(r.requests for r in rows):,} recorded requests. "
        "Modelled cost of input, in uncached input tokens, by each API's prompt-caching rules: "
        f"{_cost(total_direct)} direct, {_cost(total_managed)} managed "
        f"({_ratio(total_managed, total_direct)}).</p>"
    )
    form = (
        '<form class="filter" method="get">'
        f'<input type="search" name="q" value="{h(query)}" placeholder="filter by session, '
        'client or model" autocomplete="off" id="filter">'
        f'<input type="hidden" name="sort" value="{h(sort)}">'
        f'<input type="hidden" name="desc" value="{int(descending)}">'
        "<button>filter</button></form>"
    )
    table = (
        f'<table class="sessions sortable" id="sessions"><thead><tr>{"".join(head)}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )
    empty = "" if rows else "<p>No sessions in this store yet.</p>"
    return layout(base, "sessions", [], f"<h1>Sessions</h1>{summary}{form}{table}{empty}")


# -- a session's timeline ------------------------------------------------------------------------

LEGEND = (
    ("system", "system prompt"),
    ("metadata", "metadata lines (collapsed outputs, references)"),
    ("chat", "chat"),
    ("active", "active outputs and files"),
    ("naive", "naive request (what the client sent)"),
)


def _search_form(base: str, session_id: str, query: str = "") -> str:
    return (
        f'<form class="search" method="get" action="{h(base)}/s/{q(session_id)}/search">'
        f'<input type="search" name="q" value="{h(query)}" placeholder="search this session" '
        'id="search-box"><button>search</button></form>'
    )


def timeline_page(base: str, view: TimelineView) -> str:
    sid = view.session_id
    records = view.records
    data = [record_json(r, m) for r, m in zip(records, view.markers, strict=True)]
    last = records[-1] if records else None
    if last is not None:
        figures = (
            f"<p>{last.n:,} requests; {last.total_managed:,} managed tokens against "
            f"{last.total_naive:,} naive ({_ratio(last.total_managed, last.total_naive)}); "
            f"modelled cost {_cost(last.cost_managed)} managed, {_cost(last.cost_direct)} "
            f"direct. Log position {view.log_position:,}. "
            f'<a href="{h(base)}/s/{q(sid)}/r/{last.n}">the latest request</a></p>'
        )
    else:
        figures = (
            "<p>No request of this session was recorded (requests are recorded by "
            "<code>selfctx proxy</code>). "
            f'<a href="{h(base)}/s/{q(sid)}/at/{view.log_position}">The context at its latest '
            f"log position ({view.log_position})</a>.</p>"
        )
    legend = "".join(f'<span class="key {k}"></span>{h(text)} ' for k, text in LEGEND)
    chart = (
        f'<div class="legend">{legend}<span class="mark-key">▲</span>collapses, activations, '
        "compactions, checkpoints, rollbacks</div>"
        f'<div id="timeline" class="timeline" '
        f'data-src="{h(base)}/api/s/{q(sid)}/requests" data-link="{h(base)}/s/{q(sid)}/r/">'
        '<p class="note">The chart is drawn by the page\'s script; the table below has the same '
        "figures.</p></div>"
        f'<script type="application/json" id="timeline-data">{_json(data)}</script>'
    )
    rows = "".join(_request_row(base, sid, d) for d in data)
    table = (
        '<table class="requests" id="requests"><thead><tr><th>#</th><th>time</th>'
        '<th class="num">naive</th><th class="num">managed</th><th class="num">cached</th>'
        '<th class="num">system</th><th class="num">metadata</th><th class="num">chat</th>'
        '<th class="num">active</th><th>marks</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )
    body = (
        f"<h1>Session <code>{h(sid)}</code></h1>{figures}{_search_form(base, sid)}"
        f"<h2>Timeline</h2>{chart}<h2>Requests</h2>{table}"
    )
    return layout(base, sid, [(sid, None)], body)


def _json(value: Any) -> str:
    """JSON safe inside a script element."""
    return (
        json.dumps(value, ensure_ascii=True, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )


def _request_row(base: str, sid: str, d: Mapping[str, Any]) -> str:
    parts = d["parts"]
    marks = ", ".join(m["text"] for m in d["marks"])
    naive = "—" if d["naive"] is None else f"{d['naive']:,}"
    round_note = f" (round {d['round']})" if d["round"] else ""
    return (
        f'<tr id="r{d["n"]}"><td><a href="{h(base)}/s/{q(sid)}/r/{d["n"]}">{d["n"]}</a>'
        f"{round_note}</td><td>{_time(d['at'])}</td>"
        f'<td class="num">{naive}</td><td class="num">{d["managed"]:,}</td>'
        f'<td class="num">{d["shared"]:,}</td>'
        + "".join(f'<td class="num">{parts[p]:,}</td>' for p in PARTS)
        + f'<td class="marks">{h(marks)}</td></tr>'
    )


# -- one request ---------------------------------------------------------------------------


def _item(base: str, item: PromptItem, tx_id: int) -> str:
    classes = ["item", item.section]
    if item.role:
        classes.append(item.role)
    if item.state:
        classes.append(item.state)
    head = [f'<span class="role">{h(item.role or item.section)}</span>']
    if item.object_id:
        head.append(
            f'<a class="obj" href="{h(base)}/o/{q(item.object_id)}">{h(item.label or "")}</a>'
        )
    if item.state:
        head.append(f'<span class="state">{h(item.state)}</span>')
    body = f'<pre class="text">{h(item.text)}</pre>'
    for call_id, name, args in item.calls:
        body += (
            f'<div class="call">→ <b>{h(name)}</b> <a class="obj" href="{h(base)}/o/{q(call_id)}">'
            f"{h(call_id)}</a><pre>{h(args)}</pre></div>"
        )
    if item.state == "collapsed" and item.object_id and item.section != "metadata":
        src = f"{base}/api/content/{q(item.object_id)}?tx={tx_id}"
        size = "" if item.size is None else f" ({item.size:,} chars)"
        body += (
            f'<div class="why">why it is collapsed: {h(item.reason or "")}</div>'
            f'<details class="expand" data-src="{h(src)}"><summary>show the output as stored'
            f"{size}</summary>"
            f'<pre class="content"><a href="{h(src)}">open it</a></pre></details>'
        )
    id_attr = (
        f' id="o-{h(item.object_id)}"' if item.object_id and item.section != "metadata" else ""
    )
    head_html = f'<div class="head">{"".join(head)}</div>'
    return f'<div class="{" ".join(classes)}"{id_attr}>{head_html}{body}</div>'


def _names(base: str, pairs: Iterable[tuple[str, str]]) -> str:
    out = "".join(f"<li><code>{h(label)}</code> {h(name)}</li>" for label, name in pairs)
    return f"<ul>{out}</ul>" if out else "<p>none</p>"


def request_page(base: str, view: RequestView) -> str:
    sid = view.session_id
    record = view.record
    session_link = f"{base}/s/{q(sid)}"
    if record is not None:
        title = f"request {record.n} of {view.requests}"
        f = record.facts
        who = ", ".join(
            x
            for x in (
                f.client and f"client {f.client}",
                f.api and f"API {f.api}",
                f.model and f"model {f.model}",
                f.round and f"context-tool round {f.round}",
            )
            if x
        )
        naive = "—" if f.naive_tokens is None else f"{f.naive_tokens:,}"
        figures = (
            f"<p>Sent {_time(record.at)} ({h(who)}). Managed {record.managed_tokens:,} tokens "
            f"({record.managed_shared:,} repeating the previous request) against {naive} naive. "
            f"Assembled at log position {view.seq:,}; objects as of transaction {view.tx_id}.</p>"
        )
        if view.identical:
            check = (
                '<p class="ok" id="identical">✓ Rebuilt from the store, this is the prompt that '
                f"was sent: its digest equals the one recorded then (<code>{view.digest[:16]}"
                "</code>).</p>"
            )
        else:
            why = (
                f"the proxy noted: {h(f.note)}"
                if f.note
                else "a part of it was not logged (emergency truncation leaves turns out of one "
                "prompt only)"
            )
            check = (
                '<p class="bad" id="identical">✗ The context rebuilt from the store differs from '
                f"the one sent (digest <code>{view.digest[:16]}</code>, recorded "
                f"<code>{h(record.digest[:16])}</code>): {why}.</p>"
            )
        prev_link = f"{session_link}/r/{record.n - 1}" if record.n > 1 else None
        next_link = f"{session_link}/r/{record.n + 1}" if record.n < view.requests else None
        jump = (
            f'<form class="jump" method="get" action="{h(session_link)}/r">'
            f'as of request <input type="number" name="n" min="1" max="{view.requests}" '
            f'value="{record.n}"><button>go</button></form>'
        )
    else:
        title = f"log position {view.seq}"
        figures = (
            f"<p>The context right after log position {view.seq:,} of {view.last_seq:,} "
            f"({_time(view.at)}), as <code>selfctx show --at-position {view.seq}</code> prints "
            "it.</p>"
        )
        check = ""
        prev_link = f"{session_link}/at/{view.seq - 1}" if view.seq > 1 else None
        next_link = f"{session_link}/at/{view.seq + 1}" if view.seq < view.last_seq else None
        jump = (
            f'<form class="jump" method="get" action="{h(session_link)}/at">'
            f'at log position <input type="number" name="seq" min="1" max="{view.last_seq}" '
            f'value="{view.seq}"><button>go</button></form>'
        )
    nav = "".join(
        [
            f'<a rel="prev" href="{h(prev_link)}">← previous</a>' if prev_link else "",
            f'<a rel="next" href="{h(next_link)}">next →</a>' if next_link else "",
            jump,
        ]
    )
    items = "".join(_item(base, item, view.tx_id) for item in view.items)
    collapsed = sum(1 for i in view.items if i.state == "collapsed" and i.section == "chat")
    tokens = (
        "".join(f"<li><span class='key {p}'></span>{p}: {view.tokens[p]:,}</li>" for p in PARTS)
        if view.tokens
        else ""
    )
    working = "".join(
        f'<li><a href="{h(base)}/o/{q(w.object_id)}"><code>{h(w.label)}</code></a> {h(w.path)} '
        f"<small>{w.weight:.2f}</small></li>"
        for w in view.working_set
    )
    side = (
        f"<aside><h3>Policy</h3><p>{h(view.policy)}; {view.index:,} objects, {view.pool:,} in the "
        f"pool, {len(view.active):,} active, {collapsed:,} collapsed outputs here.</p>"
        + (f"<h3>Tokens by part</h3><ul>{tokens}</ul>" if tokens else "")
        + f"<h3>Working set</h3>{f'<ul>{working}</ul>' if working else '<p>empty</p>'}"
        f"<h3>Active</h3>{_names(base, view.active)}"
        f"<h3>Pinned</h3>{_names(base, view.pinned)}</aside>"
    )
    body = (
        f'<h1>Session <a href="{h(session_link)}"><code>{h(sid)}</code></a>: {h(title)}</h1>'
        f'{figures}{check}<nav class="pager">{nav}</nav>'
        f'<div class="request"><section class="prompt" id="prompt">{items}</section>{side}</div>'
    )
    return layout(base, f"{sid} {title}", [(sid, session_link), (title, None)], body)


# -- an object ---------------------------------------------------------------------------------


def object_page(base: str, view: ObjectView) -> str:
    rows = []
    for v in view.versions:
        hashes = "<br>".join(f"{h(k)} <code>{h(val)}</code>" for k, val in v.hashes.items())
        chars = "no content" if v.chars is None else f"{v.chars:,} chars"
        status = f" [{h(v.status)}]" if v.status else ""
        rows.append(
            f"<tr><td>{v.number}</td><td>{v.tx_id}</td><td>{_time(v.tx_time)}</td>"
            f'<td>{chars}{status} <a href="{h(base)}/api/content/{q(view.object_id)}'
            f'?tx={v.tx_id}">raw</a></td><td class="hashes">{hashes}</td></tr>'
        )
    versions = (
        "<table class='versions'><thead><tr><th>version</th><th>transaction</th><th>time</th>"
        f"<th>content</th><th>hashes</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    count = len(view.versions)
    diff = ""
    if count > 1:
        a = view.a or count - 1
        b = view.b or count

        def options(chosen: int) -> str:
            return "".join(
                f'<option value="{k}"{" selected" if k == chosen else ""}>{k}</option>'
                for k in range(1, count + 1)
            )

        diff = (
            '<form class="diff-form" method="get">compare version '
            f'<select name="a" id="diff-a">{options(a)}</select> with '
            f'<select name="b" id="diff-b">{options(b)}</select><button>diff</button></form>'
        )
        if view.diff_note:
            diff += f'<p class="note">{h(view.diff_note)}</p>'
        if view.diff:
            lines = "".join(f'<span class="{k}">{h(line) or " "}</span>' for k, line in view.diff)
            diff += f'<pre class="diff" id="diff">{lines}</pre>'
    met = f"{base}/o/{q(view.object_id)}/met"
    sessions = (
        f'<div id="met" data-include="{h(met)}?part=1">'
        f'<a href="{h(met)}">the sessions that met it</a></div>'
    )
    body = (
        f"<h1>{h(view.kind)} <code>{h(view.title)}</code></h1><p>id <code>{h(view.object_id)}"
        f"</code>, {count} version{'s' if count != 1 else ''}</p>"
        f"<h2>Versions</h2>{versions}{diff}<h2>Sessions that met it</h2>{sessions}"
    )
    return layout(base, view.title, [(view.object_id, None)], body)


def met_list(base: str, view: MetView) -> str:
    """The sessions that met an object, as a list (a part of the object's page)."""
    seen = []
    for s in view.sessions:
        link = f"{base}/s/{q(s.session_id)}"
        if not s.detailed:
            seen.append(f'<li><a href="{h(link)}">{h(s.session_id)}</a></li>')
            continue
        first = (
            f"first at log position {s.first_seq} ({_time(s.first_at)})"
            if s.first_seq
            else "when is not in its log"
        )
        if s.first_request:
            first += f', first sent in <a href="{h(link)}/r/{s.first_request}">request '
            first += f"{s.first_request}</a>"
        spans = ", ".join(
            f'<a href="{h(link)}/r/{a}">{a}</a>'
            + (f'&ndash;<a href="{h(link)}/r/{b}">{b}</a>' if b != a else "")
            for a, b in s.active
        )
        active = f"; shown in full in requests {spans}" if spans else "; never sent in full"
        seen.append(f'<li><a href="{h(link)}">{h(s.session_id)}</a>: {first}{active}</li>')
    out = f'<ul id="met-list">{"".join(seen)}</ul>' if seen else "<p>none known</p>"
    if view.note:
        out += f'<p class="note">{h(view.note)}</p>'
    return out


def met_page(base: str, view: MetView) -> str:
    oid = view.object_id
    body = (
        f'<h1>Sessions that met <a href="{h(base)}/o/{q(oid)}"><code>{h(oid)}</code></a></h1>'
        f"{met_list(base, view)}"
    )
    return layout(base, oid, [(oid, f"{base}/o/{q(oid)}"), ("sessions", None)], body)


# -- search -------------------------------------------------------------------------------------


def search_page(base: str, view: SearchView) -> str:
    sid = view.session_id
    link = f"{base}/s/{q(sid)}"
    out = []
    for hit in view.hits:
        where = []
        if hit.request is not None:
            anchor = f"#o-{hit.object_id}" if hit.kind == "toolcall" else ""
            where.append(
                f'<a href="{h(link)}/r/{hit.request}{h(anchor)}">request {hit.request}</a>'
            )
        if hit.kind != "message":
            version = "" if hit.kind != "file" else f" version {hit.version}"
            version += "" if hit.latest or hit.kind != "file" else " (not the latest)"
            where.append(f'<a href="{h(base)}/o/{q(hit.object_id)}">{h(hit.kind)}{version}</a>')
        role = f" {h(hit.role)}" if hit.role and hit.kind == "message" else ""
        turn = f", turn {hit.turn}" if hit.turn is not None else ""
        out.append(
            f'<li class="hit {h(hit.kind)}"><b>{h(hit.kind)}{role}</b>{turn}: {h(hit.title)} '
            f"— {' · '.join(where)}<div class='snippet'>{h(hit.snippet)}</div></li>"
        )
    if view.note:
        result = f'<p class="bad">{h(view.note)}</p>'
    elif view.query.strip():
        count = f"{len(view.hits)} hit{'s' if len(view.hits) != 1 else ''}"
        result = f"<p>{count} for <q>{h(view.query)}</q>, best first</p>"
        result += f'<ol class="hits" id="hits">{"".join(out)}</ol>'
    else:
        result = ""
    body = (
        f'<h1>Search session <a href="{h(link)}"><code>{h(sid)}</code></a></h1>'
        f"{_search_form(base, sid, view.query)}{result}"
    )
    return layout(base, f"search {sid}", [(sid, link), ("search", None)], body)


def error_page(base: str, status: int, message: str) -> str:
    return layout(base, str(status), [], f'<h1>{status}</h1><p class="bad">{h(message)}</p>')
