"""Configuration in one place (decision 0062): docs/configuration.md lists every setting the code
declares, with its variable and default, and every policy field with each policy's value; no code
reads a ``SELFCTX_`` variable the list does not declare; and values come from flags, then the
environment, then the files, then the defaults.

The lists are derived from the code (``selfctx.adapters.config.SETTINGS``, ``PolicyConfig``, the
``SELFCTX_`` names in the source tree), so adding a setting without its row fails here with the
row to add.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

import selfctx
from selfctx.adapters.config import (
    CONFIG_ENV,
    SETTINGS,
    ConfigError,
    Setting,
    config_files,
    load_config,
)
from selfctx.application.policies import POLICIES
from selfctx.domain.session.state import PolicyConfig

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
CODE = ("adapters", "application", "domain", "contracts", "xtdb")
POLICY_FIELDS = [f.name for f in attrs.fields(PolicyConfig) if f.name != "name"]


def _is_field(setting: Setting) -> bool:
    return setting.key.removeprefix("policy.") in POLICY_FIELDS


def _table(heading: str) -> dict[str, list[str]]:
    """The rows of the table under ``heading``, by their first cell's key."""
    text = PAGE.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def _expected_row(setting: Setting) -> str:
    env = f"`{setting.env}`" if setting.env else "—"
    default = setting.describe_default()
    default = f"`{default}`" if setting.default is not None else default
    return f"| `{setting.key}` | {env} | {default} | {setting.doc} |"


def test_the_page_lists_every_setting_as_the_code_declares_it() -> None:
    rows = _table("Settings")
    declared = [s for s in SETTINGS if not _is_field(s)]
    problems = []
    for setting in declared:
        expected = _expected_row(setting)
        found = rows.get(setting.key)
        if found is None or "| " + " | ".join([f"`{setting.key}`", *found]) + " |" != expected:
            problems.append(f"{'missing' if found is None else 'differs'}: {expected}")
    extra = sorted(set(rows) - {s.key for s in declared})
    assert not problems and not extra, (
        "docs/configuration.md's settings table and selfctx.adapters.config.SETTINGS disagree; "
        "rows as the code has them:\n" + "\n".join(problems) + f"\nnot settings: {extra}"
    )


def _policy_cell(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value}`"


def test_the_page_lists_every_policy_field_with_each_policys_value() -> None:
    header = next(
        line for line in PAGE.read_text().splitlines() if line.startswith("| setting | `ssot`")
    )
    names = [c.strip().strip("`") for c in header.strip("|").split("|")][1:-1]
    assert sorted(names) == sorted(POLICIES)
    rows = _table("Policy settings")
    problems = []
    for field in POLICY_FIELDS:
        values = [_policy_cell(getattr(POLICIES[n], field)) for n in names]
        found = rows.get(f"policy.{field}")
        if found is None or found[: len(names)] != values or not found[len(names)]:
            problems.append(f"| `policy.{field}` | " + " | ".join(values) + " | <what it does> |")
    assert not problems, "docs/configuration.md's policy table needs:\n" + "\n".join(problems)
    assert sorted(rows) == sorted(f"policy.{f}" for f in POLICY_FIELDS)
    for field in POLICY_FIELDS:  # each field is a setting of its own
        assert any(s.key == f"policy.{field}" for s in SETTINGS), field


def _names_in(paths: list[Path]) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in paths:
        for name in re.findall(r"SELFCTX_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def _code_files() -> list[Path]:
    files = [ROOT / "Makefile"]
    for folder in CODE:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".ts", ".clj", ".edn") and "node_modules" not in path.parts:
                files.append(path)
    return files


def test_every_variable_the_code_names_is_a_declared_setting() -> None:
    declared = {s.env for s in SETTINGS if s.env} | {CONFIG_ENV}
    used = _names_in(_code_files())
    unknown = {name: where for name, where in used.items() if name not in declared}
    assert not unknown, (
        "variables the code names but selfctx.adapters.config.SETTINGS does not declare "
        f"(add each as a setting): {unknown}"
    )


def test_no_module_reads_a_variable_around_the_configuration() -> None:
    """Code reads settings through ``selfctx.adapters.config``, so the file applies too."""
    reading = re.compile(r"(environ\.get\(|environ\[|getenv\()\s*([A-Z_]*_ENV\b|\"SELFCTX_)")
    offenders = []
    for path in _code_files():
        if path.suffix != ".py" or path == ROOT / "adapters" / "config.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if reading.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "read these through selfctx.adapters.config.setting:\n" + "\n".join(
        offenders
    )


def test_every_variable_the_docs_name_is_listed_on_the_page() -> None:
    """A variable a page names is a setting, the configuration file's own, or one of the test
    suite's (those ``tests/`` reads); docs/configuration.md lists all of them."""
    declared = {s.env for s in SETTINGS if s.env} | {CONFIG_ENV}
    suite = set(_names_in([p for p in (ROOT / "tests").rglob("*.py")])) - declared
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = _names_in(pages)
    stray = {n: w for n, w in named.items() if n not in declared | suite}
    assert not stray, f"variables the docs name that nothing reads: {stray}"
    listed = set(_names_in([PAGE]))
    missing = sorted((declared | suite) - listed)
    assert not missing, f"docs/configuration.md does not list {missing}"


# -- where values come from ---------------------------------------------------------------------


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_flags_then_environment_then_files_then_defaults(tmp_path: Path) -> None:
    user = _write(tmp_path / "xdg" / "self-context-manager" / "config.toml", 'store = "auto"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert config_files(env)[-1] == user
    config = load_config(environ=env)
    assert config.lookup("store") == ("auto", "file", str(user))
    assert config.lookup("proxy.port") == (8788, "default", "")
    env["SELFCTX_STORE"] = "xtdb://127.0.0.1:3000"
    assert load_config(environ=env).lookup("store")[:2] == ("xtdb://127.0.0.1:3000", "environment")
    assert load_config(environ=env).get("store", "memory") == "memory"  # a flag wins
    env["SELFCTX_STORE"] = ""  # empty: unset
    assert load_config(environ=env).get("store") == "auto"


def test_an_explicit_file_must_exist_and_replaces_the_users(tmp_path: Path) -> None:
    _write(tmp_path / "xdg" / "self-context-manager" / "config.toml", 'store = "auto"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), CONFIG_ENV: str(tmp_path / "none.toml")}
    with pytest.raises(ConfigError, match=r"none.toml.*no such file"):
        load_config(environ=env)
    chosen = _write(tmp_path / "chosen.toml", "[proxy]\nport = 9000\n")
    env[CONFIG_ENV] = str(chosen)
    config = load_config(environ=env)
    assert config.get("proxy.port") == 9000 and config.get("store") == "memory"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("stor = 'auto'\n", "stor: not a setting"),
        (
            "[proxy]\nprot = 1\n",
            r"proxy.prot: not a setting .known in that table: "
            r"proxy.answer_before_commit, proxy.answer_once_logged, proxy.host",
        ),
        ("[proxy]\nport = '8788'\n", "proxy.port: '8788' is not an integer"),
        ("[policy]\nname = 'fast'\n", "'fast' is not one of ssot, inline, relevance"),
        ("[proxy]\nupstream_openai = 'ftp://x'\n", "is not an http or https URL"),
        ("[policy]\nemergency_truncation = 1\n", "is not true or false"),
        ("store = \n", "not readable TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and caught.value.kind == "config_error"


def test_a_file_with_a_secret_must_be_private(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", "[summarizer]\nkey = 'sk-abc'\n", mode=0o644)
    with pytest.raises(ConfigError, match=r"summarizer.key but other users can read it"):
        load_config(path)
    path.chmod(0o600)
    assert load_config(path).get("summarizer.key") == "sk-abc"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SELFCTX_XTDB_DOC_CACHE_MB", "lots", "is not an integer"),
        ("SELFCTX_SUMMARIZER_TIMEOUT", "soon", "is not a number"),
        ("SELFCTX_POLICY", "fast", "is not one of"),
        ("SELFCTX_POLICY_OPTIONS", "[1]", "not a JSON object"),
    ],
)
def test_a_bad_variable_is_refused_naming_it(name: str, value: str, message: str) -> None:
    key = next(s.key for s in SETTINGS if s.env == name)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(environ={name: value, "XDG_CONFIG_HOME": "/nonexistent"}).get(key)
    assert name in str(caught.value)


def test_the_policy_table_applies_to_new_sessions(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", "[policy]\nname = 'inline'\ntrigger_tokens = 9000\n")
    config = load_config(path, environ={"SELFCTX_POLICY_OPTIONS": '{"keep_recent": 4}'})
    expected = attrs.evolve(POLICIES["inline"], trigger_tokens=9000, keep_recent=4)
    assert config.policy() == expected
    assert config.policy("relevance").name == "relevance"  # a flag names another policy
    service = selfctx.build_service(config=config)
    service.start_session("s")
    assert service.state("s").policy == expected
    bad = _write(tmp_path / "bad.toml", "[policy]\nkeep_recent = -1\n")
    with pytest.raises(selfctx.InvalidInput, match="keep_recent"):
        load_config(bad).policy()


def test_selfctx_config_shows_values_and_their_sources(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", "store = 'auto'\n[proxy]\ntoken = 'a-secret-token-123'\n")
    env = {**os.environ, CONFIG_ENV: str(path), "SELFCTX_POLICY": "inline"}
    command = [sys.executable, "-m", "selfctx.adapters.cli.main", "config"]
    shown = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    assert f"store = auto (file: {path})" in shown
    assert "policy.name = inline (environment: $SELFCTX_POLICY)" in shown
    assert "proxy.token = (set)" in shown and "a-secret-token-123" not in shown
    every = json.loads(
        subprocess.run(
            [*command, "--all", "--json"], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    assert {row["key"] for row in every["settings"]} == {s.key for s in SETTINGS}
