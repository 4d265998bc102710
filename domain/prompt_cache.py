"""What a provider's prompt cache bills for a sequence of requests: a pure model, no I/O.

A request is given as the list of **blocks** the provider reads, in its order (Anthropic: tools,
system blocks, then each content block of each message; OpenAI: the same parts as one prefix),
each with a key that changes whenever any byte of it does, its size in tokens, and, for providers
with explicit marks, whether a cache breakpoint follows it. A cache entry is a prefix of blocks;
two prefixes are the same entry when all their keys are equal, in order.

Two kinds of rules:

- **explicit breakpoints** (Anthropic Messages): only a prefix that ends at a breakpoint is
  written to the cache. A request reads the longest prefix that is in the cache, looking at each
  breakpoint and at most ``lookback`` block boundaries before it; it writes every prefix ending
  at one of its breakpoints after that (the tokens between what it read and its last breakpoint
  are billed at ``write``); what follows its last breakpoint is billed at the base price. At most
  ``max_breakpoints`` marks count (the API refuses more).
- **automatic prefix caching** (OpenAI and most others): every request's prefixes are cached;
  a request reads the longest prefix an earlier one had, rounded down to ``granularity`` tokens;
  the rest is billed at ``write`` (the base price, 1.0, where writes cost nothing extra).

Both: a prefix shorter than ``min_tokens`` is never cached; an entry lives ``ttl`` seconds after
it was last written or read. Costs are in base-input-token units (1.0 = one uncached input
token), so ``cost / tokens`` is the request's price relative to no caching at all.

The figures of :data:`ANTHROPIC` and :data:`OPENAI`, and their sources, are in decision 0047
(docs/decisions/).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import attrs

__all__ = [
    "ANTHROPIC",
    "OPENAI",
    "Bill",
    "Block",
    "CacheRules",
    "PromptCache",
    "Request",
    "bill",
    "rules_for",
    "total",
]


@attrs.frozen
class Block:
    """One unit of a prompt as the provider reads it."""

    key: str
    """Changes when any byte of the block (role and position marks included) does."""
    tokens: int
    breakpoint: bool = False
    """An explicit cache mark on this block (the prefix up to and including it is cached)."""


@attrs.frozen
class Request:
    """One model call: its blocks in reading order, and when it was sent (seconds, any origin)."""

    blocks: tuple[Block, ...]
    at: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)


@attrs.frozen
class CacheRules:
    """How one provider caches prompts and bills them."""

    name: str
    explicit: bool
    """Only prefixes that end at a breakpoint are cached (else every prefix is)."""
    read: float
    """Price of a token read from the cache, in base input tokens."""
    write: float
    """Price of a token written to the cache."""
    ttl: float
    """Seconds an entry lives after it was last written or read."""
    min_tokens: int
    """The shortest prefix cached."""
    max_breakpoints: int = 4
    lookback: int = 20
    """Block boundaries before a breakpoint where an earlier entry is looked for."""
    granularity: int = 1
    """A read is rounded down to a multiple of this many tokens (automatic caching)."""


ANTHROPIC = CacheRules(
    "anthropic",
    explicit=True,
    read=0.1,
    write=1.25,
    ttl=300.0,
    min_tokens=1024,
    max_breakpoints=4,
    lookback=20,
)
"""Anthropic Messages with 5-minute entries (Sonnet's minimum of 1,024 tokens)."""

OPENAI = CacheRules(
    "openai",
    explicit=False,
    read=0.1,
    write=1.0,
    ttl=300.0,
    min_tokens=1024,
    granularity=128,
)
"""OpenAI's automatic prefix caching, cached input at 0.1 (the GPT-5 family Codex CLI uses;
0.25 and 0.5 on older models), no write premium."""

_RULES = {"anthropic": ANTHROPIC, "openai": OPENAI, "responses": OPENAI}


def rules_for(api: str) -> CacheRules:
    """The rules of a request format (``anthropic``, ``openai``, ``responses``)."""
    try:
        return _RULES[api]
    except KeyError:
        raise ValueError(f"no caching rules for {api!r}: use one of {sorted(_RULES)}") from None


@attrs.frozen
class Bill:
    """What one request (or a sum of them) is billed for its input."""

    tokens: int = 0
    read: int = 0
    written: int = 0
    uncached: int = 0
    cost: float = 0.0
    """In base input tokens: ``tokens`` without any caching."""

    def __add__(self, other: Bill) -> Bill:
        return Bill(
            self.tokens + other.tokens,
            self.read + other.read,
            self.written + other.written,
            self.uncached + other.uncached,
            self.cost + other.cost,
        )


def _prefixes(blocks: Sequence[Block]) -> tuple[list[str], list[int]]:
    """The key and the tokens of each prefix ``blocks[: i + 1]``."""
    keys, sizes = [], []
    running = hashlib.sha256()
    size = 0
    for block in blocks:
        running.update(block.key.encode("utf-8", "surrogatepass"))
        running.update(b"\x00")
        size += block.tokens
        keys.append(running.copy().hexdigest())
        sizes.append(size)
    return keys, sizes


@attrs.define
class PromptCache:
    """A provider's cache as it fills over one sequence of requests (one cache per key and
    account in reality: give it the requests that would share one)."""

    rules: CacheRules
    entries: dict[str, float] = attrs.field(factory=dict)
    """Prefix key -> when the entry expires."""

    def send(self, request: Request) -> Bill:
        """Bill ``request`` and update the cache as the provider would."""
        self._expire(request.at)
        keys, sizes = _prefixes(request.blocks)
        total_tokens = sizes[-1] if sizes else 0
        if self.rules.explicit:
            return self._explicit(request, keys, sizes, total_tokens)
        return self._automatic(request, keys, sizes, total_tokens)

    def _expire(self, now: float) -> None:
        for key in [k for k, until in self.entries.items() if until <= now]:
            del self.entries[key]

    def _alive(self, key: str) -> bool:
        return key in self.entries

    def _explicit(
        self, request: Request, keys: list[str], sizes: list[int], total_tokens: int
    ) -> Bill:
        rules = self.rules
        marks = [i for i, b in enumerate(request.blocks) if b.breakpoint][: rules.max_breakpoints]
        hit = -1
        for mark in marks:
            for boundary in range(mark, max(mark - rules.lookback, 0) - 1, -1):
                if boundary <= hit:
                    break
                if self._alive(keys[boundary]):
                    hit = boundary
                    break
        read = sizes[hit] if hit >= 0 else 0
        if hit >= 0:
            self.entries[keys[hit]] = request.at + rules.ttl
        written = 0
        for mark in marks:
            if mark > hit and sizes[mark] >= rules.min_tokens:
                self.entries[keys[mark]] = request.at + rules.ttl
                written = sizes[mark] - read
        uncached = total_tokens - read - written
        cost = rules.read * read + rules.write * written + uncached
        return Bill(total_tokens, read, written, uncached, cost)

    def _automatic(
        self, request: Request, keys: list[str], sizes: list[int], total_tokens: int
    ) -> Bill:
        rules = self.rules
        read = 0
        for boundary in range(len(keys) - 1, -1, -1):
            if self._alive(keys[boundary]):
                read = sizes[boundary]
                self.entries[keys[boundary]] = request.at + rules.ttl
                break
        if read < rules.min_tokens:
            read = 0
        read -= read % rules.granularity
        for key, size in zip(keys, sizes, strict=True):
            if size >= rules.min_tokens:
                self.entries[key] = request.at + rules.ttl
        written = total_tokens - read if total_tokens >= rules.min_tokens else 0
        uncached = total_tokens - read - written
        cost = rules.read * read + rules.write * written + uncached
        return Bill(total_tokens, read, written, uncached, cost)


def bill(requests: Iterable[Request], rules: CacheRules) -> list[Bill]:
    """Each request's bill, the requests sent in order to one cache."""
    cache = PromptCache(rules)
    return [cache.send(request) for request in requests]


def total(bills: Iterable[Bill]) -> Bill:
    """The sum of ``bills``."""
    out = Bill()
    for one in bills:
        out = out + one
    return out
