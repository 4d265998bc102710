"""The fallback tokenizer: an estimate from the text's UTF-8 length, with no data to install.

Rule: ``ceil(utf8_bytes / 4)``. Byte-level BPE tokenizers such as tiktoken work on UTF-8 bytes and
average about four bytes per token on English prose and code, so the rule is right on average
there. We count bytes rather than characters because the two agree on ASCII, the bulk of agent
traffic, while on other scripts bytes track tokens more closely: a CJK character is three bytes
and usually about one token, which a characters/4 rule would undercount fourfold. The estimate is
still an estimate: code with long identifiers and repeated whitespace encodes to fewer tokens,
digits and punctuation to more; ``docs/tokenizer.md`` reports its error on the trajectories.
"""

from __future__ import annotations

from selfctx.application.ports.tokenizer import Tokenizer


class EstimateTokenizer(Tokenizer):
    """``ceil(len(text.encode("utf-8")) / 4)``, named ``"estimate:utf8-bytes/4"``."""

    name = "estimate:utf8-bytes/4"

    def count(self, text: str) -> int:
        """Return ``ceil(utf8_bytes / 4)``; lone surrogates count as the three bytes Python's
        ``surrogatepass`` handler gives them."""
        # isascii() is O(1) on CPython's compact strings, so ASCII text is never copied.
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        return -(-size // 4)

    def __repr__(self) -> str:
        return "EstimateTokenizer()"
