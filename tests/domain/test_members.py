"""``members``: a state's persistent set as a frozenset, the very one ``frozenset(ids)`` gives
(the same members, in the same iteration order: the content cache's order follows it)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pset
from pyrsistent.typing import PSet

from selfctx.domain.session.state import members


@given(
    st.lists(st.tuples(st.booleans(), st.text(max_size=12)), max_size=300),
)
def test_members_are_the_frozenset_of_the_set_in_its_order(steps: list[tuple[bool, str]]) -> None:
    ids: PSet[str] = pset()
    for add, name in steps:
        ids = ids.add(name) if add or name not in ids else ids.remove(name)
        found = members(ids)
        assert found == frozenset(ids) and list(found) == list(frozenset(ids))
