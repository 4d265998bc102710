"""The public API is the top-level ``selfctx`` package (docs/api.md): its names are pinned here,
each is documented, importing it loads nothing it does not need, and a policy is a name or a
``PolicyConfig`` wherever one is taken, anything else refused at the door."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import selfctx
from selfctx.adapters.harness import HarnessSession
from selfctx.application.policies import POLICIES, POLICY_DESCRIPTIONS, as_policy
from selfctx.domain.session.state import POLICY_NAMES

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = [
    "Config",
    "ConfigError",
    "ConflictError",
    "ContextService",
    "DEFAULT_POLICY",
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
    "POLICY_NAMES",
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
"""The whole public surface. A change here is a change of the API: say it in CHANGELOG.md."""


def test_the_public_names_are_pinned() -> None:
    assert sorted(selfctx.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(selfctx, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'bootstrap'"):
        _ = selfctx.bootstrap


def test_every_public_name_is_documented() -> None:
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^#+ `(\w+)", page, re.M)) | set(
        re.findall(r"^\| `(\w+)`", page, re.M)
    )
    missing = sorted(set(PUBLIC) - documented)
    assert not missing, f"docs/api.md does not describe {missing}"
    extra = sorted(n for n in documented - set(PUBLIC) if not n.startswith("selfctx"))
    assert not extra, f"docs/api.md describes names that are not public: {extra}"


def test_the_error_table_gives_each_errors_kind() -> None:
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \|", page, re.M)
    assert rows
    for name, kind in rows:
        assert getattr(selfctx, name).kind == kind, name
    errors = {n for n in PUBLIC if isinstance(getattr(selfctx, n), type)}
    errors = {n for n in errors if issubclass(getattr(selfctx, n), Exception)}
    assert {name for name, _ in rows} == errors


def test_errors_share_one_root() -> None:
    for name in PUBLIC:
        value = getattr(selfctx, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, selfctx.SelfContextError), name


def test_importing_selfctx_loads_no_adapter() -> None:
    """``import selfctx`` (and so ``selfctx --version``, and every private import) stays cheap: the
    public names are loaded when first used."""
    code = (
        "import sys, selfctx, selfctx.domain.objects; "
        "print(sorted(m for m in sys.modules if m.startswith('selfctx.adapters') "
        "or m in ('httpx', 'starlette', 'watchdog')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


# -- one registry, one default, names accepted at the door ------------------------------------


def test_one_registry_and_one_default() -> None:
    assert set(POLICIES) == set(POLICY_NAMES) == set(POLICY_DESCRIPTIONS)
    assert selfctx.POLICY_NAMES == POLICY_NAMES
    default = selfctx.policy_by_name()
    assert default.name == selfctx.DEFAULT_POLICY == "relevance"
    assert selfctx.Settings().policy == default
    service = selfctx.build_service()
    assert service.settings.policy == default
    service.start_session("s")
    assert service.state("s").policy == default
    plain = selfctx.ContextService(
        store=selfctx.MemoryStore(),
        clock=service._deps.runner.clock,
        ids=service._deps.runner.ids,
        files=service._deps.files,
        mounts=service.mounts,
        tokenizer=service.tokenizer,
    )  # the service with no settings at all
    assert plain.settings.policy == default


@pytest.mark.parametrize("name", sorted(POLICY_NAMES))
def test_a_policy_name_is_taken_wherever_a_policy_is(name: str) -> None:
    expected = POLICIES[name]
    assert selfctx.Settings(policy=name).policy == expected
    service = selfctx.build_service()
    service.start_session("a", policy=name)
    assert service.state("a").policy == expected
    assert service.open_session("b", policy=name) is None
    assert service.state("b").policy == expected
    HarnessSession(service, "c", policy=name)
    assert service.state("c").policy == expected
    assert as_policy(expected) is expected


@pytest.mark.parametrize("bad", ["bogus", "", 3, ["relevance"], b"inline"])
def test_anything_else_is_refused_at_the_door(bad: object) -> None:
    service = selfctx.build_service()
    calls: list[Callable[[], object]] = [
        lambda: selfctx.Settings(policy=bad),  # type: ignore[arg-type]
        lambda: service.start_session("a", policy=bad),  # type: ignore[arg-type]
        lambda: service.open_session("b", policy=bad),  # type: ignore[arg-type]
        lambda: HarnessSession(service, "c", policy=bad),  # type: ignore[arg-type]
        lambda: selfctx.PolicyConfig(bad),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(selfctx.UnknownPolicy) as caught:
            call()
        assert caught.value.kind == "unknown_policy"
        assert "relevance" in str(caught.value)
        assert isinstance(caught.value, selfctx.InvalidInput)
    for session_id in ("a", "b", "c"):  # nothing was started
        with pytest.raises(selfctx.SessionNotFound):
            service.state(session_id)
