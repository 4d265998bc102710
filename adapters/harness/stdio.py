"""``selfctx serve --stdio``: the context manager for a harness in any language.

JSON-RPC 2.0, one JSON value per line: requests on stdin, responses on stdout, logs on stderr
only. Requests are answered in order, one at a time. A line that is not JSON, a request of the
wrong shape, an unknown method or bad parameters get a JSON-RPC error object and the server keeps
serving; so does every deliberate error of the context manager, whose stable ``kind``
(:mod:`domain.errors`) is the error's ``data.kind``. A refused call changes nothing.
Batches (JSON arrays of requests) are answered with an array of the responses that are due;
notifications (no ``id``) are run and never answered. End of input closes every open session.

docs/harness.md lists the methods with an example exchange.
"""

from __future__ import annotations

import json
import logging
import math
import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

import attrs

from adapters.harness.messages import FORMATS, parse_messages
from adapters.harness.render import to_anthropic, to_openai
from adapters.harness.session import HarnessSession
from adapters.harness.tools import handle_context_tool, tool_schemas
from application.service import ContextService
from domain.errors import InvalidPath, SelfContextError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHODS",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "POLICIES",
    "SERVER_ERROR",
    "RpcError",
    "StdioServer",
]

log = logging.getLogger("selfctx.serve")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000
"""Code of every deliberate error of the context manager; ``data.kind`` says which one."""

POLICIES: dict[str, str] = {
    "ssot": "The SSOT's layout (system prompt, metadata pool, chat, active content) and its "
    "sliding-window auto-collapse of tool outputs.",
}
"""Layout and collapse policies ``session.open`` accepts, by name, with a one-line description."""


class RpcError(Exception):
    """A JSON-RPC error: a code, a stable ``kind`` and the details that go into ``data``."""

    def __init__(self, code: int, kind: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "data": {"kind": self.kind, **self.details},
        }


def _bad_params(param: str, reason: str) -> RpcError:
    return RpcError(INVALID_PARAMS, "invalid_params", f"{param}: {reason}", param=param)


# -- parameters ---------------------------------------------------------------------------


@attrs.frozen
class _Check:
    """What one parameter must be."""

    description: str
    test: Callable[[Any], bool]


_STR = _Check("a string", lambda v: isinstance(v, str))
_STRINGS = _Check(
    "an array of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)
)
_ARRAY = _Check("an array", lambda v: isinstance(v, list))
_OBJECT = _Check("an object", lambda v: isinstance(v, dict))
_TEXT = _Check("a string or an array of content blocks", lambda v: isinstance(v, str | list))
_FORMAT = _Check(f"one of {list(FORMATS)}", lambda v: v in FORMATS)


@attrs.frozen
class _Method:
    run: Callable[[StdioServer, dict[str, Any]], Any]
    required: Mapping[str, _Check]
    optional: Mapping[str, _Check]

    def params(self, raw: Any) -> dict[str, Any]:
        """The call's parameters, checked: named, none missing, none unknown, each well typed.
        An optional parameter given as null counts as absent."""
        if raw is None:
            raw = {}
        if isinstance(raw, list):
            raise RpcError(INVALID_PARAMS, "invalid_params", "use named parameters (a JSON object)")
        unknown = sorted(set(raw) - set(self.required) - set(self.optional))
        if unknown:
            known = sorted({*self.required, *self.optional})
            raise RpcError(
                INVALID_PARAMS,
                "invalid_params",
                f"unknown parameter(s) {unknown}; this method takes {known}",
                param=unknown[0],
            )
        out: dict[str, Any] = {}
        for name, check in (*self.required.items(), *self.optional.items()):
            value = raw.get(name)
            if value is None:
                if name in self.required:
                    raise _bad_params(name, "is required")
                continue
            if not check.test(value):
                raise _bad_params(name, f"must be {check.description}")
            out[name] = value
        return out


METHODS: dict[str, _Method] = {}
"""Every method the server answers, by name."""


def _method(
    name: str, required: Mapping[str, _Check], optional: Mapping[str, _Check] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(run: Callable[..., Any]) -> Callable[..., Any]:
        METHODS[name] = _Method(run, required, optional or {})
        return run

    return register


# -- the server ---------------------------------------------------------------------------


@attrs.define
class _Open:
    """A session open on this server."""

    harness: HarnessSession
    policy: str


class StdioServer:
    """Answers JSON-RPC requests against one :class:`ContextService`.

    ``cwd`` and ``roots`` are the defaults of ``session.open``: the directory relative paths in
    commands are resolved against, and the directories whose paths tool outputs may name.
    """

    def __init__(
        self, service: ContextService, *, cwd: str = "/", roots: Iterable[str] = ("/",)
    ) -> None:
        self.service = service
        self.cwd = cwd
        self.roots = tuple(roots)
        self.sessions: dict[str, _Open] = {}

    # -- transport ------------------------------------------------------------------------

    def serve(self, instream: IO[bytes], outstream: IO[bytes]) -> None:
        """Answer every line of ``instream`` until it ends, then close the open sessions."""
        try:
            for raw in instream:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    answer: str | None = _dump(
                        _error(None, RpcError(PARSE_ERROR, "parse_error", f"not UTF-8: {exc}"))
                    )
                else:
                    if not line.strip():
                        continue
                    answer = self.handle_line(line)
                if answer is not None:
                    try:
                        outstream.write(answer.encode("ascii") + b"\n")
                        outstream.flush()
                    except BrokenPipeError:
                        log.info("the client closed its end; stopping")
                        return
        finally:
            self.close()

    def close(self) -> None:
        """Close every session opened here (everything is already stored)."""
        for session_id in list(self.sessions):
            self.service.close_session(session_id)
            del self.sessions[session_id]

    def handle_line(self, line: str) -> str | None:
        """The response line to one input line, or None when nothing is due."""
        try:
            payload = json.loads(line)
        except ValueError as exc:
            return _dump(_error(None, RpcError(PARSE_ERROR, "parse_error", f"invalid JSON: {exc}")))
        if isinstance(payload, list):
            if not payload:
                empty = RpcError(INVALID_REQUEST, "invalid_request", "an empty batch")
                return _dump(_error(None, empty))
            answers = [a for a in (self.handle(item) for item in payload) if a is not None]
            return _dump(answers) if answers else None
        answer = self.handle(payload)
        return None if answer is None else _dump(answer)

    # -- one request ----------------------------------------------------------------------

    def handle(self, request: Any) -> dict[str, Any] | None:
        """The response object to one request, or None for a notification."""
        if not isinstance(request, dict):
            return _error(None, RpcError(INVALID_REQUEST, "invalid_request", "not an object"))
        request_id = request.get("id")
        if not _valid_id(request_id):
            bad_id = RpcError(
                INVALID_REQUEST, "invalid_request", "id must be a string, an integer or null"
            )
            return _error(None, bad_id)
        method = request.get("method")
        if request.get("jsonrpc") != "2.0":
            shape = RpcError(INVALID_REQUEST, "invalid_request", 'jsonrpc must be "2.0"')
            return _error(request_id, shape)
        if not isinstance(method, str):
            shape = RpcError(INVALID_REQUEST, "invalid_request", "method must be a string")
            return _error(request_id, shape)
        params = request.get("params")
        if params is not None and not isinstance(params, dict | list):
            shape = RpcError(INVALID_REQUEST, "invalid_request", "params must be an object")
            return _error(request_id, shape)
        notification = "id" not in request
        try:
            result = self.call(method, params)
            if notification:
                return None
            response = {"jsonrpc": "2.0", "id": request_id, "result": result}
            _dump(response)  # a result that cannot be encoded is an internal error, below
            return response
        except RpcError as exc:
            failure = exc
        except SelfContextError as exc:
            failure = _project_error(exc)
        except Exception as exc:  # a bug: report it, keep serving
            log.exception("internal error in %s", method)
            failure = RpcError(
                INTERNAL_ERROR, "internal_error", f"{type(exc).__name__}: {exc}", method=method
            )
        log.info("%s: %s (%s)", method, failure.message, failure.kind)
        return None if notification else _error(request_id, failure)

    def call(self, method: str, params: Any) -> Any:
        """Run one method with its (unchecked) parameters."""
        spec = METHODS.get(method)
        if spec is None:
            raise RpcError(
                METHOD_NOT_FOUND,
                "method_not_found",
                f"no method {method!r}; the methods are {sorted(METHODS)}",
                method=method,
            )
        return spec.run(self, spec.params(params))

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
    if not path.startswith("/"):
        raise InvalidPath(path, "must be an absolute path")
    return posixpath.normpath(path)


@_method(
    "session.open",
    {"session_id": _STR},
    {"system_prompt": _STR, "policy": _STR, "format": _FORMAT, "cwd": _STR, "roots": _STRINGS},
)
def _session_open(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    session_id = p["session_id"]
    policy = p.get("policy", "ssot")
    if policy not in POLICIES:
        raise RpcError(
            INVALID_PARAMS,
            "invalid_params",
            f"policy: unknown policy {policy!r}; the policies are {sorted(POLICIES)}",
            param="policy",
            policies=sorted(POLICIES),
        )
    if session_id in server.sessions:
        raise RpcError(
            SERVER_ERROR,
            "session_exists",
            f"session {session_id!r} is already open on this server; close it first",
            session_id=session_id,
        )
    cwd = _absolute(p.get("cwd", server.cwd))
    roots = [_absolute(r) for r in p.get("roots", server.roots)]
    harness = HarnessSession(
        server.service,
        session_id,
        p.get("format", "openai"),
        system_prompt=p.get("system_prompt", ""),
        cwd=cwd,
        roots=roots,
    )
    server.sessions[session_id] = _Open(harness, policy)
    report = harness.resumed
    out: dict[str, Any] = {
        "session_id": session_id,
        "resumed": report is not None,
        "format": harness.format,
        "policy": policy,
        "recorded": harness.ingestor.total,
    }
    if report is not None:
        out["reconciled"] = {
            "updated": list(report.updated),
            "deleted": list(report.deleted),
            "orphaned": list(report.orphaned),
            "unchanged": report.unchanged,
        }
    return out


@_method(
    "ingest",
    {"session_id": _STR, "messages": _ARRAY},
    {"format": _FORMAT, "system": _TEXT},
)
def _ingest(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    harness = server.session(p["session_id"]).harness
    fmt = p.get("format", harness.format)
    messages = parse_messages(p["messages"], fmt, p.get("system"))
    before = harness.ingestor.total
    try:
        result = harness.ingestor.ingest(messages)
    except SelfContextError as exc:
        # Validation refuses a bad list before recording anything; a failure while recording
        # (the store, a tool-call id another session owns) says how far it got.
        failure = _project_error(exc)
        failure.details["consumed"] = harness.ingestor.total - before
        raise failure from exc
    return {"consumed": result.consumed, "diverged": result.diverged, "total": result.total}


@_method("assemble", {"session_id": _STR}, {"format": _FORMAT})
def _assemble(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    harness = server.session(p["session_id"]).harness
    fmt = p.get("format", harness.format)
    if fmt == harness.format:
        request = harness.request()
    else:
        context = server.service.assemble(harness.session_id)
        request = to_openai(context) if fmt == "openai" else to_anthropic(context)
    state = server.service.state(harness.session_id)
    request["stats"] = {
        "index": len(state.index),
        "pool": len(state.pool),
        "active": len(state.active),
        "pinned": len(state.pinned),
        "collapsed": len(state.pool) - len(state.active),
        "files": sum(1 for kind in state.kinds.values() if kind == "file"),
        "toolcalls": sum(1 for kind in state.kinds.values() if kind == "toolcall"),
        "turns": len(state.turns),
        "messages": len(request["messages"]),
        "chars": _text_chars(request),
        "log_position": server.service.log_position(harness.session_id),
    }
    return request


def _context_method(name: str) -> None:
    def run(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
        harness = server.session(p["session_id"]).harness
        result = getattr(server.service, name)(harness.session_id, p["id"])
        return {"ok": result.ok, "message": result.message}

    _method(name, {"session_id": _STR, "id": _STR})(run)


for _name in ("activate", "deactivate", "pin", "unpin"):
    _context_method(_name)


@_method("tools.call", {"session_id": _STR, "name": _STR}, {"arguments": _OBJECT})
def _tools_call(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    """A context tool call the model made, relayed as is: refusals are answers for the model."""
    harness = server.session(p["session_id"]).harness
    answer = handle_context_tool(
        server.service, harness.session_id, p["name"], p.get("arguments", {})
    )
    return {"ok": answer.ok, "message": answer.message}


@_method("index_file", {"session_id": _STR, "path": _STR}, {"content": _STR})
def _index_file(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    harness = server.session(p["session_id"]).harness
    result = server.service.index_file(harness.session_id, p["path"], p.get("content"))
    return {"object_id": result.object_id, "outcome": str(result.outcome), "path": result.path}


@_method("discover", {"session_id": _STR, "paths": _STRINGS})
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


@_method("tools", {"format": _FORMAT})
def _tools(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    return {"tools": tool_schemas(p["format"])}


@_method("session.close", {"session_id": _STR})
def _session_close(server: StdioServer, p: dict[str, Any]) -> dict[str, Any]:
    server.session(p["session_id"])
    server.service.close_session(p["session_id"])
    del server.sessions[p["session_id"]]
    return {"closed": True}


# -- encoding -----------------------------------------------------------------------------


def _valid_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _error(request_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


def _dump(value: Any) -> str:
    # ASCII output: newlines inside strings are escaped, and lone surrogates cannot break it.
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


_DETAILS = (
    "index", "session_id", "object_id", "object_ids", "what", "reason", "where",
    "operation", "url", "status",
)  # fmt: skip


def _project_error(exc: SelfContextError) -> RpcError:
    """A deliberate error of the context manager, with the values it names."""
    details: dict[str, Any] = {}
    for name in _DETAILS:
        value = getattr(exc, name, None)
        if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
            details[name] = list(value)
        elif isinstance(value, str | int) and not isinstance(value, bool) and value != "":
            details[name] = value
    path = getattr(exc, "path", None) or getattr(getattr(exc, "source", None), "path", None)
    if isinstance(path, str):
        details["path"] = path
    return RpcError(SERVER_ERROR, exc.kind, str(exc)[:2000], **details)


def _text_chars(request: Mapping[str, Any]) -> int:
    """Characters of text the model reads in a request (message and block texts)."""

    def count(value: Any, key: str = "") -> int:
        if isinstance(value, str):
            return len(value) if key in ("content", "text") else 0
        if isinstance(value, Mapping):
            return sum(count(v, k) for k, v in value.items())
        if isinstance(value, list):
            return sum(count(v, key) for v in value)
        return 0

    return count(request.get("system", [])) + count(request["messages"])
