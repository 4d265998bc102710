"""The state's per-object values as machine integers by the object's place in the index.

A session state keeps, for each object of its index, its kind, the turn of a tool call and when
it was last used. As persistent maps each cost an entry per object (a bucket list, a pair, often
a Python integer: about 100-120 bytes); here each is a column of machine integers indexed by the
object's position in the session index, in chunks of :data:`CHUNK` held by a persistent vector,
so that a change copies one chunk (decision 0140). A column reads like the map it replaces: by
id, through the state's ``positions``, which the column holds (the index only grows and a
position never changes, so the references a column was last changed with answer for every id it
holds). An id not yet in the index (a tool call is recorded before it is encountered) is held
aside until it has a position.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from itertools import filterfalse, islice
from typing import Any, ClassVar, Final, Generic, Self, TypeVar

from pyrsistent import PMap, PSet, PVector, pmap, pset, pvector

from selfctx.domain.errors import InvalidInput

__all__ = [
    "CHUNK",
    "Column",
    "ColumnEvolver",
    "IndexedSet",
    "IndexedSetEvolver",
    "IntColumn",
    "KindColumn",
]

CHUNK: Final = 128
"""Values a chunk holds: a change copies one chunk (1 KB of 64-bit integers) and a slot of the
vector; a smaller chunk is a larger vector of chunks (decision 0140 gives the neighbours)."""
_SHIFT: Final = CHUNK.bit_length() - 1
_MASK: Final = CHUNK - 1

V = TypeVar("V")
C = TypeVar("C", bound="Column[Any]")
S = TypeVar("S", bound="IndexedSet")

_EMPTY_IDS: PVector[str] = pvector()
_EMPTY_POSITIONS: PMap[str, int] = pmap()
_NO_CHUNKS: PVector[array[int]] = pvector()
_NO_IDS: PSet[str] = pset()


class Column(Mapping[str, V], Generic[V]):
    """A persistent map from the ids of a session's index to values, stored by position."""

    __slots__ = ("_chunks", "_extra", "_index", "_positions", "_size")

    TYPECODE: ClassVar[str] = "q"
    ABSENT: ClassVar[int] = -(2**63)

    def __init__(
        self,
        positions: PMap[str, int] = _EMPTY_POSITIONS,
        index: PVector[str] = _EMPTY_IDS,
        chunks: PVector[array[int]] = _NO_CHUNKS,
        size: int = 0,
        extra: PMap[str, V] | None = None,
    ) -> None:
        self._positions = positions
        self._index = index
        self._chunks = chunks
        self._size = size
        self._extra: PMap[str, V] = pmap() if extra is None else extra

    # -- the codes (a subclass maps its values to machine integers)
    def _encode(self, value: V) -> int:
        raise NotImplementedError  # pragma: no cover

    def _decode(self, code: int) -> V:
        raise NotImplementedError  # pragma: no cover

    # -- reading
    def _code(self, key: str) -> int:
        try:
            position = self._positions[key]
        except (KeyError, TypeError):
            return self.ABSENT
        chunk = position >> _SHIFT
        if chunk >= len(self._chunks):
            return self.ABSENT
        return self._chunks[chunk][position & _MASK]

    def __getitem__(self, key: str) -> V:
        code = self._code(key)
        if code != self.ABSENT:
            return self._decode(code)
        return self._extra[key]

    def get(self, key: str, default: Any = None) -> Any:
        code = self._code(key)
        if code != self.ABSENT:
            return self._decode(code)
        return self._extra.get(key, default) if self._extra else default

    def __contains__(self, key: object) -> bool:
        return (type(key) is str and self._code(key) != self.ABSENT) or key in self._extra

    def __len__(self) -> int:
        return self._size

    def _present(self) -> Iterator[tuple[int, int]]:
        """(position, code) of every value held by position, in index order."""
        absent = self.ABSENT
        for n, chunk in enumerate(self._chunks):
            base = n << _SHIFT
            if chunk.count(absent) == CHUNK:
                continue
            for offset, code in enumerate(chunk):
                if code != absent:
                    yield base + offset, code

    def __iter__(self) -> Iterator[str]:
        index = self._index
        for position, _ in self._present():
            yield index[position]
        yield from sorted(self._extra)

    def items(self) -> Any:
        index, decode = self._index, self._decode
        out = [(index[position], decode(code)) for position, code in self._present()]
        out += sorted(self._extra.items())
        return out

    def values(self) -> Any:
        decode = self._decode
        out = [decode(code) for _, code in self._present()]
        out += [value for _, value in sorted(self._extra.items())]
        return out

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"

    # -- changing
    def _with(
        self,
        positions: PMap[str, int],
        index: PVector[str],
        chunks: PVector[array[int]],
        size: int,
        extra: PMap[str, V],
    ) -> Self:
        return type(self)(positions, index, chunks, size, extra)

    def set(self, key: str, value: V, positions: PMap[str, int], index: PVector[str]) -> Self:
        """This column with ``key`` holding ``value``; ``positions`` and ``index`` are the
        state's current ones (an id they do not hold yet is kept aside until it is placed)."""
        code = self._encode(value)
        position = positions.get(key)
        if position is None:
            added = key not in self
            extra = self._extra.set(key, value)
            return self._with(self._positions, self._index, self._chunks, self._size + added, extra)
        chunks, before = _put(self._chunks, position, code, self.ABSENT, self.TYPECODE)
        size = self._size + (before == self.ABSENT and key not in self._extra)
        extra = self._extra.discard(key) if self._extra else self._extra
        return self._with(positions, index, chunks, size, extra)

    def placed(self, key: str, positions: PMap[str, int], index: PVector[str]) -> Self:
        """This column once ``key`` has a position: a value held aside for it moves there."""
        if not self._extra or key not in self._extra:
            return self
        position = positions[key]
        code = self._encode(self._extra[key])
        chunks, before = _put(self._chunks, position, code, self.ABSENT, self.TYPECODE)
        size = self._size - (before != self.ABSENT)
        return self._with(positions, index, chunks, size, self._extra.discard(key))

    def evolver(self) -> ColumnEvolver[Self]:
        return ColumnEvolver(self)

    @classmethod
    def of(cls, values: Mapping[str, V], positions: PMap[str, int], index: PVector[str]) -> Self:
        """A column holding ``values`` (ids of the index; others are kept aside)."""
        out = cls(positions, index).evolver()
        for key, value in values.items():
            out.set(key, value, positions.get(key))
        return out.persistent(positions, index)


def _put(
    chunks: PVector[array[int]], position: int, code: int, absent: int, typecode: str
) -> tuple[PVector[array[int]], int]:
    """``chunks`` with ``code`` at ``position`` (new chunks of ``absent`` as needed), and the
    code that was there."""
    n, offset = position >> _SHIFT, position & _MASK
    if n < len(chunks):
        chunk = array(typecode, chunks[n])
        before = chunk[offset]
        chunk[offset] = code
        return chunks.set(n, chunk), before
    grown = chunks.evolver()
    while len(grown) < n:
        grown.append(array(typecode, [absent]) * CHUNK)
    chunk = array(typecode, [absent]) * CHUNK
    chunk[offset] = code
    grown.append(chunk)
    return grown.persistent(), absent


class ColumnEvolver(Generic[C]):
    """A column changed in place (``fold_many``, decision 0087), by position."""

    def __init__(self, column: C) -> None:
        self.column = column
        self.chunks: list[array[int]] = list(column._chunks)
        self.copied: set[int] = set()
        self.size = column._size
        self.extra: dict[str, Any] = dict(column._extra)
        self.changed = False

    def set(self, key: str, value: Any, position: int | None) -> None:
        """``key`` holds ``value``; ``position`` is its place in the index (None: not yet)."""
        column = self.column
        code = column._encode(value)
        self.changed = True
        if position is None:
            if key not in self.extra and key not in column:
                self.size += 1
            self.extra[key] = value
            return
        absent = column.ABSENT
        n, offset = position >> _SHIFT, position & _MASK
        chunks = self.chunks
        while len(chunks) <= n:
            self.copied.add(len(chunks))
            chunks.append(array(column.TYPECODE, [absent]) * CHUNK)
        if n not in self.copied:
            chunks[n] = array(column.TYPECODE, chunks[n])
            self.copied.add(n)
        chunk = chunks[n]
        if chunk[offset] == absent and self.extra.pop(key, _NOTHING) is _NOTHING:
            self.size += 1  # a new value (one held aside moves, counted already)
        chunk[offset] = code

    def placed(self, key: str, position: int) -> None:
        """``key`` now has ``position``: a value held aside for it moves there."""
        if self.extra:
            value = self.extra.get(key, _NOTHING)
            if value is not _NOTHING:
                self.set(key, value, position)

    def persistent(self, positions: PMap[str, int], index: PVector[str]) -> C:
        column = self.column
        if not self.changed:
            return column
        return column._with(positions, index, pvector(self.chunks), self.size, pmap(self.extra))


_NOTHING: Final = object()


class IntColumn(Column[int]):
    """Integers of 64 bits (a turn's number, a use's count) by position."""

    __slots__ = ()

    def _encode(self, value: int) -> int:
        if type(value) is not int or not -(2**63) < value < 2**63:
            raise InvalidInput("state value", value, "must be an integer of 64 bits")
        return value

    def _decode(self, code: int) -> int:
        return code


class KindColumn(Column[str]):
    """An object's kind (``file`` or ``toolcall``), a byte by position."""

    __slots__ = ()

    TYPECODE: ClassVar[str] = "b"
    ABSENT: ClassVar[int] = -1
    KINDS: ClassVar[tuple[str, ...]] = ("file", "toolcall")

    def _encode(self, value: str) -> int:
        try:
            return self.KINDS.index(value)
        except ValueError:
            raise InvalidInput("object kind", value, f"must be one of {self.KINDS}") from None

    def _decode(self, code: int) -> str:
        return self.KINDS[code]


class IndexedSet(AbstractSet[str]):
    """A persistent set of ids of a session's index that holds nearly all of them (the metadata
    pool): the index's first ``upto`` ids but those ``outside``, and any ids not in the index
    (``beyond``; a state folded from events that name objects never encountered). An object
    joins the index and the pool together, so that ``outside`` holds only the objects a rollback
    left in the index alone: no entry per object (a persistent set's is about 100 bytes,
    decision 0140). Iterates in index order."""

    __slots__ = ("_beyond", "_index", "_outside", "_positions", "_upto")

    def __init__(
        self,
        positions: PMap[str, int] = _EMPTY_POSITIONS,
        index: PVector[str] = _EMPTY_IDS,
        upto: int = 0,
        outside: PSet[str] = _NO_IDS,
        beyond: PSet[str] = _NO_IDS,
    ) -> None:
        self._positions = positions
        self._index = index
        self._upto = upto
        self._outside = outside
        self._beyond = beyond

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)

    @classmethod
    def of(cls, ids: Iterable[str], positions: PMap[str, int], index: PVector[str]) -> Self:
        """The set of ``ids`` (ids of the index; others held beside)."""
        members = frozenset(ids)
        outside = [i for i in index if i not in members]
        beyond = [i for i in members if i not in positions]
        return cls(positions, index, len(index), pset(outside), pset(beyond))

    def __contains__(self, key: object) -> bool:
        try:
            position = self._positions[key]  # type: ignore[index]
        except (KeyError, TypeError):
            return key in self._beyond
        return position < self._upto and key not in self._outside

    def __len__(self) -> int:
        return self._upto - len(self._outside) + len(self._beyond)

    def __iter__(self) -> Iterator[str]:
        ids = islice(self._index, self._upto)
        outside = self._outside
        yield from (filterfalse(outside.__contains__, ids) if outside else ids)
        if self._beyond:
            yield from sorted(self._beyond)

    def frozen(self) -> frozenset[str]:
        """The members as a ``frozenset`` (built in C when none is outside)."""
        if self._outside or self._beyond:
            return frozenset(self)
        return frozenset(islice(self._index, self._upto))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return AbstractSet.__eq__(self, other)

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def add(self, key: str, positions: PMap[str, int], index: PVector[str]) -> Self:
        """This set with ``key``; ``positions`` and ``index`` are the state's current ones."""
        position = positions.get(key)
        if position is None:
            if key in self._beyond:
                return self
            beyond = self._beyond.add(key)
            return type(self)(self._positions, self._index, self._upto, self._outside, beyond)
        if position < self._upto:
            if key not in self._outside:
                return self
            outside = self._outside.remove(key)
            return type(self)(positions, index, self._upto, outside, self._beyond)
        outside = self._outside
        if position > self._upto:  # ids the index gained without joining the set
            outside = outside.update(islice(index, self._upto, position))
        beyond = self._beyond.discard(key) if self._beyond else self._beyond
        return type(self)(positions, index, position + 1, outside, beyond)

    def discard(self, key: str) -> Self:
        """This set without ``key``."""
        if key in self._beyond:
            beyond = self._beyond.remove(key)
            return type(self)(self._positions, self._index, self._upto, self._outside, beyond)
        if key not in self:
            return self
        outside = self._outside.add(key)
        return type(self)(self._positions, self._index, self._upto, outside, self._beyond)

    def evolver(self) -> IndexedSetEvolver[Self]:
        return IndexedSetEvolver(self)


class IndexedSetEvolver(Generic[S]):
    """An :class:`IndexedSet` changed in place (``fold_many``, decision 0087)."""

    def __init__(self, ids: S) -> None:
        self.ids = ids
        self.upto = ids._upto
        self.outside: set[str] = set(ids._outside)
        self.beyond: set[str] = set(ids._beyond)
        self.changed = False

    def add(self, key: str, position: int | None, index: Any) -> None:
        """``key`` joins; ``position`` is its place in ``index`` (None: not in it)."""
        if position is None:
            if key not in self.beyond:
                self.beyond.add(key)
                self.changed = True
            return
        if position < self.upto:
            if key in self.outside:
                self.outside.discard(key)
                self.changed = True
            return
        self.outside.update(index[n] for n in range(self.upto, position))
        self.beyond.discard(key)
        self.upto = position + 1
        self.changed = True

    def discard(self, key: str, position: int | None) -> None:
        """``key`` leaves; ``position`` as for :meth:`add`."""
        if key in self.beyond:
            self.beyond.discard(key)
            self.changed = True
        elif position is not None and position < self.upto and key not in self.outside:
            self.outside.add(key)
            self.changed = True

    def persistent(self, positions: PMap[str, int], index: PVector[str]) -> S:
        ids = self.ids
        if not self.changed:
            return ids
        return type(ids)(positions, index, self.upto, pset(self.outside), pset(self.beyond))
