"""Which ids a tool call may have, and the id a harness's tool call is stored under.

A toolcall object's id is shown to the model (in metadata lines and as the id of the call in the
chat) and sent to providers, so it is valid for every provider format: at most 40 characters
(OpenAI) of ``[A-Za-z0-9_-]`` (Anthropic's ``tool_use`` pattern). That alone keeps it apart from
every other document of the store: infrastructure ids carry a ``:`` (``log:``, ``chat:``,
``session:``, ``system_prompt:``) and file ids are 64 hex digits.

A harness's own call id is never stored as an object id: a call reaches the store under
:func:`toolcall_object_id`, a digest of the session, the harness's id and how often the session
has used that id before, so that ids one harness reuses (``call_0`` on every turn), ids another
session uses too, and ids no provider accepts (``functions.bash:0``) all become distinct, valid
ids that no other session can produce. docs/decisions/0030-tool-call-ids.md records the scheme.
"""

from __future__ import annotations

import re
import sys
from typing import Final

from selfctx.domain.hashing import sha256_hex, stable_stringify

__all__ = [
    "MAX_TOOLCALL_ID",
    "RESERVED_PREFIXES",
    "TOOLCALL_ID",
    "interned",
    "interned_or_none",
    "is_valid_toolcall_id",
    "toolcall_id_problem",
    "toolcall_object_id",
]

RESERVED_PREFIXES: Final = ("log:", "chat:", "session:", "system_prompt:", "summary:", "calls:")
"""Id prefixes of the store's own documents (session log, chat, session, system prompt, the
compaction summary of decision 0043, and the packs of tool calls' metadata of decision 0123)."""

MAX_TOOLCALL_ID: Final = 40
"""OpenAI's limit on a tool-call id's length."""

TOOLCALL_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,40}")
"""What a toolcall object's id is made of (Anthropic's ``tool_use`` id pattern, OpenAI's length)."""

_MINTED_PREFIX: Final = "tc_"
_MINTED_DIGITS: Final = 24
"""96 bits of SHA-256: ids of different calls collide with odds no store comes near."""


def is_valid_toolcall_id(value: object) -> bool:
    """True if ``value`` may be a toolcall object's id (and so sent to any provider)."""
    return isinstance(value, str) and TOOLCALL_ID.fullmatch(value) is not None


def toolcall_id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a toolcall object's id, or None if it can."""
    if not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if not value:
        return "must not be empty"
    if value.startswith(RESERVED_PREFIXES):
        return "uses a prefix of the store's own documents"
    if len(value) > MAX_TOOLCALL_ID:
        return f"is longer than {MAX_TOOLCALL_ID} characters"
    if TOOLCALL_ID.fullmatch(value) is None:
        return "may hold only letters, digits, '_' and '-'"
    return None


def toolcall_object_id(session_id: str, provider_id: str, occurrence: int) -> str:
    """The object id of the ``occurrence``-th (1-based) call a session's harness gave the id
    ``provider_id``: ``tc_`` and 24 hex digits, the same for every client that computes it."""
    digest = sha256_hex(stable_stringify(["toolcall", session_id, provider_id, occurrence]))
    return f"{_MINTED_PREFIX}{digest[:_MINTED_DIGITS]}"


def interned(value: str) -> str:
    """``value``, the one copy of it (``sys.intern``; anything not a string as given, for
    validation to refuse). An id or a tool name is held in many places of a session
    (its index, sets and maps, the chat, the object, the harness's cursor), each read from its
    own JSON: one shared string instead of a copy in each (decision 0092)."""
    return sys.intern(value) if type(value) is str else value


def interned_or_none(value: str | None) -> str | None:
    """:func:`interned`, for an optional string."""
    return sys.intern(value) if type(value) is str else value
