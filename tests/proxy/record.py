"""Record a real client playing the long task straight against the scripted model (no proxy):
the recordings ``selfctx bench cache`` replays (adapters/bench/recordings/).

    .venv/bin/python -m tests.proxy.record claude-code 28 adapters/bench/recordings/cc.jsonl.xz

Every request the client sent is kept, with the time it arrived, in the order the model got
them; the API key is not (headers are not recorded).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from selfctx.adapters.bench.recording import Recorded, write_recording
from selfctx.adapters.proxy.scripted import ScriptedModel
from tests.proxy.clients import CLIENTS
from tests.proxy.support import ROOT, scripted
from tests.proxy.tasks import ACTIVATION_STEP

VERSIONS = {
    "claude-code": ("tests/clients", "@anthropic-ai/claude-code"),
    "codex": ("tests/clients", "@openai/codex"),
    "pi": ("adapters/pi", "@mariozechner/pi-coding-agent"),
}


def version(name: str) -> str:
    if name == "aider":
        done = subprocess.run(
            [str(ROOT / ".clients/aider/bin/aider"), "--version"], capture_output=True, text=True
        )
        return done.stdout.strip().split()[-1]
    folder, package = VERSIONS[name]
    lock = json.loads((ROOT / folder / "package-lock.json").read_text())
    return str(lock["packages"][f"node_modules/{package}"]["version"])


def requests_of(model: ScriptedModel) -> list[Recorded]:
    received = list(model.requests)
    start = received[0].at if received else 0.0
    return [Recorded(r.at - start, r.api, r.path, r.body) for r in received]


def record(name: str, steps: int, out: Path) -> int:
    chosen = CLIENTS[name]
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        repo = chosen.repo(root, steps)
        home = root / "home"
        home.mkdir()
        with scripted(chosen.script(steps)) as (model, url):
            chosen.run(url, repo, home, steps)
        requests = requests_of(model)
    meta = {
        "client": name,
        "version": version(name),
        "steps": steps,
        "task": "tests/proxy/tasks.py (straight to the scripted model, no proxy; step "
        f"{ACTIVATION_STEP} reads one more file, as no context tool is offered)",
    }
    write_recording(out, meta, requests)
    return len(requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("client", choices=sorted(CLIENTS))
    parser.add_argument("steps", type=int)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    count = record(args.client, args.steps, args.out)
    print(f"{args.out}: {count} requests, {args.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
