"""What the inspector's tests share: a short agent session written through the proxy against the
scripted model, with real files that change between reads, so that it holds collapsed outputs,
file versions, checkpoints and search hits."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.proxy import UI_PATH, Proxy, ProxyConfig
from selfctx.adapters.proxy.relay import Relay, relay_in_thread
from selfctx.adapters.proxy.scripted import ScriptedModel, Seen, Step
from selfctx.adapters.proxy.serving import serve_in_thread
from selfctx.adapters.ui import Inspector
from selfctx.adapters.ui.front import FrontInspector
from selfctx.application.ports.store import ObjectStore
from selfctx.application.service import ContextService
from tests.proxy.drive import Agent

ODD_OUTPUT = "tab\there, trailing spaces   \r\nünïcödé ✓ \\x00 <b>not bold</b> &amp;\n\n"
"""A tool output whose bytes a careless page would change (CRLF, tabs, markup, entities)."""

CALC_V1 = "def add(a, b):\n    return a - b\n"
CALC_V2 = "def add(a, b):\n    return a + b\n"


def step(command: str, text: str = "") -> Step:
    return Step(text or f"Running {command}.", (("bash", {"command": command}),))


@attrs.define
class Workbench:
    """A running proxy with the inspector mounted, over one store, and an agent to drive it."""

    service: ContextService
    inspector: Inspector
    model: ScriptedModel
    base: str
    workspace: Path
    produced: dict[str, list[str]] = attrs.field(factory=dict)
    """What each tool command returned to the agent each time it ran, byte for byte."""
    agent: Agent | None = None
    before: frozenset[str] = frozenset()
    """The sessions the store held before this bench's agent started (a shared XTDB node holds
    other tests' sessions too)."""
    own: str | None = None
    made: int = 0
    """Model calls of the agent so far (one request record each)."""

    @property
    def ui(self) -> str:
        return self.base + UI_PATH

    def run_tool(self, name: str, args: dict[str, Any]) -> str:
        command = str(args.get("command", ""))
        if command.startswith("cat "):
            output = (self.workspace / command[4:]).read_text()
        elif command == "odd":
            output = ODD_OUTPUT
        else:
            output = "".join(f"{command}: line {n} of its output\n" for n in range(60))
        self.produced.setdefault(command, []).append(output)
        return output

    def steps(self, count: int) -> None:
        """``count`` more model calls of the agent (each answered by the scripted model)."""
        assert self.agent is not None
        with httpx.Client() as client:
            for _ in range(count):
                self.agent.step(client)
                if self.own is None:
                    self.own = new_session(self.service, self.before)
        self.made += count
        wait_for_records(lambda: len(self.service.request_records(self.session_id)), self.made)

    @property
    def session_id(self) -> str:
        """The session of the test's agent (an Anthropic client: ``anthropic.<digest>``)."""
        assert self.own is not None, "the agent has not started"
        return self.own

    def another_session(self, steps: int) -> None:
        """A second agent, of another API, for a few model calls."""
        other = Agent(
            "openai",
            self.base,
            task="Add a subtract() function.",
            run_tool=self.run_tool,
            headers={"user-agent": "other-agent/2.3"},
        )
        with httpx.Client() as client:
            for _ in range(steps):
                other.step(client)


def wait_for_records(recorded: Callable[[], int], made: int) -> None:
    """Wait, at most 30 s, until ``recorded()`` counts ``made`` records: a request's record is
    written while the request goes upstream (decision 0055), so it can land just after the
    client has its answer. The test's own assertion then says what is missing."""
    deadline = time.monotonic() + 30
    while recorded() < made and time.monotonic() < deadline:
        time.sleep(0.02)


def new_session(service: ContextService, before: frozenset[str]) -> str:
    """The one Anthropic session the store holds that it did not hold in ``before``."""
    (session_id,) = [
        sid for sid in service.sessions() if sid.startswith("anthropic.") and sid not in before
    ]
    return session_id


def script() -> Any:
    """The model's side: reads calc.py, looks around, runs a command with odd output, has
    calc.py changed (by the test, between two reads), reads it again, and goes on running
    commands for as long as it is asked."""
    plan = [
        step("cat calc.py", "Let me read the code."),
        step("ls -R", "What else is there?"),
        step("odd"),
        step("pytest -q", "Running the tests."),
        step("cat calc.py", "Reading it again after the fix."),
    ]

    def answer(seen: Seen) -> Step:
        if seen.turn < len(plan):
            return plan[seen.turn]
        return step(f"echo step {seen.turn}")

    return answer


def scripted_config(upstream: str, workspace: Path, token: str | None = None) -> ProxyConfig:
    """The proxy's settings for the scripted model: both APIs to it, a small relevance budget so
    that a short session already collapses outputs."""
    return ProxyConfig(
        upstream_anthropic=upstream,
        upstream_openai=upstream + "/v1",
        cwd=str(workspace),
        roots=(str(workspace),),
        policy="relevance",
        policy_options={"trigger_tokens": 600, "clear_at_least": 100, "keep_recent": 1},
        token=token,
    )


@contextlib.contextmanager
def workbench(store: ObjectStore, workspace: Path) -> Iterator[Workbench]:
    """A proxy (with the inspector) between the test's agent and the scripted model."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "calc.py").write_text(CALC_V1)
    (workspace / "README.md").write_text("# calc\n")
    service = build_service(store=store, workspace=str(workspace))
    inspector = Inspector(service)
    model = ScriptedModel(script())
    with serve_in_thread(model.app) as upstream:
        config = scripted_config(upstream, workspace)
        proxy = Proxy(service, config, ui=inspector.app)
        try:
            with serve_in_thread(proxy.app) as base:
                bench = Workbench(
                    service, inspector, model, base, workspace, before=frozenset(service.sessions())
                )
                bench.agent = Agent(
                    "anthropic",
                    base,
                    task="The calculator adds wrong: fix add().",
                    run_tool=bench.run_tool,
                    headers={"user-agent": "test-agent/1.0 (scripted)"},
                )
                yield bench
        finally:
            service.close()


def written_session(bench: Workbench) -> None:
    """Drive the agent through the plan: two reads of calc.py with a change between them."""
    bench.steps(4)
    (bench.workspace / "calc.py").write_text(CALC_V2)
    bench.steps(3)


# -- the front of `selfctx proxy --workers N` (decision 0083) ----------------------------

SECRET = "the-run's-secret-0123456789"


@attrs.define
class Front:
    base: str
    ui: FrontInspector
    services: list[ContextService]
    workers: list[str]
    agents: list[Agent]

    @property
    def url(self) -> str:
        return self.ui.url(self.base)

    shared: bool = False
    before: frozenset[str] = frozenset()
    """The sessions the store held before the agents started (a node other tests wrote to)."""
    made: int = 0

    def steps(self, agent: int, count: int) -> None:
        """``count`` model calls of agent ``agent``, and a bounded wait for their records."""
        with httpx.Client(timeout=60) as client:
            for _ in range(count):
                self.agents[agent].step(client)
        self.made += count
        wait_for_records(self.recorded, self.made)

    def recorded(self) -> int:
        """Requests recorded in the agents' sessions, over every store."""
        return sum(
            len(service.request_records(sid))
            for service in (self.services[:1] if self.shared else self.services)
            for sid in service.sessions()
            if sid.startswith("anthropic.") and sid not in self.before
        )

    def held(self, worker: int) -> str:
        """The one session worker ``worker``'s store holds of its own agent."""
        (sid,) = [s for s in self.services[worker].sessions() if s.startswith("anthropic.")]
        return sid


def _run_tool(name: str, args: dict[str, object]) -> str:
    command = str(args.get("command", ""))
    return "".join(f"{command}: line {n} of its output\n" for n in range(60))


@contextlib.contextmanager
def front_of(stores: Sequence[ObjectStore], workspace: Path, shared: bool) -> Iterator[Front]:
    """Two workers (one per store given, or both on one) behind a relay serving the inspector."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "calc.py").write_text(CALC_V1)
    model = ScriptedModel(script())
    with serve_in_thread(model.app) as upstream, contextlib.ExitStack() as stack:
        services, workers = [], []
        for store in stores:
            service = build_service(store=store, workspace=str(workspace), track=False)
            stack.callback(service.close)
            services.append(service)
            config = scripted_config(upstream, workspace, token=SECRET)
            inspector = Inspector(service, behind_front=True)
            proxy = Proxy(service, config, ui=inspector.app)
            workers.append(stack.enter_context(serve_in_thread(proxy.app)))
        ui = FrontInspector(len(workers), shared=shared, root=UI_PATH)
        base = stack.enter_context(relay_in_thread(Relay(workers, SECRET, ui=ui)))
        agents = [
            Agent(
                "anthropic",
                base,
                task=f"Task {n}: fix add().",
                run_tool=_run_tool,
                headers={"x-api-key": f"key-of-user-{n}"},  # two conversations, two workers
            )
            for n in range(2)
        ]
        before = frozenset(s for service in services for s in service.sessions())
        front = Front(base, ui, services, workers, agents, shared=shared, before=before)
        front.steps(0, 3)
        front.steps(1, 2)
        yield front
