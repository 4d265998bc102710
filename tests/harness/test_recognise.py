"""Recognition of file effects from finished tool calls: exact effects for every supported form.

Outputs are written in the style of the recorded trajectories of the development set
(mini-swe-agent's ``<returncode>``/``<output>``, SWE-agent's ``OBSERVATION:`` with CRLF line
ends, OpenHands' editor views). A read counts only when the output is certainly the whole file.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfctx.adapters.harness import recognise as recognise_module
from selfctx.adapters.harness.recognise import (
    Effect,
    FileEdit,
    FileLines,
    FileRead,
    FileWrite,
    Listing,
    recognise,
    unwrap_output,
)
from tests.harness.conftest import CWD, mini, mini_long, numbered, swe

SEPARABLE = (
    "# Licensed under a 3-clause BSD style license - see LICENSE.rst\n"
    "\n"
    '"""\nFunctions to determine if a model is separable, i.e.\n'
    'if the model outputs are independent.\n"""\n'
    "\n"
    "import numpy as np\n"
)


def sh(command: str, output: str, cwd: str = CWD) -> list[Effect]:
    return recognise("bash", {"command": command}, output, cwd)


# -- unwrapping ---------------------------------------------------------------------------


def test_unwrap_mini_swe_agent() -> None:
    assert unwrap_output(mini("a\nb\n", 0)) == ("a\nb\n", 0)
    assert unwrap_output(mini("boom\n", 2)) == ("boom\n", 2)
    assert unwrap_output("<returncode>0</returncode>\n<output>\n</output>") == ("", 0)


def test_unwrap_keeps_an_output_that_mentions_the_closing_tag() -> None:
    assert unwrap_output(mini("<output>x</output>\n")) == ("<output>x</output>\n", 0)


def test_unwrap_swe_agent_and_plain() -> None:
    assert unwrap_output("OBSERVATION:\nfoo\r\nbar") == ("foo\nbar", None)
    assert unwrap_output("plain text") == ("plain text", None)


# -- whole-file reads through the shell ---------------------------------------------------


def test_cat_relative_to_cwd() -> None:
    assert sh("cat astropy/modeling/separable.py", mini(SEPARABLE)) == [
        FileRead("/testbed/astropy/modeling/separable.py", SEPARABLE)
    ]


def test_cat_after_cd() -> None:
    out = mini(SEPARABLE)
    assert sh("cd /testbed && cat astropy/modeling/separable.py", out, cwd="/") == [
        FileRead("/testbed/astropy/modeling/separable.py", SEPARABLE)
    ]
    assert sh("cd astropy; cat ./modeling/../modeling/separable.py", out) == [
        FileRead("/testbed/astropy/modeling/separable.py", SEPARABLE)
    ]
    assert sh("cd /testbed/src && cd pkg && cat ../a.py", mini("x\n"), cwd="/") == [
        FileRead("/testbed/src/a.py", "x\n")
    ]


def test_cat_absolute_and_quoted_paths() -> None:
    assert sh("cat /etc/hosts", mini("127.0.0.1 localhost\n")) == [
        FileRead("/etc/hosts", "127.0.0.1 localhost\n")
    ]
    assert sh("cat 'my dir/a b.py'", mini("x\n")) == [FileRead("/testbed/my dir/a b.py", "x\n")]


def test_cat_of_an_empty_file() -> None:
    assert sh("cat empty.py", mini("")) == [FileRead("/testbed/empty.py", "")]


def test_cat_without_wrapping_and_swe_agent_observation() -> None:
    assert sh("cat a.py", "x = 1\n") == [FileRead("/testbed/a.py", "x = 1\n")]
    # SWE-agent's terminal ended the lines with CRLF; the file has LF (a CR of its own stays).
    assert sh("cat a.py", swe("x = 1\ny = 2")) == [FileRead("/testbed/a.py", "x = 1\ny = 2")]
    assert sh("cat a.py", "OBSERVATION:\nx\r\r\n") == [FileRead("/testbed/a.py", "x\r\n")]


def test_cat_n_is_unnumbered() -> None:
    out = mini("     1\tx = 1\n     2\t\n     3\ty = 2\n")
    assert sh("cat -n a.py", out) == [FileRead("/testbed/a.py", "x = 1\n\ny = 2\n")]


def test_cat_n_with_a_gap_in_the_numbers_is_not_a_read() -> None:
    # not the whole file: the lines its numbers name
    assert sh("cat -n a.py", mini("     1\tx\n     3\ty\n")) == [
        FileLines("/testbed/a.py", ((1, 1), (3, 3)))
    ]


@pytest.mark.parametrize(
    "command",
    [
        "cat a.py b.py",  # two files: whose content is whose?
        "cat a.py | grep x",  # a pipe
        "cat a.py | head -20",
        "cat -A a.py",  # an unknown flag
        "cat a.py 2>&1",
        "cat a.py && echo done",
        "cat",  # stdin
        "cat a.py > b.py",  # a copy, not a read
    ],
)
def test_cat_forms_that_are_not_whole_reads(command: str) -> None:
    assert not [e for e in sh(command, mini("x = 1\n")) if isinstance(e, FileRead)]


def test_a_failed_cat_is_nothing() -> None:
    assert sh("cat nope.py", mini("cat: nope.py: No such file or directory\n", 1)) == []


def test_a_truncated_output_is_never_a_read() -> None:
    # mini-swe-agent cuts long outputs in the middle (pvlib trajectory: `head -300 pvsystem.py`):
    # its head and tail are the first and last lines the command printed (the head's last line
    # and the tail's first may be cut mid-line: not counted).
    out = mini_long("line 1\nline 2", "line 299\nline 300")
    path = "/testbed/pvlib/pvsystem.py"
    assert sh("head -300 pvlib/pvsystem.py", out) == [FileLines(path, ((1, 1), (300, 300)))]
    assert sh("cat pvlib/pvsystem.py", out) == [FileLines(path, ((1, 1), (-1, -1)))]
    assert sh("sed -n 1,400p pvlib/pvsystem.py", out) == [FileLines(path, ((1, 1), (400, 400)))]
    assert sh("find . -name '*.py'", mini_long("./a.py", "./b.py")) == []


# -- head and sed -n ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("head a.py", "1\n2\n3\n"),  # default limit 10
        ("head -n 5 a.py", "1\n2\n3\n"),
        ("head -n5 a.py", "1\n2\n3\n"),
        ("head -5 a.py", "1\n2\n3\n4\n"),
        ("head -n 3 a.py", "1\n2"),  # no final newline: 2 lines, under the limit
        ("head -50 pvlib/../a.py", "1\n"),
    ],
)
def test_head_under_its_limit_is_a_whole_read(command: str, output: str) -> None:
    assert sh(command, mini(output)) == [FileRead("/testbed/a.py", output)]


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("head -5 a.py", "1\n2\n3\n4\n5\n"),  # hit its limit
        ("head -n 3 a.py", "1\n2\n3"),
        ("head a.py", "".join(f"{n}\n" for n in range(10))),
        ("head -c 100 a.py", "1\n"),  # bytes, not lines
        ("head --lines=50 a.py", "1\n"),
        ("head -n x a.py", "1\n"),
    ],
)
def test_head_that_may_have_cut_is_not_a_read(command: str, output: str) -> None:
    effects = sh(command, mini(output))
    assert not [e for e in effects if isinstance(e, FileRead)]
    # a head that hit its limit showed the file's first lines: a partial view
    limit = {"head -5 a.py": 5, "head -n 3 a.py": 3, "head a.py": 10}.get(command)
    assert effects == ([FileLines("/testbed/a.py", ((1, limit),))] if limit else [])


def test_head_of_several_files_and_head_then_tail_are_views() -> None:
    assert sh("head -n 5 a.py b.py", mini("==> a.py <==\n1\n")) == [
        FileLines("/testbed/a.py", ((1, 5),)),
        FileLines("/testbed/b.py", ((1, 5),)),
    ]
    assert sh("cat a.py b.py | grep x", mini("x\n")) == [
        FileLines("/testbed/a.py", ()),  # whose lines are whose: not known
        FileLines("/testbed/b.py", ()),
    ]
    assert sh("head -n 50 a.py | tail -5", mini("1\n")) == [FileLines("/testbed/a.py", ((46, 50),))]


def test_sed_n_from_line_one_under_its_limit_is_a_whole_read() -> None:
    assert sh("sed -n 1,50p a.py", mini("1\n2\n")) == [FileRead("/testbed/a.py", "1\n2\n")]
    assert sh("sed -n '1,50p' a.py", mini("1\n2\n")) == [FileRead("/testbed/a.py", "1\n2\n")]
    # a file of exactly 2 lines without a final newline: still under the limit of 2
    assert sh("sed -n 1,2p a.py", mini("1\n2")) == [FileRead("/testbed/a.py", "1\n2")]


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("sed -n 5,10p a.py", "5\n6\n"),  # a range not from line 1
        ("sed -n '1525,1545p' astropy/modeling/core.py", "        return self._stds\n"),
        ("sed -n 1,2p a.py", "1\n2\n"),  # hit its limit
        ("sed -n 1p a.py", "1\n"),
        ("sed -n 1,50p a.py | head", "1\n"),
        ("sed 1,50p a.py", "1\n1\n"),
    ],
)
def test_partial_sed_is_not_a_read(command: str, output: str) -> None:
    assert not [e for e in sh(command, mini(output)) if isinstance(e, FileRead)]


@pytest.mark.parametrize(
    ("command", "path", "ranges"),
    [
        ("sed -n 5,10p a.py", "a.py", ((5, 10),)),
        (
            "sed -n '1525,1545p' astropy/modeling/core.py",
            "astropy/modeling/core.py",
            ((1525, 1545),),
        ),
        ("sed -n 1,2p a.py", "a.py", ((1, 2),)),
        ("sed -n 7p a.py", "a.py", ((7, 7),)),
        ("sed -n '40,$p' a.py", "a.py", ((40, -1),)),
        ("cd src && sed -n 3,4p b.py", "src/b.py", ((3, 4),)),
        ("head -n 40 a.py", "a.py", ((1, 40),)),
        ("tail -n 20 a.py", "a.py", ((-20, -1),)),
        ("tail -5 a.py", "a.py", ((-5, -1),)),
        ("tail -n +30 a.py", "a.py", ((30, -1),)),
    ],
)
def test_partial_views_name_their_lines(
    command: str, path: str, ranges: tuple[tuple[int, int], ...]
) -> None:
    output = "".join(f"line {n}\n" for n in range(40))
    assert sh(command, mini(output)) == [FileLines(f"/testbed/{path}", ranges)]


@pytest.mark.parametrize(
    "command",
    [
        "sed -n 10,5p a.py",  # an empty range
        "sed -n '/def/,/return/p' a.py",  # addresses that are not line numbers
        "sed -n 5,10p a.py b.py",
    ],
)
def test_views_whose_lines_are_not_known(command: str) -> None:
    assert sh(command, mini("x = 1\n")) == [
        FileLines(f"/testbed/{p}", ()) for p in ("a.py", "b.py") if p in command
    ]


@pytest.mark.parametrize("command", ["tail -f a.py", "tail -n 0 a.py", "tail -c 100 a.py"])
def test_views_that_say_nothing(command: str) -> None:
    assert sh(command, mini("x = 1\n")) == []


def test_a_failed_or_empty_partial_view_is_nothing() -> None:
    assert sh("sed -n 5,10p a.py", mini("sed: can't read a.py\n", 2)) == []
    assert sh("sed -n 500,510p a.py", mini("")) == []  # past the end: nothing was shown


def test_numbered_views_read_their_numbers() -> None:
    out = mini("    10\tdef f():\n    11\t    return 1\n    12\t\n")
    for command in (
        "nl -ba a.py | sed -n '10,12p'",
        "nl -b a a.py | sed -n 10,12p",
        "cat -n a.py | sed -n '10,12p'",
        "cat -n a.py | head -n 12 | tail -n 3",
        "cd /testbed && nl -ba a.py | grep -A2 'def f'",
    ):
        assert sh(command, out) == [FileLines("/testbed/a.py", ((10, 12),))], command
    # a gap in the numbers makes two ranges
    gap = mini("     3\tx\n     4\ty\n    40\tz\n")
    assert sh("cat -n a.py | grep -e x -e y -e z", gap) == [
        FileLines("/testbed/a.py", ((3, 4), (40, 40)))
    ]


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("nl a.py | sed -n 10,12p", "    10\tx\n"),  # plain nl skips empty lines
        ("nl -ba a.py b.py | head", "     1\tx\n"),
        ("nl -ba a.py | wc -l", "12\n"),
        ("cat -n a.py | sed -n 1,2p > out.txt", ""),
        ("nl -ba a.py | sed -n 10,12p", "nl: a.py: No such file or directory\n"),
    ],
)
def test_numbered_pipelines_that_are_not_views(command: str, output: str) -> None:
    assert sh(command, mini(output)) == []


# -- writes through the shell ------------------------------------------------------------------


def test_sed_i_is_a_write_to_read_from_disk() -> None:
    assert sh("sed -i 's/old/new/' pvlib/pvsystem.py", mini("")) == [
        FileWrite("/testbed/pvlib/pvsystem.py")
    ]


def test_redirections_are_writes() -> None:
    assert sh("echo hi > out.txt", mini("")) == [FileWrite("/testbed/out.txt")]
    assert sh("printf 'a\\n' >> logs/out.txt", mini("")) == [FileWrite("/testbed/logs/out.txt")]
    assert sh("cd /tmp && echo x > y.txt", mini(""), cwd="/") == [FileWrite("/tmp/y.txt")]


def test_heredoc_write_takes_the_target_from_its_first_line_only() -> None:
    # The body's own '>' (comparisons, return annotations) are not redirections, and a body
    # with an unbalanced quote does not hide the write.
    command = (
        "cat > reproduce_issue.py << 'EOF'\n"
        "import pvlib.pvsystem\n"
        "def f(a) -> None:\n"
        '    if a > b: print("it\'s > 3")\n'
        "EOF\n"
        "python reproduce_issue.py"
    )
    assert sh(command, mini("")) == [FileWrite("/testbed/reproduce_issue.py")]


def test_redirection_to_dev_null_or_a_descriptor_is_not_a_write() -> None:
    assert sh("echo x > /dev/null", mini("")) == []
    assert sh("echo x 2>&1", mini("x\n")) == []


def test_a_failed_write_is_nothing() -> None:
    assert sh("echo x > /root/y.txt", mini("permission denied\n", 1)) == []


# -- listings ------------------------------------------------------------------------------------


def test_find_relative_and_after_cd() -> None:
    out = mini("./astropy/modeling/separable.py\n./astropy/io/setup_package.py\n")
    assert sh('cd /testbed && find . -path "*/separable*" -type f | head -20', out, cwd="/") == [
        Listing(("/testbed/astropy/modeling/separable.py", "/testbed/astropy/io/setup_package.py"))
    ]


def test_find_skips_errors_directories_and_junk() -> None:
    out = mini(
        "./a.py\n"
        "find: './secret': Permission denied\n"
        "./src\n"  # a directory (no extension): not a file
        "./weird*.py\n"  # glob characters: junk
        "./Makefile\n"
        ".\n",
        1,
    )
    assert sh("find .", out) == [Listing(("/testbed/a.py", "/testbed/Makefile"))]


def test_find_absolute_swe_agent_output() -> None:
    out = swe("/testbed/pydantic/alias_generators.py\n/testbed/pydantic/aliases.py")
    assert sh('find /testbed -type f -name "*.py" | grep -i alias', out) == [
        Listing(("/testbed/pydantic/alias_generators.py", "/testbed/pydantic/aliases.py"))
    ]


def test_find_exec_grep_l_lists_names() -> None:
    out = mini("./src/sqlfluff/core/rules/base.py\n")
    command = 'find . -type f -name "*.py" -exec grep -l "class LintResult" {} \\; | head -5'
    assert sh(command, out) == [Listing(("/testbed/src/sqlfluff/core/rules/base.py",))]


def test_find_piped_into_xargs_grep_l_lists_names() -> None:
    out = swe("/testbed/pandas/core/indexes/datetimes.py\n/testbed/pandas/core/resample.py")
    command = 'find /testbed/pandas -type f -name "*.py" | xargs grep -l "class DatetimeIndex"'
    assert sh(command, out) == [
        Listing(("/testbed/pandas/core/indexes/datetimes.py", "/testbed/pandas/core/resample.py"))
    ]


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("find . -type f | xargs wc -l", "  10 ./a.py\n  20 ./b.py\n  30 total\n"),
        ("find . -name '*.py' | xargs cat", "import os.path\nfrom a.b import c\n"),
        ("find . -name '*.py' | wc -l", "42\n"),
    ],
)
def test_find_whose_output_is_transformed_is_not_a_listing(command: str, output: str) -> None:
    assert sh(command, mini(output)) == []


def test_a_chain_is_every_view_in_it() -> None:
    # the output mixes what each command printed: the lines each shows come from its syntax
    out = mini("./a.py\nsetup.py = here\n")
    assert sh("find . -name '*.py' && cat setup.cfg", out) == [
        FileLines("/testbed/setup.cfg", ((1, -1),))
    ]
    assert sh("cat -n a.py | head -3 && echo done", mini("     1\tx\n")) == [
        FileLines("/testbed/a.py", ())
    ]


def test_grep_recursive_n() -> None:
    out = mini(
        './src/sqlfluff/rules/L042.py:12:    """Join/From clauses should not contain.\n'
        "./src/sqlfluff/rules/L060.py:30:        Use ``COALESCE`` instead.\n"
        "Binary file ./x.so matches\n"
        "grep: ./dir: Is a directory\n"
    )
    assert sh('grep -rn "Use.*instead" ./src/sqlfluff/rules/ | head -10', out) == [
        Listing(("/testbed/src/sqlfluff/rules/L042.py", "/testbed/src/sqlfluff/rules/L060.py")),
        # -n: the hits are views of the lines they show
        FileLines("/testbed/src/sqlfluff/rules/L042.py", ((12, 12),)),
        FileLines("/testbed/src/sqlfluff/rules/L060.py", ((30, 30),)),
    ]


def test_grep_r_without_n_swe_agent_output() -> None:
    out = swe(
        "pandas/core/dtypes/dtypes.py:        >>> dtype.freq\n"
        "pandas/core/dtypes/cast.py:        dtype = PeriodDtype(freq=val.freq)"
    )
    command = 'cd /testbed && grep -r "\\.freq" --include="*.py" pandas/core | head -20'
    assert sh(command, out, cwd="/") == [
        Listing(("/testbed/pandas/core/dtypes/dtypes.py", "/testbed/pandas/core/dtypes/cast.py")),
        # each file with a hit shows some of its lines
        FileLines("/testbed/pandas/core/dtypes/dtypes.py", ()),
        FileLines("/testbed/pandas/core/dtypes/cast.py", ()),
    ]


def test_grep_l_and_files_with_matches() -> None:
    out = mini("a.py\nsub/b.py\n")
    expected = [Listing(("/testbed/a.py", "/testbed/sub/b.py"))]
    assert sh("grep -l foo *.py sub/*.py", out) == expected
    assert sh("grep -rl foo .", out) == expected
    assert sh("grep --files-with-matches foo -r .", out) == expected


def test_grep_of_several_files_names_them() -> None:
    out = mini("a.py:x = 1\nb.py:x = 2\n")
    assert sh("grep x a.py b.py", out) == [
        Listing(("/testbed/a.py", "/testbed/b.py")),
        FileLines("/testbed/a.py", ()),
        FileLines("/testbed/b.py", ()),
    ]
    assert sh("grep -n x *.py", mini("a.py:3:x = 1\na.py:4:x = 2\n")) == [
        Listing(("/testbed/a.py", "/testbed/a.py")),  # the ingestor discovers each path once
        FileLines("/testbed/a.py", ((3, 4),)),
    ]


@pytest.mark.parametrize(
    ("command", "output"),
    [
        # One file: grep prints no file names, only lines of content.
        ('grep -n "class DatetimeIndex" pandas/core/indexes/datetimes.py', "131:class X(Y):\n"),
        ("grep foo a.py", "x.y = z if a else b: foo\n"),
        ("grep import setup.py", "from os.path import join: x\n"),
        ("grep -B5 -A5 LintResult rules/L028.py", "12-    self.x = a.b: c\n13:LintResult\n"),
        ("grep -e self.x -n a.py", "4:self.x: int = 3\n"),
        ("grep -c foo a.py b.py", "a.py:3\nb.py:0\n"),  # -c lists names, but both say so
    ],
)
def test_grep_of_one_file_is_not_a_listing(command: str, output: str) -> None:
    effects = sh(command, mini(output))
    if command.startswith("grep -c"):
        assert effects == [Listing(("/testbed/a.py", "/testbed/b.py"))]
    elif command.startswith('grep -n "class'):  # the hit is a view of its line
        assert effects == [FileLines("/testbed/pandas/core/indexes/datetimes.py", ((131, 131),))]
    elif command.startswith("grep -e"):
        assert effects == [FileLines("/testbed/a.py", ((4, 4),))]
    else:  # some lines of the file, which ones unknown
        assert effects == [FileLines(f"/testbed/{command.split()[-1]}", ())]


def test_grep_n_with_context_lines_of_one_file() -> None:
    out = mini("12-    self.x = 1\n13:    y = x\n14-    return y\n--\n40:    y = 2\n")
    assert sh("grep -n -A1 -B1 'y =' a.py", out) == [
        FileLines("/testbed/a.py", ((12, 14), (40, 40)))
    ]


def test_grep_h_prints_no_names() -> None:
    assert sh("grep -rh foo .", mini("x.py: foo\n")) == []


def test_grep_that_found_nothing() -> None:
    assert sh("grep -rn foo src", mini("", 1)) == []


def test_ls_plain() -> None:
    out = mini("README.md\nsetup.py\nsrc\ndocs\nMakefile\n")
    assert sh("ls", out) == [
        Listing(("/testbed/README.md", "/testbed/setup.py", "/testbed/Makefile"))
    ]
    assert sh("ls src/", mini("a.py\nb.txt\n")) == [
        Listing(("/testbed/src/a.py", "/testbed/src/b.txt"))
    ]


def test_ls_l_skips_directories_links_and_totals() -> None:
    # ls -l in the style of the OpenHands ponyc trajectory
    out = (
        "total 300\n"
        "-rw-r--r--  1 root root   9336 Apr 30 08:32 BUILD.md\n"
        "-rw-r--r--  1 root root 106625 Apr 30 08:32 CHANGELOG.md\n"
        "drwxr-xr-x  6 root root   4096 Apr 30 08:32 src\n"
        "lrwxrwxrwx  1 root root      7 Apr 30 08:32 link.c -> main.c\n"
        "-rw-r--r--  1 root root   4096 Apr 30 08:32 Makefile\n"
    )
    assert sh("ls -l /workspace/ponyc", out) == [
        Listing(
            (
                "/workspace/ponyc/BUILD.md",
                "/workspace/ponyc/CHANGELOG.md",
                "/workspace/ponyc/Makefile",
            )
        )
    ]
    assert sh("ls -la", mini(out)) == [
        Listing(("/testbed/BUILD.md", "/testbed/CHANGELOG.md", "/testbed/Makefile"))
    ]


def test_ls_of_a_file_names_the_file_itself() -> None:
    assert sh("ls setup.py", mini("setup.py\n")) == [Listing(("/testbed/setup.py",))]
    assert sh("ls -l src/a.py", mini("-rw-r--r-- 1 root root 10 Apr 30 08:32 src/a.py\n")) == [
        Listing(("/testbed/src/a.py",))
    ]
    assert sh("ls /testbed/setup.py", mini("/testbed/setup.py\n"), cwd="/") == [
        Listing(("/testbed/setup.py",))
    ]


def test_ls_recursive_follows_its_section_headers() -> None:
    out = mini("src:\na.py\npkg\n\nsrc/pkg:\nb.py\n")
    assert sh("ls -R src", out) == [Listing(("/testbed/src/a.py", "/testbed/src/pkg/b.py"))]


def test_ls_long_options_are_not_long_format() -> None:
    assert sh("ls --all", mini("a.py\n")) == [Listing(("/testbed/a.py",))]


def test_ls_of_several_directories_is_ambiguous() -> None:
    assert sh("ls src docs", mini("src:\na.py\n\ndocs:\nb.md\n")) == []


def test_tree() -> None:
    out = mini(
        "src\n"
        "├── a.py\n"
        "├── pkg\n"
        "│   ├── __init__.py\n"
        "│   └── b.py\n"
        "└── README\n"
        "\n"
        "1 directory, 4 files\n"
    )
    expected = [
        Listing(
            (
                "/testbed/src/a.py",
                "/testbed/src/pkg/__init__.py",
                "/testbed/src/pkg/b.py",
                "/testbed/src/README",
            )
        )
    ]
    assert sh("tree src", out) == expected
    assert sh("tree -L 2 src", out) == expected
    assert sh("cd src && tree", out, cwd="/testbed") == expected


def test_git_ls_files() -> None:
    out = mini("a.py\nsrc/b.py\n")
    assert sh("git ls-files", out) == [Listing(("/testbed/a.py", "/testbed/src/b.py"))]
    assert sh("git status", mini("On branch main\nmodified:   a.py\n")) == []


def test_listing_junk_tokens_are_ignored() -> None:
    out = mini(
        "./ok.py\n"
        "./has$dollar.py\n"
        "./quote'.py\n"
        "./back`tick.py\n"
        "./pipe|.py\n"
        "./noext\n"
        "../outside.py\n"
    )
    assert sh("find .", out) == [Listing(("/testbed/ok.py", "/outside.py"))]


def test_a_listing_that_finds_nothing_is_no_effect() -> None:
    assert sh("ls", mini("")) == []
    assert sh("find . -name '*.rs'", mini("")) == []


# -- the editor tools (SWE-agent and OpenHands str_replace_editor) --------------------------


def test_editor_view_of_a_whole_file_openhands() -> None:
    text = '"""\n# CLI Package\n\n\tindented\n"""\n'
    out = numbered("/workspace/cli.pony", text)
    assert out.endswith('     5\t"""\n     6\t\n')
    effects = recognise(
        "str_replace_editor", {"command": "view", "path": "/workspace/cli.pony"}, out, "/"
    )
    assert effects == [FileRead("/workspace/cli.pony", text)]


def test_editor_view_of_a_whole_file_swe_agent() -> None:
    # SWE-agent's observation has CRLF ends and lost the trailing tab of the last (empty) line.
    text = '"""Alias generators."""\n\nimport re\n'
    out = swe(numbered("/testbed/pydantic/alias_generators.py", text, strip_trailing=True))
    assert out.endswith("import re\r\n     4")
    args = {"command": "view", "path": "/testbed/pydantic/alias_generators.py"}
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileRead("/testbed/pydantic/alias_generators.py", text)
    ]


def test_editor_view_of_a_file_without_final_newline() -> None:
    out = numbered("/testbed/a.py", "x = 1\ny = 2")
    args = {"command": "view", "path": "/testbed/a.py"}
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileRead("/testbed/a.py", "x = 1\ny = 2")
    ]


def test_editor_view_with_a_range_is_not_a_read() -> None:
    out = numbered("/testbed/a.py", "x\ny\n", start=1)
    for view_range in ([1, 3], [1, -1]):
        args = {"command": "view", "path": "/testbed/a.py", "view_range": view_range}
        # the lines it numbered (the file has 2 lines and a final newline: 3 numbered)
        assert recognise("str_replace_editor", args, out, CWD) == [
            FileLines("/testbed/a.py", ((1, 3),))
        ]


def test_editor_view_with_a_range_openhands() -> None:
    out = numbered("/w/parser.c", "a\nb\nc", start=650)
    args = {"command": "view", "path": "/w/parser.c", "view_range": [650, 700]}
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileLines("/w/parser.c", ((650, 652),))
    ]


def test_editor_view_with_a_null_range_is_a_read() -> None:
    args = {"command": "view", "path": "/testbed/a.py", "view_range": None}
    out = numbered("/testbed/a.py", "x\n")
    assert recognise("str_replace_editor", args, out, CWD) == [FileRead("/testbed/a.py", "x\n")]


def test_editor_view_clipped_is_not_a_read() -> None:
    out = (
        numbered("/testbed/big.c", "a\nb\n")
        + "<response clipped><NOTE>To save on context only part of this file has been shown to "
        "you. You should retry this tool after you have searched inside the file with `grep -n` "
        "in order to find the line numbers of what you are looking for.</NOTE>\n"
    )
    args = {"command": "view", "path": "/testbed/big.c"}
    # what it showed before the cut: lines 1 to 3, not the file
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileLines("/testbed/big.c", ((1, 3),))
    ]


def test_editor_view_not_from_line_one_is_not_a_read() -> None:
    out = numbered("/testbed/a.py", "x\ny\n", start=650)
    args = {"command": "view", "path": "/testbed/a.py"}
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileLines("/testbed/a.py", ((650, 652),))
    ]


def test_editor_view_of_a_directory_is_a_listing() -> None:
    out = (
        "Here's the files and directories up to 2 levels deep in /testbed, excluding hidden "
        "items:\n/testbed\n/testbed/setup.py\n/testbed/src\n/testbed/src/a.py\n"
    )
    args = {"command": "view", "path": "/testbed"}
    assert recognise("str_replace_editor", args, out, CWD) == [
        Listing(("/testbed/setup.py", "/testbed/src/a.py"))
    ]


def test_editor_relative_path_is_ignored() -> None:
    args = {"command": "view", "path": "a.py"}
    assert recognise("str_replace_editor", args, numbered("a.py", "x\n"), CWD) == []


def test_editor_create_is_a_write_with_its_text() -> None:
    args = {"command": "create", "path": "/testbed/reproduce_error.py", "file_text": "print(1)\n"}
    out = swe("File created successfully at: /testbed/reproduce_error.py")
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileWrite("/testbed/reproduce_error.py", "print(1)\n")
    ]


def test_editor_create_that_failed_is_nothing() -> None:
    args = {"command": "create", "path": "/testbed/a.py", "file_text": "print(1)\n"}
    out = swe(
        "File already exists at: /testbed/a.py. Cannot overwrite files using command `create`."
    )
    assert recognise("str_replace_editor", args, out, CWD) == []
    assert recognise("str_replace_editor", args, "ERROR:\nInvalid `path` parameter.", CWD) == []


def test_editor_str_replace_is_an_edit() -> None:
    args = {
        "command": "str_replace",
        "path": "/testbed/pydantic/alias_generators.py",
        "old_str": "return snake.lower()",
        "new_str": "return snake.lower().strip()",
    }
    out = swe(
        "The file /testbed/pydantic/alias_generators.py has been edited. Here's the result of "
        "running `cat -n` on a snippet of /testbed/pydantic/alias_generators.py:\n    54\t    "
        "return snake.lower().strip()\nReview the changes and make sure they are as expected. "
        "Edit the file again if necessary."
    )
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileEdit(
            "/testbed/pydantic/alias_generators.py",
            "return snake.lower()",
            "return snake.lower().strip()",
        ),
        FileLines("/testbed/pydantic/alias_generators.py", ((54, 54),)),
    ]


def test_editor_str_replace_that_failed_is_nothing() -> None:
    args = {"command": "str_replace", "path": "/testbed/a.py", "old_str": "x", "new_str": "y"}
    out = (
        "ERROR:\nNo replacement was performed, old_str `x` did not appear verbatim in "
        "/testbed/a.py."
    )
    assert recognise("str_replace_editor", args, out, CWD) == []


def test_editor_str_replace_with_no_new_str_deletes() -> None:
    args = {"command": "str_replace", "path": "/testbed/a.py", "old_str": "x = 1\n"}
    out = "The file /testbed/a.py has been edited."
    assert recognise("str_replace_editor", args, out, CWD) == [
        FileEdit("/testbed/a.py", "x = 1\n", "")
    ]


def test_editor_insert_and_undo_reread_from_disk() -> None:
    for command in ("insert", "undo_edit"):
        args = {"command": command, "path": "/testbed/a.py", "insert_line": 3, "new_str": "x"}
        out = "The file /testbed/a.py has been edited."
        assert recognise("str_replace_editor", args, out, CWD) == [FileWrite("/testbed/a.py")]


# -- OpenHands-style and generic file tools -------------------------------------------------


def test_read_tool_whole_and_partial() -> None:
    assert recognise("read", {"path": "src/a.py"}, "x = 1\n", CWD) == [
        FileRead("/testbed/src/a.py", "x = 1\n")
    ]
    assert recognise("read_file", {"file_path": "/etc/x.conf"}, "k=v\n", CWD) == [
        FileRead("/etc/x.conf", "k=v\n")
    ]
    partial_views: list[tuple[dict[str, Any], tuple[int, int]]] = [
        ({"offset": 10}, (10, -1)),
        ({"limit": 5}, (1, 5)),
        ({"offset": 10, "limit": 5}, (10, 14)),
        ({"view_range": [1, 2]}, (1, 2)),
        ({"view_range": [7, -1]}, (7, -1)),
        ({"start_line": 3}, (3, -1)),
        ({"start_line": 3, "end_line": 9}, (3, 9)),
    ]
    for partial, lines in partial_views:
        assert recognise("read", {"path": "a.py", **partial}, "x\n", CWD) == [
            FileLines("/testbed/a.py", (lines,))
        ]
    assert recognise("read", {"path": "a.py", "offset": "x"}, "x\n", CWD) == []


def test_write_and_edit_tools() -> None:
    assert recognise("write", {"path": "a.py", "content": "x\n"}, "ok", CWD) == [
        FileWrite("/testbed/a.py", "x\n")
    ]
    assert recognise("write_file", {"path": "a.py"}, "ok", CWD) == [FileWrite("/testbed/a.py")]
    assert recognise(
        "edit", {"file_path": "a.py", "old_string": "x", "new_string": "y"}, "ok", CWD
    ) == [FileEdit("/testbed/a.py", "x", "y")]


def test_unknown_tools_and_bad_arguments_are_nothing() -> None:
    assert recognise("submit", {}, "done", CWD) == []
    assert recognise("bash", {"command": 3}, "x", CWD) == []
    assert recognise("bash", {}, "x", CWD) == []
    assert recognise("bash", {"command": "cat 'unbalanced"}, "x", CWD) == []
    assert recognise("read", {"path": ""}, "x", CWD) == []
    assert recognise("str_replace_editor", {"command": "view", "path": 5}, "x", CWD) == []


def test_tool_names_are_case_insensitive_and_execute_bash_counts() -> None:
    assert recognise("execute_bash", {"command": "cat a.py"}, "x\n", CWD) == [
        FileRead("/testbed/a.py", "x\n")
    ]
    assert recognise("Bash", {"command": "cat a.py"}, "x\n", CWD) == [
        FileRead("/testbed/a.py", "x\n")
    ]


# -- outputs without an exit code (SWE-agent, OpenHands) ----------------------------------------


def openhands(output: str, code: int = 0, cwd: str = "/workspace/repo") -> str:
    """An OpenHands command observation as the model saw it (the trajectory converter adds the
    metadata's suffix, working directory and exit code)."""
    return (
        f"{output}\n[The command completed with exit code {code}.]"
        f"\n[Current working directory: {cwd}]\n[Command finished with exit code {code}]"
    )


def test_unwrap_openhands() -> None:
    assert unwrap_output(openhands("a\nb", 0)) == ("a\nb", 0)
    assert unwrap_output(openhands("boom", 2)) == ("boom", 2)
    assert unwrap_output("x\n[Command finished with exit code 1]") == ("x", 1)


_PIECES = st.sampled_from(
    [
        "x", "\n", "\r\n", "]", "[", "#", "$", " ", "@", ":", "root@host:/w", ".",
        "\n[Command finished with exit code 3]", "\n[The command completed with exit code 1.]",
        "\n[Current working directory: /w]", "\n[Python interpreter: /usr/bin/python]",
        "OBSERVATION:\n",
    ]
)  # fmt: skip


@given(st.lists(_PIECES, max_size=12).map("".join))
def test_unwrap_searches_the_trailers_only_where_they_can_end_the_text(text: str) -> None:
    """A text that does not end as a trailer does is not searched for it: the answer is the one
    a search of every text gives."""
    tail = recognise_module._OPENHANDS_TAIL.search(text)
    prompt = recognise_module._PROMPT.search(text)
    if tail:
        codes = re.findall(r"exit code (-?[0-9]{1,18})\b", tail.group(0))
        expected = (text[: tail.start()], int(codes[-1]) if codes else None)
    elif prompt:
        expected = (text[: prompt.start()].replace("\r\n", "\n"), None)
    elif text.startswith("OBSERVATION:\n"):
        expected = (text[len("OBSERVATION:\n") :].replace("\r\n", "\n"), None)
    else:
        expected = (text, None)
    if not recognise_module._MINI.match(text):
        assert unwrap_output(text) == expected


def test_openhands_cat_is_the_file_without_the_trailer() -> None:
    args = {"command": "cat /workspace/repo/a.c"}
    assert recognise("execute_bash", args, openhands("int x;\nint y;"), "/") == [
        FileRead("/workspace/repo/a.c", "int x;\nint y;")
    ]
    assert recognise("execute_bash", args, openhands("cat: a.c: No such file", 1), "/") == []


def test_openhands_truncated_observation_is_not_a_read() -> None:
    out = openhands("int x;\n[... Observation truncated due to length ...]\nint z;")
    assert recognise("execute_bash", {"command": "cat a.c"}, out, "/w") == [
        FileLines("/w/a.c", ((1, 1), (-1, -1)))
    ]


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("cat nope.py", "cat: nope.py: No such file or directory"),
        ("cat src", "cat: src: Is a directory"),
        ("head -n 5 nope.py", "head: cannot open 'nope.py' for reading: No such file or directory"),
        ("sed -n 1,5p nope.py", "sed: can't read nope.py: No such file or directory"),
    ],
)
def test_an_error_message_without_exit_code_is_not_the_file(command: str, output: str) -> None:
    # SWE-agent's observations carry no exit code: the program's own error is no content.
    assert sh(command, swe(output)) == []


def test_older_openhands_output_ends_with_the_shell_prompt() -> None:
    # resolver_pr_viewer: a terminal capture with CRLF ends and the next prompt
    out = "MIT License\r\n\r\nCopyright (c) 2024\r\nSOFTWARE.\r\nroot@bcd3959393a1:/workspace # "
    assert unwrap_output(out) == ("MIT License\n\nCopyright (c) 2024\nSOFTWARE.\n", None)
    assert recognise("execute_bash", {"command": "cat LICENSE"}, out, "/workspace") == [
        FileRead("/workspace/LICENSE", "MIT License\n\nCopyright (c) 2024\nSOFTWARE.\n")
    ]
    assert unwrap_output("\r\nroot@b365937733b2:/workspace # ") == ("\n", None)
    assert unwrap_output("user@host:~$ ") == ("", None)


def test_a_last_line_like_a_prompt_in_a_plain_output_stays() -> None:
    text = "[submodule]\n\turl = git@github.com:org/repo.git #\n"
    assert unwrap_output(text.rstrip("\n")) == (text.rstrip("\n"), None)


def test_claude_codes_numbered_read_is_the_file() -> None:
    """Claude Code's Read numbers every line ("1\\tline"); the file is the text without them."""
    output = "1\tdef add(a, b):\n2\t    return a - b\n3\t"
    assert recognise("Read", {"file_path": "/w/calc.py"}, output, "/w") == [
        FileRead("/w/calc.py", "def add(a, b):\n    return a - b\n")
    ]
    # a read from an offset is a partial view: the lines it showed (decision 0020), no read
    partial = recognise("Read", {"file_path": "/w/calc.py", "offset": 2}, output, "/w")
    assert not any(isinstance(effect, FileRead) for effect in partial)


def test_codex_exec_command_results() -> None:
    done = (
        "Chunk ID: 1f\nWall time: 0.0 seconds\nProcess exited with code 0\n"
        "Original token count: 9\nOutput:\n"
    )
    args = {"cmd": "cat calc.py", "workdir": "/w/src"}
    assert recognise("exec_command", args, done + "x = 1\n", "/w") == [
        FileRead("/w/src/calc.py", "x = 1\n")
    ]
    running = "Chunk ID: 1f\nWall time: 10.0 seconds\nProcess running with session ID 3\nOutput:\n"
    assert recognise("exec_command", args, running + "x = 1\n", "/w") == []
    cut = done + "x = 1\n…120 tokens truncated…\n"
    assert recognise("exec_command", args, cut, "/w") == []


def test_pi_edits_are_replacements() -> None:
    edits = [{"oldText": "a - b", "newText": "a + b"}, {"oldText": "x", "newText": "y"}]
    assert recognise("edit", {"path": "calc.py", "edits": edits}, "ok", "/w") == [
        FileEdit("/w/calc.py", "a - b", "a + b"),
        FileEdit("/w/calc.py", "x", "y"),
    ]


# -- a view is a view, however it was produced ---------------------------------------------

THIRTY = "".join(f"line {n}\n" for n in range(1, 31))


@pytest.mark.parametrize(
    ("command", "ranges"),
    [
        ("cat a.py | head -200", ((1, 200),)),
        ("cat a.py | head -n 20", ((1, 20),)),
        ("cat a.py | sed -n '5,10p'", ((5, 10),)),
        ("cat /testbed/a.py | tail -5", ((-5, -1),)),
        ("cat a.py 2>&1 | head -n 5", ((1, 5),)),
        ("head -100 a.py | tail -20", ((81, 100),)),
        ("sed -n '1,5p;10,12p' a.py", ((1, 5), (10, 12))),
        ("awk 'NR>=5 && NR<=9' a.py", ((5, 9),)),
        ("awk 'NR==5,NR==9' a.py", ((5, 9),)),
        ("awk 'NR>4 && NR<10 {print}' a.py", ((5, 9),)),
        ("cat a.py | awk 'NR>=5 && NR<=9'", ((5, 9),)),
        ("cat a.py | grep foo", ()),  # some lines, which ones unknown
        ("grep -A 30 'class X' a.py", ()),
        ("grep -B 5 -A 10 'def f' a.py | grep -B 10 -A 10 return", ()),
    ],
)
def test_pipelines_of_line_filters_are_views(
    command: str, ranges: tuple[tuple[int, int], ...]
) -> None:
    assert sh(command, mini(THIRTY)) == [FileLines("/testbed/a.py", ranges)]


@pytest.mark.parametrize(
    "command",
    [
        "cat -n a.py | sed -n '5,7p'",
        "nl -ba a.py | awk 'NR>=5 && NR<=7'",
        "cat -n a.py | grep -v zzz",
    ],
)
def test_numbered_outputs_say_their_lines(command: str) -> None:
    out = mini("     5\tx\n     6\ty\n     7\tz\n")
    assert sh(command, out) == [FileLines("/testbed/a.py", ((5, 7),))]


def test_grep_n_numbers_what_it_is_given() -> None:
    out = mini("3:class X:\n4-  a\n5-  b\n--\n40:class X2\n")
    assert sh("cat a.py | grep -n X -A 2", out) == [FileLines("/testbed/a.py", ((3, 5), (40, 40)))]
    # sed gave it lines 100 to 200: its line 3 is the file's 102
    assert sh("sed -n '100,200p' a.py | grep -n X", out) == [
        FileLines("/testbed/a.py", ((102, 104), (139, 139)))
    ]


def test_grep_recursive_with_context_lines() -> None:
    out = mini("src/a.py:3:foo\nsrc/a.py-4-  bar\nsrc/a.py-5-  baz\n--\nsrc/b-c.py:9:foo\n")
    assert sh("grep -rn -A2 foo src", out) == [
        Listing(("/testbed/src/a.py", "/testbed/src/b-c.py")),
        FileLines("/testbed/src/a.py", ((3, 5),)),
        FileLines("/testbed/src/b-c.py", ((9, 9),)),
    ]


def test_python_printing_a_file_is_a_read() -> None:
    command = "python -c \"print(open('a.py').read())\""
    assert sh(command, mini("x = 1\n\n")) == [FileRead("/testbed/a.py", "x = 1\n")]
    command = 'python3 -c \'print(open("a.py").read(), end="")\''
    assert sh(command, mini("x = 1\n")) == [FileRead("/testbed/a.py", "x = 1\n")]
    # any other program is not a view
    assert sh("python -c \"print(open('a.py').read().upper())\"", mini("X = 1\n\n")) == []


def test_a_diff_shows_the_lines_of_its_hunks() -> None:
    out = mini(
        "diff --git a/django/a.py b/django/a.py\nindex 1..2 100644\n--- a/django/a.py\n"
        "+++ b/django/a.py\n@@ -10,7 +10,8 @@ def f():\n x\n-y\n+z\n+w\n@@ -100 +101,3 @@\n a\n"
    )
    assert sh("git diff django/a.py", out) == [
        FileLines("/testbed/django/a.py", ((10, 17), (101, 103)))
    ]


def test_a_chain_of_views_is_all_of_them() -> None:
    out = mini(THIRTY)
    assert sh("sed -n '1,5p' a.py && echo --- && sed -n '10,12p' b.py", out) == [
        FileLines("/testbed/a.py", ((1, 5),)),
        FileLines("/testbed/b.py", ((10, 12),)),
    ]
    assert sh("cat a.py b.py", out) == [
        FileLines("/testbed/a.py", ((1, -1),)),
        FileLines("/testbed/b.py", ((1, -1),)),
    ]
    assert sh("cd src; head -3 a.py; cd ..; tail -2 b.py", out) == [
        FileLines("/testbed/src/a.py", ((1, 3),)),
        FileLines("/testbed/b.py", ((-2, -1),)),
    ]


def test_a_cut_output_shows_its_first_and_last_lines() -> None:
    head, tail = "l100\nl101\nl102", "l398\nl399\nl400"
    assert sh("cat a.py | sed -n '100,400p'", mini_long(head, tail)) == [
        FileLines("/testbed/a.py", ((100, 101), (399, 400)))
    ]
    numbered_head = "   100\tl100\n   101\tl101\n   102\tl"
    numbered_tail = "99\tl398\n   399\tl399\n   400\tl400"
    assert sh("nl -ba a.py | sed -n '100,400p'", mini_long(numbered_head, numbered_tail)) == [
        FileLines("/testbed/a.py", ((100, 102), (399, 400)))
    ]
    # a cut grep without numbers: some lines
    assert sh("grep -A 400 def a.py", mini_long("def f", "x")) == [FileLines("/testbed/a.py", ())]


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("cat a.py | wc -l", "30\n"),
        ("cat a.py | cut -c1-10", "line 1\n"),
        ("cat a.py | sed 's/x/y/'", "line 1\n"),
        ("cat a.py | sort | uniq -c", "  1 line 1\n"),
        ("awk '{print $1}' a.py", "line\n"),
        ("python -c 'import a'", ""),
        ("cat a.py | head -5 > out.txt", ""),
    ],
)
def test_what_transforms_lines_is_not_a_view(command: str, output: str) -> None:
    assert sh(command, mini(output)) == []


def test_a_line_numbered_zero_is_not_a_line() -> None:
    # "src/a.py:0: x" once made every later request of the session fail
    assert sh("grep -rn x src", mini("src/a.py:0: x\n")) == [
        Listing(("/testbed/src/a.py",)),
        FileLines("/testbed/src/a.py", ()),
    ]
    assert sh("grep -n x a.py", mini("0: x\n")) == [FileLines("/testbed/a.py", ())]
