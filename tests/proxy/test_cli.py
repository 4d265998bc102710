"""``selfctx proxy`` on the command line: loopback unless told, and then only with a token; bad
options stop it before it serves; the banner says how to point each client at it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.proxy.support import selfctx


def test_another_host_needs_a_token() -> None:
    done = selfctx("proxy", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    assert "SELFCTX_PROXY_TOKEN" in done.stderr and "token" in done.stderr


def test_a_short_token_and_a_bad_policy_option_are_refused(tmp_path: Path) -> None:
    short = tmp_path / "token"
    short.write_text("abc\n")
    done = selfctx("proxy", "--port", "0", "--token-file", str(short))
    assert done.returncode == 2 and "16 characters" in done.stderr
    done = selfctx("proxy", "--port", "0", "--policy-option", "trigger_tokens=lots")
    assert done.returncode == 2 and "NAME=INTEGER" in done.stderr


def test_the_banner_with_a_token_hides_it(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-of-thirty-two-characters\n")
    env = {**os.environ, "SELFCTX_PROXY_TOKEN": ""}
    argv = ["proxy", "--port", "0", "--host", "127.0.0.1", "--token-file", str(token)]
    process = subprocess.Popen(
        [sys.executable, "-m", "selfctx.adapters.cli.main", *argv, "--workspace", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(4)]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    text = "".join(banner)
    assert "listening on http://127.0.0.1:" in text
    assert "context_activate/deactivate/pin/unpin/search" in text  # the five tools
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:" in text and "/t/<TOKEN>" in text
    assert "a-token-of-thirty-two" not in text


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_an_interrupt_right_after_the_banner_ends_the_front_and_its_workers(
    tmp_path: Path, delay: float, inherited: signal.Handlers
) -> None:
    """SIGINT as soon as the front has printed its banner (its event loop may still be
    starting) ends it, and its workers with it; also when SIGINT was ignored when it started,
    as a background job's is."""
    argv = ["proxy", "--port", "0", "--workers", "2", "--workspace", str(tmp_path)]
    process = subprocess.Popen(
        [sys.executable, "-m", "selfctx.adapters.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, inherited),
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) in (0, 130)
    finally:
        if process.poll() is None:
            process.kill()
    assert "listening on" in banner
    # the workers (their command lines name the workspace) ended with the front
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert left.stdout.split() == []


def test_a_port_in_use_is_a_clear_error() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        done = selfctx("proxy", "--port", str(taken.getsockname()[1]))
    finally:
        taken.close()
    assert done.returncode == 2
    assert "in use" in done.stderr and "--port" in done.stderr
    assert "Traceback" not in done.stderr


def test_workers_serve_each_conversation_from_one_process(tmp_path: Path) -> None:
    """``--workers 2``: a front and two workers; every request of a conversation reaches the
    same worker (its session continues), and the workers refuse whoever skips the front."""
    import httpx

    from selfctx.adapters.proxy.scripted import Step
    from tests.proxy.drive import Agent
    from tests.proxy.support import proxy_process, scripted

    steps = [
        Step(calls=(("bash", {"command": "ls"}),)),
        Step(calls=(("bash", {"command": "pwd"}),)),
        Step("done"),
    ]
    with (
        scripted(steps) as (model, up),
        proxy_process(up, "memory", tmp_path, tmp_path / "proxy.log", "--workers", "2") as proxy,
        httpx.Client() as client,
    ):
        agents = [
            Agent("openai", proxy.url, task=f"task {n}", headers={"x-selfctx-session": f"s{n}"})
            for n in range(4)
        ]
        for agent in agents:
            agent.run(client)
        log = proxy.log_text()
    assert len(model.requests) == 4 * 3
    for n in range(4):
        assert log.count(f"session=s{n} ") == 3  # one session each, served where it lives


def test_workers_default_to_one_per_core_and_bad_counts_are_refused() -> None:
    from selfctx.adapters.cli.proxy_cmd import cores, workers_wanted

    assert workers_wanted("auto") == cores() == len(os.sched_getaffinity(0))
    assert workers_wanted("3") == 3 and workers_wanted(1) == 1
    for bad in ("0", "-1", "two", "1000"):
        done = selfctx("proxy", "--port", "0", "--workers", bad)
        assert done.returncode == 2 and "auto (one per core)" in done.stderr, done.stderr
    assert "default auto: one per" in selfctx("proxy", "--help").stdout
