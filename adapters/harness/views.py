"""Which lines of which files a shell command's output shows, however the command was written.

A view is lines of a version of a file (decision 0020), whatever produced it: ``sed -n``,
``head``, ``tail``, ``awk 'NR>=a && NR<=b'``, ``cat f | head -200``, ``cat -n f | sed -n``,
``grep`` hits with or without ``-n`` and with context lines, ``git diff`` hunks,
``python -c "print(open(f).read())"``, each stage of a pipeline narrowing what the one before
showed, and a chain of such commands (``&&``, ``;``) showing several files. An output the harness
cut in the middle (mini-swe-agent's head and tail, OpenHands' truncation) shows the first and the
last lines of what the command printed.

Lines are known exactly when the command's own syntax says them (``sed -n 10,20p``), when the
output carries the file's line numbers (``cat -n``, ``nl -ba``, ``grep -n``), or when a diff's
hunk headers do; otherwise the view names the file with no ranges: some of its lines, which ones
unknown (a ``grep`` without ``-n``). Whatever the text, the functions here return views or
nothing; they never raise.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence

import attrs

__all__ = ["Cut", "Shown", "chain_views", "cut_parts", "diff_views", "runs", "split_pipeline"]

Range = tuple[int, int]

MAX_NUMBER = 10**9
"""Line numbers past this are not line numbers (and ``int`` never sees a long digit run)."""


@attrs.frozen
class Shown:
    """What a pipeline shows of one file so far."""

    path: str
    ranges: tuple[Range, ...]
    """1-based inclusive ranges (negative: from the end); empty when unknown."""
    numbered: str | None = None
    """How the output numbers its lines with the file's numbers: ``tab`` (``cat -n``, ``nl``),
    ``grep`` (``N:`` and ``N-``), or None."""
    exact: bool = True
    """False once a stage kept an unknown subset of the lines (a ``grep`` filter, say)."""
    offset: int = 0
    """Added to the numbers the output carries: ``sed -n '40,80p' f | grep -n x`` numbers the
    lines it is given from 1, and its line 1 is the file's line 40."""


@attrs.frozen
class Cut:
    """An output the harness cut: its first and its last characters."""

    head: str
    tail: str


_MINI_CUT = re.compile(
    r"<output_head>\n?(.*?)\n?</output_head>\s*<elided_chars>.*?</elided_chars>\s*"
    r"<output_tail>\n?(.*?)\n?</output_tail>",
    re.S,
)
_OPENHANDS_CUT = "[... Observation truncated due to length ...]"


def cut_parts(output: str) -> Cut | None:
    """The head and tail of an output a harness cut in the middle (None: not cut)."""
    match = _MINI_CUT.search(output)
    if match:
        return Cut(match.group(1), match.group(2))
    if _OPENHANDS_CUT in output:
        head, _, tail = output.partition(_OPENHANDS_CUT)
        return Cut(head, tail)
    return None


# -- tokens ------------------------------------------------------------------------------------

_CHAIN = {"&&", ";"}
_REDIRECT = re.compile(r"\A[0-9]?(?:>>?|<|>&|&>)\Z")


def _words(command: str) -> list[str] | None:
    """The command's words and operators (``|``, ``&&``, ``;`` separate, quoted or not)."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return None


def _segments(words: list[str]) -> Iterator[list[str]]:
    """The commands of a chain (split at ``&&`` and ``;``), empty ones skipped."""
    current: list[str] = []
    for word in words:
        if word in _CHAIN:
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def split_pipeline(words: Sequence[str]) -> list[list[str]] | None:
    """The stages of one pipeline with stderr redirections dropped; None when its output goes
    elsewhere (``> file``), runs in the background, or is an alternative (``||``)."""
    stages: list[list[str]] = [[]]
    items = list(words)
    n = 0
    while n < len(items):
        word = items[n]
        if word in ("|", "|&"):
            stages.append([])
        elif word in ("||", "&", "(", ")", "<<", "<<<"):
            return None
        elif _REDIRECT.match(word) or (
            word.isdigit() and n + 1 < len(items) and _is_redir(items[n + 1])
        ):
            if word.isdigit():  # "2" ">" target: the descriptor, then the operator
                n += 1
                word = word + items[n]
            target = items[n + 1] if n + 1 < len(items) else ""
            n += 1
            if word.startswith("2") or (word in (">&", "&>") and target in ("1", "2")):
                pass  # stderr somewhere: the output is still what the command printed
            elif word.startswith("<"):
                pass  # input from a file
            elif target == "/dev/null" and word.startswith("2"):
                pass
            else:
                return None  # stdout to a file: the output is not what it shows
        else:
            stages[-1].append(word)
        n += 1
    if any(not s for s in stages):
        return None
    return stages


def _is_redir(word: str) -> bool:
    return word in (">", ">>", ">&", "<")


# -- sources -------------------------------------------------------------------------------------


def _resolve(cwd: str, path: str) -> str:
    return posixpath.normpath(posixpath.join(cwd, path))


def _number(text: str) -> int | None:
    return int(text) if re.fullmatch(r"[0-9]{1,9}", text) else None


def _operands(args: Sequence[str], valued: str = "") -> tuple[list[str], list[str]] | None:
    """Flags and operands of a command's arguments; ``valued``: short flags taking a value."""
    flags, operands = [], []
    it = iter(args)
    for arg in it:
        if arg == "--":
            operands += list(it)
        elif arg.startswith("-") and len(arg) > 1:
            flags.append(arg)
            if len(arg) == 2 and arg[1] in valued:
                value = next(it, None)
                if value is None:
                    return None
                flags.append(value)
        else:
            operands.append(arg)
    return flags, operands


def _head_count(args: Sequence[str]) -> tuple[int, list[str]] | None:
    """``head``'s line count and files (None: bytes, or a form not understood)."""
    count, files, it = 10, [], iter(args)
    for arg in it:
        if arg == "-n":
            value = _number(next(it, ""))
            if value is None:
                return None
            count = value
        elif re.fullmatch(r"-n?[0-9]{1,9}", arg):
            count = int(arg.lstrip("-n"))
        elif arg.startswith("-"):
            return None
        else:
            files.append(arg)
    return count, files


def _tail_count(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """``tail``'s count (``N`` or ``+K``) and files."""
    count, files, it = "10", [], iter(args)
    for arg in it:
        if arg == "-n":
            count = next(it, "")
        elif re.fullmatch(r"-n?\+?[0-9]{1,9}", arg):
            count = arg.lstrip("-n")
        elif arg.startswith("-"):
            return None
        else:
            files.append(arg)
    if not re.fullmatch(r"\+?[0-9]{1,9}", count):
        return None
    return count, files


_SED_RANGE = re.compile(r"([0-9]{1,9})(?:,([0-9]{1,9}|\$))?p")


def _sed_ranges(script: str) -> tuple[Range, ...] | None:
    """The lines ``sed -n SCRIPT`` prints when SCRIPT is line addresses (``Ap``, ``A,Bp``,
    ``A,$p``, several joined by ``;``); None otherwise."""
    out = []
    for part in filter(None, (p.strip() for p in script.split(";"))):
        match = _SED_RANGE.fullmatch(part)
        if match is None:
            return None
        start = int(match.group(1))
        end = match.group(2)
        stop = -1 if end == "$" else int(end) if end is not None else start
        if start < 1 or (stop != -1 and stop < start):
            return None
        out.append((start, stop))
    return tuple(out) or None


_AWK_TERM = re.compile(r"NR\s*(>=|<=|==|>|<)\s*([0-9]{1,9})")
_AWK_PRINT = re.compile(r"\{\s*print(?:\s+\$0)?\s*;?\s*\}")


def _awk_range(script: str) -> Range | None:
    """The lines ``awk SCRIPT`` prints when SCRIPT only selects by line number and prints them
    as they are: ``NR>=a && NR<=b``, ``NR==a,NR==b``, ``NR>a && NR<b``, with or without
    ``{print}``."""
    body = _AWK_PRINT.sub("", script).strip()
    start, stop = 1, -1
    if re.fullmatch(r"NR\s*==\s*[0-9]{1,9}\s*,\s*NR\s*==\s*[0-9]{1,9}", body):
        a, b = (int(n) for n in re.findall(r"[0-9]{1,9}", body))
        return (a, b) if 1 <= a <= b else None
    for term in re.split(r"\s*&&\s*", body):
        match = _AWK_TERM.fullmatch(term.strip())
        if match is None:
            return None
        op, n = match.group(1), int(match.group(2))
        if op == ">=":
            start = max(start, n)
        elif op == ">":
            start = max(start, n + 1)
        elif op == "<=":
            stop = n if stop == -1 else min(stop, n)
        elif op == "<":
            stop = n - 1 if stop == -1 else min(stop, n - 1)
        else:
            start, stop = max(start, n), n if stop == -1 else min(stop, n)
    if start < 1 or (stop != -1 and stop < start):
        return None
    return (start, stop)


_PY_OPEN = re.compile(
    r"""\A\s*print\(\s*open\(\s*(['"])([^'"\n]+)\1\s*\)\s*\.read\(\)\s*(?:,\s*end\s*=\s*(['"])\3\s*)?\)\s*;?\s*\Z"""
)


def python_read(args: Sequence[str]) -> tuple[str, bool] | None:
    """``python -c "print(open(F).read())"``: the file and whether ``print`` added a newline."""
    if len(args) != 2 or args[0] != "-c":
        return None
    match = _PY_OPEN.match(args[1])
    if match is None:
        return None
    return match.group(2), match.group(3) is None


def _source(stage: Sequence[str], cwd: str) -> list[Shown] | None:
    """What the first stage of a pipeline shows of which files (None: it is not a view)."""
    program = posixpath.basename(stage[0])
    args = list(stage[1:])
    if program == "cat":
        parsed = _operands(args)
        if parsed is None:
            return None
        flags, files = parsed
        if not files or any(f not in ("-n", "--number") for f in flags):
            return None
        numbered = "tab" if flags else None
        exact = len(files) == 1
        return [
            Shown(_resolve(cwd, f), ((1, -1),), numbered if exact else None, exact) for f in files
        ]
    if program == "nl":
        if len(args) == 2 and args[0] in ("-ba", "--body-numbering=a"):
            return [Shown(_resolve(cwd, args[1]), ((1, -1),), "tab")]
        if len(args) == 3 and args[:2] == ["-b", "a"]:
            return [Shown(_resolve(cwd, args[2]), ((1, -1),), "tab")]
        return None
    if program == "head":
        head = _head_count(args)
        if head is None or not head[1] or head[0] < 1:
            return None
        lines, files = head
        return [Shown(_resolve(cwd, f), ((1, lines),)) for f in files]
    if program == "tail":
        tail = _tail_count(args)
        if tail is None or len(tail[1]) != 1:
            return None
        count, files = tail
        n = int(count.lstrip("+"))
        if count.startswith("+"):
            return [Shown(_resolve(cwd, files[0]), ((max(n, 1), -1),))]
        return [Shown(_resolve(cwd, files[0]), ((-n, -1),))] if n > 0 else None
    if program == "sed":
        if len(args) >= 3 and args[0] == "-n" and "-i" not in args:
            files = args[2:]
            ranges = _sed_ranges(args[1])
            if len(files) == 1 and ranges is not None:
                return [Shown(_resolve(cwd, files[0]), ranges)]
            return [Shown(_resolve(cwd, f), (), None, False) for f in files]
        return None
    if program in ("awk", "gawk"):
        if len(args) == 2 and not args[0].startswith("-"):
            selected = _awk_range(args[0])
            return [Shown(_resolve(cwd, args[1]), (selected,))] if selected is not None else None
        return None
    if program in ("python", "python3"):
        found = python_read(args)
        if found is None:
            return None
        return [Shown(_resolve(cwd, found[0]), ((1, -1),))]
    if program == "grep":
        return _grep_source(args, cwd)
    return None


_GREP_VALUED = "efmABCdD"


def _grep_source(args: Sequence[str], cwd: str) -> list[Shown] | None:
    """A ``grep`` of one file (no file names in its lines): its hits, numbered with ``-n``.
    Several files or a recursive search are the listing's business (``recognise``)."""
    parsed = _operands(args, _GREP_VALUED)
    if parsed is None:
        return None
    flags, operands = parsed
    letters = "".join(f[1:] for f in flags if f.startswith("-") and not f.startswith("--"))
    if any(c in letters for c in "rRlLcqHZ") or any(
        f.startswith("--") and f.split("=")[0] in ("--recursive", "--files-with-matches", "--count")
        for f in flags
    ):
        return None
    pattern_given = any(f in ("-e", "-f") for f in flags) or any(
        f.startswith(("--regexp", "--file")) for f in flags
    )
    files = operands if pattern_given else operands[1:]
    if len(files) != 1 or any(c in files[0] for c in "*?["):
        return None
    numbered = "n" in letters.replace("-", "") or "--line-number" in flags
    return [Shown(_resolve(cwd, files[0]), (), "grep" if numbered else None, numbered)]


# -- filters -----------------------------------------------------------------------------------


def _narrow(ranges: tuple[Range, ...], stage: Sequence[str]) -> tuple[Range, ...] | None:
    """The file lines a positional filter keeps of one exact range (None: not positional, or
    not computable)."""
    if len(ranges) != 1:
        return None
    start, stop = ranges[0]
    program = posixpath.basename(stage[0])
    args = list(stage[1:])
    if program == "head":
        head = _head_count(args)
        if head is None or head[1] or head[0] < 1:
            return None
        n = head[0]
        if start > 0:
            end = start + n - 1
            return ((start, end if stop == -1 else min(stop, end)),)
        return ((start, min(stop, start + n - 1)),) if start + n - 1 < 0 else ((start, stop),)
    if program == "tail":
        tail = _tail_count(args)
        if tail is None or tail[1]:
            return None
        count = tail[0]
        n = int(count.lstrip("+"))
        if count.startswith("+"):
            first = (start + max(n, 1) - 1) if start > 0 else None
            if first is None or (stop != -1 and first > stop):
                return None
            return ((first, stop),)
        if n < 1:
            return None
        if stop > 0:
            return ((max(start, stop - n + 1), stop),)
        return ((-n, -1),)  # the last n lines (fewer if what came before had fewer)
    if program == "sed" and len(args) == 2 and args[0] == "-n":
        inner = _sed_ranges(args[1])
        if inner is None or len(inner) != 1 or start < 0:
            return None
        a, b = inner[0]
        first = start + a - 1
        last = -1 if b == -1 else start + b - 1
        if stop != -1:
            if first > stop:
                return None
            last = stop if last == -1 else min(last, stop)
        return ((first, last),)
    if program in ("awk", "gawk") and len(args) == 1:
        inner_range = _awk_range(args[0])
        if inner_range is None or start < 0:
            return None
        return _narrow(
            ranges,
            ["sed", "-n", f"{inner_range[0]},{inner_range[1] if inner_range[1] > 0 else '$'}p"],
        )
    return None


_SUBSETS = {"grep", "sort", "uniq", "cat"}
"""Stages that keep some of the lines they are given, as they are (or reorder them)."""


def _filter(shown: list[Shown], stage: Sequence[str]) -> list[Shown] | None:
    """What a later stage of the pipeline keeps (None: its output is not lines of the files)."""
    program = posixpath.basename(stage[0])
    if program in ("head", "tail", "sed", "awk", "gawk"):
        if program == "sed" and (len(stage) != 3 or stage[1] != "-n"):
            return None  # sed without -n transforms lines
        out = []
        for s in shown:
            if s.numbered is not None:
                out.append(s)  # the numbers in the output say which lines remain
                continue
            narrowed = _narrow(s.ranges, stage) if s.exact else None
            out.append(attrs.evolve(s, ranges=narrowed or (), exact=narrowed is not None))
        return out
    if program in _SUBSETS:
        if program in ("cat", "uniq") and len(stage) > 1:
            return None  # cat -A, uniq -c: the lines change
        if program == "grep" and any(a in ("-c", "-l", "-L", "-q", "--count") for a in stage[1:]):
            return None
        if program == "grep" and any(
            re.fullmatch(r"-\w*n\w*", a) or a == "--line-number" for a in stage[1:]
        ):
            # grep -n numbers the lines it is given: the file's numbers, shifted by where the
            # one range it was given starts
            return [
                attrs.evolve(s, numbered="grep", offset=s.ranges[0][0] - 1)
                if s.numbered is None and s.exact and len(s.ranges) == 1 and s.ranges[0][0] > 0
                else s
                if s.numbered is not None
                else attrs.evolve(s, ranges=(), exact=False)
                for s in shown
            ]
        return [
            s if s.numbered is not None else attrs.evolve(s, ranges=(), exact=False) for s in shown
        ]
    return None


# -- numbers in the output ----------------------------------------------------------------------

_TAB_NUMBER = re.compile(r"\A *([0-9]{1,9})\t")
_GREP_NUMBER = re.compile(r"\A([0-9]{1,9})[:-]")


def _numbers(lines: Sequence[str], numbered: str) -> list[int] | None:
    """File line numbers the output's lines carry; None when a line does not carry one (the
    output is something else: an error message, say). ``--`` separates grep's context groups."""
    pattern = _TAB_NUMBER if numbered == "tab" else _GREP_NUMBER
    out = []
    for line in lines:
        if not line or (numbered == "grep" and line == "--"):
            continue
        match = pattern.match(line)
        if match is None:
            return None
        out.append(int(match.group(1)))
    return out


def runs(numbers: Sequence[int]) -> tuple[Range, ...]:
    """Line numbers as ranges of consecutive numbers, in order of first appearance, at most 64;
    numbers below 1 are not line numbers and are left out."""
    out: list[list[int]] = []
    for n in numbers:
        if n < 1 or n > MAX_NUMBER:
            continue
        if out and out[-1][0] <= n <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], n)
        else:
            out.append([n, n])
    return tuple((a, b) for a, b in out[:64])


def _complete_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _finish(shown: Shown, output: str | None, cut: Cut | None) -> Shown | None:
    """The view once the output is known: numbers read from it, or a cut applied to the exact
    ranges. None when the output shows nothing (empty, or not the numbered lines expected)."""
    if shown.numbered is not None:
        if output is None and cut is None:
            return attrs.evolve(shown, ranges=(), numbered=None, exact=False)
        if cut is not None:
            head = cut.head.split("\n")
            tail = cut.tail.split("\n")[1:]  # its first line starts mid-line
            found = _numbers([*head, *tail], shown.numbered)
        else:
            assert output is not None
            found = _numbers(output.split("\n"), shown.numbered)
        if not found:
            return None
        return attrs.evolve(shown, ranges=runs([n + shown.offset for n in found]), exact=True)
    if output is not None and not output.strip() and cut is None:
        return None
    if cut is None or not shown.exact or len(shown.ranges) != 1:
        return shown if cut is None else attrs.evolve(shown, ranges=(), exact=False)
    start, stop = shown.ranges[0]
    first_lines = cut.head.count("\n")
    last_lines = max(_complete_lines(cut.tail) - 1, 0)
    ranges: list[Range] = []
    if start > 0 and first_lines:
        ranges.append((start, start + first_lines - 1))
    if last_lines:
        if stop > 0:
            ranges.append((max(stop - last_lines + 1, 1), stop))
        elif stop == -1:
            ranges.append((-last_lines, -1))
    if not ranges:
        return attrs.evolve(shown, ranges=(), exact=False)
    return attrs.evolve(shown, ranges=tuple(ranges))


def pipeline_views(
    stages: Sequence[Sequence[str]], cwd: str, output: str | None, cut: Cut | None = None
) -> list[Shown]:
    """What one pipeline's output shows. ``output``: its own output (None when the output is
    shared with other commands of a chain); ``cut``: the output's head and tail when the harness
    cut it."""
    shown = _source(stages[0], cwd)
    if not shown:
        return []
    if len(shown) > 1 and len(stages) > 1:  # several files through a filter: whose lines?
        shown = [attrs.evolve(s, ranges=(), numbered=None, exact=False) for s in shown]
    for stage in stages[1:]:
        if not stage:
            return []
        narrowed = _filter(shown, stage)
        if narrowed is None:
            return []
        shown = narrowed
    out = []
    for s in shown:
        if s.numbered is not None and len(shown) > 1:
            s = attrs.evolve(s, ranges=(), numbered=None, exact=False)
        done = _finish(s, output, cut)
        if done is not None:
            out.append(done)
    return out


def chain_views(command: str, output: str | None, cwd: str, cut: Cut | None = None) -> list[Shown]:
    """The views of every command of a chain (``a && b; c``), following ``cd``. ``output`` is
    the chain's whole output: it is a command's own only when the chain has one command."""
    words = _words(command)
    if not words:
        return []
    segments = list(_segments(words))
    out: list[Shown] = []
    alone = len(segments) == 1
    for segment in segments:
        if segment[0] == "cd":
            if len(segment) == 2:
                cwd = _resolve(cwd, segment[1])
            continue
        if posixpath.basename(segment[0]) == "echo":
            continue
        stages = split_pipeline(segment)
        if stages is None:
            continue
        out += pipeline_views(stages, cwd, output if alone else None, cut if alone else None)
    return out


_DIFF_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.M)
_HUNK = re.compile(r"^@@ -[0-9,]+ \+([0-9]{1,9})(?:,([0-9]{1,9}))? @@", re.M)


def diff_views(output: str, cwd: str) -> list[Shown]:
    """The lines of each file a unified diff shows (``git diff``): its hunks' new line ranges."""
    out: list[Shown] = []
    files = list(_DIFF_FILE.finditer(output))
    for n, header in enumerate(files):
        path = header.group(1)
        if path == "/dev/null":
            continue
        end = files[n + 1].start() if n + 1 < len(files) else len(output)
        ranges = []
        for hunk in _HUNK.finditer(output, header.end(), end):
            start = int(hunk.group(1))
            size = int(hunk.group(2)) if hunk.group(2) is not None else 1
            if start >= 1 and size >= 1:
                ranges.append((start, start + size - 1))
        out.append(Shown(_resolve(cwd, path), runs_of_ranges(ranges), None, bool(ranges)))
    return out


def runs_of_ranges(ranges: Sequence[Range]) -> tuple[Range, ...]:
    """Ranges merged where they touch, at most 64."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out[:64])
