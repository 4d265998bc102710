"""The objects an open session holds: every one's metadata, and content up to a budget.

A long session meets thousands of tool outputs and file versions. Their content lives in the
store; what a client keeps in memory is every object's metadata (ids, hashes, sizes, paths, the
call's arguments) and the content of the objects used last, up to :data:`CONTENT_BUDGET`
characters. An object whose content was dropped (*hollow*) is read again from the store, in one
batch, the next time its content is asked for, so a session's memory does not grow with the
bytes it has seen (decision 0065).

``ObjectCache[id]`` and ``get`` always give the whole object. :meth:`ObjectCache.meta` gives
what is in memory, hollow or not, for what needs no content (hashes, sources, sizes:
``char_count``); :meth:`ObjectCache.showing` gives a view whose objects are whole only for the
ids it is told will be shown in full (what a renderer reads the content of).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, MutableMapping
from typing import Final

import attrs
from pyrsistent import PSet

from selfctx.domain.documents import from_document, toolcall_without_content
from selfctx.domain.objects import ContentObject, FileObject, ToolcallObject
from selfctx.domain.session.state import members

__all__ = ["CONTENT_BUDGET", "METADATA_BUDGET", "Loader", "ObjectCache"]

CONTENT_BUDGET: Final = 4_000_000
"""Characters of content a session keeps in memory (about 4 MB of text): its active objects and
the ones used last. Chosen as several times what a 200,000-token context can show in full."""

METADATA_BUDGET: Final = 256
"""Hollow tool calls whose metadata a session keeps in memory (the ones used last, about 180 KB);
an older one's is read again from the store when a pass needs it. Chosen in decision 0111: the
passes of a turn read the metadata of the newest outputs and of what changed (the bench's
sessions read none back over 1,000 turns with 16); a re-rendering after a collapse reads from the
collapsed output on."""

Loader = Callable[[list[str]], Mapping[str, object]]
"""Reads the latest stored documents of some ids (``ObjectStore.get_many``)."""


def _size(obj: ContentObject) -> int:
    return len(obj.content) if obj.content is not None else 0


class ObjectCache(MutableMapping[str, ContentObject]):
    """The latest known version of every object of one session's index (not thread-safe: the
    session's lock serialises its users)."""

    def __init__(
        self,
        loader: Loader | None = None,
        budget: int = CONTENT_BUDGET,
        metadata_budget: int = METADATA_BUDGET,
        metadata_loader: Loader | None = None,
    ) -> None:
        """``metadata_loader``: reads tool calls' documents without their content (default:
        ``loader``, whose content is then dropped)."""
        self._loader = loader
        self._metadata_loader = metadata_loader
        self.budget = budget
        self.metadata_budget = metadata_budget
        """Hollow tool calls whose metadata stays in memory (decision 0111)."""
        self._objects: dict[str, ContentObject | None] = {}
        """Every object, hollow or whole; None for a cold one (its metadata in the store only)."""
        self._warm: collections.OrderedDict[str, None] = collections.OrderedDict()
        """The hollow tool calls whose metadata is in memory, least recently used first."""
        self._whole: collections.OrderedDict[str, int] = collections.OrderedDict()
        """Ids whose content is in memory, least recently used first, with its size."""
        self._hollow: set[str] = set()
        self._files: set[str] = set()
        """The ids of the file objects among them (what the versions feed is asked about)."""
        self._held: frozenset[str] = frozenset()
        """The ids the last :meth:`showing` showed whole: their content stays whatever the
        budget (a prompt shows it anyway), so that a working set larger than the budget is not
        read again from the store every turn (decision 0086)."""
        self.chars = 0
        """Characters of content in memory."""
        self.loads = 0
        """Objects read again from the store because their content had been dropped."""
        self.metadata_loads = 0
        """Cold objects read again from the store for their metadata."""

    # -- the mapping -------------------------------------------------------------------------

    def __getitem__(self, object_id: str) -> ContentObject:
        obj = self._objects[object_id]
        if object_id in self._hollow:
            self.load([object_id])
            return self._objects[object_id]  # type: ignore[return-value]
        if object_id in self._whole:
            self._whole.move_to_end(object_id)
        return obj  # type: ignore[return-value]

    def __setitem__(self, object_id: str, obj: ContentObject) -> None:
        self._drop(object_id)
        self._objects[object_id] = obj
        if isinstance(obj, FileObject):
            self._files.add(object_id)
        size = _size(obj)
        if size:
            self._whole[object_id] = size
            self.chars += size
            self._evict()

    def __delitem__(self, object_id: str) -> None:
        self._drop(object_id)
        del self._objects[object_id]

    def __contains__(self, object_id: object) -> bool:
        return object_id in self._objects

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)

    # -- beyond it ---------------------------------------------------------------------------

    @property
    def warm_calls(self) -> int:
        """Hollow tool calls whose metadata is in memory (at most ``metadata_budget``)."""
        return len(self._warm)

    def hold_hollow(self, obj: ContentObject) -> None:
        """Hold ``obj`` without its content (read without it: ``obj.content`` is None); it is
        read from the store when asked for whole."""
        self._drop(obj.id)
        self._objects[obj.id] = obj
        if isinstance(obj, FileObject):
            self._files.add(obj.id)
        self._hollow.add(obj.id)
        self._cool(obj)

    def meta(self, object_id: str, *, read: bool = True) -> ContentObject | None:
        """The object as held in memory (hollow: ``content`` None although it has content;
        its hashes, source and ``char_count`` are right); a cold one's metadata is read from
        the store (decision 0111), or with ``read`` False taken as None: what looks for files
        only (a cold object is a tool call). None for an id the session does not hold."""
        obj = self._objects.get(object_id)
        if obj is None:
            return self._warm_up(object_id) if read and object_id in self._objects else None
        if object_id in self._warm:
            self._warm.move_to_end(object_id)
        return obj

    def cold(self, object_id: str) -> bool:
        """Whether the object's metadata is in the store only (decision 0111)."""
        return object_id in self._objects and self._objects[object_id] is None

    def file_hashes(self) -> dict[str, str]:
        """The object hash of every file object held, by id (walks the files only; a file's
        metadata always stays in memory)."""
        objects = self._objects
        return {object_id: objects[object_id].object_hash for object_id in self._files}  # type: ignore[union-attr]

    @property
    def held(self) -> frozenset[str]:
        """The ids whose content stays beyond the budget (the last :meth:`showing`'s)."""
        return self._held

    def held_chars(self) -> int:
        """Characters of content held beyond the budget's choice: the held objects' in memory."""
        return sum(self._whole.get(i, 0) for i in self._held)

    def whole_file(self, object_id: str) -> FileObject | None:
        """The version of file ``object_id`` held with its content (or with none to hold: a
        deletion, a binary file), None when the session does not hold it whole. Safe without
        the session's lock, from another thread (the watcher's, decision 0124): one dictionary
        look-up and one set membership, each atomic, and nothing moved; what it gives may be a
        moment behind the session, which a commit expecting it finds out."""
        obj = self._objects.get(object_id)
        if not isinstance(obj, FileObject) or object_id in self._hollow:
            return None
        return obj

    def hollow(self, object_id: str) -> bool:
        """Whether the object's content is not in memory (it is in the store)."""
        return object_id in self._hollow

    def load(self, object_ids: Iterable[str]) -> None:
        """Read the content of these hollow objects again, in one batch."""
        wanted = [i for i in dict.fromkeys(object_ids) if i in self._hollow]
        if not wanted:
            return
        if self._loader is None:
            raise LookupError(f"no store to read {wanted[:3]} from")
        docs = self._loader(wanted)
        for object_id in wanted:
            doc = docs.get(object_id)
            if doc is None:
                raise LookupError(f"{object_id!r} is in the session but not in the store")
            obj = from_document(doc)  # type: ignore[arg-type]
            assert isinstance(obj, FileObject | ToolcallObject)
            # The latest version: the one held, or a newer one another client wrote since,
            # which the session would learn of on its next read anyway.
            self.loads += 1
            self[object_id] = obj

    def _warm_up(self, object_id: str) -> ContentObject:
        """A cold object's metadata, read from the store."""
        return self.read_metadata([object_id])[object_id]

    def read_metadata(self, object_ids: Iterable[str]) -> dict[str, ContentObject]:
        """The metadata of the cold objects among these, read from the store in one batch (their
        content dropped again: what asks for metadata reads no content), each held as the
        hollow tool call used last; by id."""
        objects = self._objects
        wanted = [i for i in dict.fromkeys(object_ids) if i in objects and objects[i] is None]
        if not wanted:
            return {}
        loader = self._metadata_loader or self._loader
        if loader is None:
            raise LookupError(f"no store to read {wanted[:3]} from")
        docs = loader(wanted)
        read: dict[str, ContentObject] = {}
        for object_id in wanted:
            doc = docs.get(object_id)
            if doc is None:
                raise LookupError(f"{object_id!r} is in the session but not in the store")
            if "content" in doc:  # type: ignore[operator]
                obj = _hollowed(from_document(doc))  # type: ignore[arg-type]
            else:
                obj = toolcall_without_content(doc)  # type: ignore[arg-type]
            assert isinstance(obj, ToolcallObject)  # only tool calls go cold
            self.metadata_loads += 1
            read[object_id] = objects[object_id] = obj
            self._warm[object_id] = None
        return read

    def _cool(self, obj: ContentObject) -> None:
        """``obj`` is a hollow object used now: a tool call's metadata joins the ones kept
        (:meth:`trim` drops the least recently used beyond the budget)."""
        if isinstance(obj, ToolcallObject):
            self._warm[obj.id] = None
            self._warm.move_to_end(obj.id)

    def trim(self) -> None:
        """Drop the metadata of the hollow tool calls used least recently beyond
        :attr:`metadata_budget` (they go cold: only their ids stay). Called after an assembly,
        not while one walks the session (a resumed session's first one renders every message
        with the metadata the resume read)."""
        warm, objects = self._warm, self._objects
        while len(warm) > self.metadata_budget:
            object_id, _ = warm.popitem(last=False)
            objects[object_id] = None

    def showing(self, shown: Collection[str]) -> Mapping[str, ContentObject]:
        """A view in which the objects ``shown`` are whole (read again in one batch if need
        be) and the others as held (hollow or not): what a renderer needs, which reads the
        content of the objects it shows in full and only the metadata of the rest."""
        order, held = self._members(shown)
        self._held = held
        hollow = self._hollow
        if hollow:
            self.load([i for i in order if i in hollow])
        whole = self._whole
        for object_id in order:
            if object_id in whole:
                whole.move_to_end(object_id)
        self._evict()  # what an earlier showing held beyond the budget goes now
        return _Showing(self, held)

    @staticmethod
    def _members(shown: Collection[str]) -> tuple[Iterable[str], frozenset[str]]:
        """The ids of ``shown`` to walk, and as a set whose tests run in C. A persistent set
        (the session's active set, shown two or three times a turn) is the session state's,
        whose members are kept by identity (:func:`members`): walking a persistent set takes
        several Python calls per member, a third of a millisecond for 350 of them. Either order
        is the order of hashes (as is a persistent set's); it orders the content cache's
        least recently used among what was shown together, not what is shown."""
        if isinstance(shown, PSet):
            found = members(shown)
            return found, found
        return shown, frozenset(shown)

    def _drop(self, object_id: str) -> None:
        self._files.discard(object_id)
        self._warm.pop(object_id, None)
        size = self._whole.pop(object_id, None)
        if size is not None:
            self.chars -= size
        self._hollow.discard(object_id)

    def _evict(self) -> None:
        """Drop the content of the least recently used objects beyond the budget, except the
        ones the last :meth:`showing` showed whole."""
        kept: list[tuple[str, int]] = []
        while self.chars > self.budget and len(self._whole) > 1:
            object_id, size = self._whole.popitem(last=False)
            if object_id in self._held:
                kept.append((object_id, size))
                continue
            self.chars -= size
            obj = self._objects[object_id]
            assert obj is not None  # whole: its metadata is held
            hollow = _hollowed(obj)
            self._objects[object_id] = hollow
            self._hollow.add(object_id)
            self._cool(hollow)
        for object_id, size in reversed(kept):  # back in front, in their order
            self._whole[object_id] = size
            self._whole.move_to_end(object_id, last=False)


def _hollowed(obj: ContentObject) -> ContentObject:
    """``obj`` without its content; everything else, its size included, as it was."""
    return attrs.evolve(obj, content=None)


@attrs.frozen
class _Showing(Mapping[str, ContentObject]):
    cache: ObjectCache
    shown: Collection[str]
    fetched: dict[str, ContentObject] = attrs.field(factory=dict)
    """Cold objects :meth:`prefetch` read, for as long as this view is used."""

    def prefetch(self, object_ids: Iterable[str]) -> None:
        """Read the cold ones among these objects in one batch, and keep them here whatever
        the metadata budget: what a renderer is about to walk (decision 0111)."""
        self.fetched.update(self.cache.read_metadata(object_ids))

    def __getitem__(self, object_id: str) -> ContentObject:
        if object_id in self.shown:
            return self.cache[object_id]
        obj = self.fetched.get(object_id) or self.cache.meta(object_id)
        if obj is None:
            raise KeyError(object_id)
        return obj

    def __contains__(self, object_id: object) -> bool:
        return object_id in self.cache

    def __iter__(self) -> Iterator[str]:
        return iter(self.cache)

    def __len__(self) -> int:
        return len(self.cache)
