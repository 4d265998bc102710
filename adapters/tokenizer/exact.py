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
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
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

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` encoded as ordinary text (no special tokens)."""
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
