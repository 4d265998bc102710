"""Credentials never leave the proxy in a log line or an error body.

A request's credentials go upstream with it and nowhere else. What the proxy writes (its log, the
error bodies and events it answers with) may quote an upstream URL, an exception, or an upstream
error that echoes a key; :func:`redact` replaces in any such text the credential values the
request carried, the values of credential query-string parameters (``?key=``, ``?api-key=``, ...,
as some gateways take them) and bearer tokens. :class:`RedactingFilter` does the same to every
record of the loggers it is attached to, tracebacks included.
"""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Iterable

__all__ = ["CREDENTIALS", "REDACTED", "RedactingFilter", "redact"]

CREDENTIALS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "selfctx_proxy_credentials", default=()
)
"""The credential values of the request being served (set by the proxy for each request; tasks
and worker threads it starts see them too)."""

REDACTED = "[redacted]"
_PARAMETERS = r"key|api-key|api_key|apikey|access_token|token|x-api-key"
_QUERY = re.compile(rf"(?i)([?&;](?:{_PARAMETERS})=)[^&#\s'\"<>]*")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",;]+")
_HEADER = re.compile(
    r"(?i)((?:x-api-key|api-key|authorization|x-goog-api-key)['\"]?\s*[:=]\s*['\"]?)[^\s'\",;}]+"
)


def redact(text: str, values: Iterable[str] | None = None) -> str:
    """``text`` with credentials replaced by ``[redacted]``: each of ``values`` (default: the
    credentials of the request being served, :data:`CREDENTIALS`; 8 characters or more),
    credential query parameters, bearer tokens and credential headers written out."""
    given = CREDENTIALS.get() if values is None else values
    for value in sorted({v for v in given if v and len(v) >= 8}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _QUERY.sub(rf"\1{REDACTED}", text)
    text = _BEARER.sub(rf"\1{REDACTED}", text)
    return _HEADER.sub(rf"\1{REDACTED}", text)


class RedactingFilter(logging.Filter):
    """Redacts each record's message and traceback before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
