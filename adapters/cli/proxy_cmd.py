"""``selfctx proxy``: the context manager as a model-API endpoint, for unchanged agents.

Point an agent's base URL at the proxy: it serves Anthropic Messages, OpenAI Chat Completions and
OpenAI Responses, replaces each request by the managed one and forwards it upstream. The address
and how to point each client at it are printed on stdout when it is ready; one log line per request
goes to stderr. See docs/harness.md ("A model-API proxy").
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from typing import Any

import attrs

from selfctx.adapters.bootstrap import build_service, open_store
from selfctx.adapters.cli.stores import STORE_HELP
from selfctx.adapters.config import load_config, setting
from selfctx.application.policies import POLICIES
from selfctx.domain.errors import InvalidInput

TOKEN_ENV = "SELFCTX_PROXY_TOKEN"
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


_FROM_SETTINGS = ("host", "port", "tool_prefix", "max_body_mb", "max_rounds")
"""Flags whose default is a ``proxy.*`` setting (docs/configuration.md)."""


def _token(args: argparse.Namespace) -> str | None:
    token: str | None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
    else:
        token = setting("proxy.token") or None
    if token is not None and len(token) < 16:
        raise InvalidInput("proxy token", "(hidden)", "use at least 16 characters")
    if args.host not in _LOOPBACK and token is None:
        raise InvalidInput(
            "host",
            args.host,
            f"serving beyond this machine needs a token: set ${TOKEN_ENV} or give --token-file "
            "(clients then send it as the x-selfctx-token header or use the base URL "
            "http://HOST:PORT/t/TOKEN)",
        )
    return token


def _option(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name or not value.strip().isdigit():
        raise InvalidInput("policy option", text, "use NAME=INTEGER, e.g. trigger_tokens=20000")
    return name.strip(), int(value)


def _banner(
    base: str, config: Any, store: str, policy: str, ui: str | None = None, *more: str
) -> str:
    """What the proxy prints when it is ready: the inspector's address last."""
    root = f"{base}/t/<TOKEN>" if config.token else base
    inspector = (
        [f"  inspector (what the model saw): {ui}"]
        if ui
        else [
            "  inspector: off (it is served on loopback without a proxy token, unless --no-ui; "
            "selfctx ui serves a store on its own)"
        ]
    )
    return "\n".join(
        [
            f"selfctx proxy listening on {base} (store {store}, policy {policy}, context tools "
            f"{config.tool_prefix}activate/deactivate/pin/unpin/search)",
            f"  upstreams: Anthropic {config.upstream_anthropic}, OpenAI {config.upstream_openai}",
            f"  Claude Code:  ANTHROPIC_BASE_URL={root} claude",
            f"  Codex CLI:    codex -c model_provider=selfctx "
            f'-c \'model_providers.selfctx={{name="selfctx", base_url="{root}/v1", '
            f'env_key="OPENAI_API_KEY", wire_api="responses"}}\'',
            f"  aider:        OPENAI_API_BASE={root}/v1 aider --model openai/<model>",
            f"  other OpenAI clients: base URL {root}/v1; Anthropic clients: {root}",
            "  a client may name its session with the header x-selfctx-session",
            *more,
            *inspector,
        ]
    )


def _run(args: argparse.Namespace) -> int:
    # imported here: the ASGI stack loads only for the command that serves
    from selfctx.adapters.proxy import UI_PATH, Proxy, ProxyConfig
    from selfctx.adapters.proxy.guard import LOOPBACK_NAMES
    from selfctx.adapters.proxy.serving import bind, serve, tune_collector
    from selfctx.adapters.ui import Inspector

    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="selfctx proxy: %(levelname)s %(message)s",
    )
    for noisy in ("httpx", "httpcore"):  # their request lines would repeat ours
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.store = setting("store", args.store)
    for name in _FROM_SETTINGS:
        setattr(args, name, setting(f"proxy.{name}", getattr(args, name)))
    token = _token(args)
    # The policy of new sessions: --policy and --policy-option over the policy settings (the
    # configuration file's [policy] table, $SELFCTX_POLICY...); refused before serving if bad.
    chosen = load_config().policy(args.policy, **dict(_option(o) for o in args.policy_option))
    named = POLICIES[chosen.name]
    options = {
        k: v for k, v in attrs.asdict(chosen).items() if k != "name" and v != getattr(named, k)
    }
    workspace = os.path.realpath(args.workspace or os.getcwd())
    roots = tuple(os.path.realpath(r) for r in args.root) or (workspace,)
    config = ProxyConfig(
        upstream_anthropic=setting("proxy.upstream_anthropic", args.upstream_anthropic),
        upstream_openai=setting("proxy.upstream_openai", args.upstream_openai),
        tool_prefix=args.tool_prefix,
        policy=chosen.name,
        policy_options=options,
        cwd=workspace,
        roots=roots,
        max_body_bytes=args.max_body_mb * 1024 * 1024,
        max_rounds=args.max_rounds,
        answer_before_commit=setting("proxy.answer_before_commit"),
        answer_once_logged=setting("proxy.answer_once_logged"),
        token=token,
        # loopback: answer only to this machine's names (no DNS rebinding); beyond it, a token
        hosts=LOOPBACK_NAMES | {args.host.lower()} if args.host in _LOOPBACK else None,
    )
    try:
        sock = bind(args.host, args.port)  # before the store: a taken port fails fast
    except OSError as exc:
        reason = {
            errno.EADDRINUSE: "is in use (another proxy?): choose another with --port, or 0 "
            "for any free one",
            errno.EACCES: "may not be used by this user: choose one above 1023 with --port",
            errno.EADDRNOTAVAIL: "is not an address of this machine",
        }.get(exc.errno or 0, f"cannot be listened on: {exc.strerror}")
        raise InvalidInput("address", f"{args.host}:{args.port}", reason) from None
    args.workers_given = args.workers
    args.workers = workers_wanted(args.workers)
    if args.workers > 1:
        return _front(args, sock, config)
    if args.exit_with_stdin:
        from selfctx.adapters.proxy.spawn import exit_with_stdin

        exit_with_stdin()
    store = open_store(args.store)
    service = None
    tune_collector()
    try:
        service = build_service(
            store=store, workspace=workspace, roots=list(roots), track=not args.no_track
        )
        host = f"[{args.host}]" if ":" in args.host else args.host
        base = f"http://{host}:{sock.getsockname()[1]}"
        inspector = None
        if args.ui_behind_front:  # a worker: the front checks the token, the secret guards this
            inspector = Inspector(service, behind_front=True)
        elif _serves_ui(args, token):
            inspector = Inspector(service)
        proxy = Proxy(service, config, ui=inspector.app if inspector else None)
        ui = inspector.url(base + UI_PATH) if inspector and not args.ui_behind_front else None
        print(_banner(base, config, args.store, chosen.name, ui), flush=True)
        serve(proxy.app, sock, log_level="warning")
    finally:
        if service is not None:
            service.close()
        store.close()
        sock.close()
    return 0


def cores() -> int:
    """The cores this process may run on (its affinity, where the system says)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers_wanted(value: str | int) -> int:
    """``--workers``: a number, or ``auto`` (the default): one worker per core the process may
    use, and one process (no front) on a single core (decision 0083)."""
    if value == "auto":
        return cores()
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise InvalidInput("workers", value, "use auto (one per core) or a number from 1 to 256")
    return int(text)


def _serves_ui(args: argparse.Namespace, token: str | None) -> bool:
    """Whether the inspector is served: on loopback without a proxy token (behind one, a browser
    could not reach it: use selfctx ui then), unless --no-ui."""
    return args.host in _LOOPBACK and token is None and not args.no_ui


def _front(args: argparse.Namespace, sock: Any, config: Any) -> int:
    """``--workers N``: start N workers with the same settings and serve the front."""
    from selfctx.adapters.proxy.relay import Relay
    from selfctx.adapters.proxy.spawn import start_workers
    from selfctx.adapters.xtdb import ensure_local_node

    store = args.store
    if store == "auto":  # one node for all workers
        store = "xtdb://" + ensure_local_node().removeprefix("http://")
    argv = ["--store", store, "--workspace", config.cwd, "--tool-prefix", config.tool_prefix]
    argv += ["--upstream-anthropic", config.upstream_anthropic]
    argv += ["--upstream-openai", config.upstream_openai]
    argv += ["--max-body-mb", str(args.max_body_mb), "--max-rounds", str(args.max_rounds)]
    argv += ["--log-level", args.log_level]
    for root in config.roots:
        argv += ["--root", root]
    if args.policy:
        argv += ["--policy", args.policy]
    for option in args.policy_option:
        argv += ["--policy-option", option]
    if args.no_track:
        argv.append("--no-track")
    inspector = None
    if _serves_ui(args, config.token):
        from selfctx.adapters.proxy import UI_PATH
        from selfctx.adapters.ui.front import FrontInspector

        # one store for all (XTDB): any worker shows everything; else each shows its own
        inspector = FrontInspector(args.workers, shared=store != "memory", root=UI_PATH)
        argv.append("--ui-behind-front")
    try:
        secret, workers = start_workers(args.workers, argv)
    except RuntimeError as exc:
        raise InvalidInput("workers", args.workers, str(exc)) from None
    front = Relay(
        workers,
        secret,
        token=config.token,
        hosts=config.hosts,
        max_body_bytes=config.max_body_bytes,
        ui=inspector,
    )
    host = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{host}:{sock.getsockname()[1]}"
    policy = args.policy or "default"
    note = " (each worker keeps its own in-memory store)" if store == "memory" else ""
    ui = inspector.url(base) if inspector else None
    why = " (one per core; --workers 1: one process)" if args.workers_given == "auto" else ""
    listed = f"  {args.workers} worker processes{why}: {', '.join(workers)}"
    banner = _banner(base, config, store + note, policy, ui, listed)
    try:
        front.run(sock, ready=lambda: print(banner, flush=True))
    finally:
        sock.close()
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "proxy",
        help="serve Anthropic and OpenAI model APIs, managing every request's context",
        description="A model-API proxy: point an agent's base URL at it (Claude Code, Codex CLI, "
        "aider, any Anthropic or OpenAI client). Each request is ingested into its session and "
        "replaced by the managed request; the context tools are answered by the proxy. "
        "See docs/harness.md.",
    )
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: the proxy.host setting, "
        f"127.0.0.1; any other needs a token, ${TOKEN_ENV} or --token-file)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="port (default: proxy.port, 8788; 0: any free)"
    )
    parser.add_argument(
        "--upstream-anthropic",
        default=None,
        metavar="URL",
        help="where Anthropic requests go (default: the proxy.upstream_anthropic setting, "
        "https://api.anthropic.com)",
    )
    parser.add_argument(
        "--upstream-openai",
        default=None,
        metavar="URL",
        help="where OpenAI requests go (default: the proxy.upstream_openai setting, "
        "https://api.openai.com; a trailing /v1 is fine)",
    )
    parser.add_argument("--store", default=None, help=STORE_HELP)
    parser.add_argument("--policy", default=None, help="layout policy of new sessions")
    parser.add_argument(
        "--policy-option",
        metavar="NAME=N",
        action="append",
        default=[],
        help="override a field of the policy (repeatable), e.g. trigger_tokens=20000",
    )
    parser.add_argument(
        "--tool-prefix",
        default=None,
        help="prefix of the context tools' names (default: proxy.tool_prefix, context_: "
        "context_activate, ...)",
    )
    parser.add_argument(
        "--workspace",
        metavar="DIR",
        help="the agents' working directory (default: the current directory)",
    )
    parser.add_argument(
        "--root",
        metavar="DIR",
        action="append",
        default=[],
        help="a directory files may be read from (repeatable; default: workspace)",
    )
    parser.add_argument("--token-file", metavar="FILE", help="a file holding the proxy's token")
    parser.add_argument(
        "--max-body-mb", type=int, default=None, help="largest request body (MB; default 32)"
    )
    parser.add_argument(
        "--max-rounds",
        type=int,
        default=None,
        help="context-tool rounds per request before the model must answer (default 5)",
    )
    parser.add_argument("--no-track", action="store_true", help="do not watch files read")
    parser.add_argument(
        "--workers",
        default="auto",
        metavar="N|auto",
        help="worker processes behind a front (default auto: one per core, one process on a "
        "single core): more serve more conversations at once, each conversation always by the "
        "same worker; 1: one process, no front",
    )
    parser.add_argument(
        "--no-ui", action="store_true", help="do not serve the inspector at /_selfctx/ui"
    )
    parser.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ui-behind-front", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.set_defaults(handler=_run)
