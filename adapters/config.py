"""Configuration in one place: every setting, where it is read from, and its default.

A setting's value comes from the first of these that gives one (decision 0062):

1. a command-line flag, where the command has one (``--store``, ``--policy``, ...);
2. its environment variable (``SELFCTX_STORE``, ...);
3. the configuration file: ``$SELFCTX_CONFIG`` if set, else
   ``$XDG_CONFIG_HOME/self-context-manager/config.toml`` (``~/.config/...``), over
   ``/etc/self-context-manager/config.toml`` (the system-wide file: the user's file overrides it
   key by key);
4. its default.

The file is TOML; a setting ``xtdb.home`` is the key ``home`` of its ``[xtdb]`` table, a setting
``store`` a top-level key. ``[policy]`` holds ``name`` and any field of the policy
(``trigger_tokens = 20000``): the named policy's settings, with those overridden.

Adding a setting is one entry in :data:`SETTINGS` (and one row in docs/configuration.md, which
``tests/test_configuration.py`` compares with this list, and names what is missing). Code reads a
setting with :func:`setting` (or a :class:`Config` from :func:`load_config`), never from
``os.environ`` directly.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from selfctx.application.policies import DEFAULT_POLICY, POLICIES, policy_by_name
from selfctx.application.settings import Settings
from selfctx.domain.errors import InvalidInput, SelfContextError
from selfctx.domain.session.state import PolicyConfig

__all__ = [
    "CONFIG_ENV",
    "SETTINGS",
    "Config",
    "ConfigError",
    "Setting",
    "config_files",
    "load_config",
    "setting",
]

CONFIG_ENV: Final = "SELFCTX_CONFIG"
"""A configuration file to read instead of the user's (it must exist)."""
APP: Final = "self-context-manager"
SYSTEM_FILE: Final = Path("/etc") / APP / "config.toml"
MAX_FILE_BYTES: Final = 1 << 20

Kind = Literal["str", "int", "float", "bool", "path", "url", "choice", "json"]


class ConfigError(InvalidInput):
    """A configuration file or variable holds something unusable; it names where and why."""

    kind = "config_error"

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.what = where
        self.value = None
        self.reason = reason
        SelfContextError.__init__(self, f"configuration: {where}: {reason}")


@attrs.frozen
class Setting:
    """One setting: its key in the file, its variable, its type and default, what it does."""

    key: str
    """Dotted: the table and the key in the file (``xtdb.home``), or a top-level key."""
    kind: Kind
    doc: str
    """One sentence for docs/configuration.md and ``selfctx config``."""
    default: Any = None
    """The value when nothing sets it (None: unset, or worked out where it is used)."""
    env: str | None = None
    """Its environment variable (None: none)."""
    default_text: str | None = None
    """How the default reads when it is worked out where the setting is used (a path under
    ``$XDG_CACHE_HOME``, ...)."""
    flag: str | None = None
    """The command-line flag that overrides it, where one does."""
    choices: tuple[str, ...] = ()
    """For ``choice``: the allowed values."""
    secret: bool = False
    """Never printed; a file holding it must be readable by its owner only."""
    in_file: bool = True
    """False for variables read by other programs only (the Pi extension's)."""

    def describe_default(self) -> str:
        """The default as docs/configuration.md writes it."""
        if self.default_text is not None:
            return self.default_text
        if self.default is None:
            return "unset"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, float) and self.default.is_integer():
            return str(int(self.default))
        return str(self.default)


def _policy_fields() -> Iterator[Setting]:
    """Every field of :class:`PolicyConfig` but its name, as ``policy.<field>``: the default is
    the named policy's own value (docs/configuration.md lists it per policy)."""
    for field in attrs.fields(PolicyConfig):
        if field.name == "name":
            continue
        kind: Kind = "bool" if isinstance(field.default, bool) else "int"
        yield Setting(
            f"policy.{field.name}",
            kind,
            "A field of the policy: see the policy table of docs/configuration.md.",
            default_text="the policy's own",
        )


SETTINGS: Final[tuple[Setting, ...]] = (
    # -- stores and sessions -----------------------------------------------------------------
    Setting(
        "store", "str",
        "The store commands use: memory, auto (the local XTDB node) or xtdb://HOST:PORT.",
        default="memory", env="SELFCTX_STORE", flag="--store",
    ),
    Setting(
        "policy.name", "choice",
        "The layout and collapse policy of new sessions.",
        default=DEFAULT_POLICY, env="SELFCTX_POLICY", flag="--policy",
        choices=tuple(POLICIES),
    ),
    Setting(
        "policy.options", "json",
        "Fields of the policy to override, as a JSON object (the environment's form of the "
        "[policy] table's other keys).",
        env="SELFCTX_POLICY_OPTIONS", flag="--policy-option", in_file=False,
    ),
    *_policy_fields(),
    Setting(
        "files.max_file_bytes", "int",
        "Files larger than this are indexed as metadata only, and not read.",
        default=Settings().max_file_bytes,
    ),
    Setting(
        "files.max_output_bytes", "int",
        "Tool outputs and file contents a harness hands over larger than this are refused.",
        default=Settings().max_output_bytes,
    ),
    Setting(
        "memory.cache_budget", "int",
        "Bytes of the caches an open session keeps in memory, split among them: content, "
        "hollow calls' metadata, renderings, remembered token counts, known identifiers and the "
        "tokenizer's memo; each files.* budget unset takes its share (decision 0169).",
        default=Settings().cache_budget, env="SELFCTX_CACHE_BUDGET",
    ),
    Setting(
        "files.content_budget", "int",
        "Characters of object content an open session keeps in memory besides what its prompt "
        "shows whole; the rest is read back from the store when shown (decisions 0065, 0086). "
        "Default: its share of memory.cache_budget.",
        default=Settings().content_budget,
    ),
    Setting(
        "files.metadata_budget", "int",
        "Tool calls whose content was dropped and whose metadata an open session keeps in "
        "memory, the ones used last; an older one's is read back from the store when needed "
        "(decision 0111). Default: its share of memory.cache_budget.",
        default=Settings().metadata_budget,
    ),
    Setting(
        "files.rendering_budget", "int",
        "Chat messages, the last ones, whose rendering as a provider's item an open session's "
        "request cache keeps; an older one is encoded again when a request renders it "
        "(decision 0117). Default: its share of memory.cache_budget.",
        default=Settings().rendering_budget,
    ),
    Setting(
        "files.mounts", "path",
        "A TOML file of mount mappings for a sandboxed agent (docs/specification.md §3).",
        env="SELFCTX_MOUNTS",
    ),
    Setting(
        "files.host_filesystem_id", "str",
        "This machine's filesystem id, instead of the one derived from its machine id.",
        env="SELFCTX_HOST_FILESYSTEM_ID", default_text="SHA-256 of the machine id",
    ),
    Setting(
        "search.index", "path",
        "The search index file of selfctx search.",
        env="SELFCTX_SEARCH_INDEX", flag="--index",
        default_text="$XDG_CACHE_HOME/self-context-manager/search/<store>.sqlite",
    ),
    # -- the model-API proxy ----------------------------------------------------------------
    Setting(
        "proxy.upstream_anthropic", "url",
        "Where the proxy sends Anthropic Messages requests.",
        default="https://api.anthropic.com", env="SELFCTX_UPSTREAM_ANTHROPIC",
        flag="--upstream-anthropic",
    ),
    Setting(
        "proxy.upstream_openai", "url",
        "Where the proxy sends OpenAI Chat Completions and Responses requests.",
        default="https://api.openai.com", env="SELFCTX_UPSTREAM_OPENAI",
        flag="--upstream-openai",
    ),
    Setting(
        "proxy.host", "str", "The address the proxy listens on (any but loopback needs a token).",
        default="127.0.0.1", flag="--host",
    ),
    Setting(
        "proxy.port", "int", "The proxy's port (0: any free one).", default=8788, flag="--port",
    ),
    Setting(
        "proxy.tool_prefix", "str", "The prefix of the context tools' names the proxy adds.",
        default="context_", flag="--tool-prefix",
    ),
    Setting(
        "proxy.max_body_mb", "int", "The largest request body the proxy takes, in megabytes.",
        default=32, flag="--max-body-mb",
    ),
    Setting(
        "proxy.max_rounds", "int",
        "Context-tool rounds per request before the model must answer.",
        default=5, flag="--max-rounds",
    ),
    Setting(
        "proxy.answer_before_commit", "bool",
        "Hand a whole (not streamed) answer to the client while the commit beside its request "
        "lands (decision 0107): faster on XTDB, but a proxy killed at that moment loses the "
        "request's record, and what it added until the client sends it again.",
        default=False, env="SELFCTX_PROXY_ANSWER_BEFORE_COMMIT",
    ),
    Setting(
        "proxy.answer_once_logged", "bool",
        "Hand an answer to the client once the transaction beside its request is in the store's "
        "durable log, before the store has checked it (decision 0138; XTDB: indexed it). Off: "
        "the answer waits for the check too.",
        default=True, env="SELFCTX_PROXY_ANSWER_ONCE_LOGGED",
    ),
    Setting(
        "proxy.token", "str",
        "A token clients must send (x-selfctx-token, or a /t/TOKEN base URL); needed to serve "
        "beyond 127.0.0.1. At least 16 characters.",
        env="SELFCTX_PROXY_TOKEN", flag="--token-file", secret=True,
    ),
    # -- compaction summaries ------------------------------------------------------------------
    Setting(
        "summarizer.url", "url",
        "An OpenAI- or Anthropic-compatible endpoint that writes compaction summaries (unset: "
        "the extractive summarizer).",
        env="SELFCTX_SUMMARIZER_URL",
    ),
    Setting(
        "summarizer.model", "str", "The summarizer's model name (unset: the endpoint's default).",
        env="SELFCTX_SUMMARIZER_MODEL",
    ),
    Setting(
        "summarizer.key", "str", "The summarizer's API key (never logged).",
        env="SELFCTX_SUMMARIZER_KEY", secret=True,
    ),
    Setting(
        "summarizer.api", "choice", "The summarizer endpoint's API.",
        env="SELFCTX_SUMMARIZER_API", choices=("openai", "anthropic"),
        default_text="anthropic for an Anthropic host, else openai",
    ),
    Setting(
        "summarizer.timeout", "float", "Seconds per summarizer request.",
        default=30.0, env="SELFCTX_SUMMARIZER_TIMEOUT",
    ),
    # -- tokens ---------------------------------------------------------------------------------
    Setting(
        "tokenizer.dir", "path", "Where the tokenizer's rank files are installed.",
        env="SELFCTX_TIKTOKEN_DIR", flag="--dir",
        default_text="$XDG_CACHE_HOME/self-context-manager/tiktoken",
    ),
    # -- XTDB ----------------------------------------------------------------------------------
    Setting(
        "xtdb.home", "path", "XTDB's jar cache (lib/, classes/, Maven's m2/).",
        env="SELFCTX_XTDB_HOME", default_text="$XDG_CACHE_HOME/self-context-manager/xtdb-1.24.5",
    ),
    Setting(
        "xtdb.data", "path", "The data directory of the local node --store auto uses.",
        env="SELFCTX_XTDB_DATA", flag="--data",
        default_text="$XDG_DATA_HOME/self-context-manager/xtdb",
    ),
    Setting(
        "xtdb.project", "path", "The node's Maven project, configs and sources.",
        env="SELFCTX_XTDB_PROJECT", default_text="the copy installed with the package",
    ),
    Setting(
        "xtdb.keys", "path", "Where the 0600 key files of running nodes are kept.",
        env="SELFCTX_XTDB_KEYS",
        default_text="$XDG_STATE_HOME/self-context-manager/xtdb-keys",
    ),
    Setting(
        "xtdb.doc_cache_mb", "int", "Megabytes of documents a node caches after reading them.",
        default=64, env="SELFCTX_XTDB_DOC_CACHE_MB",
    ),
    Setting(
        "xtdb.warm_up_ms", "int",
        "Milliseconds a node runs its request path on a scratch node before it answers (0: not).",
        default=15000, env="SELFCTX_XTDB_WARM_UP_MS",
    ),
    Setting(
        "xtdb.java_opts", "str", "The node's JVM options, space-separated.",
        env="SELFCTX_XTDB_JAVA_OPTS", default_text="a 1 GB heap and the options of xtdb/",
    ),
    Setting(
        "xtdb.pg_bin", "path",
        "The folder of PostgreSQL's initdb and postgres for a throwaway cluster database "
        "(tests, bench scale).",
        env="SELFCTX_PG_BIN", default_text="the newest /usr/lib/postgresql/*/bin, then PATH",
    ),
    # -- benchmarks and the Pi extension -------------------------------------------------------
    Setting(
        "bench.trajectories", "path", "The recorded sessions selfctx bench context replays.",
        env="SELFCTX_TRAJECTORIES", default_text="../shared/data/trajectories, when present",
    ),
    Setting(
        "pi.command", "str", "The command the Pi extension starts (it runs serve --stdio).",
        default="selfctx", env="SELFCTX_COMMAND", in_file=False,
    ),
)  # fmt: skip
"""Every setting. A new one goes here (and into docs/configuration.md)."""

_BY_KEY: Final = {s.key: s for s in SETTINGS}
assert len(_BY_KEY) == len(SETTINGS), "two settings share a key"


# -- reading the files ----------------------------------------------------------------------------


def config_files(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The files read, lowest precedence first (those that do not exist are skipped, except an
    explicit ``$SELFCTX_CONFIG``, which must)."""
    env = os.environ if environ is None else environ
    explicit = env.get(CONFIG_ENV)
    if explicit:
        return [SYSTEM_FILE, Path(explicit).expanduser()]
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [SYSTEM_FILE, Path(base) / APP / "config.toml"]


_parsed: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}


def _read(path: Path, required: bool) -> dict[str, Any]:
    try:
        info = path.stat()
    except FileNotFoundError:
        if required:
            raise ConfigError(f"${CONFIG_ENV}={path}", "no such file") from None
        return {}
    except OSError as exc:
        raise ConfigError(str(path), exc.strerror or str(exc)) from exc
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
        raise ConfigError(str(path), "not a regular file of at most 1 MB")
    stamp = (info.st_mtime_ns, info.st_size)
    cached = _parsed.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(str(path), f"not readable TOML: {exc}") from exc
    flat = _flatten(data, str(path))
    shared = info.st_mode & (stat.S_IRGRP | stat.S_IROTH)
    secrets = [k for k in flat if _BY_KEY[k].secret]
    if secrets and shared:
        raise ConfigError(
            str(path),
            f"holds {', '.join(secrets)} but other users can read it: chmod 600 {path}",
        )
    _parsed[path] = (stamp, flat)
    return flat


def _flatten(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``{"xtdb": {"home": ...}}`` to ``{"xtdb.home": ...}``, refusing unknown keys."""
    flat: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(value, dict):
            for inner, item in value.items():
                flat[f"{name}.{inner}"] = item
        else:
            flat[name] = value
    for key, value in flat.items():
        known = _BY_KEY.get(key)
        if known is None or not known.in_file:
            near = sorted(k for k in _BY_KEY if k.split(".")[0] == key.split(".")[0])
            hint = f" (known in that table: {', '.join(near)})" if near else ""
            raise ConfigError(f"{where}: {key}", f"not a setting{hint}; see docs/configuration.md")
        flat[key] = _check(known, value, f"{where}: {key}")
    return flat


# -- values ---------------------------------------------------------------------------------------


def _check(setting: Setting, value: Any, where: str) -> Any:
    """A value from the file, checked against the setting's kind."""
    kind = setting.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif isinstance(value, str):
        return _check_text(setting, value, where)
    raise ConfigError(where, f"{value!r} is not {_KIND_NAMES[kind]}")


_KIND_NAMES: Final[Mapping[str, str]] = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "path": "a path (a string)",
    "url": "an http or https URL",
    "choice": "one of the allowed values",
    "json": "a JSON object",
}


def _check_text(setting: Setting, text: str, where: str) -> Any:
    if setting.kind == "choice" and text not in setting.choices:
        raise ConfigError(where, f"{text!r} is not one of {', '.join(setting.choices)}")
    if setting.kind == "url" and not text.startswith(("http://", "https://")):
        raise ConfigError(where, f"{text!r} is not an http or https URL")
    if setting.kind == "path":
        return str(Path(text).expanduser()) if text else text
    if setting.kind == "json":
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise ConfigError(where, f"not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise ConfigError(where, "not a JSON object")
        return parsed
    return text


def _from_env(setting: Setting, text: str) -> Any:
    """A value from the environment (always text), checked against the setting's kind."""
    where = f"${setting.env}"
    if setting.kind == "bool":
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(where, f"{text!r} is not true or false")
    if setting.kind == "int":
        try:
            return int(text.strip())
        except ValueError:
            raise ConfigError(where, f"{text!r} is not an integer") from None
    if setting.kind == "float":
        try:
            return float(text.strip())
        except ValueError:
            raise ConfigError(where, f"{text!r} is not a number") from None
    return _check_text(setting, text, where)


Source = Literal["flag", "environment", "file", "default"]


@attrs.frozen
class Config:
    """The settings as the files and the environment give them (flags are the caller's)."""

    file_values: Mapping[str, Any]
    """Values from the configuration files, by key."""
    file_sources: Mapping[str, str]
    """The file each of those came from."""
    environ: Mapping[str, str]
    files: tuple[Path, ...]
    """The files looked at, lowest precedence first."""

    def lookup(self, key: str, flag: Any = None) -> tuple[Any, Source, str]:
        """(value, where it came from, which file or variable)."""
        known = _BY_KEY.get(key)
        if known is None:
            raise KeyError(f"{key!r} is not a setting of selfctx.adapters.config.SETTINGS")
        if flag is not None:
            return flag, "flag", known.flag or "a flag"
        if known.env is not None:
            text = self.environ.get(known.env)
            if text:  # an empty variable counts as unset, as the shell's ${X:-default} does
                return _from_env(known, text), "environment", f"${known.env}"
        if key in self.file_values:
            return self.file_values[key], "file", self.file_sources[key]
        return known.default, "default", ""

    def get(self, key: str, flag: Any = None) -> Any:
        """The value of ``key``: ``flag`` when given, else its variable, file entry or default."""
        return self.lookup(key, flag)[0]

    def is_set(self, key: str) -> bool:
        """True if a variable or a file sets ``key`` (not its default)."""
        return self.lookup(key)[1] != "default"

    def policy(self, name: str | None = None, **overrides: Any) -> PolicyConfig:
        """The policy of new sessions: ``name`` or ``policy.name``, with the ``[policy]`` table's
        fields, then ``$SELFCTX_POLICY_OPTIONS``, then ``overrides`` applied."""
        fields = {
            key.split(".", 1)[1]: value
            for key, value in self.file_values.items()
            if key.startswith("policy.") and key not in ("policy.name", "policy.options")
        }
        fields.update(self.get("policy.options") or {})
        fields.update(overrides)
        return policy_by_name(self.get("policy.name", name), **fields)

    def settings(self, *, policy: PolicyConfig | None = None) -> Settings:
        """The application's :class:`Settings` these values give."""
        return Settings(
            policy=policy if policy is not None else self.policy(),
            max_file_bytes=self.get("files.max_file_bytes"),
            max_output_bytes=self.get("files.max_output_bytes"),
            cache_budget=self.get("memory.cache_budget"),
            **{
                key.split(".", 1)[1]: self.get(key)
                for key in ("files.content_budget", "files.metadata_budget",
                            "files.rendering_budget")
                if self.is_set(key)  # else the share of the cache budget
            },
        )  # fmt: skip


def load_config(
    file: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Config:
    """The configuration: ``file`` if given (it must exist), else the usual files (see the
    module's documentation), under the environment (``environ``, default ``os.environ``)."""
    env = dict(os.environ if environ is None else environ)
    if file is not None:
        files, required = [Path(file)], True
    else:
        files = config_files(env)
        required = bool(env.get(CONFIG_ENV))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for index, path in enumerate(files):
        read = _read(path, required and index == len(files) - 1)
        values.update(read)
        sources.update(dict.fromkeys(read, str(path)))
    return Config(values, sources, env, tuple(files))


def setting(key: str, flag: Any = None) -> Any:
    """The value of one setting now (flag, environment, file, default)."""
    return load_config().get(key, flag)
