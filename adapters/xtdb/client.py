"""A thin client over XTDB 1.x's HTTP API (``/_xtdb/...``), with an injected ``httpx.Client``.

Every request asks for JSON (the server's default is EDN). Every failure becomes one of the
store port's errors, carrying the node's URL and the operation, raised ``from`` the httpx error:

- no connection, or no answer in time: :class:`StoreUnavailable`;
- an error status (400 bad request or out-of-sync basis, 500 ...): :class:`StoreRejected`;
  a server-side wait that timed out (500 ``TimeoutException``) is :class:`StoreUnavailable`;
- a body that is not the JSON expected (malformed, truncated, wrong shape):
  :class:`StoreProtocolError`.

Strings in answers are decoded as :mod:`selfctx.adapters.xtdb.text` says (the store encodes
what it sends). Timeouts are per call, in seconds; the caller divides its own deadline between
its calls.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx

from selfctx.adapters.jsontext import loads
from selfctx.adapters.xtdb import text
from selfctx.application.ports.store import StoreProtocolError, StoreRejected, StoreUnavailable

log = logging.getLogger("selfctx.xtdb")

_JSON = {"Accept": "application/json"}
_EDN_BODY = {"Accept": "application/json", "Content-Type": "application/edn"}
_JSON_BODY = {"Accept": "application/json", "Content-Type": "application/json"}
_BLOBS = "X-Selfctx-Blobs"


class Connections:
    """Keep-alive HTTP/1.1 connections to one node, for the requests of every turn.

    httpx spends about a millisecond of CPU on each request (building and parsing URLs, header
    models, its connection pool), and the standard library's ``http.client`` about 0.2 ms (its
    header parser is the ``email`` package's); a turn makes several. This pool writes each
    request in one piece and reads the answer's status line, the three headers that frame it
    (``Content-Length``, ``Transfer-Encoding``, ``Connection``) and its body, in about 0.05 ms
    (decision 0085). It is used by the stores :func:`selfctx.adapters.xtdb.open_store` opens; a
    client given only an ``httpx.Client`` (a test's mock transport) goes through httpx.
    Thread-safe: each request takes a connection of its own. A connection the node closed while
    idle is noticed before it is used again (it reads as at its end), and one idle for longer
    than ``idle_limit`` is closed rather than used, before the node would close it, so a request
    is never sent on a connection the node is closing. Failures are raised as ``http.client``
    raises them (``RemoteDisconnected``, ``IncompleteRead``, ``HTTPException``) or as the socket
    does."""

    def __init__(self, host: str, port: int, idle_limit: float = 20.0) -> None:
        self.host = host
        self.port = port
        self.idle_limit = idle_limit
        """Seconds a connection is kept idle at most. The node's HTTP server (the JDK's) closes a
        connection idle for 30 s, checked every 10 s (its ``sun.net.httpserver.idleInterval`` and
        ``clockTick`` defaults): a request sent on one just then would meet a close, not an
        answer. A connection idle for less than this is never one the node is closing."""
        self._idle: list[_Link] = []
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float,
        first: Callable[[bytes], None] | None = None,
    ) -> tuple[int, bytes]:
        """Send one request and read its whole answer: (status, body). Raises what
        ``http.client`` and the socket raise (:class:`XtdbClient` makes them store errors).
        ``first``, when given, is called with a chunked body's first line as soon as it is read
        (decision 0138), while the rest is still to come."""
        head = _head(method, target, body, headers)
        link = self._take()
        try:
            if link is None:
                link = _Link(self.host, self.port, timeout)
            else:
                link.sock.settimeout(timeout)
            if body is not None and len(body) > _JOIN_BELOW:
                link.sock.sendall(head)
                link.sock.sendall(body)
            else:
                link.sock.sendall(head + body if body is not None else head)
            status, data, closes = _read_answer(link.reader, first)
        except BaseException:
            if link is not None:
                link.close()
            raise
        if closes:
            link.close()
        else:
            link.idle_since = time.monotonic()
            with self._lock:
                self._idle.append(link)
        return status, data

    def _take(self) -> _Link | None:
        oldest = time.monotonic() - self.idle_limit
        with self._lock:
            while self._idle:
                link = self._idle.pop()
                if link.idle_since > oldest and _idle_and_open(link):
                    return link
                link.close()
        return None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for link in idle:
            link.close()


class _Link:
    """One connection to the node: its socket, and a buffered reader of its answers."""

    __slots__ = ("idle_since", "reader", "sock")

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.idle_since = 0.0  # when its last answer was read (time.monotonic)
        self.sock = socket.create_connection((host, port), timeout)
        # Small requests leave at once (no wait for the answer to an earlier write's ACK).
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


_JOIN_BELOW = 65_536
"""A body shorter than this is sent in one write with the head (one segment, one copy)."""
_MAX_LINE = 65_536
_MAX_HEADERS = 100
"""What ``http.client`` takes at most: a longer line, or more headers, is a broken answer."""


def _head(method: str, target: str, body: bytes | None, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    text = "\r\n".join(lines)
    if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
        raise ValueError("a request line or header holds a line break")
    return (text + "\r\n\r\n").encode("latin-1")


def _read_answer(
    reader: Any, first: Callable[[bytes], None] | None = None
) -> tuple[int, bytes, bool]:
    """(status, body, whether the node closes the connection after it) of one answer."""
    for _ in range(_MAX_HEADERS):
        line = reader.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected("the node closed the connection without an answer")
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("status line")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise http.client.BadStatusLine(repr(line))
        status = int(parts[1])
        length, chunked, closes = _read_headers(reader, parts[0] == b"HTTP/1.0")
        if status >= 200:
            break  # an interim answer (100 Continue) is followed by the answer
    else:
        raise http.client.HTTPException(f"got more than {_MAX_HEADERS} interim answers")
    if status in (204, 304):
        return status, b"", closes
    if chunked:
        return status, _read_chunks(reader, first), closes
    if length is None:  # the body ends where the connection does
        return status, reader.read(), True
    data = reader.read(length)
    if len(data) < length:
        raise http.client.IncompleteRead(data, length - len(data))
    return status, data, closes


def _read_headers(reader: Any, old: bool) -> tuple[int | None, bool, bool]:
    """The framing headers of an answer: (Content-Length, chunked, closes)."""
    length: int | None = None
    chunked = False
    closes = old
    for _ in range(_MAX_HEADERS + 1):
        line = reader.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n"):
            return length, chunked, closes
        if not line:
            raise http.client.RemoteDisconnected("the node closed the connection in the headers")
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise http.client.HTTPException(f"bad Content-Length: {value!r}") from None
            if length < 0:
                raise http.client.HTTPException(f"bad Content-Length: {value!r}")
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            tokens = value.lower()
            if b"close" in tokens:
                closes = True
            elif b"keep-alive" in tokens:
                closes = False
    raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")


def _read_chunks(reader: Any, first: Callable[[bytes], None] | None = None) -> bytes:
    """A chunked body; ``first`` is called once with its first line (up to ``\n``) as soon as
    the chunks read hold it."""
    parts: list[bytes] = []
    while True:
        line = reader.readline(_MAX_LINE + 1)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise http.client.IncompleteRead(b"".join(parts)) from None
        if size == 0:
            break
        chunk = reader.read(size)
        if len(chunk) < size or reader.read(2) != b"\r\n":
            raise http.client.IncompleteRead(b"".join(parts) + chunk)
        parts.append(chunk)
        if first is not None and b"\n" in chunk:
            call, first = first, None
            call(b"".join(parts).split(b"\n", 1)[0])
    for _ in range(_MAX_HEADERS + 1):  # trailers, up to the blank line
        line = reader.readline(_MAX_LINE + 1)
        if line in (b"\r\n", b"\n", b""):
            break
    return b"".join(parts)


def _idle_and_open(conn: _Link) -> bool:
    """Whether a kept connection may carry a request: the node has not closed it (a read would
    find its end) and sent nothing unasked. Asked without blocking, for any descriptor number."""
    sock = conn.sock
    try:
        sock.settimeout(0.0)  # the request sets its own timeout again
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True  # nothing to read: open and quiet
    except OSError:
        return False
    return False  # b"": closed by the node; bytes: not ours to read


class XtdbClient:
    """Calls to one XTDB node; ``http`` must have the node's base URL (``http://host:port``).

    ``key`` returns the node's secret (decision 0027), sent as ``Authorization: Bearer``; it is
    asked again when the node refuses it (a node restarted since has a new one). ``key_hint``
    says where the secret was looked for, for the error a refused client gets.
    """

    def __init__(
        self,
        http: httpx.Client,
        *,
        key: Callable[[], str | None] | None = None,
        key_hint: str = "",
        connections: Connections | None = None,
    ) -> None:
        self.http = http
        self.url = str(http.base_url).rstrip("/")
        self.connections = connections
        """Where requests go when given (:class:`Connections`); else through ``http``."""
        self._key = key
        self._key_hint = key_hint
        self._sent_key: str | None = None
        if key is not None:
            self._use_key(key())

    def _use_key(self, value: str | None) -> None:
        self._sent_key = value
        if value is None:
            self.http.headers.pop("Authorization", None)
        else:
            self.http.headers["Authorization"] = f"Bearer {value}"

    def _refresh_key(self) -> bool:
        """Read the secret again; True if it changed (worth one more try)."""
        if self._key is None:
            return False
        fresh = self._key()
        if fresh is None or fresh == self._sent_key:
            return False
        self._use_key(fresh)
        return True

    # -- transport ---------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        operation: str,
        *,
        timeout: float,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] = _JSON,
        missing_ok: bool = False,
        retry: bool = True,
        first: Callable[[bytes], None] | None = None,
    ) -> Any:
        where = {"url": self.url, "operation": operation}

        def again() -> Any:  # the one retry _answer may make
            return self._call(
                method,
                path,
                operation,
                timeout=timeout,
                params=params,
                content=content,
                headers=headers,
                missing_ok=missing_ok,
                retry=False,
                first=first,
            )

        if self.connections is not None:
            status, body = self._send(method, path, params, content, headers, timeout, where, first)
        else:
            status, body = self._send_httpx(method, path, params, content, headers, timeout, where)
        if first is not None and status == 200:
            status, body = _verdict(body, where)
        return self._answer(status, body, where, again, missing_ok=missing_ok, retry=retry)

    def _send_httpx(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        content: bytes | None,
        headers: dict[str, str],
        timeout: float,
        where: dict[str, str],
    ) -> tuple[int, bytes]:
        """One request through :attr:`http` (a client built on an httpx client alone)."""
        try:
            response = self.http.request(
                method, path, params=params, content=content, headers=headers, timeout=timeout
            )
            body = response.content  # read fully here, so a cut-off body fails inside the try
        except httpx.TimeoutException as exc:
            raise StoreUnavailable(f"no answer within {timeout:.2f} s", **where) from exc
        except httpx.RemoteProtocolError as exc:
            # The node went away before its answer was complete (before a status line, or with
            # the body cut short, as a node that is being stopped does): it is unavailable.
            if "without sending" in str(exc) or "peer closed connection" in str(exc):
                raise StoreUnavailable(f"the node closed the connection: {exc}", **where) from exc
            raise StoreProtocolError(f"broken HTTP answer: {exc}", **where) from exc
        except httpx.DecodingError as exc:
            raise StoreProtocolError(f"undecodable answer: {exc}", **where) from exc
        except httpx.TransportError as exc:
            raise StoreUnavailable(f"cannot reach the node: {exc}", **where) from exc
        return response.status_code, body

    def _send(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None,
        content: bytes | None,
        headers: dict[str, str],
        timeout: float,
        where: dict[str, str],
        first: Callable[[bytes], None] | None = None,
    ) -> tuple[int, bytes]:
        """One request through :attr:`connections`, its failures made store errors as httpx's
        are."""
        assert self.connections is not None
        target = path + ("?" + urllib.parse.urlencode(params) if params else "")
        sent = {**headers, "Host": f"{self.connections.host}:{self.connections.port}"}
        auth = self.http.headers.get("Authorization")
        if auth is not None:
            sent["Authorization"] = auth
        try:
            status, body = self.connections.request(method, target, content, sent, timeout, first)
            log.debug("HTTP Request: %s %s%s %d", method, self.url, target, status)
            return status, body
        except TimeoutError as exc:
            raise StoreUnavailable(f"no answer within {timeout:.2f} s", **where) from exc
        except (http.client.RemoteDisconnected, http.client.IncompleteRead) as exc:
            # the node went away before its answer was complete, as a node being stopped does
            raise StoreUnavailable(f"the node closed the connection: {exc!r}", **where) from exc
        except http.client.HTTPException as exc:
            raise StoreProtocolError(f"broken HTTP answer: {exc!r}", **where) from exc
        except OSError as exc:
            raise StoreUnavailable(f"cannot reach the node: {exc}", **where) from exc

    def _answer(
        self,
        status: int,
        body: bytes,
        where: dict[str, str],
        again: Callable[[], Any],
        *,
        missing_ok: bool,
        retry: bool,
    ) -> Any:
        """The decoded answer of a request that got one (``again``: the request once more,
        after a refused secret was read anew)."""
        if status == 404 and missing_ok:
            return None
        if status == 401:
            if retry and self._refresh_key():
                return again()
            hint = f" (its secret was looked for in {self._key_hint})" if self._key_hint else ""
            raise StoreRejected(f"HTTP 401: {_error_message(body)}{hint}", status=401, **where)
        if status >= 400:
            message = _error_message(body)
            if status == 500 and b"TimeoutException" in body:
                raise StoreUnavailable(f"the node timed out: {message}", **where)
            raise StoreRejected(f"HTTP {status}: {message}", status=status, **where)
        try:
            answer = loads(body)
        except ValueError as exc:  # includes UnicodeDecodeError
            raise StoreProtocolError(
                f"the answer is not JSON ({exc}): {body[:200]!r}", **where
            ) from exc
        # Strings the store escaped on the way in (text.py); the search is skipped by nearly
        # every answer, which holds no escape at all.
        if text.ESCAPE_UTF8 in body:
            answer = text.decode(answer)
        return answer

    def _shape_error(self, operation: str, answer: Any) -> StoreProtocolError:
        return StoreProtocolError(
            f"unexpected answer: {str(answer)[:200]}", url=self.url, operation=operation
        )

    def _tx(self, operation: str, answer: Any) -> dict[str, Any]:
        """A ``{"txId": int, "txTime": str}`` answer, checked."""
        if not (
            isinstance(answer, dict)
            and isinstance(answer.get("txId"), int)
            and isinstance(answer.get("txTime"), str)
        ):
            raise self._shape_error(operation, answer)
        return answer

    # -- endpoints ---------------------------------------------------------------------------

    def status(self, *, timeout: float) -> dict[str, Any]:
        """``GET /_xtdb/status``: version, index version, KV store."""
        answer = self._call("GET", "/_xtdb/status", "status", timeout=timeout)
        if not isinstance(answer, dict):
            raise self._shape_error("status", answer)
        return answer

    def submit_tx(
        self,
        body: bytes,
        *,
        timeout: float,
        wait: float | None = None,
        blob_head: int = 0,
        logged: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """``POST /_xtdb/submit-tx`` with a JSON ``{"tx-ops": [...]}`` body; ``{txId, txTime}``.

        With ``wait`` (seconds) the project's own node also awaits the transaction and adds
        ``txCommitted?`` to the answer, in the same round trip; a node running upstream's HTTP
        server ignores the parameter, and the answer then has no ``txCommitted?``.

        A ``blob_head`` (our node only) says that the body is that many bytes of JSON followed by
        the raw UTF-8 of its long strings (``XtdbStore``'s ``_body``, decision 0015).

        ``logged`` (with ``wait``, our node only, through :class:`Connections`) asks the node to
        answer in two lines (decision 0138): ``logged({txId, txTime})`` is called, in this
        thread, as soon as the first is read (the transaction is in the node's tx-log), and the
        call returns the second (the answer above) once the node has indexed it.
        """
        params: dict[str, Any] | None = None
        if wait is not None:
            params = {"await-timeout": max(1, int(wait * 1000))}
        first = None
        if logged is not None and params is not None and self.connections is not None:
            params["logged"] = "true"
            where = {"url": self.url, "operation": "submit-tx"}

            def first(line: bytes) -> None:
                logged(self._tx("submit-tx", _line(line, where)))

        answer = self._call(
            "POST",
            "/_xtdb/submit-tx",
            "submit-tx",
            timeout=timeout,
            params=params,
            content=body,
            headers={**_JSON_BODY, _BLOBS: str(blob_head)} if blob_head else _JSON_BODY,
            first=first,
        )
        tx = self._tx("submit-tx", answer)
        committed = tx.get("txCommitted?")
        if committed is not None and not isinstance(committed, bool):
            raise self._shape_error("submit-tx", answer)
        return tx

    def await_tx(self, tx_id: int, *, wait: float, timeout: float) -> dict[str, Any]:
        """Block until the node has indexed ``tx_id`` (server-side ``wait`` seconds at most)."""
        params = {"tx-id": tx_id, "timeout": max(1, int(wait * 1000))}
        answer = self._call("GET", "/_xtdb/await-tx", "await-tx", timeout=timeout, params=params)
        return self._tx("await-tx", answer)

    def tx_committed(self, tx_id: int, *, timeout: float) -> bool:
        """Whether an indexed transaction was applied (False: a ``match`` failed)."""
        answer = self._call(
            "GET",
            "/_xtdb/tx-committed",
            "tx-committed",
            timeout=timeout,
            params={"tx-id": tx_id},
        )
        committed = answer.get("txCommitted?") if isinstance(answer, dict) else None
        if not isinstance(committed, bool):
            raise self._shape_error("tx-committed", answer)
        return committed

    def entity(
        self, eid: str, *, valid_time: str, timeout: float, tx_id: int | None = None
    ) -> dict[str, Any] | None:
        """The document of string id ``eid`` at the basis, or None."""
        params: dict[str, Any] = {"eid": eid, "valid-time": valid_time}
        if tx_id is not None:
            params["tx-id"] = tx_id
        answer = self._call(
            "GET", "/_xtdb/entity", "entity", timeout=timeout, params=params, missing_ok=True
        )
        if answer is not None and not isinstance(answer, dict):
            raise self._shape_error("entity", answer)
        return answer

    def entity_history(self, eid: str, *, valid_time: str, timeout: float) -> list[Any]:
        """Every version of ``eid``, ascending, with documents.

        With corrections: two transactions in the same millisecond get the same default valid
        time, and without corrections XTDB lists only the later one of them.
        """
        params = {
            "eid": eid,
            "history": "true",
            "sort-order": "asc",
            "with-docs": "true",
            "with-corrections": "true",
            "valid-time": valid_time,
        }
        answer = self._call("GET", "/_xtdb/entity", "history", timeout=timeout, params=params)
        if not isinstance(answer, list) or not all(
            isinstance(e, dict) and isinstance(e.get("txId"), int) for e in answer
        ):
            raise self._shape_error("history", answer)
        return answer

    def query(
        self,
        edn_body: str,
        *,
        operation: str,
        valid_time: str,
        timeout: float,
        tx_id: int | None = None,
    ) -> list[Any]:
        """``POST /_xtdb/query`` with an EDN ``{:query ... :in-args [...]}`` body; the rows."""
        params: dict[str, Any] = {"valid-time": valid_time}
        if tx_id is not None:
            params["tx-id"] = tx_id
        answer = self._call(
            "POST",
            "/_xtdb/query",
            operation,
            timeout=timeout,
            params=params,
            content=edn_body.encode("utf-8"),
            headers=_EDN_BODY,
        )
        if not isinstance(answer, list) or not all(isinstance(row, list) for row in answer):
            raise self._shape_error(operation, answer)
        return answer

    def latest_completed_tx(self, *, timeout: float) -> dict[str, Any] | None:
        """The latest transaction this node has indexed (committed or not), or None."""
        answer = self._call(
            "GET",
            "/_xtdb/latest-completed-tx",
            "latest-completed-tx",
            timeout=timeout,
            missing_ok=True,
        )
        return None if answer is None else self._tx("latest-completed-tx", answer)

    def latest_submitted_tx(self, *, timeout: float) -> int | None:
        """The id of the latest transaction in the node's tx-log (indexed or not), or None."""
        answer = self._call(
            "GET",
            "/_xtdb/latest-submitted-tx",
            "latest-submitted-tx",
            timeout=timeout,
            missing_ok=True,
        )
        if answer is None:
            return None
        if not (isinstance(answer, dict) and isinstance(answer.get("txId"), int)):
            raise self._shape_error("latest-submitted-tx", answer)
        return int(answer["txId"])

    def tx_log(
        self,
        after_tx_id: int | None,
        *,
        timeout: float,
        with_ops: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Committed transactions after ``after_tx_id`` (all if None), oldest first; with
        ``with_ops`` each carries ``txOps`` (``[["put", doc], ...]``); ``limit`` asks for at most
        that many (our node honours it; the answer is cut here too, for upstream's)."""
        params: dict[str, Any] = {} if after_tx_id is None else {"after-tx-id": after_tx_id}
        if with_ops:
            params["with-ops"] = "true"
        if limit is not None:
            params["limit"] = limit
        answer = self._call("GET", "/_xtdb/tx-log", "tx-log", timeout=timeout, params=params)
        if not isinstance(answer, list):
            raise self._shape_error("tx-log", answer)
        entries = [self._tx("tx-log", entry) for entry in answer]
        if with_ops and not all(isinstance(entry.get("txOps"), list) for entry in entries):
            raise self._shape_error("tx-log", answer)
        return entries if limit is None else entries[:limit]

    def versions(
        self, after_tx_id: int | None, *, timeout: float, held: bytes | None = None
    ) -> dict[str, Any] | None:
        """``GET /_xtdb/selfctx/versions`` (our node only, decision 0066): the file versions
        written after ``after_tx_id``; None from a node without it (upstream's server). With
        ``held`` (a JSON body ``{"held": [[id, object_hash], ...]}``) it is a ``POST``, and the
        answer's ``documents`` lists those of the held files with a newer version (decision
        0106)."""
        params = {} if after_tx_id is None else {"after-tx-id": after_tx_id}
        answer = self._call(
            "GET" if held is None else "POST",
            "/_xtdb/selfctx/versions",
            "versions",
            timeout=timeout,
            params=params,
            content=held,
            headers=_JSON if held is None else _JSON_BODY,
            missing_ok=True,
        )
        if answer is None:
            return None
        versions = answer.get("versions") if isinstance(answer, dict) else None
        documents = answer.get("documents", []) if isinstance(answer, dict) else None
        if not (
            isinstance(versions, list)
            and isinstance(answer.get("complete"), bool)
            and all(isinstance(v, list) and len(v) == 3 and isinstance(v[0], int) for v in versions)
            and isinstance(documents, list)
            and all(isinstance(d, dict) and isinstance(d.get("xt/id"), str) for d in documents)
        ):
            raise self._shape_error("versions", answer)
        return dict(answer)

    def sync(self, *, wait: float, timeout: float) -> None:
        """Block until the node has indexed everything submitted to its tx-log so far."""
        params = {"timeout": max(1, int(wait * 1000))}
        self._call("GET", "/_xtdb/sync", "sync", timeout=timeout, params=params)


def _line(line: bytes, where: dict[str, str]) -> Any:
    try:
        return loads(line)
    except ValueError as exc:
        raise StoreProtocolError(
            f"the answer is not JSON ({exc}): {line[:200]!r}", **where
        ) from exc


def _verdict(body: bytes, where: dict[str, str]) -> tuple[int, bytes]:
    """(status, body) of a two-line answer's second line (decision 0138): an error line carries
    the status a one-line answer would have had."""
    lines = body.split(b"\n")
    if len(lines) != 3 or lines[2]:
        raise StoreProtocolError(f"expected two lines: {body[:200]!r}", **where)
    second = lines[1]
    if second.startswith(b'{"error"'):
        status = _line(second, where).get("status")
        return (status if isinstance(status, int) and status >= 400 else 500), second
    return 200, second


def _error_message(body: bytes) -> str:
    """The ``error`` of a JSON error body, else the body's start (error shapes vary by route)."""
    text = body[:500].decode("utf-8", "replace")
    try:
        parsed = json.loads(body)
    except ValueError:
        return text or "(empty body)"
    if isinstance(parsed, dict):
        for key in ("error", "xtdb.error/message", "message", "class"):
            if isinstance(parsed.get(key), str):
                return str(parsed[key])
    return text
