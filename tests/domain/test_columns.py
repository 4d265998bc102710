"""The state's per-object columns and pool (decision 0140) behave as the persistent map and set
they replace: the same answers after any sequence of changes, old versions unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from selfctx.domain.errors import InvalidInput
from selfctx.domain.session.columns import CHUNK, IndexedSet, IntColumn, KindColumn

_IDS = [f"o{n}" for n in range(3 * CHUNK)]
_steps = st.lists(
    st.tuples(
        st.sampled_from(["index", "set", "add", "discard"]),
        st.sampled_from(_IDS[:8] + _IDS[CHUNK - 2 : CHUNK + 2] + _IDS[-3:]),
        st.integers(-(2**63) + 1, 2**63 - 1),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(_steps)
def test_columns_and_the_pool_answer_as_a_map_and_a_set_do(steps: list[Any]) -> None:
    positions: Any = pmap()
    index: Any = pvector()
    ints, kinds, pool = IntColumn(), KindColumn(), IndexedSet()
    model_ints: dict[str, int] = {}
    model_kinds: dict[str, str] = {}
    model_pool: set[str] = set()
    versions = []
    for what, key, value in steps:
        if what == "index" and key not in positions:
            # an object joins the index and the pool; values held aside take their place
            positions, index = positions.set(key, len(index)), index.append(key)
            kinds = kinds.set(key, "file" if value % 2 else "toolcall", positions, index)
            model_kinds[key] = "file" if value % 2 else "toolcall"
            ints = ints.placed(key, positions, index)
            pool = pool.add(key, positions, index)
            model_pool.add(key)
        elif what == "set":
            ints = ints.set(key, value, positions, index)
            model_ints[key] = value
        elif what == "add":
            pool = pool.add(key, positions, index)
            model_pool.add(key)
        elif what == "discard":
            pool = pool.discard(key)
            model_pool.discard(key)
        versions.append((ints, dict(model_ints), pool, set(model_pool)))
        assert dict(ints.items()) == model_ints and len(ints) == len(model_ints)
        assert dict(kinds.items()) == model_kinds
        assert set(pool) == model_pool and len(pool) == len(model_pool)
        for probe in (*_IDS[:8], key, 3):
            assert ints.get(probe) == model_ints.get(probe)
            assert (probe in pool) == (probe in model_pool)
    for column, values, ids, members in versions:  # every version as it was made
        assert column == values and ids == members
    # the in-place forms reach the same values
    built = IntColumn.of(model_ints, positions, index)
    assert built == ints and list(built) == list(ints)
    rebuilt = IndexedSet.of(model_pool, positions, index)
    assert rebuilt == pool and list(rebuilt) == list(pool)


def test_a_value_a_column_cannot_hold_is_refused() -> None:
    positions, index = pmap({"a": 0}), pvector(["a"])
    with pytest.raises(InvalidInput):
        IntColumn().set("a", 2**63, positions, index)
    with pytest.raises(InvalidInput):
        KindColumn().set("a", "folder", positions, index)
