"""The encodings we can count exactly, and where their rank tables live on this machine.

The pattern, special tokens and SHA-256 of each encoding are copied from tiktoken 0.14.0's own
``tiktoken_ext/openai_public.py`` (``o200k_base()`` and ``cl100k_base()``); the test suite checks
them against that module's constructors, run offline over the installed rank file. We do not call
those constructors at run time because they fetch the rank file from the network when it is not in
tiktoken's cache.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs
from pyrsistent import pmap

from selfctx.domain.errors import InvalidInput

DATA_DIR_ENV = "SELFCTX_TIKTOKEN_DIR"
"""Environment variable naming the directory that holds ``<encoding>.tiktoken`` rank files."""


def _frozen(tokens: Mapping[str, int]) -> Mapping[str, int]:
    return pmap(tokens)  # hashable, so specs can be set members and dict keys


@attrs.frozen
class EncodingSpec:
    """Everything needed to build a tiktoken encoding from its rank file, and to verify the file."""

    name: str
    """tiktoken's name for the encoding, which is also the rank file's stem."""
    sha256: str
    """SHA-256 of the rank file as tiktoken publishes it (``expected_hash`` in openai_public)."""
    size: int
    """Size of the rank file in bytes; lets a truncated file be rejected without hashing it."""
    n_ranks: int
    """Number of mergeable ranks (lines) in the rank file."""
    pat_str: str
    """The pre-tokenisation regular expression."""
    special_tokens: Mapping[str, int] = attrs.field(converter=_frozen)
    """Special tokens and their ids. Counting never emits them, but tiktoken needs them to size
    its vocabulary."""

    @property
    def file_name(self) -> str:
        """Name of the rank file, ``<name>.tiktoken``."""
        return f"{self.name}.tiktoken"


_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

O200K_BASE = EncodingSpec(
    name="o200k_base",
    sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    size=3_613_922,
    n_ranks=199_998,
    pat_str="|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
    special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
)
"""The encoding of GPT-4o and later OpenAI models; the default."""

CL100K_BASE = EncodingSpec(
    name="cl100k_base",
    sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    size=1_681_126,
    n_ranks=100_256,
    pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
    special_tokens={
        _ENDOFTEXT: 100257,
        _FIM_PREFIX: 100258,
        _FIM_MIDDLE: 100259,
        _FIM_SUFFIX: 100260,
        _ENDOFPROMPT: 100276,
    },
)
"""The encoding of GPT-4 and GPT-3.5-turbo."""

ENCODINGS: Mapping[str, EncodingSpec] = {spec.name: spec for spec in (O200K_BASE, CL100K_BASE)}
"""The encodings this project can install and count exactly, by name; the first is the default."""


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The directory holding the rank files.

    The ``tokenizer.dir`` setting (``$SELFCTX_TIKTOKEN_DIR`` or the configuration file) when set,
    else ``$XDG_CACHE_HOME/self-context-manager/tiktoken``, else
    ``~/.cache/self-context-manager/tiktoken``.
    """
    from selfctx.adapters.config import load_config

    env = os.environ if environ is None else environ
    configured = load_config(environ=env).get("tokenizer.dir")
    if configured:
        return Path(configured).expanduser()
    cache_home = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache_home) / "self-context-manager" / "tiktoken"


def spec_for(name: str) -> EncodingSpec:
    """The spec of encoding ``name``; :class:`InvalidInput` names the known ones."""
    try:
        return ENCODINGS[name]
    except KeyError:
        raise InvalidInput("encoding", name, f"known: {', '.join(ENCODINGS)}") from None
