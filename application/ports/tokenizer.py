"""The tokenizer port: how many tokens a model would be sent for a piece of text.

Budgets, layout policies and the context benchmark all measure prompts in tokens. Two adapters
implement this port (``selfctx.adapters.tokenizer``): an exact one built on tiktoken's published
rank tables, and a documented estimate used when those tables are not installed. Every figure the
project prints carries the :attr:`Tokenizer.name` of the tokenizer that produced it, so an
estimate is never mistaken for an exact count.
"""

from __future__ import annotations

import abc

from selfctx.domain.errors import SelfContextError


class Tokenizer(abc.ABC):
    """Counts tokens in text. Implementations are pure functions of their text: no I/O per call."""

    name: str
    """Which tokenizer this is, stable across runs: ``"tiktoken:o200k_base"`` for an exact count
    with that encoding, ``"estimate:<rule>"`` for an estimate (for example
    ``"estimate:utf8-bytes/4"``). Reports print it beside every figure."""

    @property
    def exact(self) -> bool:
        """Whether :meth:`count` returns the model's real token count rather than an estimate."""
        return not self.name.startswith("estimate:")

    def bound_memo(self, entries: int) -> None:
        """Remember the counts of at most ``entries`` texts from now on, if this tokenizer
        remembers any (a memo shared by several services keeps the least bound any gave it;
        decision 0169). A tokenizer without a memo ignores it."""
        del entries

    @property
    def memo_entries(self) -> int:
        """Texts whose counts the tokenizer remembers now (0 without a memo)."""
        return 0

    @abc.abstractmethod
    def count(self, text: str) -> int:
        """Return the number of tokens ``text`` encodes to, as ordinary text.

        Strings that look like special tokens (``<|endoftext|>``) are counted as the plain text
        they are, the way a provider encodes message content. Counting never fails for any
        ``str`` (including lone surrogates) and the empty string counts 0. Counts of two texts
        need not add up to the count of their concatenation.
        """


class TokenizerError(SelfContextError):
    """The data an exact tokenizer needs could not be installed or loaded.

    Carries the encoding's name, the path involved (empty when none) and the reason.
    """

    kind = "tokenizer_error"

    def __init__(self, encoding: str, reason: str, *, path: str = "") -> None:
        self.encoding = encoding
        self.reason = reason
        self.path = path
        where = f" at {path}" if path else ""
        super().__init__(f"tokenizer data for {encoding!r}{where}: {reason}")
