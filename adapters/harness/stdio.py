"""``selfctx serve --stdio``: the context manager for a harness in any language.

JSON-RPC 2.0, one JSON value per line: requests on stdin, responses on stdout, logs on stderr
only (the protocol itself, framing and errors are :mod:`selfctx.adapters.harness.rpc`). This module
holds the methods: sessions opened on the server, each a :class:`HarnessSession`, fed and read by
``ingest`` and ``assemble``, and the model's context tools. Every deliberate error of the context
manager reaches the client with its stable ``kind`` as ``data.kind``, and changes nothing.
End of input closes every open session.

docs/harness.md lists the methods with an example exchange.
"""

from __future__ import annotations

import gc
import logging
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attrs

from selfctx.adapters import jsontext
from selfctx.adapters.collector import COLLECTOR
from selfctx.adapters.harness.encode import ascii_dumps
from selfctx.adapters.harness.incremental import Known, NeedWhole, TooDeep
from selfctx.adapters.harness.messages import FORMATS
from selfctx.adapters.harness.request import RequestCache
from selfctx.adapters.harness.resent import Held, ResentLine, read_resent
from selfctx.adapters.harness.rpc import (
    ARRAY,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    OBJECT,
    PARSE_ERROR,
    SERVER_ERROR,
    STR,
    STRINGS,
    Check,
    LineServer,
    Method,
    RawJson,
    RpcError,
    dump_response,
    method,
    project_error,
    too_deep_params,
)
from selfctx.adapters.harness.session import HarnessSession
from selfctx.adapters.harness.tools import hit_to_json, is_prefix, tool_schemas
from selfctx.application.policies import POLICY_NAMES, policy_by_name
from selfctx.application.service import ContextService
from selfctx.application.usecases.checkpoints import (
    MODES,
    CheckpointInfo,
    RollbackReport,
)
from selfctx.domain.chat import whole_chat_read
from selfctx.domain.errors import InvalidInput, InvalidPath, SelfContextError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHODS",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SERVER_ERROR",
    "RpcError",
    "StdioServer",
    "checkpoint_to_json",
    "rollback_to_json",
]

log = logging.getLogger("selfctx.serve")

METHODS: dict[str, Method] = {}
"""Every method the server answers, by name."""

_FORMAT = Check(f"one of {list(FORMATS)}", lambda v: v in FORMATS)
_PREFIX = Check(
    "at most 32 letters, digits, '_' or '-'",
    lambda v: isinstance(v, str) and is_prefix(v),
)
_TEXT = Check("a string or an array of content blocks", lambda v: isinstance(v, str | list))


@attrs.define
class _Open:
    """A session open on this server, with what its answers reuse from one turn to the next."""

    harness: HarnessSession
    policy: str
    kinds: _KindCounts = attrs.field(factory=lambda: _KindCounts())


class StdioServer(LineServer):
    """Answers JSON-RPC requests against one :class:`ContextService`.

    ``cwd`` and ``roots`` (host paths) give the defaults of ``session.open``: the directory
    relative paths in commands are resolved against, and the directories whose paths tool outputs
    may name — translated to the paths the agent sees through the service's mounts.
    """

    methods: ClassVar[Mapping[str, Method]] = METHODS

    def __init__(
        self, service: ContextService, *, cwd: str = "/", roots: Iterable[str] = ("/",)
    ) -> None:
        self.service = service
        self.cwd = cwd
        self.roots = tuple(roots)
        mounts = service.mounts
        self.agent_cwd = mounts.agent_path(cwd) if cwd.startswith("/") else cwd
        """The defaults of ``session.open`` as the agent names them: with mounts configured, the
        agent sees ``/workspace`` where the server was told ``/home/me/project``."""
        self.agent_roots = tuple(
            dict.fromkeys(a for r in self.roots for a in mounts.agent_roots(r))
        )
        self.sessions: dict[str, _Open] = {}
        self.held: dict[str, Held] = {}
        """Each session's last whole list: its text's length, ends and digest
        (:mod:`selfctx.adapters.harness.resent`)."""
        self.reading: ResentLine | None = None
        """The line being answered, when it was read with a list held."""

    def handle_line(self, line: str) -> str | None:
        """A whole list sent again is read only past the items of the last one (decision
        0099); any other line as :class:`LineServer` reads it."""
        resent = read_resent(line, self.held)
        if resent is None:
            return super().handle_line(line)
        self.reading = resent
        try:
            answer = self.handle(resent.request)
        finally:
            self.reading = None
        return None if answer is None else dump_response(answer)

    def close(self) -> None:
        """Close every session opened here (everything is already stored)."""
        for session_id in list(self.sessions):
            self.service.close_session(session_id)
            del self.sessions[session_id]
        _thaw()

    def session(self, session_id: str) -> _Open:
        opened = self.sessions.get(session_id)
        if opened is None:
            raise RpcError(
                SERVER_ERROR,
                "session_not_found",
                f"session {session_id!r} is not open on this server; call session.open first",
                session_id=session_id,
            )
        return opened


# -- methods ------------------------------------------------------------------------------


def _absolute(path: str) -> str:
    """An agent path a session is opened with (``cwd``, a root), checked: absolute, no NUL, and
    text a file system can be asked about (no lone surrogate)."""
    if "\x00" in path:
        raise InvalidPath(path, "a path must not contain NUL")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPath(path, "a path must be text (it holds a lone surrogate)") from None
    if not path.startswith("/"):
        raise InvalidPath(path, "must be an absolute path")
    return posixpath.normpath(path)


def _root_warnings(server: StdioServer, cwd: str, roots: list[str]) -> list[str]:
    """Why a session opened with these roots may index nothing (said, not refused: the roots
    are the harness's to choose)."""
    if not roots:
        return ["no roots: no path in a tool output can be indexed"]
    warnings = []
    if not any(cwd == r or cwd.startswith(r.rstrip("/") + "/") for r in roots):
        warnings.append(
            f"the working directory {cwd} is under none of the roots {roots}: files the agent "
            "names relative to it will not be indexed"
        )
    for root in roots:
        try:
            server.service.object_id_for(root)
        except SelfContextError as exc:
            warnings.append(f"root {root} cannot be read: {exc}")
    return warnings


@method(
    METHODS,
    "session.open",
    {"session_id": STR},
    {
        "system_prompt": STR,
        "policy": STR,
        "format": _FORMAT,
        "cwd": STR,
        "roots": STRINGS,
        "tool_prefix": _PREFIX,
        "policy_options": OBJECT,
    },
)
def _session_open(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    session_id = p["session_id"]
    default = server.service.settings.policy  # the server's (its configuration's) policy
    policy = p.get("policy", default.name)
    if policy not in POLICY_NAMES:
        raise RpcError.bad_params(
            "policy",
            f"unknown policy {policy!r}; the policies are {sorted(POLICY_NAMES)}",
            policies=sorted(POLICY_NAMES),
        )
    if session_id in server.sessions:
        raise RpcError(
            SERVER_ERROR,
            "session_exists",
            f"session {session_id!r} is already open on this server; close it first",
            session_id=session_id,
        )
    try:
        if "policy" in p or "policy_options" in p:
            chosen = policy_by_name(policy, **p.get("policy_options", {}))
        else:
            chosen = default
    except InvalidInput as exc:
        raise RpcError.bad_params("policy_options", str(exc)) from exc
    cwd = _absolute(p.get("cwd", server.agent_cwd))
    roots = [_absolute(r) for r in p.get("roots", server.agent_roots)]
    warnings = _root_warnings(server, cwd, roots)
    # A resume builds a whole session that lives on: full collections meanwhile walk all of it
    # and free nothing (decision 0104, as an assembly's in decision 0098).
    kinds = _KindCounts()
    with COLLECTOR, whole_chat_read():  # each closed turn read back once (decision 0144)
        harness = HarnessSession(
            server.service,
            session_id,
            p.get("format", "openai"),
            system_prompt=p.get("system_prompt", ""),
            cwd=cwd,
            roots=roots,
            policy=chosen,
            tool_prefix=p.get("tool_prefix", ""),
        )
        if harness.resumed is not None:
            # Its first request rendered, counted and encoded, deciding nothing: that request
            # then costs what an ordinary one does (decision 0110). Then what the process holds
            # is set aside from the collector instead of walked once (decision 0116): no walk
            # now, none by the first assembly, and no later collection walks the resumed
            # session again until a session is closed (_thaw).
            harness.prepare()
            # and the index's kinds counted, which the first assembly's statistics would
            # count whole otherwise (decision 0129)
            kinds.count(harness.service.state(session_id))
            gc.freeze()
    policy = harness.service.state(session_id).policy.name  # a resumed session keeps its own
    server.sessions[session_id] = _Open(harness, policy, kinds)
    report = harness.resumed
    out: dict[str, Any] = {
        "session_id": session_id,
        "resumed": report is not None,
        "format": harness.format,
        "policy": policy,
        "recorded": harness.ingestor.total,
        "digest": harness.digest(),
    }
    if warnings:
        out["warnings"] = warnings
        for warning in warnings:
            log.warning("session %s: %s", session_id, warning)
    if report is not None:
        out["reconciled"] = {
            "updated": list(report.updated),
            "deleted": list(report.deleted),
            "orphaned": list(report.orphaned),
            "unchanged": report.unchanged,
        }
    return out


@method(
    METHODS,
    "ingest",
    {"session_id": STR, "messages": ARRAY},
    {"format": _FORMAT, "system": _TEXT, "extends": STR},
    checks_nesting=True,
)
def _ingest(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    """The harness's whole list, or (with ``extends``) only its new messages after the list
    whose digest ``extends`` names. Either way only what the server has not seen is parsed."""
    session_id = p["session_id"]
    harness = server.session(session_id).harness
    before = harness.ingestor.total
    reading = server.reading
    server.held.pop(session_id, None)
    try:
        if "extends" in p:
            result = harness.append(p["messages"], p["extends"], p.get("system"), p.get("format"))
        else:
            result = _ingest_list(harness, p, reading)
    except TooDeep:
        raise too_deep_params() from None
    except SelfContextError as exc:
        # Validation refuses a bad list before recording anything; a failure while recording
        # (the store, a tool-call id another session owns) says how far it got.
        failure = project_error(exc)
        failure.details["consumed"] = harness.ingestor.total - before
        raise failure from exc
    if reading is not None and "extends" not in p and reading.session_id == session_id:
        server.held[session_id] = reading.held(harness.list_version)
    return {
        "consumed": result.consumed,
        "diverged": result.diverged,
        "total": result.total,
        "digest": result.digest,
    }


def _ingest_list(harness: HarnessSession, p: dict[str, Any], reading: ResentLine | None) -> Any:
    known = reading.known if reading is not None else None
    if known is None or reading is None or reading.session_id != p["session_id"]:
        return harness.ingest(p["messages"], p.get("system"), p.get("format"))
    try:
        return harness.ingest(
            p["messages"],
            p.get("system"),
            p.get("format"),
            known=Known(known.count, known.version, known.last),
        )
    except NeedWhole:  # not the list the session remembers: the line's items, read whole
        messages = jsontext.loads(reading.line)["params"]["messages"]
        return harness.ingest(messages, p.get("system"), p.get("format"))


@method(METHODS, "assemble", {"session_id": STR}, {"format": _FORMAT})
def _assemble(server: StdioServer, p: dict[str, Any]) -> RawJson:
    harness = server.session(p["session_id"]).harness
    fmt = p.get("format", harness.format)
    with COLLECTOR:  # a first assembly allocates a prompt's worth that lives on (decision 0098)
        if fmt == harness.format:
            request = harness.encoded_request()
        else:
            context = server.service.assemble(harness.session_id)
            one = RequestCache(fmt, tool_prefix=harness.tool_prefix, spill=False)
            request = one.render(context)
    state = server.service.state(harness.session_id)
    files, toolcalls = server.session(p["session_id"]).kinds.count(state)
    stats = {
        "index": len(state.index),
        "pool": len(state.pool),
        "active": len(state.active),
        "pinned": len(state.pinned),
        "collapsed": len(state.pool) - len(state.active),
        "files": files,
        "toolcalls": toolcalls,
        "turns": len(state.turns),
        "messages": request.messages,
        "chars": request.chars,
        "log_position": server.service.log_position(harness.session_id),
        "cached_chars": server.service.cached_chars(harness.session_id),
    }
    *parts, last = request.parts  # the request's object, with its stats added at its end
    return RawJson(*parts, last[:-1], ',"stats":', ascii_dumps(stats), "}")


def _context_method(name: str) -> None:
    def run(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
        harness = server.session(p["session_id"]).harness
        result = getattr(server.service, name)(harness.session_id, harness.ids.resolve(p["id"]))
        return {"ok": result.ok, "message": result.message}

    method(METHODS, name, {"session_id": STR, "id": STR})(run)


for _name in ("activate", "deactivate", "pin", "unpin"):
    _context_method(_name)


@method(METHODS, "session.caches", {"session_id": STR}, {})
def _caches(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    """The bytes each of the session's caches holds as ``memory.cache_budget`` counts them
    (decision 0169)."""
    return server.session(p["session_id"]).harness.cache_bytes()


@method(METHODS, "tools.call", {"session_id": STR, "name": STR}, {"arguments": OBJECT})
def _tools_call(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    """A context tool call the model made, relayed as is: refusals are answers for the model."""
    harness = server.session(p["session_id"]).harness
    answer = harness.handle(p["name"], p.get("arguments", {}))
    out: dict[str, Any] = {"ok": answer.ok, "message": answer.message}
    if answer.images:  # inline's activate of an output with images: give them back with it
        out["images"] = list(answer.images)
    return out


_BOOL = Check("a boolean", lambda v: isinstance(v, bool))


@method(METHODS, "index_file", {"session_id": STR, "path": STR}, {"content": STR, "wrote": _BOOL})
def _index_file(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    harness = server.session(p["session_id"]).harness
    result = server.service.index_file(
        harness.session_id, p["path"], p.get("content"), wrote=p.get("wrote", False)
    )
    return {"object_id": result.object_id, "outcome": str(result.outcome), "path": result.path}


@method(METHODS, "discover", {"session_id": STR, "paths": STRINGS})
def _discover(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    harness = server.session(p["session_id"]).harness
    report = server.service.discover(harness.session_id, p["paths"])
    return {
        "found": [
            {"object_id": r.object_id, "outcome": str(r.outcome), "path": r.path}
            for r in report.found
        ],
        "refused": [{"path": path, "reason": reason} for path, reason in report.refused],
    }


@method(METHODS, "tools", {"format": _FORMAT}, {"prefix": _PREFIX})
def _tools(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    return {"tools": tool_schemas(p["format"], p.get("prefix", ""))}


_INT = Check("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))


@method(
    METHODS,
    "search",
    {"query": STR},
    {"session_id": STR, "role": STR, "type": STR, "limit": _INT},
)
def _search(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    """Ranked hits over what a session has seen (or, without ``session_id``, the whole store)."""
    hits = server.service.search(
        p["query"],
        session_id=p.get("session_id"),
        role=p.get("role"),
        kind=p.get("type"),
        limit=p.get("limit", 20),
    )
    return {"hits": [hit_to_json(hit) for hit in hits]}


@method(METHODS, "budget", {"session_id": STR})
def _budget(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    """Seed 001's token-budget report for the context the model sees now."""
    harness = server.session(p["session_id"]).harness
    return attrs.asdict(server.service.budget(harness.session_id))


@method(METHODS, "checkpoint", {"session_id": STR}, {"label": STR})
def _checkpoint(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    harness = server.session(p["session_id"]).harness
    return checkpoint_to_json(server.service.checkpoint(harness.session_id, p.get("label")))


@method(METHODS, "checkpoints", {"session_id": STR})
def _checkpoints(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    found = server.service.checkpoints(p["session_id"])
    return {"checkpoints": [checkpoint_to_json(cp) for cp in found]}


_MODE = Check(f"one of {list(MODES)}", lambda v: v in MODES)


@method(METHODS, "rollback", {"session_id": STR, "to": STR}, {"mode": _MODE, "dry_run": _BOOL})
def _rollback(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    """Back to a checkpoint: ``conversation`` (default), ``files`` or ``both``."""
    harness = server.session(p["session_id"]).harness
    report = server.service.rollback(
        harness.session_id,
        p["to"],
        mode=p.get("mode", "conversation"),
        dry_run=p.get("dry_run", False),
    )
    return rollback_to_json(report)


@method(METHODS, "session.close", {"session_id": STR})
def _session_close(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    server.held.pop(p["session_id"], None)
    server.session(p["session_id"])
    server.service.close_session(p["session_id"])
    del server.sessions[p["session_id"]]
    _thaw()
    return {"closed": True}


def _thaw() -> None:
    """What resumes set aside from the collector (``gc.freeze``, decision 0116) handed back to
    it: a closed session's objects, which reference counting frees, may hold cycles only the
    collector finds."""
    gc.unfreeze()


class _KindCounts:
    """How many files and tool calls a session's index holds, counted as the index grows (an
    index only grows, but for a rollback, after which it is counted again)."""

    def __init__(self) -> None:
        self._index: Any = None
        self._counted = 0
        self._files = 0
        self._toolcalls = 0

    def count(self, state: Any) -> tuple[int, int]:
        index, kinds = state.index, state.kinds
        n = len(index)
        previous = self._index
        if (
            previous is None
            or n < self._counted
            or (self._counted and index[self._counted - 1] != previous[self._counted - 1])
        ):
            self._counted = self._files = self._toolcalls = 0
        for object_id in index[self._counted :]:
            kind = kinds.get(object_id)
            self._files += kind == "file"
            self._toolcalls += kind == "toolcall"
        self._index, self._counted = index, n
        return self._files, self._toolcalls


def checkpoint_to_json(checkpoint: CheckpointInfo) -> dict[str, Any]:
    """A checkpoint as JSON (the RPC methods' and ``selfctx checkpoints --json``'s shape)."""
    return {
        "label": checkpoint.label,
        "position": checkpoint.position,
        "at": checkpoint.at,
        "auto": checkpoint.auto,
        "turn": checkpoint.turn,
    }


def rollback_to_json(report: RollbackReport) -> dict[str, Any]:
    """What a rollback did, or would do, as JSON."""
    return {
        "to": report.label,
        "mode": report.mode,
        "dry_run": report.dry_run,
        "position": report.position,
        "turns_before": report.turns_before,
        "turns_after": report.turns_after,
        "leaving": list(report.leaving),
        "files": [
            {"object_id": f.object_id, "path": f.path, "action": f.action, "reason": f.reason}
            for f in report.files
        ],
        "refused": [f.path for f in report.refused],
        "saved_as": report.saved_as,
    }
