"""A small JSON object of scalars is a flat map (decision 0127): the pairs it was given, in the
order a persistent map of them iterates (so every text written from it is what that map gave),
equal to and hashed as any mapping of the same pairs, immutable, one tuple of keys shared."""

from __future__ import annotations

import json
import pickle

import pytest
from pyrsistent import pmap

from selfctx.domain.chat import (
    FLAT_KEYS,
    FlatMap,
    ToolCallRequest,
    freeze_json,
    message_from_json,
    message_to_json,
    thaw_json,
)

EDIT = {"path": "src/a.py", "old_string": "x = 1", "new_string": "x = 2", "replace_all": False}


def test_a_flat_map_iterates_as_a_persistent_map_and_equals_it() -> None:
    frozen = freeze_json(dict(EDIT))
    persistent = pmap(EDIT)
    assert type(frozen) is FlatMap
    assert list(frozen) == list(persistent) and list(frozen.items()) == list(persistent.items())
    assert frozen == persistent and persistent == frozen and frozen == EDIT
    assert hash(frozen) == hash(persistent)
    assert frozen != {**EDIT, "replace_all": True} and frozen != {"path": "src/a.py"}
    assert thaw_json(frozen) == EDIT
    assert json.dumps(thaw_json(frozen)) == json.dumps(thaw_json(persistent))
    assert frozen["path"] == "src/a.py" and frozen.get("nothing") is None and "path" in frozen
    with pytest.raises(KeyError):
        frozen["nothing"]
    with pytest.raises(AttributeError):
        frozen._values = ()
    assert pickle.loads(pickle.dumps(frozen)) == frozen


def test_calls_with_the_same_parameters_share_one_tuple_of_keys() -> None:
    calls = [ToolCallRequest(f"c{n}", "edit", {**EDIT, "path": f"f{n}.py"}) for n in range(3)]
    assert len({id(c.arguments._keys) for c in calls}) == 1  # type: ignore[attr-defined]
    again = message_from_json(message_to_json(message_from_json(_assistant(calls))))
    assert again == message_from_json(_assistant(calls))


def test_larger_or_nested_objects_stay_persistent_maps() -> None:
    many = {f"k{n}": n for n in range(FLAT_KEYS + 1)}
    assert type(freeze_json(many)) is not FlatMap and freeze_json(many) == many
    nested = {"a": [1, 2], "b": {"c": "d"}}
    assert type(freeze_json(nested)) is not FlatMap and thaw_json(freeze_json(nested)) == nested
    assert freeze_json({}) == {}


def _assistant(calls: list[ToolCallRequest]) -> dict[str, object]:
    return {
        "role": "assistant",
        "text": "editing",
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in calls],
    }
