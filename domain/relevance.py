"""Relevance: which tool outputs the agent still needs (decision 0021).

Two facts decide it, both read from the session alone:

* **Views.** Each tool call records what it showed of which files (``file_views``: the whole
  file, some lines, or a change). An output all of whose views a later output shows again (the
  same file, the same or more lines) is *superseded*: the later one holds those lines, in their
  newer version if the file changed in between.
* **The working set.** The files the agent works on: those named in its last few messages (a
  path in a command or an argument, an edit target, a test file it ran, a module it imported,
  a file's stem that is an identifier)
  or in a traceback frame of their outputs.

From them each active tool output gets a *tier*: superseded outputs collapse first, then
outputs that show nothing of the working set (least recently used first); outputs that show a
working-set file are kept as long as it stays one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from selfctx.domain.chat import AssistantMessage, ToolResult, thaw_json
from selfctx.domain.objects import ContentObject, FileObject, FileView, Source, ToolcallObject
from selfctx.domain.session.state import SessionState

__all__ = [
    "KEEP",
    "SUPERSEDED",
    "UNUSED",
    "FileNames",
    "Relevance",
    "RelevanceMemo",
    "answer_names",
    "covers",
    "identifiers",
    "json_strings",
    "name_tokens",
    "named_files",
    "relevance",
    "superseded_by",
    "working_set_calls",
]

SUPERSEDED = 0
"""Tier of an output a later output shows again: collapsed first."""
UNUSED = 1
"""Tier of an output that shows nothing of the working set."""
KEEP = 2
"""Tier of an output that shows a file of the working set: kept by batch collapses."""

DECAY = 0.9
"""How much a mention weighs per message of age."""
_TOKEN = re.compile(r"[\w.\-/]+")
_DISTINCT_STEM = re.compile(r"[A-Za-z](?=\w*[0-9_])\w{3,}")
"""A file name's stem distinct enough to stand for the file when named alone: an identifier with a
digit or underscore in it (``L060``, ``test_parser``), not a word of prose (``setup``) nor a
dunder that every package has (``__init__``)."""
_FRAME = re.compile(r'File "([^"\n]+)", line \d+|^([\w./-]+\.\w+):\d+:(?:\d+:)? ', re.M)
"""A traceback frame (Python's ``File "x.py", line 3``) or a compiler's or pytest's
``path:line:`` at the start of a line."""
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z](?=\w*[0-9_])\w{3,}")
"""An identifier distinct enough to be a name rather than a word: a letter, then letters,
digits and underscores with a digit or an underscore among them (``friends_abstract``,
``test_l060``; not ``models``, not ``__init__``), four characters or more."""
_MAX_NAME_TEXT = 50_000
"""Only the first characters of an output are looked at for identifiers it introduces."""
_MAX_FRAME_TEXT = 20_000
"""Only the last characters of an output are searched for frames (tracebacks end outputs)."""


@attrs.frozen
class Relevance:
    """What the session's views and working set say about its active tool outputs."""

    working_set: Mapping[str, float]
    """Ids of the files the agent works on, each with its weight: the sum, over the recent
    messages that name it, of ``DECAY ** age`` (age 0: the latest message), so that a file the
    agent keeps coming back to weighs more than one it named once."""
    tiers: Mapping[str, int]
    """For each active tool output: :data:`SUPERSEDED`, :data:`UNUSED` or :data:`KEEP`."""
    superseded: Mapping[str, str]
    """Superseded active outputs, each with the earliest later output that shows its lines."""
    stale: Mapping[str, str] = attrs.field(factory=dict)
    """Active outputs every file of which a later call changed (and no later output shows their
    lines again), each with the call that changed the last of them: what they show may no longer
    be so; tiered :data:`UNUSED`."""
    named: Mapping[str, float] = attrs.field(factory=dict)
    """Active outputs the agent's recent messages name by an identifier the output brought into
    the session (no earlier output or call of the agent had it), each with its weight (as
    :attr:`working_set`'s): the agent works with what they showed; tiered :data:`KEEP`."""


def _lines_cover(outer: tuple[tuple[int, int], ...], inner: tuple[tuple[int, int], ...]) -> bool:
    for start, end in inner:
        if start < 0 or end < 0:  # counted from the end: only the same range shows it again
            if (start, end) not in outer:
                return False
            continue
        line = start
        while line <= end:
            reach = next((b for a, b in outer if a > 0 and a <= line and (b < 0 or b >= line)), 0)
            if reach == 0:
                return False
            if reach < 0:
                break  # to the end of the file
            line = reach + 1
    return True


def covers(later: FileView, earlier: FileView) -> bool:
    """Whether ``later`` shows every line ``earlier`` showed (of the same file)."""
    if later.file != earlier.file or later.kind == "change" or earlier.kind == "change":
        return False
    if later.kind == "read":
        return True
    if not earlier.ranges or not later.ranges:  # lines not known: only a whole read shows them
        return False
    return earlier.kind == "lines" and _lines_cover(later.ranges, earlier.ranges)


def superseded_by(
    earlier: ToolcallObject, later_outputs: Iterable[ToolcallObject]
) -> ToolcallObject | None:
    """The first of ``later_outputs`` that shows every line ``earlier`` showed of every file
    (None if none does, or if ``earlier`` showed no file)."""
    shown = [v for v in earlier.file_views or () if v.kind != "change"]
    if not shown:
        return None
    for later in later_outputs:
        views = [v for v in later.file_views or () if v.kind != "change"]
        if views and all(any(covers(v, s) for v in views) for s in shown):
            return later
    return None


def json_strings(value: Any) -> Iterator[str]:
    """Every string value in decoded JSON, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from json_strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from json_strings(item)


def _message_texts(message: AssistantMessage, objects: Mapping[str, ContentObject]) -> list[str]:
    """An assistant message's text and call arguments, and the traceback frames in the outputs of
    its calls."""
    texts = [message.text]
    for call in message.tool_calls:
        texts += json_strings(thaw_json(call.arguments))
        output = objects.get(call.id)
        if isinstance(output, ToolcallObject) and output.content:
            for match in _FRAME.finditer(output.content[-_MAX_FRAME_TEXT:]):
                texts.append(match.group(1) or match.group(2))
    return texts


def _outputs_key(
    message: AssistantMessage, objects: Mapping[str, ContentObject]
) -> tuple[Any, ...]:
    """What a message's texts depend on besides the message: each call's output, by its hash and
    whether its content is at hand."""
    key: list[Any] = []
    for call in message.tool_calls:
        output = objects.get(call.id)
        if isinstance(output, ToolcallObject):
            key.append((output.content_hash, output.content is not None))
        else:
            key.append(None)
    return tuple(key)


def _recent_tokens(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    messages: int,
    memo: RelevanceMemo,
) -> Iterator[tuple[str, ...]]:
    """The candidate names (:func:`name_tokens`) of each of the last ``messages`` assistant
    messages, newest first. Each message's are worked out once and kept in ``memo`` while the
    message is among the last ``messages`` (and its outputs do not change)."""
    seen: dict[int, tuple[AssistantMessage, tuple[Any, ...], tuple[str, ...]]] = {}
    kept = memo.tokens
    try:
        for message in _recent_messages(state, messages):
            key = _outputs_key(message, objects)
            entry = kept.get(id(message))
            if entry is None or entry[0] is not message or entry[1] != key:
                entry = (message, key, name_tokens(_message_texts(message, objects)))
            seen[id(message)] = entry
            yield entry[2]
    finally:
        memo.tokens = seen  # only the recent messages' stay: bounded by ``messages``


def _recent_messages(state: SessionState, messages: int) -> Iterator[AssistantMessage]:
    """The assistant messages of the chat, newest first, until ``messages`` distinct ones."""
    seen: set[int] = set()
    for turn in reversed(state.turns):
        for message in reversed(turn.messages):
            if not isinstance(message, AssistantMessage):
                continue
            if len(seen) >= messages:
                return
            seen.add(id(message))
            yield message


def working_set_calls(state: SessionState, recent_messages: int) -> list[str]:
    """The tool calls whose objects :func:`relevance` reads to find the working set: the active
    ones (and the files they show) and those of the last ``recent_messages`` assistant messages
    (their outputs' traceback frames name files). A reader holding only these, and the files
    the active ones show, gets the same working set as one holding every object (the tiers and
    supersession look further: at the outputs recorded after each active one)."""
    kinds = state.kinds
    out = dict.fromkeys(i for i in state.ordered(state.active) if kinds.get(i) == "toolcall")
    for message in _recent_messages(state, recent_messages):
        out.update(dict.fromkeys(call.id for call in message.tool_calls))
    return list(out)


def name_tokens(texts: Iterable[str]) -> tuple[str, ...]:
    """The distinct words of ``texts`` that may name a file (a path, a dotted name, a stem), in
    the order they first appear."""
    found: dict[str, None] = {}
    for text in texts:
        for token in _TOKEN.findall(text):
            found[token.rstrip(".-")] = None
    return tuple(found)


class FileNames:
    """The files of ``paths`` (file id to agent-visible path) and the words that name them:
    built once, asked for many texts' words (:func:`name_tokens`)."""

    def __init__(self, paths: Mapping[str, str], *, modules: bool = True) -> None:
        by_name: dict[str, list[tuple[str, str]]] = {}
        for file_id, path in paths.items():
            by_name.setdefault(path.rsplit("/", 1)[-1], []).append((file_id, path))
        stems: dict[str, list[str]] = {}
        for name, files in by_name.items():
            stem = name.rsplit(".", 1)[0]
            if "." in name and _DISTINCT_STEM.fullmatch(stem):
                stems.setdefault(stem, []).extend(f for f, _ in files)
        self._by_name = by_name
        self._stems = stems
        self._modules = modules

    def _match(self, candidate: str, found: set[str]) -> None:
        candidate = candidate.lstrip("./") if candidate.startswith("./") else candidate
        for file_id, path in self._by_name.get(candidate.rsplit("/", 1)[-1], ()):
            if path == candidate or path.endswith("/" + candidate.lstrip("/")):
                found.add(file_id)

    def named(self, tokens: Iterable[str]) -> frozenset[str]:
        """The ids of the files the words ``tokens`` name."""
        found: set[str] = set()
        stems, modules = self._stems, self._modules
        for token in tokens:
            if "/" in token or "." in token:
                self._match(token, found)
            elif token in stems:  # a file known by its name alone: `L060` for `L060.py`
                found.update(stems[token])
            if modules and "/" not in token and "." in token:
                parts = token.split(".")
                for n in range(len(parts), 1, -1):
                    self._match("/".join(parts[:n]) + ".py", found)
        return frozenset(found)


def named_files(
    texts: Iterable[str], paths: Mapping[str, str], *, modules: bool = True
) -> frozenset[str]:
    """The ids (keys of ``paths``, file id to agent-visible path) of the files the texts name:
    by a path that ends the file's path on a component boundary (``src/a.py``, ``a.py``,
    ``/w/src/a.py``), by its stem alone when the stem is an identifier rather than a word
    (``L060`` names ``rules/L060.py``), or, with ``modules``, by a dotted module name
    (``pkg.mod`` and ``pkg.mod.attr`` name ``pkg/mod.py``)."""
    return FileNames(paths, modules=modules).named(name_tokens(texts))


KNOWN_NAMES: Final = 8_192
"""Distinct identifiers :class:`KnownNames` holds in each of its two generations. The sessions
of the development set show at most about 650 in all, so none of them forgets one; a session of
generated text that shows thousands holds at most twice this many (about 1.5 MB), not every
identifier it ever saw (decision 0086)."""


@attrs.define(eq=False)
class KnownNames:
    """The identifiers a session has shown, bounded: the ones seen since the last turnover
    (``recent``) and those of the generation before (``older``). When ``recent`` holds more than
    ``limit``, it becomes ``older`` and the generation before that is forgotten, so an identifier
    is forgotten only after ``limit`` other distinct ones were seen since it last was; seeing it
    again keeps it. Set operations in C, as a set's."""

    limit: int = KNOWN_NAMES
    recent: set[str] = attrs.field(factory=set)
    older: set[str] = attrs.field(factory=set)

    def __contains__(self, name: object) -> bool:
        return name in self.recent or name in self.older

    def __len__(self) -> int:
        return len(self.recent) + len(self.older - self.recent)

    def unseen(self, names: set[str]) -> set[str]:
        """The members of ``names`` not known."""
        return names.difference(self.recent, self.older)

    def update(self, names: Iterable[str]) -> None:
        """Note ``names`` as seen now."""
        self.recent.update(names)
        if len(self.recent) > self.limit:
            self.older, self.recent = self.recent, set()


@attrs.define(eq=False)
class RelevanceMemo:
    """What :func:`relevance` learnt about a session's outputs, kept between turns so that each
    turn looks only at the outputs recorded since the last (the session index only grows; a
    rollback starts a new memo). Facts, not guesses: whether a later output shows all of an
    output's lines, whether later calls changed every file it shows."""

    checked: dict[str, int] = attrs.field(factory=dict)
    """Output id → length of the session index when the outputs after it were last looked at."""
    covered: dict[str, str] = attrs.field(factory=dict)
    """Output id → the first later output that shows every line it showed."""
    changed: dict[str, dict[str, str]] = attrs.field(factory=dict)
    """Output id → the files it shows that a later call changed, each with the first such call
    (only outputs with views)."""
    answered: set[str] = attrs.field(factory=set)
    """Outputs the collapse of answered outputs has looked at once already: it looks at each
    once, at the first request after the agent answered it."""
    tokens: dict[int, tuple[AssistantMessage, tuple[Any, ...], tuple[str, ...]]] = attrs.field(
        factory=dict
    )
    """The candidate names of each recent assistant message (by the message object's identity,
    which the entry holds, and what its outputs were), so that each is read once: only the last
    ``recent_messages`` messages' are kept."""
    introduced: dict[str, frozenset[str]] = attrs.field(factory=dict)
    """Output id → the identifiers it brought into the session (only active outputs)."""
    known: KnownNames = attrs.field(factory=KnownNames)
    """Identifiers the session had shown before (outputs looked at, the agent's calls), the
    latest ones of a very long session."""
    scanned: int = 0
    """Length of the session index when outputs were last looked at for identifiers."""

    def forget(self, keep: Iterable[str]) -> None:
        """Drop what is known of outputs other than ``keep`` (those no longer active)."""
        kept = set(keep)
        for table in (self.checked, self.covered, self.changed, self.introduced):
            for key in [k for k in table if k not in kept]:
                del table[key]
        self.answered &= kept


def relevance(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    display_path: Callable[[Source], str],
    recent_messages: int,
    memo: RelevanceMemo | None = None,
    named_messages: int | None = None,
    introduced: bool = False,
) -> Relevance:
    """Tiers of the active tool outputs, the working set, and which outputs are superseded.

    Only active outputs and the files they show are looked at (plus, for supersession and
    staleness, the outputs recorded after them since the last call with the same ``memo``), so
    the work follows what the prompt shows and what is new, not the session's size."""
    memo = memo if memo is not None else RelevanceMemo()
    active = [
        o for i in state.ordered(state.active) if isinstance(o := objects.get(i), ToolcallObject)
    ]
    shown = {v.file for o in active for v in o.file_views or () if v.kind != "change"}
    paths = {
        f: display_path(o.source) for f in shown if isinstance(o := objects.get(f), FileObject)
    }
    working: dict[str, float] = {}
    if paths:  # no active output shows a file: there is nothing to keep, nothing to look for
        names = FileNames(paths)
        for age, tokens in enumerate(_recent_tokens(state, objects, recent_messages, memo)):
            for file_id in names.named(tokens):
                working[file_id] = working.get(file_id, 0.0) + DECAY**age
    superseded: dict[str, str] = {}
    tiers: dict[str, int] = {}
    stale: dict[str, str] = {}
    for output in active:
        views = [v for v in output.file_views or () if v.kind != "change"]
        if views:
            _look_after(state, objects, output, views, memo)
        later = memo.covered.get(output.id)
        if later is not None:
            superseded[output.id] = later
            tiers[output.id] = SUPERSEDED
        elif views and (changes := memo.changed.get(output.id, {})).keys() >= {
            v.file for v in views
        }:
            # every file it shows changed since: its lines may no longer be what they were
            stale[output.id] = max(changes.values(), key=state.positions.__getitem__)
            tiers[output.id] = UNUSED
        elif any(v.file in working for v in views):
            tiers[output.id] = KEEP
        else:
            tiers[output.id] = UNUSED
    named: dict[str, float] = {}
    if named_messages or introduced:
        _introduced(state, objects, {o.id for o in active}, memo)
    if named_messages:
        named = _named_outputs(state, {o.id for o in active}, named_messages, memo)
        for output_id in named:
            if tiers.get(output_id) == UNUSED and output_id not in stale:
                tiers[output_id] = KEEP
    memo.forget(o.id for o in active)
    return Relevance(working, tiers, superseded, stale, named)


def _names(text: str) -> set[str]:
    return set(_IDENTIFIER.findall(text[:_MAX_NAME_TEXT]))


def identifiers(text: str) -> set[str]:
    """The identifiers of ``text`` distinct enough to be names (a digit or an underscore in
    them, four characters or more: ``friends_base``, ``L060``), as the agent's messages are read
    for them."""
    return set(_IDENTIFIER.findall(text))


def answer_names(
    state: SessionState, output_id: str, start: tuple[int, int] | None = None
) -> set[str]:
    """The identifiers the agent named (its text and call arguments) in its answer to the
    output ``output_id``: the first message it wrote after it saw the output (none yet: empty).
    ``start`` (a turn and a message index in it at or before the output's result, such as the
    message that made the call) spares reading the turn from its beginning."""
    turn = state.toolcall_turn.get(output_id)
    if turn is None:
        return set()
    first = start[1] if start is not None and start[0] == turn else 0
    found = False
    for number in range(turn, len(state.turns)):
        messages = state.turns[number].messages
        for message in messages[first if number == turn else 0 :]:
            if isinstance(message, ToolResult) and message.toolcall_id == output_id:
                found = True
            elif found and isinstance(message, AssistantMessage):
                said = _names(message.text)
                for call in message.tool_calls:
                    for text in json_strings(thaw_json(call.arguments)):
                        said |= _names(text)
                return said
    return set()


def _said(state: SessionState, messages: int) -> Iterator[set[str]]:
    """The identifiers of each of the last ``messages`` assistant messages (text and call
    arguments), newest first."""
    seen = 0
    for turn in reversed(state.turns):
        for message in reversed(turn.messages):
            if not isinstance(message, AssistantMessage):
                continue
            if seen >= messages:
                return
            seen += 1
            said = _names(message.text)
            for call in message.tool_calls:
                for text in json_strings(thaw_json(call.arguments)):
                    said |= _names(text)
            yield said


def _introduced(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    active_ids: set[str],
    memo: RelevanceMemo,
) -> None:
    """Note in ``memo.introduced`` the identifiers each active output brought into the session.
    Each output recorded since the last call is looked at once, in order: the identifiers it
    shows that neither an earlier output nor the agent's calls had shown are its own."""
    for object_id in state.index[memo.scanned :]:
        obj = objects.get(object_id)
        if not isinstance(obj, ToolcallObject):
            continue
        for text in json_strings(thaw_json(obj.args)):  # the agent's own words come first
            memo.known.update(_names(text))
        shown = _names(obj.content or "")
        names = memo.known.unseen(shown)
        memo.known.update(shown)
        if names and object_id in active_ids:
            memo.introduced[object_id] = frozenset(names)
    memo.scanned = len(state.index)


def _named_outputs(
    state: SessionState, active_ids: set[str], messages: int, memo: RelevanceMemo
) -> dict[str, float]:
    """The active outputs whose introduced identifiers (:func:`_introduced`) the agent's last
    ``messages`` messages name, with their weights."""
    if not memo.introduced:
        return {}
    weights: dict[str, float] = {}
    for age, said in enumerate(_said(state, messages)):
        for output_id, introduced in memo.introduced.items():
            if output_id in active_ids and introduced & said:
                weights[output_id] = weights.get(output_id, 0.0) + DECAY**age
    return weights


def _look_after(
    state: SessionState,
    objects: Mapping[str, ContentObject],
    output: ToolcallObject,
    views: list[FileView],
    memo: RelevanceMemo,
) -> None:
    """Look at the outputs recorded after ``output`` that ``memo`` has not seen: the first one
    showing all its lines, and the calls changing its files."""
    if output.id in memo.covered:
        return
    end = len(state.index)
    start = memo.checked.get(output.id, state.positions[output.id] + 1)
    files = {v.file for v in views}
    for object_id in state.index[start:end]:
        later = objects.get(object_id)
        if not isinstance(later, ToolcallObject) or not later.file_views:
            continue
        if superseded_by(output, [later]) is later:
            memo.covered[output.id] = later.id
            break
        for view in later.file_views:
            if view.kind == "change" and view.file in files:
                memo.changed.setdefault(output.id, {}).setdefault(view.file, later.id)
    memo.checked[output.id] = end
