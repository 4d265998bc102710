"""Part of a view (decision 0075): which lines of a collapsing output its reference keeps."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from selfctx.domain.excerpt import excerpt, excerpt_ranges

LINES = [f"    line_{n} = value({n})" for n in range(30)]
TEXT = "\n".join(LINES)


def test_the_named_lines_stay_with_the_lines_around_them() -> None:
    ranges = excerpt_ranges(TEXT, {"line_10", "line_20"}, context=2, most_lines=20)
    assert ranges == ((8, 13), (18, 23))
    shown = excerpt(TEXT, ranges).split("\n")
    assert shown[0] == "[... 8 lines]"
    assert shown[1:6] == LINES[8:13]
    assert shown[6] == "[... 5 lines]"
    assert shown[7:12] == LINES[18:23]
    assert shown[12] == "[... 7 lines]"


def test_ranges_that_touch_become_one_and_the_limit_cuts_the_last() -> None:
    assert excerpt_ranges(TEXT, {"line_3", "line_6"}, context=1, most_lines=20) == ((2, 8),)
    assert excerpt_ranges(TEXT, {"line_3", "line_20"}, context=2, most_lines=7) == (
        (1, 6),
        (18, 20),
    )


def test_a_name_counts_as_a_whole_identifier_only() -> None:
    # ``line_1`` is not in ``line_10``; words without a digit or underscore are not names
    assert excerpt_ranges(TEXT, {"line_1"}, context=0, most_lines=5) == ((1, 2),)
    assert excerpt_ranges(TEXT, {"value"}, context=0, most_lines=5) == ()


def test_nothing_named_or_everything_kept_keeps_nothing() -> None:
    assert excerpt_ranges(TEXT, set(), context=2, most_lines=20) == ()
    assert excerpt_ranges(TEXT, {"other_name"}, context=2, most_lines=20) == ()
    assert excerpt_ranges("a_1 = 2\nb", {"a_1"}, context=1, most_lines=5) == ()  # all of it
    assert excerpt_ranges(TEXT, {"line_3"}, context=2, most_lines=0) == ()


def test_a_very_long_line_is_not_kept() -> None:
    text = "short_name\n" + "long_name " * 100
    assert excerpt_ranges(text, {"long_name"}, context=0, most_lines=5) == ()


NAMES = st.sampled_from(["ab_1", "cd_22", "x_yz", "L060"])
TEXTS = st.lists(
    st.one_of(st.text(max_size=30), NAMES, st.builds(lambda n, t: f"{t} {n}", NAMES, st.text())),
    max_size=40,
).map("\n".join)


@given(TEXTS, st.sets(NAMES), st.integers(0, 6), st.integers(0, 30))
def test_an_excerpt_is_lines_of_the_output_verbatim_in_order(
    text: str, names: set[str], context: int, most: int
) -> None:
    ranges = excerpt_ranges(text, names, context=context, most_lines=most)
    lines = text.split("\n")
    assert sum(end - start for start, end in ranges) <= most
    at = 0
    for start, end in ranges:
        assert at <= start < end <= len(lines)
        at = end
    if not ranges:
        return
    assert sum(end - start for start, end in ranges) < len(lines)
    shown = iter(excerpt(text, ranges).split("\n"))
    at = 0
    for start, end in ranges:  # a gap line counting what is left out, then the lines as they were
        if start > at:
            assert next(shown) == f"[... {start - at} line{'s' if start - at != 1 else ''}]"
        for line in lines[start:end]:
            assert next(shown) == line
        at = end
    if at < len(lines):
        assert next(shown).startswith(f"[... {len(lines) - at} line")
    assert next(shown, None) is None


@given(st.text(max_size=300), st.sets(st.text(max_size=8), max_size=4))
def test_any_text_and_names_give_ranges_or_nothing(text: str, names: set[str]) -> None:
    ranges = excerpt_ranges(text, names, context=2, most_lines=10)
    assert isinstance(excerpt(text, ranges), str)
