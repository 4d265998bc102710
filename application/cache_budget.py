"""One byte budget for every cache an open session keeps, split among them (decision 0169).

A session's caches are each bounded (content by characters, the others by entries); what one of
them holds is measured as it is put in: the content's characters (one byte each in the ASCII
text most outputs are; ``files.content_budget``), and a fixed size an entry for the caches whose
entries are all alike (measured with ``tracemalloc``: ``tests/test_cache_budget.py``). The
default total is what the bounds chosen one by one before (decisions 0065, 0086, 0111, 0117,
0157) hold together, so the default changes nothing; a smaller total shrinks every one of them
in the same proportion.
"""

from __future__ import annotations

import functools
from typing import Final

import attrs

from selfctx.application.objects import CONTENT_BUDGET, METADATA_BUDGET
from selfctx.application.tokens import TEXT_ENTRIES
from selfctx.domain.relevance import KNOWN_NAMES

__all__ = ["CACHE_BUDGET", "ENTRY_BYTES", "CacheShares", "cache_shares"]

RENDERING_MESSAGES: Final = 1_024
"""Chat messages whose rendering a request cache keeps by default (decision 0117)."""

TOKENIZER_ENTRIES: Final = 16_384
"""Long texts whose token counts the exact tokenizer remembers by default (decision 0086)."""

ENTRY_BYTES: Final = {
    "token_counts": 172,
    "tokenizer_memo": 175,
    "known_names": 100,
    "metadata": 700,
    "renderings": 1_000,
}
"""Bytes one entry of each entry-bounded cache holds (``tracemalloc``, 4,000 entries): a
remembered token count (an ``OrderedDict`` slot, its integer key and count), a tokenizer memo
entry (a 16-byte digest and a count), a known identifier (a set slot and the string of an
identifier of about 16 characters), a hollow tool call's metadata (decision 0111: 256 of them
about 180 KB), a message's rendering (its item's values or text beside the ones the request
cache keeps anyway; an average, not measured a message)."""

_DEFAULT_BYTES: Final = {
    "content": CONTENT_BUDGET,
    "token_counts": TEXT_ENTRIES * ENTRY_BYTES["token_counts"],
    "tokenizer_memo": TOKENIZER_ENTRIES * ENTRY_BYTES["tokenizer_memo"],
    "known_names": 2 * KNOWN_NAMES * ENTRY_BYTES["known_names"],
    "metadata": METADATA_BUDGET * ENTRY_BYTES["metadata"],
    "renderings": RENDERING_MESSAGES * ENTRY_BYTES["renderings"],
}

CACHE_BUDGET: Final = sum(_DEFAULT_BYTES.values())
"""Bytes of the caches of one open session by default (about 12.5 MB): the sum of the bounds
each cache had before there was one budget, so that the default changes none of them."""

SPLIT: Final = {name: size / CACHE_BUDGET for name, size in _DEFAULT_BYTES.items()}
"""Each cache's part of the total: content 32%, remembered token counts 22%, the tokenizer's
memo 23%, known identifiers 13%, renderings 8%, hollow calls' metadata 1.4%."""


@attrs.frozen
class CacheShares:
    """The bounds a total gives each cache."""

    total: int
    content_chars: int
    """Characters of content the object cache keeps (``ObjectCache.budget``)."""
    metadata_calls: int
    """Hollow tool calls whose metadata stays in memory (``ObjectCache.metadata_budget``)."""
    token_counts: int
    """Texts whose token counts a session remembers (``TokenCounts.entries``)."""
    tokenizer_memo: int
    """Long texts whose token counts the tokenizer remembers (the process's, shared)."""
    known_names: int
    """Identifiers in each of relevance's two generations (``KnownNames.limit``)."""
    renderings: int
    """Messages whose provider rendering a request cache keeps (``rendering_budget``)."""


@functools.lru_cache(maxsize=8)
def cache_shares(total: int = CACHE_BUDGET) -> CacheShares:
    """What ``total`` bytes give each cache (at least one entry each; 0 content is allowed)."""
    if total == CACHE_BUDGET:  # the bounds as they were chosen, exactly
        return CacheShares(
            total, CONTENT_BUDGET, METADATA_BUDGET, TEXT_ENTRIES, TOKENIZER_ENTRIES,
            KNOWN_NAMES, RENDERING_MESSAGES,
        )  # fmt: skip

    def share(name: str) -> int:
        return int(total * SPLIT[name])

    def entries(name: str) -> int:
        return max(1, share(name) // ENTRY_BYTES[name])

    return CacheShares(
        total=total,
        content_chars=share("content"),
        metadata_calls=entries("metadata"),
        token_counts=entries("token_counts"),
        tokenizer_memo=entries("tokenizer_memo"),
        known_names=max(1, share("known_names") // 2 // ENTRY_BYTES["known_names"]),
        renderings=entries("renderings"),
    )
