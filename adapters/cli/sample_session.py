"""The example session the project ships (``sample_session.json``), and how it is recorded.

mini-swe-agent's own agent loop (``DefaultAgent`` with its ``mini.yaml`` configuration, its
``LocalEnvironment`` running every command for real) works on a copy of the sample project
(``sample/``: a calculator whose parser groups ``2 - 3 - 4`` to the right and whose command line
crashes on an unknown function name). Only the model is scripted: :class:`ScriptedModel` answers
each query with the next step of :func:`steps`, in mini-swe-agent's tool-call format. The agent
runs through :func:`selfctx.adapters.harness.minisweagent.attach`, so the context tool it uses once
(``activate``, as a command) is answered by a live session, as it would be in production.

The recorded stream is mini-swe-agent's history as OpenAI messages, with each command's exact
output (``<returncode>``/``<output>``) and the copy's location shown as ``/workspace``. The
machine's description that mini-swe-agent puts in its prompt is fixed, so the file does not
depend on where it was recorded.

Regenerate with ``python -m selfctx.adapters.cli.sample_session`` (needs the ``dev`` extra, which
has mini-swe-agent; the test suite checks that a new recording holds the same conversation).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness.minisweagent import SHELL_TOOLS_PROMPT, attach, to_openai_messages
from selfctx.adapters.harness.trajectories import OWN_FORMAT
from selfctx.adapters.memory import MemoryStore
from selfctx.domain.identifiers import toolcall_object_id

SAMPLE = Path(__file__).with_name("sample")
OUTPUT = Path(__file__).with_name("sample_session.json")
ROOT = "/workspace"
"""Where the agent's project appears in the recorded session."""
FILESYSTEM = "selfctx-sample"
"""The agent's filesystem, fixed so that file ids in the session are stable."""
SESSION = "sample"
TASK = (
    "In the calc project, evaluate('2 - 3 - 4') returns 3 instead of -5, and "
    '`python3 -m calc "mean(2, 4)"` crashes with a KeyError traceback instead of reporting '
    "an unknown function. Fix both, add a mean function, add tests for the functions, and "
    "list mean in the README."
)
MACHINE = {"system": "Linux", "release": "6.1.0", "version": "#1 SMP", "machine": "x86_64"}
"""What mini-swe-agent's prompt says of the machine (it would read the recording host's)."""
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

Step = tuple[str, str | Callable[[], str]]
"""The model's text and its command (or a function that makes it when the step comes)."""

FIX_FUNCTIONS = """python3 - <<'EOF'
from pathlib import Path

path = Path("calc/functions.py")
source = path.read_text()
old = '''    function = FUNCTIONS[name]
    check_arity(name, arguments)
'''
new = '''    if name not in FUNCTIONS:
        known = ", ".join(sorted(FUNCTIONS))
        raise CalcError(f"unknown function {name!r} (known: {known})")
    function = FUNCTIONS[name]
    check_arity(name, arguments)
'''
assert source.count(old) == 1, source.count(old)
path.write_text(source.replace(old, new))
EOF"""

NEW_TESTS = """cat > tests/test_functions.py <<'EOF'
import unittest

from calc import evaluate
from calc.errors import CalcError


class FunctionsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(evaluate("mean(2, 4, 9)"), 5)

    def test_unknown_function(self):
        with self.assertRaises(CalcError) as caught:
            evaluate("median(1, 2)")
        self.assertIn("unknown function median", str(caught.exception))

    def test_arity(self):
        with self.assertRaises(CalcError):
            evaluate("sqrt(1, 2)")

    def test_round_to_places(self):
        self.assertEqual(evaluate("round(2.567, 2)"), 2.57)

    def test_nested_calls(self):
        self.assertEqual(evaluate("max(1, min(5, 3)) - 1"), 2)


if __name__ == "__main__":
    unittest.main()
EOF"""

ADD_MEAN = (
    'sed -i -e \'s/^    "min": min,$/    "min": min,\\n'
    '    "mean": lambda *values: sum(values) \\/ len(values),/\' '
    '-e \'s/^    "min": (1, None),$/    "min": (1, None),\\n    "mean": (1, None),/\' '
    "calc/functions.py"
)

TESTS = "python3 -m unittest discover -s tests"


def steps(handle_of: Callable[[str], str]) -> list[Step]:
    """The scripted model's answers, in order. ``handle_of(call_id)`` names a tool call's
    output as the context tools know it (``#n``)."""
    return [
        (
            "Let me look at the layout of the project first.",
            "find . -type f -not -path './.git/*' | sort",
        ),
        ("The README should say how the pieces fit together.", "cat README.md"),
        ("Reproducing the crash from the issue.", 'python3 -m calc "mean(2, 4)"'),
        ("And the wrong result for subtraction.", 'python3 -m calc "2 - 3 - 4"'),
        ("Running the test suite to see what it already catches.", TESTS),
        (
            "The traceback ends in call() in calc/functions.py. Let me read that module.",
            "cat calc/functions.py",
        ),
        ("Where is call used?", 'grep -rn "call(" calc'),
        ("The evaluator, around the call node.", "nl -ba calc/evaluate.py | sed -n '1,30p'"),
        ("How does the command line report errors?", "cat calc/__main__.py"),
        ("And CalcError itself.", "cat calc/errors.py"),
        (
            "A small reproduction without the command line, to see the exception type.",
            'python3 -c "\nfrom calc.functions import FUNCTIONS, call\nprint(sorted(FUNCTIONS))\n'
            "try:\n    call('mean', [2.0, 4.0])\nexcept Exception as error:\n"
            '    print(type(error).__name__, error)\n"',
        ),
        (
            "call() looks the name up with\n\n    function = FUNCTIONS[name]\n\nwhich raises "
            "KeyError for a name it does not know, and the command line only catches CalcError. "
            "I'll check the name first and raise CalcError naming the known functions.",
            FIX_FUNCTIONS,
        ),
        ("Checking the change.", "sed -n '30,45p' calc/functions.py"),
        ("The crash should now be a clear error.", 'python3 -m calc "mean(2, 4)"'),
        (
            "Now the subtraction. The parser groups operators; where is expression?",
            'grep -n "def \\|PRECEDENCE" calc/parser.py',
        ),
        ("The method itself.", "sed -n '60,70p' calc/parser.py"),
        (
            "Equal precedence binds to the right because the right operand is parsed with the "
            "operator's own precedence:\n\n            right = self.expression(PRECEDENCE[op])\n\n"
            "The right operand may only take operators of strictly higher precedence.",
            "sed -i 's/right = self.expression(PRECEDENCE\\[op\\])/"
            "right = self.expression(PRECEDENCE[op] + 1)/' calc/parser.py",
        ),
        ("Checking the edit.", "nl -ba calc/parser.py | sed -n '60,70p'"),
        ("The example from the issue:", 'python3 -m calc "2 - 3 - 4"'),
        ("And the test suite.", TESTS),
        (
            "Edge cases: a chain of divisions, unary minus, a call inside arithmetic.",
            "python3 -c \"from calc import evaluate; print(evaluate('64 / 8 / 2'), "
            "evaluate('-2 - -3'), evaluate('max(1, 10 - 2 - 3)'), evaluate('round(2.567, 2)'))\"",
        ),
        (
            "The issue also asks for a mean function. The two tables again, as they are now.",
            "sed -n '1,25p' calc/functions.py",
        ),
        ("Adding mean after min, in FUNCTIONS and in ARITY.", ADD_MEAN),
        ("Checking both tables.", "head -n 27 calc/functions.py"),
        ("mean works:", 'python3 -m calc "mean(2, 4, 9)"'),
        ("An empty call must be an error, not a crash.", 'python3 -m calc "mean()"'),
        ("Which modules raise CalcError now?", "grep -n CalcError calc/*.py"),
        (
            "The end of the existing test module, to follow its style.",
            "tail -n 12 tests/test_calc.py",
        ),
        ("A test module for the functions.", NEW_TESTS),
        ("Running all the tests.", TESTS + " -v"),
        (
            "The message quotes the name, so the assertion\n\n"
            '        self.assertIn("unknown function median", str(caught.exception))\n\n'
            "must expect 'median' in quotes.",
            "sed -i \"s/unknown function median/unknown function 'median'/\" "
            "tests/test_functions.py",
        ),
        ("Again.", TESTS + " -v"),
        (
            "The README lists the functions; mean must be there too.",
            'grep -n "functions" README.md',
        ),
        (
            "Adding it to the list.",
            "sed -i 's/`round`, `hypot`)/`round`, `hypot`, `mean`)/' README.md",
        ),
        ("Checking the line.", "sed -n '9,10p' README.md"),
        ("The whole change so far.", "git diff"),
        (
            "Before finishing, the first crash once more, to compare it with what the command "
            "line says now.",
            lambda: f"activate {handle_of('call_003')}",
        ),
        ("The unknown name:", 'python3 -m calc "median(1, 2)"'),
        ("A missing parenthesis:", 'python3 -m calc "mean(1, 2"'),
        ("Division by zero:", 'python3 -m calc "1 / 0"'),
        ("And a plain expression still works:", 'python3 -m calc "2 * (3 + 4) - 1 - 1"'),
        ("The size of the modules touched.", "wc -l calc/functions.py calc/parser.py README.md"),
        ("Running everything one last time.", TESTS),
        ("What changed, file by file.", "git status --short"),
        ("And the size of the change.", "git diff --stat"),
        (
            "Both bugs are fixed (operators of equal precedence associate to the left; an unknown "
            "function is a CalcError), mean is added and documented, and tests/test_functions.py "
            "covers the functions. Submitting.",
            SUBMIT,
        ),
    ]


class ScriptedModel:
    """A mini-swe-agent model (duck-typed, as its ``Model`` protocol) that answers with the
    next step, in the tool-call format of its ``DeterministicToolcallModel``."""

    def __init__(self, script: Sequence[Step], observation_template: str) -> None:
        from minisweagent.models.test_models import DeterministicToolcallModelConfig

        self.script = list(script)
        self.config = DeterministicToolcallModelConfig(
            outputs=[], observation_template=observation_template
        )
        self.calls = 0

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        text, command = self.script[self.calls]
        self.calls += 1
        command = command() if callable(command) else command
        call_id = f"call_{self.calls:03d}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})},
        }
        return {
            "role": "assistant",
            "content": text,
            "tool_calls": [call],
            "extra": {"actions": [{"command": command, "tool_call_id": call_id}], "cost": 0.0},
        }

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def format_observation_messages(
        self, message: dict[str, Any], outputs: list[dict[str, Any]], template_vars: Any = None
    ) -> list[dict[str, Any]]:
        from minisweagent.models.utils.actions_toolcall import (
            format_toolcall_observation_messages,
        )

        observations: list[dict[str, Any]] = format_toolcall_observation_messages(
            actions=message.get("extra", {}).get("actions", []),
            outputs=outputs,
            observation_template=self.config.observation_template,
            template_vars=template_vars,
        )
        return observations

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return dict(self.config.model_dump())

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"model": {"model_name": "scripted"}}}}


def _git(workdir: Path, *args: str) -> None:
    git = ["git", "-c", "user.name=selfctx", "-c", "user.email=selfctx@example.invalid"]
    subprocess.run([*git, *args], cwd=workdir, check=True, capture_output=True)


def _replace(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    return value


def record(workdir: Path) -> dict[str, Any]:
    """Run the scripted session in ``workdir`` (a copy of the sample tree) and return the
    trajectory in the project's own format."""
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import builtin_config_dir
    from minisweagent.environments.local import LocalEnvironment

    class Environment(LocalEnvironment):
        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            variables: dict[str, Any] = super().get_template_vars(**kwargs)
            return variables | MACHINE

    _git(workdir, "init", "-q")
    _git(workdir, "add", ".")
    _git(workdir, "commit", "-q", "-m", "calc")
    config = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())
    env = Environment(cwd=str(workdir), **config.get("environment", {}))
    service = build_service(store=MemoryStore(), workspace=str(workdir))

    def handle_of(call_id: str) -> str:
        state = service.state(SESSION)
        return f"#{state.positions[toolcall_object_id(SESSION, call_id, 1)] + 1}"

    model = ScriptedModel(steps(handle_of), config["model"]["observation_template"])
    managed, managed_env = attach(model, env, service, SESSION, cwd=str(workdir))
    agent_config = config["agent"] | {"step_limit": 0, "cost_limit": 0}
    agent = DefaultAgent(managed, managed_env, **agent_config)  # type: ignore[arg-type]
    agent.run(TASK)
    managed.sync(agent.messages)
    messages, _ = to_openai_messages(agent.messages, SESSION)
    messages[0]["content"] = f"{messages[0]['content']}\n\n{SHELL_TOOLS_PROMPT}"
    messages = _replace(messages, str(workdir), ROOT)
    return {
        "format": OWN_FORMAT,
        "description": "selfctx example session: mini-swe-agent's agent loop with a scripted "
        "model fixes two bugs in the sample calc project (adapters/cli/sample); recorded by "
        "adapters/cli/sample_session.py",
        "workspace": ROOT,
        "cwd": ROOT,
        "filesystem_id": FILESYSTEM,
        "messages": messages,
    }


def main() -> int:
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    with tempfile.TemporaryDirectory(prefix="selfctx-sample-") as tmp:
        os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", str(Path(tmp) / "mswea-config"))
        workdir = (Path(tmp) / "workspace").resolve()
        shutil.copytree(SAMPLE, workdir, ignore=shutil.ignore_patterns("__pycache__"))
        data = record(workdir)
    OUTPUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(data['messages'])} messages)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
