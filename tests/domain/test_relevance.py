"""The relevance core (decision 0021): which views show the same lines again, which files a text
names, and the tiers of a session's active outputs."""

from __future__ import annotations

from typing import Any

import pytest

from selfctx.domain.errors import InvalidInput
from selfctx.domain.objects import FileView, ToolcallObject
from selfctx.domain.relevance import covers, named_files, superseded_by


def lines(*ranges: tuple[int, int], file: str = "f") -> FileView:
    return FileView(file, "lines", ranges)


def test_a_whole_read_covers_any_view_of_its_file_only() -> None:
    read = FileView("f", "read")
    assert covers(read, lines((10, 20)))
    assert covers(read, FileView("f", "read"))
    assert covers(read, lines((-5, -1)))
    assert not covers(read, lines((1, 2), file="g"))
    assert not covers(lines((1, 10**6)), read)  # lines never stand for the whole file


@pytest.mark.parametrize(
    ("later", "earlier", "expected"),
    [
        (((10, 40),), ((12, 20),), True),
        (((10, 40),), ((10, 40),), True),
        (((10, 20), (21, 30)), ((15, 25),), True),  # adjacent ranges join
        (((10, 20), (22, 30)), ((15, 25),), False),  # line 21 is missing
        (((10, -1),), ((500, 600),), True),  # to the end of the file
        (((1, 5),), ((1, 5), (9, 9)), False),
        (((-5, -1),), ((-5, -1),), True),  # the same tail
        (((-10, -1),), ((-5, -1),), False),  # counted from the end: only the same range
        (((1, 1000),), ((-5, -1),), False),
    ],
)
def test_line_coverage(
    later: tuple[tuple[int, int], ...], earlier: tuple[tuple[int, int], ...], expected: bool
) -> None:
    assert covers(lines(*later), lines(*earlier)) is expected


def test_a_change_covers_nothing_and_is_never_covered() -> None:
    change = FileView("f", "change")
    assert not covers(change, lines((1, 2)))
    assert not covers(FileView("f", "read"), change)


def test_lines_not_known_are_covered_by_a_read_only() -> None:
    unknown = FileView("f", "lines")  # a grep without -n: some lines, which ones unknown
    assert covers(FileView("f", "read"), unknown)
    assert not covers(lines((1, -1)), unknown)
    assert not covers(unknown, lines((3, 4)))
    assert not covers(unknown, FileView("f", "lines"))


@pytest.mark.parametrize(
    ("kind", "ranges"),
    [("read", ((1, 2),)), ("change", ((1, 2),)), ("view", ())],
)
def test_views_are_validated(kind: Any, ranges: Any) -> None:
    with pytest.raises(InvalidInput):
        FileView("f", kind, ranges)


@pytest.mark.parametrize("bad", [((0, 3),), ((5, 2),), (("a", 3),), ((True, 3),)])
def test_ranges_are_validated(bad: Any) -> None:
    with pytest.raises(InvalidInput):
        FileView("f", "lines", bad)


def test_views_round_trip_through_json() -> None:
    view = FileView("f", "lines", ((3, 9), (-2, -1)))
    assert view.to_json() == {"file": "f", "kind": "lines", "ranges": [[3, 9], [-2, -1]]}
    assert FileView.from_json(view.to_json()) == view
    assert FileView.from_json({"file": "g", "kind": "read"}) == FileView("g", "read")


def call(call_id: str, *views: FileView) -> ToolcallObject:
    return ToolcallObject.build(
        call_id,
        tool="bash",
        args={"command": "x"},
        output="out",
        status="ok",
        chat_ref="chat:s",
        file_views=views or None,
    )


def test_superseded_by_the_first_later_output_that_shows_all_its_lines() -> None:
    earlier = call("a", lines((10, 20)), lines((1, 5), file="g"))
    partial = call("b", lines((10, 20)))  # only one of the two files
    full = call("c", FileView("f", "read"), lines((1, 9), file="g"))
    again = call("d", FileView("f", "read"), FileView("g", "read"))
    assert superseded_by(earlier, [partial, full, again]) is full
    assert superseded_by(earlier, [partial]) is None
    assert superseded_by(call("e"), [again]) is None  # showed no file
    assert superseded_by(call("w", FileView("f", "change")), [again]) is None  # only a change


def test_a_hundred_hits_keep_their_first_ranges() -> None:
    view = FileView("f", "lines", tuple((n, n) for n in range(1, 200, 2)))
    assert len(view.ranges) == 64


PATHS = {
    "sep": "/testbed/astropy/modeling/separable.py",
    "test_sep": "/testbed/astropy/modeling/tests/test_separable.py",
    "core": "/testbed/astropy/modeling/core.py",
    "init": "/testbed/astropy/__init__.py",
    "yml": "/testbed/test/fixtures/L060.yml",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cat astropy/modeling/separable.py", {"sep"}),
        ("sed -n '1,9p' ./astropy/modeling/separable.py", {"sep"}),
        ("the bug is in separable.py, not core.py", {"sep", "core"}),
        ("python -m pytest astropy/modeling/tests/test_separable.py -x", {"test_sep"}),
        ("from astropy.modeling.separable import separability_matrix", {"sep"}),
        ("astropy.modeling.core.CompoundModel._calculate", {"core"}),
        ('File "/testbed/astropy/modeling/separable.py", line 42', {"sep"}),
        ("cat /testbed/test/fixtures/L060.yml", {"yml"}),
        ("odeling/separable.py", set()),  # not on a component boundary
        ("my_separable.py and separable.pyc", set()),
        ("nothing here at all", set()),
        # a file named by its stem alone, when the stem is an identifier, not a word
        ('sqlfluff.lint(sql, rules="L060")', {"yml"}),
        ("python test_separable", {"test_sep"}),
        ("the separable matrix of the core", set()),
        ("L0600, xL060 and L06", set()),
        ("def __init__(self):", set()),
    ],
)
def test_named_files(text: str, expected: set[str]) -> None:
    assert named_files([text], PATHS) == expected


def test_named_files_without_module_names() -> None:
    text = "from astropy.modeling.separable import x"
    assert named_files([text], PATHS, modules=False) == frozenset()


def test_known_names_are_bounded_and_keep_what_is_seen_again() -> None:
    from selfctx.domain.relevance import KnownNames

    known = KnownNames(limit=100)
    known.update({"kept_1"})
    known.update({"once_1"})
    for batch in range(200):  # 10,000 distinct identifiers, and one seen in every batch
        names = {f"name_{batch}_{i}" for i in range(50)}
        assert known.unseen(names | {"kept_1"}) == names
        known.update(names | {"kept_1"})
        assert len(known.recent) + len(known.older) <= 2 * (100 + 51)
    assert "kept_1" in known
    assert "once_1" not in known  # forgotten once thousands of others came after it
    assert known.unseen({"once_1", "kept_1"}) == {"once_1"}


def test_known_names_forget_nothing_below_their_limit() -> None:
    from selfctx.domain.relevance import KnownNames

    known, plain = KnownNames(limit=1_000), set[str]()
    for batch in range(20):
        names = {f"n_{batch * 7 + i}" for i in range(40)}
        assert known.unseen(names) == names - plain
        known.update(names)
        plain |= names
    assert len(known) == len(plain) and all(n in known for n in plain)
