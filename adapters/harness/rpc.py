"""JSON-RPC 2.0, one JSON value per line: framing, request checks, parameter checks, errors.

:class:`LineServer` answers lines by calling the methods of its ``methods`` table; what the
methods do is the subclass's business (``selfctx.adapters.harness.stdio``). Every failure becomes an
error object: the standard codes for the protocol's own failures, ``SERVER_ERROR`` with the
project's stable ``kind`` for a deliberate error (:mod:`selfctx.domain.errors`), ``INTERNAL_ERROR``
for a bug. The server keeps serving after each of them.
"""

from __future__ import annotations

import json
import logging
import math
import select
from collections.abc import Callable, Mapping
from typing import IO, Any, ClassVar

import attrs

from selfctx.adapters import jsontext
from selfctx.domain.errors import SelfContextError

__all__ = [
    "ARRAY",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_NESTING",
    "METHOD_NOT_FOUND",
    "OBJECT",
    "PARSE_ERROR",
    "SERVER_ERROR",
    "STR",
    "STRINGS",
    "Check",
    "LineServer",
    "Method",
    "RawJson",
    "RpcError",
    "dump_response",
    "method",
    "too_deep_params",
]

log = logging.getLogger("selfctx.serve")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000
"""Code of every deliberate error of the context manager; ``data.kind`` says which one."""

MAX_NESTING = 100
"""Deepest nesting of arrays and objects a request may have: deeper values are refused before
anything walks them (every JSON walker here, the standard library's included, recurses)."""


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

    @classmethod
    def bad_params(cls, param: str, reason: str, **details: Any) -> RpcError:
        return cls(INVALID_PARAMS, "invalid_params", f"{param}: {reason}", param=param, **details)


_DETAILS = (
    "index", "session_id", "object_id", "object_ids", "what", "reason", "where",
    "operation", "url", "status", "label", "digest", "length",
)  # fmt: skip


def project_error(exc: SelfContextError) -> RpcError:
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


class RawJson:
    """A method's result already encoded as compact ASCII JSON (so that a large result whose
    parts did not change is not encoded again: ``assemble``)."""

    __slots__ = ("parts",)

    def __init__(self, *parts: str) -> None:
        """The result's text: ``parts`` joined (once, into the response line)."""
        self.parts = parts

    @property
    def text(self) -> str:
        return "".join(self.parts)


# -- parameters ---------------------------------------------------------------------------


@attrs.frozen
class Check:
    """What one parameter must be."""

    description: str
    test: Callable[[Any], bool]


STR = Check("a string", lambda v: isinstance(v, str))
STRINGS = Check(
    "an array of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)
)
ARRAY = Check("an array", lambda v: isinstance(v, list))
OBJECT = Check("an object", lambda v: isinstance(v, dict))


@attrs.frozen
class Method:
    """One method: what runs it, and its parameters."""

    run: Callable[[Any, dict[str, Any]], Any]
    """Called with the server and the checked parameters."""
    required: Mapping[str, Check]
    optional: Mapping[str, Check]
    checks_nesting: bool = False
    """The method bounds the nesting of its parameters itself, walking only what it has not
    seen before (``ingest``: a list resent every turn); the server's walk is skipped."""

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
            raise RpcError.bad_params(
                unknown[0], f"unknown parameter(s) {unknown}; this method takes {known}"
            )
        out: dict[str, Any] = {}
        for name, check in (*self.required.items(), *self.optional.items()):
            value = raw.get(name)
            if value is None:
                if name in self.required:
                    raise RpcError.bad_params(name, "is required")
                continue
            if not check.test(value):
                raise RpcError.bad_params(name, f"must be {check.description}")
            out[name] = value
        return out


def method(
    table: dict[str, Method],
    name: str,
    required: Mapping[str, Check],
    optional: Mapping[str, Check] | None = None,
    *,
    checks_nesting: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function in ``table`` as the method ``name``."""

    def register(run: Callable[..., Any]) -> Callable[..., Any]:
        table[name] = Method(run, required, optional or {}, checks_nesting)
        return run

    return register


# -- the server ---------------------------------------------------------------------------


def _write_all(outstream: IO[bytes], data: bytes) -> None:
    """Write every byte of ``data``. A buffered stream takes them all at once; a raw one (the
    process's stdout when ``PYTHONUNBUFFERED`` is set) may take fewer: a write to a pipe that a
    signal interrupts returns what it wrote, a non-blocking pipe that is full takes what fits
    (or nothing). The rest is written after it, waiting until the stream takes more; each
    round writes at least one byte or waits, so the loop ends."""
    view = memoryview(data)
    while view:
        written = outstream.write(view)
        if written is None:  # a non-blocking stream that takes nothing now
            select.select([], [outstream], [])
            continue
        if written <= 0:
            raise OSError(f"the output stream took none of {len(view)} bytes")
        view = view[written:]


class LineServer:
    """Answers JSON-RPC 2.0 lines with the methods of ``methods``; one request at a time."""

    methods: ClassVar[Mapping[str, Method]] = {}

    def serve(self, instream: IO[bytes], outstream: IO[bytes]) -> None:
        """Answer every line of ``instream`` until it ends, then :meth:`close`."""
        try:
            for raw in instream:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    not_utf8 = RpcError(PARSE_ERROR, "parse_error", f"not UTF-8: {exc}")
                    answer: str | None = _dump(_error(None, not_utf8))
                else:
                    if not line.strip():
                        continue
                    answer = self._answer(line)
                if answer is not None:
                    try:
                        # two writes, not a copy of a long answer with its line break
                        _write_all(outstream, answer.encode("ascii"))
                        _write_all(outstream, b"\n")
                        outstream.flush()
                    except BrokenPipeError:
                        log.info("the client closed its end; stopping")
                        return
        finally:
            self.close()

    def close(self) -> None:
        """Called once the input has ended."""

    def _answer(self, line: str) -> str | None:
        """:meth:`handle_line`, and whatever escapes it answered as an internal error: no input
        ends the server."""
        try:
            return self.handle_line(line)
        except Exception as exc:  # a bug outside any one request (framing, encoding an answer)
            log.exception("internal error while answering a line")
            failure = RpcError(INTERNAL_ERROR, "internal_error", f"{type(exc).__name__}: {exc}")
            return _dump(_error(None, failure))

    def handle_line(self, line: str) -> str | None:
        """The response line to one input line, or None when nothing is due."""
        try:
            payload = jsontext.loads(line)
        except ValueError as exc:
            return _dump(_error(None, RpcError(PARSE_ERROR, "parse_error", f"invalid JSON: {exc}")))
        except RecursionError:  # the parser's own limit, far below what the line may hold
            return _dump(_error(None, _too_deep("the request")))
        if isinstance(payload, list):
            if not payload:
                empty = RpcError(INVALID_REQUEST, "invalid_request", "an empty batch")
                return _dump(_error(None, empty))
            answers = [a for a in (self.handle(item) for item in payload) if a is not None]
            return _dump(answers) if answers else None
        answer = self.handle(payload)
        return None if answer is None else _dump(answer)

    def handle(self, request: Any) -> dict[str, Any] | None:
        """The response object to one request, or None for a notification."""
        if not isinstance(request, dict):
            return _error(None, RpcError(INVALID_REQUEST, "invalid_request", "not an object"))
        request_id = request.get("id")
        if not _valid_id(request_id):
            bad_id = RpcError(
                INVALID_REQUEST, "invalid_request", "id must be a string, a number or null"
            )
            return _error(None, bad_id)
        shape = _shape_error(request)
        if shape is not None:
            return _error(request_id, RpcError(INVALID_REQUEST, "invalid_request", shape))
        name = request["method"]
        notification = "id" not in request
        try:
            spec = self.methods.get(name)
            if (spec is None or not spec.checks_nesting) and _deeper_than(
                request.get("params"), MAX_NESTING
            ):
                raise too_deep_params()
            result = self.call(name, request.get("params"))
            if notification:
                return None
            response = {"jsonrpc": "2.0", "id": request_id, "result": result}
            if not isinstance(result, RawJson):
                _dump(response)  # a result that cannot be encoded is an internal error, below
            return response
        except RpcError as exc:
            failure = exc
        except SelfContextError as exc:
            failure = project_error(exc)
        except RecursionError:  # a value nested deeper than some walker allows: the caller's
            failure = RpcError(
                INVALID_PARAMS, "invalid_params", "params: nested too deeply", param="params"
            )
        except Exception as exc:  # a bug: report it, keep serving
            log.exception("internal error in %s", name)
            failure = RpcError(
                INTERNAL_ERROR, "internal_error", f"{type(exc).__name__}: {exc}", method=name
            )
        log.info("%s: %s (%s)", name, failure.message, failure.kind)
        return None if notification else _error(request_id, failure)

    def call(self, name: str, params: Any) -> Any:
        """Run one method with its (unchecked) parameters."""
        spec = self.methods.get(name)
        if spec is None:
            raise RpcError(
                METHOD_NOT_FOUND,
                "method_not_found",
                f"no method {name!r}; the methods are {sorted(self.methods)}",
                method=name,
            )
        return spec.run(self, spec.params(params))


def too_deep_params() -> RpcError:
    """The error for parameters nested deeper than :data:`MAX_NESTING`."""
    return RpcError(
        INVALID_PARAMS,
        "invalid_params",
        f"params: nested more than {MAX_NESTING} levels deep",
        param="params",
    )


def _too_deep(what: str) -> RpcError:
    return RpcError(
        INVALID_REQUEST, "invalid_request", f"{what} is nested more than {MAX_NESTING} levels deep"
    )


def _deeper_than(value: Any, limit: int) -> bool:
    """True if arrays and objects in ``value`` nest more than ``limit`` levels (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _shape_error(request: Mapping[str, Any]) -> str | None:
    if request.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if not isinstance(request.get("method"), str):
        return "method must be a string"
    params = request.get("params")
    if params is not None and not isinstance(params, dict | list):
        return "params must be an object"
    return None


def _valid_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _error(request_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


def dump_response(value: Any) -> str:
    """A response (or a batch of them) as its line, without the line break."""
    return _dump(value)


def _dump(value: Any) -> str:
    # ASCII output: newlines inside strings are escaped, and lone surrogates cannot break it.
    if isinstance(value, list):
        return "[" + ",".join(_dump(item) for item in value) + "]"
    if isinstance(value, dict) and isinstance(value.get("result"), RawJson):
        head = json.dumps(
            {k: v for k, v in value.items() if k != "result"},
            ensure_ascii=True,
            separators=(",", ":"),
        )
        raw: RawJson = value["result"]
        return "".join((head[:-1], ',"result":', *raw.parts, "}"))
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
