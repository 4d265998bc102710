"""Part of a view: the lines of a collapsing tool output that the agent named (decision 0075).

When an output collapses, its one-line reference can keep the lines the agent is likely to use
again: those holding an identifier its messages named after it saw the output (``friends_base``,
``test_l060``: a name with a digit or an underscore, as :mod:`selfctx.domain.relevance` reads
them), with a few lines around each. The excerpt is text, fixed when the output collapses (the
prompt before it stays as the provider cached it); the output itself is untouched, and
activating it shows every byte again.
"""

from __future__ import annotations

from collections.abc import Iterable

from selfctx.domain.relevance import identifiers

__all__ = ["MAX_EXCERPT_SCAN", "excerpt", "excerpt_ranges"]

MAX_EXCERPT_SCAN = 200_000
"""Only the first characters of an output are looked at for lines to keep."""
_MAX_LINE = 400
"""Longer lines are not kept (a minified blob, a long log line): they cost more than they say."""


def excerpt_ranges(
    content: str, names: Iterable[str], *, context: int, most_lines: int
) -> tuple[tuple[int, int], ...]:
    """The line ranges (0-based, end exclusive, ascending, disjoint) of ``content`` to keep: each
    line that holds one of ``names`` as an identifier, with ``context`` lines either side, the
    earliest first, until ``most_lines`` lines are kept (a range is cut at the limit). Empty when
    no line names one, or when the lines kept would be all of them."""
    wanted = frozenset(names)
    if not wanted or most_lines < 1:
        return ()
    lines = content[:MAX_EXCERPT_SCAN].split("\n")
    total = content.count("\n") + 1
    ranges: list[tuple[int, int]] = []
    kept = 0
    for number, line in enumerate(lines):
        if len(line) > _MAX_LINE or not wanted.intersection(identifiers(line)):
            continue
        start = max(0, number - context)
        end = min(len(lines), number + context + 1)
        if ranges and start <= ranges[-1][1]:  # overlaps or touches the previous range
            start = ranges[-1][1]
            if end <= start:
                continue
            end = min(end, start + most_lines - kept)
            ranges[-1] = (ranges[-1][0], end)
        else:
            end = min(end, start + most_lines - kept)
            ranges.append((start, end))
        kept += end - start
        if kept >= most_lines:
            break
    if kept >= total:
        return ()  # every line: nothing would be left out
    return tuple(ranges)


def excerpt(content: str, ranges: Iterable[tuple[int, int]]) -> str:
    """The lines of ``content`` in ``ranges`` (from :func:`excerpt_ranges`), verbatim, each gap
    between them a line ``[... N lines]``."""
    lines = content.split("\n")
    out: list[str] = []
    at = 0
    for start, end in ranges:
        if start > at:
            out.append(_gap(start - at))
        out.extend(lines[start:end])
        at = end
    if out and at < len(lines):
        out.append(_gap(len(lines) - at))
    return "\n".join(out)


def _gap(lines: int) -> str:
    return f"[... {lines} line{'s' if lines != 1 else ''}]"
