"""How often an assembly renders the context (decision 0156)."""

from __future__ import annotations

from typing import Any

from selfctx.adapters.harness import HarnessSession
from selfctx.application.usecases.assemble import AssembleContext
from selfctx.domain.rendering import AssembledContext
from tests.harness.conftest import bash, mini, o_assistant, o_tool, o_user
from tests.harness.test_relevance_policy import A_PY, NOISE, read_then_install, session, shown


def _renders(h: HarnessSession) -> tuple[int, AssembledContext]:
    """Renders made by the next assembly of ``h``'s session, and what it assembled."""
    assemble = h.service._assemble
    calls = 0
    render = AssembleContext.render

    def counting(session: Any) -> AssembledContext:
        nonlocal calls
        calls += 1
        return render(assemble, session)

    assemble.render = counting  # type: ignore[method-assign]
    try:
        context = h.service.assemble("s1")
    finally:
        del assemble.render
    return calls, context


def test_an_assembly_whose_seen_collapse_collapses_renders_once() -> None:
    h = session()
    messages = read_then_install()
    h.ingest(messages)
    h.service.assemble("s1")
    messages += [
        o_assistant("Now back to a.py.", bash("c3", "python -c 'import a'")),
        o_tool("c3", mini("")),
    ]
    h.ingest(messages)
    calls, context = _renders(h)
    assert calls == 1
    assert all(NOISE not in m.text for m in context.chat)  # the seen collapse collapsed c2
    tools = shown(h)
    assert tools["c2"].startswith("[#") and A_PY in tools["c1"]


def test_an_assembly_that_collapses_nothing_renders_once() -> None:
    h = session()
    h.ingest([o_user("fix the bug"), o_assistant("Reading.", bash("c1", "cat a.py"))])
    calls, _context = _renders(h)
    assert calls == 1
