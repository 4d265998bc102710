"""The project's error tree.

Every error the library raises on purpose derives from :class:`SelfContextError`, so a harness can
catch one class. Each error carries the values a user needs to act on it (the id, the path, the
reason) as attributes, and a ``kind`` that stays stable across releases: the stdio server reports
it as ``data.kind`` and tests match on it.
"""

from __future__ import annotations


class SelfContextError(Exception):
    """Root of every error this project raises deliberately."""

    kind = "error"


class InvalidInput(SelfContextError, ValueError):
    """A caller handed over a value that can never be valid; nothing was changed."""

    kind = "invalid_input"

    def __init__(self, what: str, value: object, reason: str) -> None:
        self.what = what
        self.value = value
        self.reason = reason
        super().__init__(f"invalid {what} {value!r}: {reason}")


class MissingInput(InvalidInput):
    """A value a command needs was not given at all (no flag, variable or setting)."""

    def __init__(self, what: str, advice: str) -> None:
        self.what = what
        self.value = None
        self.reason = advice
        SelfContextError.__init__(self, f"no {what} given: {advice}")


class UnknownPolicy(InvalidInput):
    """A policy was named that does not exist, or something that is neither a policy nor a name
    was given where a policy is expected."""

    kind = "unknown_policy"

    def __init__(self, value: object, known: tuple[str, ...]) -> None:
        self.known = known
        if isinstance(value, str):
            reason = f"the policies are {', '.join(known)}"
        else:
            reason = f"give a policy name ({', '.join(known)}) or a PolicyConfig"
        super().__init__("policy", value, reason)


class InvalidPath(InvalidInput):
    """A path that is empty, relative where an absolute one is needed, or otherwise malformed."""

    kind = "invalid_path"

    def __init__(self, path: object, reason: str) -> None:
        super().__init__("path", path, reason)
        self.path = path


class InvalidContent(InvalidInput):
    """Content that cannot be stored as text (for example bytes that are not UTF-8)."""

    kind = "invalid_content"

    def __init__(self, where: str, reason: str) -> None:
        super().__init__("content", where, reason)
        self.where = where


class UnknownObject(SelfContextError, LookupError):
    """The id names no object this session has encountered (nor, perhaps, any object at all).

    The message deliberately does not say whether the object exists in another session: one
    session must not learn about another's objects by guessing ids.
    """

    kind = "unknown_object"

    def __init__(self, object_id: str, session_id: str) -> None:
        self.object_id = object_id
        self.session_id = session_id
        super().__init__(f"no object {object_id!r} in session {session_id!r}")


class NotAContentObject(SelfContextError, ValueError):
    """The id names an infrastructure object (chat, system prompt, session), which has no
    context level: it cannot be activated, deactivated or pinned."""

    kind = "not_a_content_object"

    def __init__(self, object_id: str) -> None:
        self.object_id = object_id
        super().__init__(
            f"{object_id!r} is an infrastructure object; only file and toolcall objects can be "
            "activated, deactivated or pinned"
        )


class SessionNotFound(SelfContextError, LookupError):
    """No session with this id exists in the store."""

    kind = "session_not_found"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session {session_id!r}")


class SessionExists(SelfContextError):
    """A session with this id already exists; resume it instead of starting it again."""

    kind = "session_exists"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} already exists; resume it instead")


class DuplicateObject(SelfContextError):
    """An unsourced object id (a tool-call id) is already taken by a different object."""

    kind = "duplicate_object"

    def __init__(self, object_id: str, reason: str) -> None:
        self.object_id = object_id
        self.reason = reason
        super().__init__(f"object id {object_id!r} is already taken: {reason}")


class UnknownCheckpoint(SelfContextError, LookupError):
    """A rollback named a checkpoint the session does not have."""

    kind = "unknown_checkpoint"

    def __init__(self, label: str, session_id: str, known: tuple[str, ...] = ()) -> None:
        self.label = label
        self.session_id = session_id
        self.known = known
        listed = ", ".join(known[-10:]) if known else "none yet"
        super().__init__(
            f"session {session_id!r} has no checkpoint {label!r} (its latest: {listed})"
        )


class DuplicateCheckpoint(SelfContextError):
    """A checkpoint label is already taken in this session."""

    kind = "duplicate_checkpoint"

    def __init__(self, label: str, session_id: str) -> None:
        self.label = label
        self.session_id = session_id
        super().__init__(f"session {session_id!r} already has a checkpoint {label!r}")
