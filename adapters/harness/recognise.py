"""What a finished tool call means for files: a whole-file read, a view of some lines, a write,
an edit, or a listing.

Recognition is conservative: a read counts only when the output is certainly the whole file (a
plain ``cat``, a ``view`` without a range, a ``head``/``sed -n`` whose output ended before its
limit). A partial view (``sed -n 'A,Bp'``, ``head``/``tail -n``, ``nl -ba``/``cat -n`` through a
line filter, ``grep -n`` hits, an editor ``view`` with a range, a ``read`` with an offset) says
which lines of the file the output shows (:class:`FileLines`); it is never taken for the file's
content. Listings yield candidate paths, resolved against the command's working directory; the
ingestor keeps only those under the allowed roots.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from selfctx.adapters.harness.views import (
    Cut,
    chain_views,
    cut_parts,
    diff_views,
    python_read,
    runs,
)

__all__ = [
    "Effect",
    "FileEdit",
    "FileLines",
    "FileRead",
    "FileWrite",
    "Listing",
    "recognise",
    "unwrap_output",
]


@attrs.frozen
class FileRead:
    """The output is the whole content of ``path``."""

    path: str
    content: str


@attrs.frozen
class FileWrite:
    """``path`` was written; ``content`` is its new text when the call says it, else None (the
    file must be read from disk, if it can be)."""

    path: str
    content: str | None = None


@attrs.frozen
class FileEdit:
    """``path`` had ``old`` replaced by ``new`` (once)."""

    path: str
    old: str
    new: str


@attrs.frozen
class FileLines:
    """The output shows these lines of ``path`` (1-based, inclusive; a negative number counts
    from the end, -1 being the last line), but not all of the file. No ranges: some of its
    lines, which ones unknown."""

    path: str
    ranges: tuple[tuple[int, int], ...]


@attrs.frozen
class Listing:
    """Paths (absolute, agent-visible) seen in a listing."""

    paths: tuple[str, ...]


Effect = FileRead | FileLines | FileWrite | FileEdit | Listing

# Numbers are ASCII digits, at most 18 of them: int() refuses more than 4,300 digits, and a
# harness's text may hold anything.
_MINI = re.compile(
    r"\A<returncode>(-?[0-9]{1,18})</returncode>\s*<output>\n?(.*)</output>\s*\Z", re.S
)
_CAT_N_HEADER = re.compile(r"\AHere's the result of running `cat -n` on (\S+):\r?\n")
_CAT_N_LINE = re.compile(r"\A *([0-9]{1,18})\t(.*)\Z", re.S)
_DIR_HEADER = re.compile(r"\AHere's the files and directories up to \d+ levels deep in (\S+)")
_CLIPPED = "<response clipped>"
"""What the editors put where they cut a long ``view`` (the rest is a note, not the file)."""
_MINI_CUT = re.compile(
    r"\A<returncode>-?\d+</returncode>\s*(?:<warning>.*?</warning>\s*)?<output_head>", re.S
)
"""mini-swe-agent's wrapping of an output it cut in the middle: never a whole file."""
_SHELL_OPS = {"|", "||", "&&", ";", ">", ">>", "<", "2>", "&", "2>&1", "|&"}
_KNOWN_NAMES = {"Makefile", "Dockerfile", "LICENSE", "README", "Cargo.lock", "Gemfile", "Rakefile"}


_OPENHANDS_TAIL = re.compile(
    r"(?:\n\[(?:The command completed with exit code (-?\d+)\."
    r"|Command finished with exit code (-?\d+)"
    r"|Current working directory: [^\n]*|Python interpreter: [^\n]*)\])+\Z"
)
"""The lines OpenHands appends to a command's output (exit code, working directory)."""
_OPENHANDS_CUT = "[... Observation truncated due to length ...]"
_PROMPT = re.compile(r"(?:(?<=\r\n)|\A)[\w.-]+@[\w.-]+:[^\r\n]*[#$] ?\Z")
"""The shell prompt older OpenHands observations end with (``root@host:/workspace # ``)."""
_PROMPT_ENDS = ("#", "$", "# ", "$ ")
"""How a text that :data:`_PROMPT` matches ends (its ``[#$] ?\\Z``)."""


_TAIL_CHARS = 65_536
"""How far from its end an output is searched for trailing lines: a search from the start tries
every position of a text of megabytes for a pattern only its last lines can match."""


def _near_end(output: str) -> int:
    return max(0, len(output) - _TAIL_CHARS)


_CODEX = re.compile(
    r"\AChunk ID: [^\n]*\nWall time: [^\n]*\n(?:Process exited with code (-?\d+)\n)?"
    r"(?:Original token count: \d+\n)?Output:\n(.*)\Z",
    re.S,
)
"""Codex CLI's wrapping of an ``exec_command`` result (no exit code: still running)."""


def unwrap_output(output: str) -> tuple[str, int | None]:
    """The command's own output and exit code, without a harness's wrapping (mini-swe-agent's
    ``<returncode>``/``<output>``, SWE-agent's ``OBSERVATION:`` prefix, OpenHands' trailing
    ``[... exit code N]`` and ``[Current working directory: ...]`` lines or, in its older
    observations, the shell prompt after the output)."""
    match = _MINI.match(output)
    if match:
        return match.group(2), int(match.group(1))
    # Both trailers end the text: a text that does not end as they do is not searched (each
    # search tries every position of the last 64 KB, most of a millisecond for an ordinary one).
    tail = _OPENHANDS_TAIL.search(output, _near_end(output)) if output.endswith("]") else None
    if tail:
        codes = re.findall(r"exit code (-?[0-9]{1,18})\b", tail.group(0))
        return output[: tail.start()], int(codes[-1]) if codes else None
    prompt = _PROMPT.search(output, _near_end(output)) if output.endswith(_PROMPT_ENDS) else None
    if prompt:  # a terminal's capture: CRLF line ends, the next prompt after the output
        return output[: prompt.start()].replace("\r\n", "\n"), None
    if output.startswith("OBSERVATION:\n"):
        # SWE-agent reads commands through a terminal, which ends every line with CRLF.
        return output[len("OBSERVATION:\n") :].replace("\r\n", "\n"), None
    return output, None


def _resolve(cwd: str, path: str) -> str:
    return posixpath.normpath(posixpath.join(cwd, path))


def _split_cd(command: str, cwd: str) -> tuple[str, str]:
    """Strip leading ``cd DIR &&`` steps, following them."""
    while True:
        match = re.match(r"\s*cd\s+(\"[^\"]*\"|'[^']*'|[^\s;&|]+)\s*(&&|;)\s*", command)
        if not match:
            return command.strip(), cwd
        target = match.group(1).strip("\"'")
        cwd = _resolve(cwd, target)
        command = command[match.end() :]


def _tokens(command: str) -> list[str] | None:
    try:
        return shlex.split(command, comments=False)
    except ValueError:
        return None


def _simple(tokens: list[str]) -> bool:
    return not any(t in _SHELL_OPS or t.startswith((">", "<", "|")) for t in tokens)


def _cat_n_content(text: str, *, editor: bool = False) -> str | None:
    """File content from ``cat -n`` style output (every line numbered from 1 consecutively).

    ``editor``: the output of an editor ``view`` (SWE-agent, OpenHands), which numbers the lines
    of ``content.split("\\n")``: an empty last line stands for the final newline, and SWE-agent's
    recorded observations lose its trailing tab. Coreutils ``cat -n`` numbers no such line."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if editor and lines and re.fullmatch(r" *\d+", lines[-1]):
        lines[-1] += "\t"
    out = []
    for expected, line in enumerate(lines, start=1):
        match = _CAT_N_LINE.match(line)
        if not match or int(match.group(1)) != expected:
            return None
        out.append(match.group(2))
    if editor:
        return "\n".join(out)
    return "\n".join(out) + ("\n" if out else "")


def _shell_effects(command: str, output: str, code: int | None, cwd: str) -> Iterator[Effect]:
    effects = list(_plain_shell_effects(command, output, code, cwd))
    if any(isinstance(e, FileRead | FileLines | FileWrite) for e in effects):
        yield from effects
        return
    yield from effects
    if code not in (None, 0):
        return
    # Any other view: a pipeline, a chain of views, awk, python, a diff (adapters.harness.views).
    yield from _views(command, output, cwd, None)


def _views(command: str, output: str, cwd: str, cut: Cut | None) -> Iterator[Effect]:
    command, cwd = _split_cd(command, cwd)
    if "<<" in command.split("\n", 1)[0]:
        return  # a here-document writes: its body is data
    words = command.split()
    if not words or (output or (cut.head if cut else "")).startswith(
        f"{posixpath.basename(words[0])}: "
    ):
        return  # the program's own error message (no exit code: SWE-agent), not content
    if (
        cut is None
        and len(words) >= 2
        and posixpath.basename(words[0]) == "git"
        and words[1]
        in (
            "diff",
            "show",
        )
    ):
        for shown in diff_views(output, cwd):
            yield FileLines(shown.path, shown.ranges)
        return
    if cut is None:
        tokens = _tokens(command)
        python = (
            python_read(tokens[1:])
            if tokens and posixpath.basename(tokens[0]) in ("python", "python3")
            else None
        )
        if python is not None:  # print(open(f).read()): the file and print's newline
            path, newline = python
            if not newline or output.endswith("\n"):
                yield FileRead(_resolve(cwd, path), output[:-1] if newline else output)
            return
    for shown in chain_views(command, output if cut is None else None, cwd, cut):
        yield FileLines(shown.path, shown.ranges)


def _plain_shell_effects(command: str, output: str, code: int | None, cwd: str) -> Iterator[Effect]:
    command, cwd = _split_cd(command, cwd)
    first_line = command.split("\n", 1)[0]
    if "<<" in first_line:
        command = first_line  # a here-document's body is data, not shell syntax
    tokens = _tokens(command)
    if not tokens:
        return
    program = posixpath.basename(tokens[0])
    simple = _simple(tokens)
    if code is None and program in ("cat", "head", "sed") and output.startswith(f"{program}: "):
        return  # no exit code (SWE-agent), but the program's own error message: no content
    if code not in (None, 0):
        if program in ("grep", "rg") and code == 1:
            return  # grep found nothing: no listing, nothing else
        if program not in ("find", "grep", "rg"):
            return
    if program == "cat" and simple:
        files = [t for t in tokens[1:] if not t.startswith("-")]
        flags = [t for t in tokens[1:] if t.startswith("-")]
        if len(files) == 1 and not flags:
            yield FileRead(_resolve(cwd, files[0]), output)
        elif len(files) == 1 and flags == ["-n"]:
            content = _cat_n_content(output)
            if content is not None:
                yield FileRead(_resolve(cwd, files[0]), content)
    elif program == "head" and simple:
        yield from _head(tokens, output, cwd)
    elif program == "sed" and simple and len(tokens) == 4 and tokens[1] == "-n":
        match = re.fullmatch(r"1,([0-9]{1,18})p", tokens[2])
        if match and output.count("\n") < int(match.group(1)):
            yield FileRead(_resolve(cwd, tokens[3]), output)
        else:
            lines = _sed_range(tokens[2])
            if lines is not None and output:
                yield FileLines(_resolve(cwd, tokens[3]), (lines,))
    elif program == "tail" and simple:
        yield from _tail(tokens, cwd)
    elif program == "sed" and "-i" in tokens and simple:
        target = tokens[-1]
        yield FileWrite(_resolve(cwd, target))
    elif simple is False and re.search(
        r"(?:^|\s)(?:cat|echo|printf)\b[^|]*>\s*([^\s;&|]+)", command
    ):
        for target in re.findall(r">\s*([^\s;&|>]+)", command):
            if not target.startswith(("&", "/dev/")):
                yield FileWrite(_resolve(cwd, target.strip("\"'")))
    elif program in ("find", "ls", "grep", "rg", "tree", "git"):
        lister = _lister(tokens)
        if lister is None:
            return
        paths = tuple(_listing(*lister, output, cwd))
        if paths:
            yield Listing(paths)
        if lister[0] in ("grep", "rg", "xargs-grep"):
            yield from _grep_hits(lister[1], output, cwd, lister[0] == "xargs-grep")


_LINE_FILTERS = {"head", "tail", "sort", "uniq"}
_CHAINS = {"&&", "||", ";", "&", "|&"}


def _lister(tokens: list[str]) -> tuple[str, list[str]] | None:
    """The program whose output format the listing has, and its arguments: the first command of
    a pipeline whose later stages only keep or reorder lines (``head``, ``sort``, ``grep PAT``),
    or ``find ... | xargs grep``. None when the output is someone else's (a chain with ``&&`` or
    ``;``, a pipe into ``wc``, ``cat``, ``awk``...): its lines are not paths."""
    stages: list[list[str]] = [[]]
    redirected = False
    for n, token in enumerate(tokens):
        if redirected:
            redirected = False  # the target of a redirection: not an argument
        elif re.match(r"\d*(?:>>?|<)(?:&\d+)?", token):
            redirected = re.fullmatch(r"\d*(?:>>?|<)", token) is not None
        elif token == "|":
            stages.append([])
        elif token in _CHAINS and not (token == ";" and n and tokens[n - 1] in ("{}", "+")):
            return None
        else:
            stages[-1].append(token)
    program, args = posixpath.basename(stages[0][0]), stages[0]
    for stage in stages[1:]:
        name = posixpath.basename(stage[0]) if stage else ""
        if name in _LINE_FILTERS or (
            name == "grep" and all(re.fullmatch(r"-[viEFwxP]+|-e", t) for t in _flags(stage))
        ):
            continue
        if program == "find" and name == "xargs" and stage[1:2] and stage[1] in ("grep", "rg"):
            program, args = "xargs-grep", stage[1:]  # grep over many files: names shown
            continue
        return None
    if program == "find" and not _find_prints_paths(args):
        return None
    return program, args


def _flags(tokens: list[str]) -> list[str]:
    return [t for t in tokens[1:] if t.startswith("-")]


def _find_prints_paths(tokens: list[str]) -> bool:
    """``find`` prints one path per line unless told otherwise (``-printf``, ``-ls``) or made to
    run another command, whose output is only names with ``grep -l``."""
    if any(t in ("-printf", "-fprintf", "-ls", "-fls", "-print0") for t in tokens):
        return False
    for n, token in enumerate(tokens):
        if token in ("-exec", "-execdir", "-ok", "-okdir"):
            command = tokens[n + 1 : n + 2]
            if command not in (["grep"], ["rg"]) or not any(
                t in ("-l", "-L", "--files-with-matches") or re.fullmatch(r"-\w*l\w*", t)
                for t in tokens[n + 2 :]
            ):
                return False
    return True


def _sed_range(script: str) -> tuple[int, int] | None:
    """The lines ``sed -n SCRIPT`` prints: ``Ap``, ``A,Bp``, ``A,$p``."""
    match = re.fullmatch(r"([0-9]{1,18})(?:,([0-9]{1,18}|\$))?p", script)
    if match is None or int(match.group(1)) < 1:
        return None
    start, end = int(match.group(1)), match.group(2)
    stop = -1 if end == "$" else int(end) if end is not None else start
    if stop != -1 and stop < start:
        return None
    return (start, stop)


def _tail(tokens: list[str], cwd: str) -> Iterator[Effect]:
    """``tail -n N FILE``, ``tail -N FILE``, ``tail -n +K FILE``."""
    count, files, args = "10", [], iter(tokens[1:])
    for token in args:
        if token == "-n":
            count = next(args, "")
        elif re.fullmatch(r"-n?\+?[0-9]{1,18}", token):
            count = token.lstrip("-n")
        elif token.startswith("-"):
            return
        else:
            files.append(token)
    if len(files) != 1 or not re.fullmatch(r"\+?[0-9]{1,18}", count):
        return
    n = int(count.lstrip("+"))
    if count.startswith("+"):
        lines = (max(n, 1), -1)
    elif n > 0:
        lines = (-n, -1)
    else:
        return
    yield FileLines(_resolve(cwd, files[0]), (lines,))


_NUMBERED = re.compile(r"\A *([0-9]{1,18})\t")


def _grep_hits(tokens: list[str], output: str, cwd: str, named: bool = False) -> Iterator[Effect]:
    """The lines a ``grep`` showed of each file: with ``-n``, their numbers (``N:text`` for one
    file, ``PATH:N:text`` for several; context lines ``-A/-B/-C`` use ``-``); without, some
    lines of each file named in a hit, which ones unknown."""
    numbered = any(
        t == "--line-number" or (re.fullmatch(r"-[A-Za-z]+", t) and "n" in t[1:])
        for t in _flags(tokens)
    )
    names_only = any(
        t in ("-l", "-L", "-c", "--count", "--files-with-matches")
        or re.fullmatch(r"-\w*[lLc]\w*", t)
        for t in _flags(tokens)
    )
    if names_only:
        return
    named = named or _grep_names_lines(tokens)
    if named:
        files: dict[str, list[int]] = {}
        hit = re.compile(r"\A(.+?):([0-9]{1,18}):") if numbered else re.compile(r"\A([^:]+):")
        for line in output.split("\n"):
            match = hit.match(line)
            if match and _plausible_file(match.group(1)):
                numbers = files.setdefault(match.group(1), [])
                if numbered:
                    numbers.append(int(match.group(2)))
        if numbered:  # context lines: PATH-N-text, for a path that has hits
            context = re.compile(r"\A(.+?)-([0-9]{1,18})-")
            for line in output.split("\n"):
                match = context.match(line)
                if match and match.group(1) in files:
                    files[match.group(1)].append(int(match.group(2)))
        for path, numbers in list(files.items())[:_MAX_GREP_FILES]:
            yield FileLines(_resolve(cwd, path), runs(sorted(numbers)))
        return
    if not numbered:
        return  # one file without numbers: the views of a pipeline say which (some) lines
    operands = [t for t in tokens[1:] if not t.startswith("-")]
    if len(operands) != 2 or not _plausible_file(operands[1]):
        return  # the pattern and one file, nothing else (a -e pattern: not worth the guess)
    numbers = [int(m.group(1)) for m in re.finditer(r"^([0-9]{1,18})[:-]", output, re.M)]
    if numbers:
        yield FileLines(_resolve(cwd, operands[1]), runs(numbers))


_MAX_GREP_FILES = 20
"""A recursive ``grep -n`` over a tree: the files of its first hits only."""


def _head(tokens: list[str], output: str, cwd: str) -> Iterator[Effect]:
    limit, files, args = 10, [], iter(tokens[1:])
    for token in args:
        if token == "-n":
            count = next(args, "")
            if not re.fullmatch(r"[0-9]{1,18}", count):
                return
            limit = int(count)
        elif re.fullmatch(r"-n?[0-9]{1,18}", token):
            limit = int(token.lstrip("-n"))
        elif token.startswith("-"):
            return
        else:
            files.append(token)
    lines = output.count("\n") + (0 if output.endswith("\n") or not output else 1)
    if len(files) == 1 and lines < limit:
        yield FileRead(_resolve(cwd, files[0]), output)
    elif len(files) == 1 and limit > 0:
        yield FileLines(_resolve(cwd, files[0]), ((1, limit),))


def _plausible_file(name: str) -> bool:
    if not name or name in (".", "..") or "\x00" in name or len(name) > 255:
        return False
    if any(c in name for c in "*?[]{}<>|\"'`$"):
        return False
    base = name.rsplit("/", 1)[-1]
    return ("." in base.strip(".")) or base in _KNOWN_NAMES


def _listing(program: str, tokens: list[str], output: str, cwd: str) -> Iterator[str]:
    lines = [line.rstrip("\r") for line in output.split("\n") if line.strip()]
    if program == "find" or (program == "git" and tokens[1:2] == ["ls-files"]):
        for line in lines:
            if not line.startswith(("find:", "fatal:")) and _plausible_file(line.strip()):
                yield _resolve(cwd, line.strip())
    elif program in ("grep", "rg", "xargs-grep"):
        names_only = any(
            t in ("-l", "--files-with-matches") or re.fullmatch(r"-\w*l\w*", t) for t in tokens[1:]
        )
        if not names_only and program != "xargs-grep" and not _grep_names_lines(tokens):
            return  # its lines are the file's content, not "path:content"
        for line in lines:
            if line.startswith(("Binary file", "grep:")):
                continue
            path = line if names_only else line.split(":", 1)[0] if ":" in line else ""
            if path and _plausible_file(path):
                yield _resolve(cwd, path)
    elif program == "ls":
        targets = [t for t in tokens[1:] if not t.startswith("-")]
        long_format = any(re.fullmatch(r"-[A-Za-z]*l[A-Za-z]*", t) for t in tokens[1:])
        base = _resolve(cwd, targets[0]) if len(targets) == 1 else cwd
        recursive = "--recursive" in tokens[1:] or any(
            re.fullmatch(r"-[A-Za-z]*R[A-Za-z]*", t) for t in tokens[1:]
        )
        if len(targets) > 1 and not recursive:
            return  # several directories: sections are ambiguous without -R headers
        for line in lines:
            if line.startswith("total "):
                continue
            if line.endswith(":"):
                if recursive:  # "-R" prints "DIR:" before each directory's entries
                    base = _resolve(cwd, line[:-1])
                continue
            if long_format:
                fields = line.split(None, 8)
                if len(fields) < 9 or not fields[0].startswith("-"):
                    continue  # directories, links and devices are not files
                names = [fields[8]]
            else:
                names = line.split()  # on a terminal, ls prints several names per line
            for name in names:
                if not _plausible_file(name):
                    continue
                if len(targets) == 1 and name == targets[0] and not recursive:
                    yield _resolve(cwd, name)  # ls of a file prints it as it was given
                else:
                    yield _resolve(base, name)
    elif program == "tree":
        stack: list[str] = []
        operands, args = [], iter(tokens[1:])
        for token in args:
            if token in ("-L", "-P", "-I", "-o", "-H", "-T", "--filelimit", "--charset"):
                next(args, None)  # an option's value, not the directory
            elif not token.startswith("-"):
                operands.append(token)
        root = _resolve(cwd, operands[0] if operands else ".")
        for line in lines:
            match = re.match(r"^((?:[│ ] {3}|    )*)[├└]── (.+)$", line)
            if not match:
                continue
            depth = len(match.group(1)) // 4
            del stack[depth:]
            stack.append(match.group(2).strip())
            if _plausible_file(stack[-1]):
                yield _resolve(root, "/".join(stack))


_GREP_VALUE_FLAGS = "efmABCdD"
"""Short options of grep that take a value (``-e PATTERN``, ``-A 5``...)."""
_GREP_VALUE_LONG = {"--regexp", "--file", "--max-count", "--after-context", "--before-context"}
_GREP_VALUE_LONG |= {"--context", "--devices", "--directories", "--binary-files", "--label"}


def _grep_names_lines(tokens: list[str]) -> bool:
    """Whether grep (or rg) prefixes its lines with the file name: recursive, ``-H``, or several
    files (a glob counts as several); a single file is searched without names."""
    recursive = tokens[0] == "rg"
    names: bool | None = None
    pattern_given = False
    operands: list[str] = []
    args = iter(tokens[1:])
    for token in args:
        if token == "--":
            operands += list(args)
        elif token.startswith("--"):
            option = token.split("=", 1)[0]
            if option in ("--recursive", "--dereference-recursive"):
                recursive = True
            elif option == "--with-filename":
                names = True
            elif option == "--no-filename":
                names = False
            if option in ("--regexp", "--file"):
                pattern_given = True
            if option in _GREP_VALUE_LONG and "=" not in token:
                next(args, None)
        elif token.startswith("-") and len(token) > 1:
            for n, flag in enumerate(token[1:]):
                if flag in "rR":
                    recursive = True
                elif flag == "H":
                    names = True
                elif flag == "h":
                    names = False
                elif flag in _GREP_VALUE_FLAGS:
                    pattern_given = pattern_given or flag in "ef"
                    if n == len(token) - 2:
                        next(args, None)  # the value is the next token
                    break
        else:
            operands.append(token)
    files = operands if pattern_given else operands[1:]
    if names is not None:
        return names
    if recursive:
        return not (tokens[0] == "rg" and len(files) == 1 and _plausible_file(files[0]))
    return len(files) > 1 or any(c in f for f in files for c in "*?[")


def _editor_effects(args: Mapping[str, Any], output: str) -> Iterator[Effect]:
    """SWE-agent's and OpenHands' ``str_replace_editor``."""
    command, path = args.get("command"), args.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        return
    if command == "view":
        dir_match = _DIR_HEADER.match(output)
        if dir_match:
            found = [line.strip() for line in output.splitlines()[1:]]
            yield Listing(tuple(p for p in found if p.startswith("/") and _plausible_file(p)))
            return
        header = _CAT_N_HEADER.match(output)
        if header and not args.get("view_range") and _CLIPPED not in output:
            content = _cat_n_content(output[header.end() :], editor=True)
            if content is not None:
                yield FileRead(path, content)
                return
        if header:
            yield from _editor_lines(path, args.get("view_range"), output[header.end() :])
    elif command == "create" and isinstance(args.get("file_text"), str):
        if not _editor_refused(output):
            yield FileWrite(path, args["file_text"])
    elif command == "str_replace" and isinstance(args.get("old_str"), str):
        if "has been edited" in output or "was edited" in output or not output:
            yield FileEdit(path, args["old_str"], str(args.get("new_str") or ""))
            snippet = _SNIPPET_HEADER.search(output)
            if snippet:  # the edited lines, as the editor showed them after the edit
                yield from _editor_lines(path, None, output[snippet.end() :])
    elif command in ("insert", "undo_edit"):
        yield FileWrite(path)


_SNIPPET_HEADER = re.compile(r"Here's the result of running `cat -n` on a snippet of \S+:\r?\n")


def _editor_lines(path: str, view_range: Any, body: str) -> Iterator[Effect]:
    """The lines an editor ``view`` (or an edit's snippet) showed: its numbered lines, or the
    range it was asked for when the numbers cannot be read."""
    numbers = []
    for line in body.replace("\r\n", "\n").split("\n"):
        match = _NUMBERED.match(line)
        if match is None:
            break  # the end of the numbered lines (a note, a clipped marker)
        numbers.append(int(match.group(1)))
    ranges = runs(numbers)
    if not ranges and isinstance(view_range, list) and len(view_range) == 2:
        start, end = view_range
        if isinstance(start, int) and isinstance(end, int) and start >= 1:
            ranges = ((start, -1 if end == -1 else max(end, start)),)
    if ranges:
        yield FileLines(path, ranges)


def _editor_refused(output: str) -> bool:
    """The editor reported that it did nothing (``create`` over an existing file, a bad path)."""
    return output.lstrip().startswith(("ERROR", "Error")) or "Cannot overwrite" in output


def _read_lines(path: str, args: Mapping[str, Any]) -> Iterator[Effect]:
    """A read tool given a range: ``offset``/``limit`` (1-based first line, line count),
    ``start_line``/``end_line``, or ``view_range``."""

    def number(key: str) -> int | None:
        value = args.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    offset, limit = number("offset"), number("limit")
    start, end = number("start_line"), number("end_line")
    view_range = args.get("view_range")
    if isinstance(view_range, list) and len(view_range) == 2:
        start, end = view_range
        start = start if isinstance(start, int) else None
        end = end if isinstance(end, int) else None
    if start is None and (offset is not None or limit is not None):
        start = max(offset or 1, 1)
        end = start + limit - 1 if limit is not None and limit > 0 else -1
    if start is None or start < 1:
        return
    if end is None or end == -1 or end < start:
        end = -1
    yield FileLines(path, ((start, end),))


_SWE_WINDOW = re.compile(r"\A\[File: ([^\n]+?) \([0-9]{1,18} lines total\)\]\r?\n")
"""SWE-agent 0.x's file viewer (``open``, ``goto``, ``scroll_down``, ``edit``...): a header
naming the file, then its lines numbered ``N:``."""
_WINDOW_LINE = re.compile(r"^([0-9]{1,18}):", re.M)


def _numbered_window(path: str, body: str, cwd: str) -> FileLines | None:
    numbers = [int(m.group(1)) for m in _WINDOW_LINE.finditer(body)]
    ranges = runs(numbers)
    return FileLines(_resolve(cwd, path.strip()), ranges) if ranges else None


def recognise(tool: str, args: Mapping[str, Any], output: str, cwd: str) -> list[Effect]:
    """File effects of one finished tool call. ``output`` is the text the model saw."""
    text, code = unwrap_output(output)
    name = tool.lower()
    if name == "exec_command" and isinstance(args.get("cmd"), str):  # Codex CLI
        codex = _CODEX.match(output)
        if not codex or codex.group(1) is None or "tokens truncated" in output:
            return []  # still running, or cut: neither a whole file nor a complete listing
        workdir = args.get("workdir")
        here = _resolve(cwd, workdir) if isinstance(workdir, str) and workdir else cwd
        return list(_shell_effects(args["cmd"], codex.group(2), int(codex.group(1)), here))
    if name in ("bash", "execute_bash", "shell", "run", "terminal") and isinstance(
        args.get("command"), str
    ):
        window = _SWE_WINDOW.match(text)
        if window is not None:  # SWE-agent 0.x's file viewer: numbered lines of one file
            found = _numbered_window(window.group(1), text[window.end() :], cwd)
            return [found] if found is not None else []
        if _MINI_CUT.match(output) or _OPENHANDS_CUT in output:
            # A cut output: never a whole file nor a complete listing, but its head and tail
            # are the first and last lines of what the command showed.
            cut = cut_parts(text)
            return list(_views(args["command"], "", cwd, cut)) if cut is not None else []
        return list(_shell_effects(args["command"], text, code, cwd))
    if name in ("str_replace_editor", "edit_file", "text_editor"):
        return list(_editor_effects(args, text))
    path = args.get("path", args.get("file_path"))
    if not isinstance(path, str) or not path:
        return []
    path = _resolve(cwd, path)
    if name in ("read", "read_file", "view"):
        if not any(k in args for k in ("offset", "limit", "view_range", "start_line", "end_line")):
            # Claude Code's Read numbers every line as an editor view does ("1\tdef f():\n2\t").
            numbered = _cat_n_content(text, editor=True) if text[:1].isdigit() else None
            return [FileRead(path, numbered if numbered is not None else text)]
        return list(_read_lines(path, args))
    if name in ("write", "write_file", "create_file"):
        content = args.get("content", args.get("file_text"))
        return [FileWrite(path, content if isinstance(content, str) else None)]
    if name == "edit" and isinstance(args.get("edits"), list):  # Pi: replacements in one call
        edits = args["edits"]
        if all(isinstance(e, Mapping) and isinstance(e.get("oldText"), str) for e in edits):
            return [FileEdit(path, e["oldText"], str(e.get("newText", ""))) for e in edits]
        return []
    if name in ("edit", "replace") and isinstance(args.get("old_string", args.get("old")), str):
        old = args.get("old_string", args.get("old"))
        new = args.get("new_string", args.get("new", ""))
        return [FileEdit(path, str(old), str(new))]
    return []
