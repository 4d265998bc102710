"""Pre-request shedding (seed 001's third layer): when the prompt passes 90% of the model's input
limit, files leave the context, largest first, with a note in the chat (decision 0042).

Only unpinned files go, and only what shows their content: under the ssot layout the file objects
of the active set; under the inline layout (where a file shows in the tool message that read it)
the tool outputs that show files and no pinned one. Each stays one ``activate`` away.
"""

from __future__ import annotations

from collections.abc import Callable

from selfctx.application.runner import OpenSession
from selfctx.domain.inline import handle
from selfctx.domain.objects import FileObject, ToolcallObject

__all__ = ["files_to_shed", "shedding_note"]


def files_to_shed(
    session: OpenSession, count: Callable[[str], int], goal: int
) -> tuple[list[str], int]:
    """The objects to collapse, largest first, until ``goal`` tokens are cleared (or none is
    left), and the tokens they clear."""
    state = session.state
    inline = state.policy.name == "inline"
    sizes: dict[str, int] = {}
    for object_id in state.active:
        if object_id in state.pinned:
            continue
        obj = session.objects[object_id]
        if inline:
            refs = obj.file_refs if isinstance(obj, ToolcallObject) else None
            if not refs or any(ref in state.pinned for ref in refs):
                continue
        elif not isinstance(obj, FileObject):
            continue
        sizes[object_id] = count(obj.content or "")
    chosen, cleared = [], 0
    for object_id in sorted(sizes, key=lambda i: (-sizes[i], state.positions[i])):
        if cleared >= goal:
            break
        chosen.append(object_id)
        cleared += sizes[object_id]
    return chosen, cleared


def shedding_note(
    session: OpenSession, chosen: list[str], cleared: int, prompt: int, limit: int
) -> str:
    """The line the model reads about it."""
    state = session.state
    inline = state.policy.name == "inline"
    names = ", ".join(handle(state, i) if inline else i for i in chosen)
    return (
        f"dropped {len(chosen)} file(s) from the context, largest first (about {cleared} tokens), "
        f"because the prompt ({prompt} tokens) passed 90% of the model's input limit of {limit}: "
        f"{names}. activate(id) brings any of them back."
    )
