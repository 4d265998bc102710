"""The tokenizer port, its two adapters, the fallback rule and the rank-file installer.

Exact counts need the rank files. The ``rank_dir`` fixture runs the real installer on the data
directory, which is a no-op when the project's set-up (``selfctx tokenizer install``) already
ran; where no registry client can fetch them, the exact tests are skipped with the reason.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest

import selfctx.adapters.tokenizer as tk
from selfctx.adapters.cli import tokenizer_cmd
from selfctx.adapters.tokenizer import (
    CL100K_BASE,
    DATA_DIR_ENV,
    O200K_BASE,
    EncodingSpec,
    EstimateTokenizer,
    RankSource,
    SourceFailed,
    TiktokenTokenizer,
    TokenizerDataCorrupt,
    TokenizerDataMissing,
    TokenizerInstallFailed,
    default_tokenizer,
    install,
    npm_ranks_to_tiktoken,
)
from selfctx.adapters.tokenizer.exact import LONG_WHITESPACE_RUN, has_long_whitespace_run
from selfctx.application.ports.tokenizer import Tokenizer, TokenizerError
from selfctx.domain.errors import SelfContextError

# Counts by js-tiktoken 1.0.21 (npm, pure JavaScript: its own regex and BPE), run with node 20:
# `getEncoding(name).encode(text, [], []).length`. An implementation independent of tiktoken's
# Rust core, so agreement checks our rank files, pattern and special-token handling together.
KNOWN = [
    # (text, o200k_base, cl100k_base)
    ("", 0, 0),
    ("hello world", 2, 2),
    ("Hello, world! I'm here; we've seen they'll DON'T", 11, 15),
    ("def add(a, b):\n    return a + b\n\n\nprint(add(2, 40))\n", 20, 20),
    ("    indented\t\ttabs   and   spaces   \n\n\r\n", 12, 12),
    ("naïve café — “quotes” and ümlauts", 12, 13),
    ("日本語のテキストと中文文本。", 10, 14),
    ("emoji 👩\u200d💻🚀 and flags 🇳🇱", 14, 18),
    ("numbers 1234567890 3.14159 1e-9 0xDEADBEEF", 22, 22),
    ("<|endoftext|> is plain text here", 11, 11),
    ("path/to/some/file.py:123: error: Incompatible types in assignment", 16, 16),
    ("CamelCaseIdentifier snake_case_identifier SCREAMING_CASE", 10, 11),
    ("Привет, мир! Это тест.", 8, 12),
    ("مرحبا بالعالم", 4, 10),
    ("a\u0301e\u0301 combining marks", 6, 6),
    ("\u0000\u0001\u001f control chars", 5, 5),
]

# Whitespace runs long enough to make tiktoken's Rust regex panic, counted through the
# pure-Python splitter. Expected counts by JTokkit 1.1.0 (Maven Central, Java: its own regex and
# BPE), `countTokensOrdinary`, run with Java 17 and -Xss64m.
LONG_RUNS = [
    # (text, o200k_base, cl100k_base)
    (" " * 1_000_000, 7813, 7813),
    ("x" + " " * 1_000_000 + "x", 7815, 7815),
    ("\t" * 1_000_000 + "x", 62501, 62501),
    ("def f():\n" + " " * 300_000 + "\n\n" + "\t" * 50_000 + "return 1\n", 5478, 5478),
]


@pytest.fixture(scope="session")
def rank_dir() -> Path:
    """The data directory with both rank files installed and verified."""
    try:
        install()
    except TokenizerInstallFailed as exc:
        pytest.skip(f"rank files not installed and not fetchable here: {exc}")
    return tk.data_dir()


@pytest.fixture(scope="session")
def o200k(rank_dir: Path) -> TiktokenTokenizer:
    return TiktokenTokenizer.installed("o200k_base", rank_dir)


@pytest.fixture(scope="session")
def cl100k(rank_dir: Path) -> TiktokenTokenizer:
    return TiktokenTokenizer.installed("cl100k_base", rank_dir)


# -- Behaviour every Tokenizer has ----------------------------------------------------------------


class TokenizerBehaviour:
    """What any implementation of the port must do; subclasses provide ``make_tokenizer``."""

    def make_tokenizer(self) -> Tokenizer:
        raise NotImplementedError

    def test_is_a_tokenizer_with_a_name(self) -> None:
        tokenizer = self.make_tokenizer()
        assert isinstance(tokenizer, Tokenizer)
        assert tokenizer.name.split(":", 1)[0] in {"tiktoken", "estimate"}
        assert tokenizer.exact == (not tokenizer.name.startswith("estimate:"))

    def test_empty_text_counts_zero(self) -> None:
        assert self.make_tokenizer().count("") == 0

    @pytest.mark.parametrize(
        "text",
        [
            "a",
            "hello world",
            "<|endoftext|>",
            "<|endofprompt|>",
            "\ud800 lone surrogate",
            "é" * 300,
        ],
    )
    def test_any_text_counts_positive_and_repeatably(self, text: str) -> None:
        tokenizer = self.make_tokenizer()
        first = tokenizer.count(text)
        assert isinstance(first, int) and first > 0
        assert tokenizer.count(text) == first

    def test_long_repeated_text_is_counted_consistently(self) -> None:
        tokenizer = self.make_tokenizer()
        texts = [f"line {i}: " + "x = compute(y) " * 40 for i in range(50)]
        first = [tokenizer.count(t) for t in texts]
        assert [tokenizer.count(t) for t in texts] == first


class TestEstimateBehaviour(TokenizerBehaviour):
    def make_tokenizer(self) -> Tokenizer:
        return EstimateTokenizer()


class TestTiktokenBehaviour(TokenizerBehaviour):
    @pytest.fixture(autouse=True)
    def _exact(self, o200k: TiktokenTokenizer) -> None:
        self._tokenizer = o200k

    def make_tokenizer(self) -> Tokenizer:
        return self._tokenizer


# -- The estimate ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("abc", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("é", 1),  # 2 bytes
        ("日本語", 3),  # 9 bytes
        ("日本語のテキスト", 6),  # 24 bytes; chars/4 would say 2
        ("\ud800", 1),  # 3 bytes with surrogatepass
        ("x" * 4001, 1001),
    ],
)
def test_estimate_is_utf8_bytes_over_four_rounded_up(text: str, expected: int) -> None:
    assert EstimateTokenizer().count(text) == expected


def test_estimate_says_it_is_an_estimate() -> None:
    tokenizer = EstimateTokenizer()
    assert tokenizer.name == "estimate:utf8-bytes/4"
    assert not tokenizer.exact


# -- Exact counts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "o200k_count", "cl100k_count"), KNOWN)
def test_exact_counts_match_an_independent_implementation(
    o200k: TiktokenTokenizer,
    cl100k: TiktokenTokenizer,
    text: str,
    o200k_count: int,
    cl100k_count: int,
) -> None:
    assert o200k.count(text) == o200k_count
    assert cl100k.count(text) == cl100k_count


def test_exact_tokenizers_are_named_after_their_encoding(
    o200k: TiktokenTokenizer, cl100k: TiktokenTokenizer
) -> None:
    assert (o200k.name, o200k.exact) == ("tiktoken:o200k_base", True)
    assert cl100k.name == "tiktoken:cl100k_base"


def test_specs_equal_tiktokens_own_constructors(
    rank_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our pattern, special tokens and hash are tiktoken's: run ``openai_public``'s constructors
    offline, over the installed files placed in tiktoken's cache under its own key."""
    import tiktoken.load
    from tiktoken_ext import openai_public

    def no_network(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken tried to fetch {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    for spec in (O200K_BASE, CL100K_BASE):
        url = f"https://openaipublic.blob.core.windows.net/encodings/{spec.file_name}"
        data = (rank_dir / spec.file_name).read_bytes()
        (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(data)
        theirs = getattr(openai_public, spec.name)()
        assert theirs["pat_str"] == spec.pat_str
        assert theirs["special_tokens"] == dict(spec.special_tokens)
        assert theirs["mergeable_ranks"] == tk.exact.parse_rank_file(data)
        assert len(theirs["mergeable_ranks"]) == spec.n_ranks
        assert hashlib.sha256(data).hexdigest() == spec.sha256


@pytest.mark.parametrize(("text", "o200k_count", "cl100k_count"), LONG_RUNS)
def test_long_whitespace_runs_are_counted_without_a_panic(
    o200k: TiktokenTokenizer,
    cl100k: TiktokenTokenizer,
    text: str,
    o200k_count: int,
    cl100k_count: int,
) -> None:
    assert has_long_whitespace_run(text)
    assert o200k.count(text) == o200k_count
    assert cl100k.count(text) == cl100k_count


def test_pure_python_splitting_gives_the_same_counts(o200k: TiktokenTokenizer) -> None:
    texts = [t for t, _, _ in KNOWN] + [
        "x" + " " * (LONG_WHITESPACE_RUN // 2) + "y\n" * 100,
        "\r\n".join(f"    {i} = [{', '.join(map(str, range(i)))}]" for i in range(200)),
        "trailing spaces   ",
        "\ud800 lone surrogate",
    ]
    for text in texts:
        assert o200k._count_by_pieces(text) == o200k._count(text), text[:40]


def test_long_whitespace_detection() -> None:
    assert not has_long_whitespace_run("")
    assert not has_long_whitespace_run("a" * 100_000)
    assert not has_long_whitespace_run(" " * (LONG_WHITESPACE_RUN // 2))
    assert not has_long_whitespace_run("word " * 20_000)
    assert has_long_whitespace_run(" " * LONG_WHITESPACE_RUN)
    assert has_long_whitespace_run("code" * 5000 + "\n" * LONG_WHITESPACE_RUN + "more")


def test_the_memo_of_long_strings_is_bounded(rank_dir: Path) -> None:
    shared = TiktokenTokenizer.installed("o200k_base", rank_dir)
    tokenizer = TiktokenTokenizer(shared.encoding, cache_entries=2)
    texts = [f"{i} " + "lorem ipsum dolor " * 50 for i in range(3)]
    counts = [tokenizer.count(t) for t in texts]
    assert len(tokenizer._cache) == 2
    assert [tokenizer.count(t) for t in texts] == counts
    assert counts == [shared.count(t) for t in texts]


def test_installed_tokenizers_are_shared_per_file(rank_dir: Path) -> None:
    assert TiktokenTokenizer.installed("o200k_base", rank_dir) is TiktokenTokenizer.installed(
        "o200k_base", rank_dir
    )


# -- Choosing the tokenizer -----------------------------------------------------------------------


def test_default_is_exact_when_the_data_is_installed(rank_dir: Path) -> None:
    assert default_tokenizer(directory=rank_dir).name == "tiktoken:o200k_base"
    assert default_tokenizer("cl100k_base", directory=rank_dir).name == "tiktoken:cl100k_base"


def test_default_falls_back_to_the_estimate_when_the_env_points_to_an_empty_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert tk.data_dir() == tmp_path
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokenizer = default_tokenizer()
    assert isinstance(tokenizer, EstimateTokenizer)
    with pytest.raises(TokenizerDataMissing) as caught:
        TiktokenTokenizer.installed()
    assert caught.value.kind == "tokenizer_data_missing"
    assert "selfctx tokenizer install" in str(caught.value)


def test_default_falls_back_to_the_estimate_without_tiktoken(
    rank_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes `import tiktoken` fail
    assert isinstance(default_tokenizer(directory=rank_dir), EstimateTokenizer)
    with pytest.raises(TokenizerDataMissing, match=r"self-context-manager\[tokens\]"):
        TiktokenTokenizer.installed(directory=rank_dir)


def test_default_warns_and_falls_back_when_the_file_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / O200K_BASE.file_name).write_bytes(b"IQ== 0\n")
    with pytest.warns(RuntimeWarning, match="tokenizer install"):
        tokenizer = default_tokenizer(directory=tmp_path)
    assert isinstance(tokenizer, EstimateTokenizer)
    with pytest.raises(TokenizerDataCorrupt) as caught:
        TiktokenTokenizer.from_file(tmp_path / O200K_BASE.file_name)
    assert isinstance(caught.value, TokenizerError)
    assert isinstance(caught.value, SelfContextError)
    assert caught.value.path == str(tmp_path / O200K_BASE.file_name)


def test_data_dir_follows_the_environment() -> None:
    assert tk.data_dir({DATA_DIR_ENV: "/srv/ranks"}) == Path("/srv/ranks")
    assert tk.data_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/self-context-manager/tiktoken")
    assert tk.data_dir({}).parts[-3:] == (".cache", "self-context-manager", "tiktoken")


# -- The installer --------------------------------------------------------------------------------

TOY_DATA = b"IQ== 0\nIg== 1\n"
TOY = EncodingSpec(
    name="toy",
    sha256=hashlib.sha256(TOY_DATA).hexdigest(),
    size=len(TOY_DATA),
    n_ranks=2,
    pat_str=r"\S+|\s+",
    special_tokens={},
)


class FakeSource(RankSource):
    """Delivers fixed bytes and records how often it was asked."""

    def __init__(self, data: bytes | None, label: str = "fake") -> None:
        self.data = data
        self._label = label
        self.calls = 0

    @property
    def label(self) -> str:
        return self._label

    def fetch(self, specs: Sequence[EncodingSpec], workdir: Path) -> dict[str, bytes]:
        self.calls += 1
        assert workdir.is_dir()
        if self.data is None:
            raise SourceFailed("registry unreachable")
        return {spec.name: self.data for spec in specs}


def test_install_is_idempotent(tmp_path: Path) -> None:
    source = FakeSource(TOY_DATA)
    first = install([TOY], directory=tmp_path, sources=[source])
    assert [(r.encoding, r.action, r.source) for r in first] == [("toy", "installed", "fake")]
    assert (tmp_path / "toy.tiktoken").read_bytes() == TOY_DATA
    stamp = (tmp_path / "toy.tiktoken").stat().st_mtime_ns

    second = install([TOY], directory=tmp_path, sources=[source])
    assert [(r.action, r.source) for r in second] == [("present", "")]
    assert source.calls == 1
    assert (tmp_path / "toy.tiktoken").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.tiktoken"]


def test_install_skips_sources_that_fail_or_deliver_the_wrong_bytes(tmp_path: Path) -> None:
    broken, wrong, good = FakeSource(None, "a"), FakeSource(b"IQ== 1\n", "b"), FakeSource(TOY_DATA)
    done = install([TOY], directory=tmp_path, sources=[broken, wrong, good])
    assert [(r.action, r.source) for r in done] == [("installed", "fake")]
    assert (broken.calls, wrong.calls, good.calls) == (1, 1, 1)


def test_install_fails_clearly_and_writes_nothing_when_no_source_delivers(tmp_path: Path) -> None:
    with pytest.raises(TokenizerInstallFailed) as caught:
        install([TOY], directory=tmp_path, sources=[FakeSource(None, "a"), FakeSource(b"x", "b")])
    error = caught.value
    assert error.kind == "tokenizer_install_failed"
    assert error.attempts[0] == "a: registry unreachable"
    assert error.attempts[1].startswith("b: toy has sha256 ")
    assert TOY.sha256 in error.attempts[1]
    assert "a: registry unreachable" in str(error)
    assert list(tmp_path.iterdir()) == []


def test_install_replaces_a_corrupt_file(tmp_path: Path) -> None:
    (tmp_path / "toy.tiktoken").write_bytes(b"garbage")
    done = install([TOY], directory=tmp_path, sources=[FakeSource(TOY_DATA)])
    assert done[0].action == "replaced"
    assert (tmp_path / "toy.tiktoken").read_bytes() == TOY_DATA


def test_a_missing_client_is_reported_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for source, client in ((tk.MavenJar(), "mvn"), (tk.NpmTarball(), "npm")):
        with pytest.raises(SourceFailed, match=f"`{client}` is not on PATH"):
            source.fetch([O200K_BASE], tmp_path)


def test_npm_ranks_expand_to_the_tiktoken_format() -> None:
    assert npm_ranks_to_tiktoken("! 0 IQ== Ig==\n! 5 Iw==\n") == b"IQ== 0\nIg== 1\nIw== 5\n"
    assert npm_ranks_to_tiktoken("") == b""


def test_real_install_a_second_time_is_a_no_op(rank_dir: Path) -> None:
    again = install(directory=rank_dir, sources=[FakeSource(None, "must not be asked")])
    assert [r.action for r in again] == ["present", "present"]


@pytest.mark.slow
@pytest.mark.parametrize("source", tk.DEFAULT_SOURCES, ids=lambda s: s.label)
def test_each_registry_delivers_the_published_files(source: RankSource, tmp_path: Path) -> None:
    """Fetches for real with mvn or npm (network to the registry; skipped without the client)."""
    client = "mvn" if isinstance(source, tk.MavenJar) else "npm"
    if not any(
        os.access(Path(d) / client, os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)
    ):
        pytest.skip(f"{client} is not installed")
    done = install(directory=tmp_path, sources=[source])
    assert [(r.action, r.source) for r in done] == [("installed", source.label)] * 2
    for spec in (O200K_BASE, CL100K_BASE):
        assert hashlib.sha256((tmp_path / spec.file_name).read_bytes()).hexdigest() == spec.sha256


# -- The command line -----------------------------------------------------------------------------


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="selfctx")
    tokenizer_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_cli_status_reports_the_estimate_for_an_empty_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_cli(["tokenizer", "status", "--dir", str(tmp_path)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["tokenizer"] == "estimate:utf8-bytes/4"
    assert status["exact"] is False


def test_cli_install_then_count(
    rank_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_cli(["tokenizer", "install", "--dir", str(rank_dir)]) == 0
    out = capsys.readouterr().out
    assert "already installed and verified" in out
    assert "token counts are exact" in out
    sample = tmp_path / "sample.txt"
    sample.write_text("hello world")
    assert _run_cli(["tokenizer", "count", "--dir", str(rank_dir), str(sample)]) == 0
    assert capsys.readouterr().out.split("\t")[::2] == ["2", "tiktoken:o200k_base\n"]


def test_public_api() -> None:
    assert sorted(tk.__all__) == sorted(
        [
            "CL100K_BASE",
            "DATA_DIR_ENV",
            "DEFAULT_SOURCES",
            "ENCODINGS",
            "O200K_BASE",
            "EncodingSpec",
            "EstimateTokenizer",
            "Installed",
            "MavenJar",
            "NpmTarball",
            "RankSource",
            "SourceFailed",
            "TiktokenTokenizer",
            "TokenizerDataCorrupt",
            "TokenizerDataMissing",
            "TokenizerInstallFailed",
            "data_dir",
            "default_tokenizer",
            "install",
            "npm_ranks_to_tiktoken",
        ]
    )
    for name in tk.__all__:
        assert hasattr(tk, name)


def test_cli_install_without_tiktoken_does_not_claim_success(
    rank_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank files alone do not make counts exact: without the tiktoken package (the
    ``tokens`` extra) ``install`` says so and fails, as ``status`` would report ``exact: false``."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tiktoken" else real(name, *a)
    )
    assert _run_cli(["tokenizer", "install", "--dir", str(rank_dir)]) == 1
    captured = capsys.readouterr()
    assert "token counts are exact" not in captured.out
    assert "tiktoken package is not installed" in captured.err
    assert "self-context-manager[tokens]" in captured.err
