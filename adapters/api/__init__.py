"""self-context-manager: the context-management layer for LLM coding agents.

This module is the public API: everything a program needs to embed the context manager, swap its
store or property-test it is importable from ``selfctx`` and listed in ``__all__``
(docs/api.md describes each name). Every other module (``selfctx.domain``,
``selfctx.application``, ``selfctx.adapters``, ...) is private by convention and may change
between releases without notice.

The names are imported when first used, so ``import selfctx`` (and ``selfctx --version``) stays
cheap and importing a private module does not load the adapters.

This file is the ``selfctx`` package's ``__init__``: ``pyproject.toml`` maps the package to
``adapters/api/`` (decision 0060).
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__: str = version("self-context-manager")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

_EXPORTS: dict[str, str] = {
    # stores
    "open_store": "selfctx.adapters.bootstrap",
    "MemoryStore": "selfctx.adapters.memory",
    "ObjectStore": "selfctx.application.ports.store",
    # the service and the harness session
    "build_service": "selfctx.adapters.bootstrap",
    "ContextService": "selfctx.application.service",
    "Settings": "selfctx.application.settings",
    "HarnessSession": "selfctx.adapters.harness.session",
    # policies
    "DEFAULT_POLICY": "selfctx.application.policies",
    "POLICY_NAMES": "selfctx.application.policies",
    "PolicyConfig": "selfctx.domain.session.state",
    "policy_by_name": "selfctx.application.policies",
    # configuration
    "load_config": "selfctx.adapters.config",
    "Config": "selfctx.adapters.config",
    # errors
    "SelfContextError": "selfctx.domain.errors",
    "ConfigError": "selfctx.adapters.config",
    "InvalidInput": "selfctx.domain.errors",
    "InvalidPath": "selfctx.domain.errors",
    "InvalidContent": "selfctx.domain.errors",
    "UnknownObject": "selfctx.domain.errors",
    "NotAContentObject": "selfctx.domain.errors",
    "SessionNotFound": "selfctx.domain.errors",
    "SessionExists": "selfctx.domain.errors",
    "DuplicateObject": "selfctx.domain.errors",
    "UnknownCheckpoint": "selfctx.domain.errors",
    "DuplicateCheckpoint": "selfctx.domain.errors",
    "UnknownPolicy": "selfctx.domain.errors",
    "SourceUnavailable": "selfctx.application.ports.files",
    "SourceChanged": "selfctx.application.ports.files",
    "StoreError": "selfctx.application.ports.store",
    "StoreUnavailable": "selfctx.application.ports.store",
    "StoreRejected": "selfctx.application.ports.store",
    "StoreProtocolError": "selfctx.application.ports.store",
    "ConflictError": "selfctx.application.ports.store",
    "SearchUnavailable": "selfctx.application.ports.search",
    "SummarizerError": "selfctx.application.ports.summarizer",
    "TokenizerError": "selfctx.application.ports.tokenizer",
    "MountConfigError": "selfctx.adapters.mounts.errors",
    "XtdbSetupError": "selfctx.adapters.xtdb.errors",
}
"""Each public name and the private module that defines it."""

__all__ = [
    "DEFAULT_POLICY",
    "POLICY_NAMES",
    "Config",
    "ConfigError",
    "ConflictError",
    "ContextService",
    "DuplicateCheckpoint",
    "DuplicateObject",
    "HarnessSession",
    "InvalidContent",
    "InvalidInput",
    "InvalidPath",
    "MemoryStore",
    "MountConfigError",
    "NotAContentObject",
    "ObjectStore",
    "PolicyConfig",
    "SearchUnavailable",
    "SelfContextError",
    "SessionExists",
    "SessionNotFound",
    "Settings",
    "SourceChanged",
    "SourceUnavailable",
    "StoreError",
    "StoreProtocolError",
    "StoreRejected",
    "StoreUnavailable",
    "SummarizerError",
    "TokenizerError",
    "UnknownCheckpoint",
    "UnknownObject",
    "UnknownPolicy",
    "XtdbSetupError",
    "__version__",
    "build_service",
    "load_config",
    "open_store",
    "policy_by_name",
]
"""The public names (tests/test_public_api.py pins them: changing the list is an API change)."""


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'selfctx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ loads them
    from selfctx.adapters.bootstrap import build_service, open_store
    from selfctx.adapters.config import Config, ConfigError, load_config
    from selfctx.adapters.harness.session import HarnessSession
    from selfctx.adapters.memory import MemoryStore
    from selfctx.adapters.mounts.errors import MountConfigError
    from selfctx.adapters.xtdb.errors import XtdbSetupError
    from selfctx.application.policies import DEFAULT_POLICY, POLICY_NAMES, policy_by_name
    from selfctx.application.ports.files import SourceChanged, SourceUnavailable
    from selfctx.application.ports.search import SearchUnavailable
    from selfctx.application.ports.store import (
        ConflictError,
        ObjectStore,
        StoreError,
        StoreProtocolError,
        StoreRejected,
        StoreUnavailable,
    )
    from selfctx.application.ports.summarizer import SummarizerError
    from selfctx.application.ports.tokenizer import TokenizerError
    from selfctx.application.service import ContextService
    from selfctx.application.settings import Settings
    from selfctx.domain.errors import (
        DuplicateCheckpoint,
        DuplicateObject,
        InvalidContent,
        InvalidInput,
        InvalidPath,
        NotAContentObject,
        SelfContextError,
        SessionExists,
        SessionNotFound,
        UnknownCheckpoint,
        UnknownObject,
        UnknownPolicy,
    )
    from selfctx.domain.session.state import PolicyConfig
