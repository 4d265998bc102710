"""A JSON object is a flat map (decisions 0127 and 0132): the pairs it was given, in the order it
was given them (the client's, so every text written from it is what the client sent, whatever the
hash seed), equal to and hashed as any mapping of the same pairs in any order, immutable, one
tuple of keys shared; nested and larger objects are flat maps too."""

from __future__ import annotations

import json
import pickle

import pytest
from pyrsistent import pmap

from selfctx.domain.chat import (
    FLAT_KEYS,
    STORED_ORDER_KEYS,
    FlatMap,
    ToolCallRequest,
    freeze_json,
    json_from_stored,
    message_from_json,
    message_to_json,
    thaw_json,
)
from selfctx.domain.errors import InvalidInput

EDIT = {"path": "src/a.py", "old_string": "x = 1", "new_string": "x = 2", "replace_all": False}


def test_a_flat_map_keeps_the_order_it_was_given_and_equals_any_order() -> None:
    frozen = freeze_json(dict(EDIT))
    persistent = pmap(EDIT)
    assert type(frozen) is FlatMap
    assert list(frozen) == list(EDIT) and list(frozen.items()) == list(EDIT.items())
    assert frozen == persistent and persistent == frozen and frozen == EDIT
    reordered = freeze_json(dict(reversed(EDIT.items())))
    assert list(reordered) == list(reversed(EDIT)) and reordered == frozen
    assert hash(frozen) == hash(persistent) == hash(reordered)
    assert frozen != {**EDIT, "replace_all": True} and frozen != {"path": "src/a.py"}
    assert thaw_json(frozen) == EDIT
    assert json.dumps(thaw_json(frozen)) == json.dumps(EDIT)
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


def test_larger_and_nested_objects_keep_their_order_at_every_depth() -> None:
    many = {f"k{n}": n for n in reversed(range(3 * FLAT_KEYS))}
    frozen = freeze_json(many)
    assert type(frozen) is FlatMap and frozen == many and list(frozen) == list(many)
    assert all(frozen[k] == v for k, v in many.items()) and "k0" in frozen and "x" not in frozen
    with pytest.raises(KeyError):
        frozen["x"]
    assert pickle.loads(pickle.dumps(frozen)) == frozen
    nested = {"z": [1, {"y": 2, "b": [{"q": 1, "a": 2}]}], "b": {"c": "d", "a": many}, "a": ()}
    again = freeze_json(nested)
    assert type(again["b"]) is FlatMap and type(again["z"][1]) is FlatMap
    assert json.dumps(thaw_json(again)) == json.dumps({**nested, "a": []})
    assert hash(again) == hash(freeze_json(dict(reversed(nested.items()))))
    assert freeze_json({}) == {} and thaw_json(freeze_json({})) == {}


def test_a_persistent_map_stored_before_keeps_the_order_it_has() -> None:
    persistent = pmap({f"k{n}": {"v": n} for n in range(12)})
    frozen = freeze_json(persistent)
    assert type(frozen) is FlatMap and list(frozen) == list(persistent) and frozen == persistent


def _assistant(calls: list[ToolCallRequest]) -> dict[str, object]:
    return {
        "role": "assistant",
        "text": "editing",
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in calls],
    }


def test_an_object_past_what_a_store_keeps_in_order_is_stored_as_its_text() -> None:
    big = {f"k{n}": n for n in reversed(range(STORED_ORDER_KEYS + 1))}
    calls = [
        ToolCallRequest("c1", "edit", EDIT),
        ToolCallRequest("c2", "set", {"z": 1, "env": big}),
    ]
    message = message_from_json(_assistant(calls))
    stored = message_to_json(message)
    small, large = (c["arguments"] for c in stored["tool_calls"])
    assert small == EDIT and list(small) == list(EDIT)  # as before: an object
    assert large == json.dumps({"z": 1, "env": big}, separators=(",", ":"))
    again = message_from_json(json.loads(json.dumps(stored)))
    assert again == message
    assert [json.dumps(thaw_json(c.arguments)) for c in again.tool_calls] == [  # type: ignore[union-attr]
        json.dumps(EDIT),
        json.dumps({"z": 1, "env": big}),
    ]


def test_a_message_stored_before_loads_in_the_order_it_was_stored() -> None:
    stored = _assistant([ToolCallRequest("c1", "edit", EDIT)])
    stored["tool_calls"][0]["arguments"] = dict(sorted(EDIT.items()))  # type: ignore[index]
    call = message_from_json(stored).tool_calls[0]  # type: ignore[union-attr]
    assert call.arguments == EDIT and list(call.arguments) == sorted(EDIT)
    assert json_from_stored({"a": 1}) == {"a": 1}
    for bad in ("{not json", "[1, 2]"):
        with pytest.raises(InvalidInput):
            json_from_stored(bad)
