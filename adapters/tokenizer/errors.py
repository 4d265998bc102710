"""Errors of the tokenizer adapters: data missing, data corrupt, installation failed."""

from __future__ import annotations

from collections.abc import Sequence

from selfctx.application.ports.tokenizer import TokenizerError

INSTALL_HINT = "run `selfctx tokenizer install`"


class TokenizerDataMissing(TokenizerError):
    """The rank file (or tiktoken itself) is not installed. ``default_tokenizer()`` answers this
    by falling back to the estimate; constructing the exact tokenizer directly raises it."""

    kind = "tokenizer_data_missing"


class TokenizerDataCorrupt(TokenizerError):
    """A rank file is present but is not the file tiktoken publishes (wrong size or SHA-256)."""

    kind = "tokenizer_data_corrupt"


class TokenizerInstallFailed(TokenizerError):
    """No source could deliver a rank file with the expected SHA-256. ``attempts`` holds one line
    per source tried, saying what went wrong there."""

    kind = "tokenizer_install_failed"

    def __init__(self, encoding: str, attempts: Sequence[str], *, path: str = "") -> None:
        self.attempts = tuple(attempts)
        reason = "no source delivered it:\n" + "\n".join(f"  - {a}" for a in self.attempts)
        super().__init__(encoding, reason, path=path)
