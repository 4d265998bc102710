"""Choosing the tokenizer: exact when its data is installed, the estimate otherwise."""

from __future__ import annotations

import warnings
from pathlib import Path

from selfctx.application.ports.tokenizer import Tokenizer

from .encodings import O200K_BASE
from .errors import TokenizerDataCorrupt, TokenizerDataMissing
from .estimate import EstimateTokenizer
from .exact import TiktokenTokenizer


def default_tokenizer(
    encoding: str = O200K_BASE.name, *, directory: Path | None = None
) -> Tokenizer:
    """The exact tokenizer for ``encoding`` if tiktoken and its verified rank file are installed,
    else :class:`EstimateTokenizer`. Never touches the network.

    A missing file or a missing tiktoken falls back silently (the returned ``name`` says which
    tokenizer counts); a file that is present but fails verification falls back with a
    ``RuntimeWarning``, because that is a broken set-up someone should fix.
    """
    try:
        return TiktokenTokenizer.installed(encoding, directory)
    except TokenizerDataMissing:
        return EstimateTokenizer()
    except TokenizerDataCorrupt as exc:
        warnings.warn(f"{exc}; counting with the estimate instead", RuntimeWarning, stacklevel=2)
        return EstimateTokenizer()
