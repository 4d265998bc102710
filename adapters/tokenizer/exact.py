"""The exact tokenizer: tiktoken, built from a rank file installed on this machine.

The rank file is read from disk and checked against tiktoken's published SHA-256 before use; the
encoding is built with ``tiktoken.Encoding`` from the spec in :mod:`.encodings`, so nothing here
ever touches the network (``tiktoken.get_encoding`` would download a missing file).

Two details matter for replays that count millions of characters:

* Counts of long strings are memoised by a BLAKE2b digest of their UTF-8 bytes (bounded LRU), so
  re-rendering the same tool output on every model call costs a hash, not a re-encode. Digests,
  not the strings, are kept, so the cache never holds large texts alive.
* tiktoken's Rust regex engine gives up on very long runs of whitespace (a panic, observed from a
  few hundred thousand characters up). Texts holding such a run are split with tiktoken's own
  pure-Python path (the ``regex`` module with the same pattern, then byte-pair encoding of each
  piece), which yields the same tokens; a panic on any other text takes the same path.
* A long text is counted piece by piece (:func:`pieces`), each piece memoised on its own: a tool
  output shown once as ``[#3]`` and its output, once as the output alone, is encoded once, and a
  long run without a break (a megabyte of ``x``, of base64), which tiktoken's byte-pair merge
  handles in more than linear time, is encoded in bounded pieces. Pieces end after a line break
  followed by a non-blank character, or before a space followed by a letter — where tiktoken's
  pre-tokenizer splits the whole text too, so the sum is the whole text's count — and only a run
  with neither for :data:`MAX_PIECE_CHARS` is cut anywhere (a token or so per cut).
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from selfctx.application.ports.tokenizer import Tokenizer

from .encodings import O200K_BASE, EncodingSpec, data_dir, spec_for
from .errors import INSTALL_HINT, TokenizerDataCorrupt, TokenizerDataMissing

if TYPE_CHECKING:
    import tiktoken

CACHE_MIN_CHARS = 256
"""Shorter strings are counted directly: encoding them costs about as much as a cache lookup."""

LONG_WHITESPACE_RUN = 32_768
"""Texts with a whitespace run this long go through the pure-Python splitter. tiktoken 0.14
handled runs of 200,000 characters and panicked at 1,000,000; the margin costs nothing on ordinary
text."""

_STRIDE = LONG_WHITESPACE_RUN // 2

PIECE_CHARS = 4_096
"""Texts longer than this are counted in pieces of about this many characters or more."""
MAX_PIECE_CHARS = 8_192
"""Longest piece: a text with no clean break in this many characters is cut there."""

_LINE_START = re.compile(r"\n(?=[^\s])")
_WORD_START = re.compile(r"(?<=\S) (?=[^\W\d_])")


def pieces(text: str) -> Iterator[str]:
    """``text`` in consecutive pieces of :data:`PIECE_CHARS` to :data:`MAX_PIECE_CHARS`
    characters (the last may be shorter), cut where tiktoken's pre-tokenizer splits anyway: after
    a line break followed by a non-blank character, else before a single space followed by a
    letter, else (a run with neither) anywhere."""
    start, end = 0, len(text)
    while end - start > MAX_PIECE_CHARS:
        low, high = start + PIECE_CHARS, start + MAX_PIECE_CHARS
        found = _LINE_START.search(text, low, high + 1)
        if found is not None:
            cut = found.end()
        else:
            word = _WORD_START.search(text, low, high)
            cut = word.start() if word is not None else high
        yield text[start:cut]
        start = cut
    yield text[start:]


def has_long_whitespace_run(text: str) -> bool:
    """True if ``text`` holds a whitespace run of :data:`LONG_WHITESPACE_RUN` characters or more
    (and for some runs half as long). Looks at one character in every 16,384, so it costs nothing
    measurable: a run that long covers two consecutive sampled positions and everything between,
    which is then checked in full."""
    previous = False
    for i in range(0, len(text), _STRIDE):
        current = text[i].isspace()
        if current and previous and text[i - _STRIDE : i + 1].isspace():
            return True
        previous = current
    return False


def _import_tiktoken(encoding: str) -> ModuleType:
    try:
        import tiktoken
    except ImportError as exc:
        raise TokenizerDataMissing(
            encoding, "tiktoken is not installed; pip install 'self-context-manager[tokens]'"
        ) from exc
    return tiktoken


def read_rank_file(path: Path, spec: EncodingSpec) -> bytes:
    """Return the bytes of ``path`` after checking its size and SHA-256 against ``spec``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TokenizerDataMissing(
            spec.name, f"no rank file; {INSTALL_HINT}", path=str(path)
        ) from None
    except OSError as exc:
        raise TokenizerDataCorrupt(
            spec.name, f"cannot read the rank file: {exc.strerror}", path=str(path)
        ) from exc
    if len(data) != spec.size:
        raise TokenizerDataCorrupt(
            spec.name, f"{len(data)} bytes, expected {spec.size}; {INSTALL_HINT}", path=str(path)
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise TokenizerDataCorrupt(
            spec.name, f"sha256 {digest}, expected {spec.sha256}; {INSTALL_HINT}", path=str(path)
        )
    return data


def parse_rank_file(data: bytes) -> dict[bytes, int]:
    """Parse tiktoken's rank-file format: one ``<base64 token> <rank>`` per line."""
    import base64

    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def build_encoding(data: bytes, spec: EncodingSpec) -> tiktoken.Encoding:
    """Build the tiktoken encoding of ``spec`` from verified rank-file bytes."""
    encoding: tiktoken.Encoding = _import_tiktoken(spec.name).Encoding(
        name=spec.name,
        pat_str=spec.pat_str,
        mergeable_ranks=parse_rank_file(data),
        special_tokens=dict(spec.special_tokens),
    )
    return encoding


class TiktokenTokenizer(Tokenizer):
    """Exact token counts with a tiktoken encoding, named ``"tiktoken:<encoding>"``.

    Build one with :meth:`installed` (the rank file in the data directory) or :meth:`from_file`.
    Safe to share between threads.
    """

    def __init__(self, encoding: tiktoken.Encoding, *, cache_entries: int = 16_384) -> None:
        """Wrap ``encoding``; ``cache_entries`` bounds the memo of long strings (0 disables it)."""
        self.name = f"tiktoken:{encoding.name}"
        self.encoding = encoding
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._cache_entries = cache_entries
        self._lock = threading.Lock()
        self.encoded_chars = 0
        """Characters handed to the encoder so far (memo hits cost none): the work counting
        did, which benchmarks report and tests bound."""

    @classmethod
    def from_file(
        cls, path: Path, spec: EncodingSpec = O200K_BASE, *, cache_entries: int = 16_384
    ) -> TiktokenTokenizer:
        """Verify the rank file at ``path`` against ``spec`` and build the tokenizer from it."""
        return cls(build_encoding(read_rank_file(path, spec), spec), cache_entries=cache_entries)

    @classmethod
    def installed(
        cls, encoding: str = O200K_BASE.name, directory: Path | None = None
    ) -> TiktokenTokenizer:
        """The tokenizer for ``encoding`` from the data directory (see ``data_dir()``).

        Loading takes a few tenths of a second, so the result is shared per file: repeated calls
        return the same instance while the file is unchanged.
        """
        spec = spec_for(encoding)
        _import_tiktoken(spec.name)
        path = (directory if directory is not None else data_dir()) / spec.file_name
        try:
            stat = path.stat()
        except FileNotFoundError:
            raise TokenizerDataMissing(
                spec.name, f"no rank file; {INSTALL_HINT}", path=str(path)
            ) from None
        return _shared(str(path.resolve()), spec.name, stat.st_size, stat.st_mtime_ns)

    def bound_memo(self, entries: int) -> None:
        with self._lock:
            self._cache_entries = max(0, min(self._cache_entries, entries))
            while len(self._cache) > self._cache_entries:
                self._cache.popitem(last=False)

    @property
    def memo_entries(self) -> int:
        return len(self._cache)

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` encoded as ordinary text (no special tokens)."""
        if len(text) > MAX_PIECE_CHARS and not has_long_whitespace_run(text):
            return sum(self._memoised(piece) for piece in pieces(text))
        return self._memoised(text)

    def _memoised(self, text: str) -> int:
        if len(text) < CACHE_MIN_CHARS or self._cache_entries <= 0:
            return self._count(text)
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        n = self._count(text)
        with self._lock:
            self._cache[key] = n
            if len(self._cache) > self._cache_entries:
                self._cache.popitem(last=False)
        return n

    def _count(self, text: str) -> int:
        self.encoded_chars += len(text)
        if len(text) > _STRIDE and has_long_whitespace_run(text):
            return self._count_by_pieces(text)
        try:
            return len(self.encoding.encode_ordinary(text))
        except BaseException as exc:
            # pyo3 turns a Rust panic into PanicException, a BaseException from a module that
            # cannot be imported by name; anything else (KeyboardInterrupt...) propagates.
            if type(exc).__name__ != "PanicException":
                raise
            return self._count_by_pieces(text)

    def _count_by_pieces(self, text: str) -> int:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # The same repair encode_ordinary applies: lone surrogates become U+FFFD.
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return len(self.encoding._encode_only_native_bpe(text))

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.encoding.name!r})"


@functools.lru_cache(maxsize=4)
def _shared(path: str, encoding: str, size: int, mtime_ns: int) -> TiktokenTokenizer:
    # size and mtime_ns are part of the key so that a re-installed file is loaded afresh.
    del size, mtime_ns
    return TiktokenTokenizer.from_file(Path(path), spec_for(encoding))
