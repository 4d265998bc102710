"""Recognition never blocks management: whatever a tool printed and whatever the command was,
recognising file effects yields views or nothing, never an error, and a message list holding such
an output is recorded and managed like any other (a line such as ``src/a.py:0: x`` once made every
later request of its session fail with ``invalid view 'lines'``).

Hypothesis feeds arbitrary text and text shaped like what recognition reads (numbered lines,
``path:N:`` hits, diff hunks, harness wrappers and cuts) as outputs of arbitrary and view-shaped
commands."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selfctx.adapters.bootstrap import build_service
from selfctx.adapters.harness import HarnessSession
from selfctx.adapters.harness.recognise import FileLines, recognise
from selfctx.adapters.harness.render import validate_openai
from selfctx.adapters.memory import MemoryStore
from selfctx.application.policies import policy_by_name
from selfctx.application.settings import Settings
from selfctx.domain.errors import InvalidInput
from selfctx.domain.objects import FileView
from tests.harness.conftest import CONTAINER, CWD, ROOTS, bash, o_assistant, o_call, o_tool, o_user

NUMBERS = st.one_of(st.integers(-3, 3), st.integers(0, 10**6), st.integers(10**17, 10**40)).map(str)
PATHS = st.sampled_from(["a.py", "src/a.py", "/testbed/b.c", "./x", "..", "-", "a b.py", ""])
WORDS = st.text(st.characters(codec="utf-8"), max_size=12)


@st.composite
def lines(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 6))
    n, word, path = draw(NUMBERS), draw(WORDS), draw(PATHS)
    return [
        f"{path}:{n}:{word}",
        f"{path}-{n}-{word}",
        f"{n}:{word}",
        f"{' ' * draw(st.integers(0, 6))}{n}\t{word}",
        f"@@ -{n},{n} +{n},{draw(NUMBERS)} @@",
        f"+++ b/{path}",
        draw(st.text(max_size=40)),
    ][kind]


@st.composite
def outputs(draw: st.DrawFn) -> str:
    body = "\n".join(draw(st.lists(lines(), max_size=12)))
    wrap = draw(st.integers(0, 5))
    code = draw(NUMBERS)
    if wrap == 0:
        return body
    if wrap == 1:
        return f"<returncode>{code}</returncode>\n<output>\n{body}\n</output>"
    if wrap == 2:  # cut in the middle, as mini-swe-agent cuts
        tail = "\n".join(draw(st.lists(lines(), max_size=4)))
        return (
            f"<returncode>{code}</returncode>\n<warning>w</warning><output_head>\n{body}\n"
            f"</output_head>\n<elided_chars>\n9 characters elided\n</elided_chars>\n"
            f"<output_tail>\n{tail}\n</output_tail>"
        )
    if wrap == 3:
        return f"{body}\n[... Observation truncated due to length ...]\n{body}"
    if wrap == 4:
        return f"OBSERVATION:\n{body}\r\n"
    return draw(st.text(max_size=200))


PROGRAMS = st.sampled_from(
    [
        "cat {p}",
        "cat -n {p} | sed -n '{n},{m}p'",
        "cat {p} | head -{n}",
        "cat {p} | tail -n {n}",
        "head -n {n} {p}",
        "tail -n +{n} {p}",
        "sed -n '{n},{m}p' {p}",
        "sed -n '{n}p;{m}p' {p}",
        "awk 'NR>={n} && NR<={m}' {p}",
        "awk 'NR=={n},NR=={m}' {p}",
        "nl -ba {p} | grep -n x | head -{m}",
        "grep -n -A {n} x {p}",
        "grep -rn -C{n} x {p}",
        "grep x {p} {p}",
        "git diff {p}",
        "python -c \"print(open('{p}').read())\"",
        "cd {p} && sed -n {n},{m}p {p}; head -{n} {p}",
        "find {p} -name '*.py' | xargs grep -n x",
        "{w}",
    ]
)


@st.composite
def commands(draw: st.DrawFn) -> str:
    template = draw(PROGRAMS)
    return template.format(
        p=draw(PATHS), n=draw(NUMBERS), m=draw(NUMBERS), w=draw(st.text(max_size=60))
    )


TOOLS = st.sampled_from(["bash", "execute_bash", "str_replace_editor", "read", "exec_command"])


@st.composite
def arguments(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    if tool == "str_replace_editor":
        return {
            "command": draw(st.sampled_from(["view", "str_replace", "create", "insert"])),
            "path": "/testbed/" + draw(PATHS),
            "view_range": draw(st.one_of(st.none(), st.lists(st.integers(-5, 10**20), max_size=3))),
            "old_str": draw(st.text(max_size=10)),
        }
    if tool == "read":
        return {"path": draw(PATHS), "offset": draw(st.integers(-5, 10**20))}
    if tool == "exec_command":
        return {"cmd": draw(commands())}
    return {"command": draw(st.one_of(commands(), st.text(max_size=80)))}


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_recognition_yields_views_or_nothing(data: st.DataObject) -> None:
    tool = data.draw(TOOLS)
    args = data.draw(arguments(tool))
    effects = recognise(tool, args, data.draw(outputs()), CWD)
    for effect in effects:
        if isinstance(effect, FileLines):  # a lines view names line numbers, or none
            try:
                FileView("f", "lines", effect.ranges)
            except InvalidInput:
                # the ingestor leaves such a view out; it never reaches the session
                assert any(0 in (a, b) or (a > 0) == (b > 0) for a, b in effect.ranges)


def _session(policy: str) -> HarnessSession:
    service = build_service(
        store=MemoryStore(),
        default_filesystem_id=CONTAINER,
        settings=Settings(policy=policy_by_name(policy)),
    )
    return HarnessSession(service, "s", "openai", cwd=CWD, roots=ROOTS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["ssot", "inline", "relevance"]),
    st.lists(st.tuples(TOOLS, st.data(), outputs()), min_size=1, max_size=5),
)
def test_any_output_is_recorded_and_the_session_stays_managed(
    policy: str, calls: list[tuple[str, st.DataObject, str]]
) -> None:
    h = _session(policy)
    messages: list[dict[str, Any]] = [o_user("go")]
    for n, (tool, data, output) in enumerate(calls):
        args = data.draw(arguments(tool))
        call = bash(f"c{n}", args["command"]) if tool == "bash" else o_call(f"c{n}", tool, **args)
        messages += [o_assistant("", call), o_tool(f"c{n}", output)]
        h.ingest(messages)  # never an error: recognition yields views or nothing
        request = h.request()
        validate_openai(request)
    assert len(h.service.state("s").kinds) >= len(calls)
    # and the session goes on being managed
    messages += [o_assistant("done", bash("last", "true")), o_tool("last", "")]
    h.ingest(messages)
    validate_openai(h.request())
