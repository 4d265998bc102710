"""A minimal agent for each API, written independently of the proxy's code: it sends its whole
conversation, reads the answer (a JSON body, or a stream it checks for well-formedness and puts
back together), runs "tools" by returning canned outputs, and goes on until the model stops
calling tools. The tests drive the proxy with it where a real client would be too slow or would
not exercise a case (a parallel call, a mixed call, an error).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx

__all__ = ["Agent", "read_stream"]

PATHS = {
    "anthropic": "/v1/messages",
    "openai": "/v1/chat/completions",
    "responses": "/v1/responses",
}


def _events(text: str) -> list[tuple[str | None, Any]]:
    """(event name, decoded data) of each event; comments are skipped."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if name is None and not data:
            continue
        joined = "\n".join(data)
        out.append((name, joined if joined == "[DONE]" else json.loads(joined)))
    return out


def read_stream(api: str, text: str) -> dict[str, Any]:
    """The response a stream amounts to; AssertionError if the stream breaks its API's rules
    (order of events, block indices, tool-call indices)."""
    events = _events(text)
    assert events, "an empty stream"
    if api == "anthropic":
        assert events[0][1]["type"] == "message_start", events[0]
        assert events[-1][1]["type"] == "message_stop", events[-1]
        message = dict(events[0][1]["message"])
        blocks: list[dict[str, Any]] = []
        parts: dict[int, str] = {}
        open_block = None
        for name, data in events[1:-1]:
            assert name == data["type"], (name, data)
            if data["type"] == "content_block_start":
                assert open_block is None and data["index"] == len(blocks), data
                open_block = data["index"]
                blocks.append(dict(data["content_block"]))
            elif data["type"] == "content_block_delta":
                assert data["index"] == open_block, data
                delta, block = data["delta"], blocks[open_block]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "input_json_delta":
                    parts[open_block] = parts.get(open_block, "") + delta["partial_json"]
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "signature_delta":
                    block["signature"] += delta["signature"]
            elif data["type"] == "content_block_stop":
                assert data["index"] == open_block, data
                open_block = None
            elif data["type"] == "message_delta":
                message.update(data["delta"])
        for index, text_json in parts.items():
            blocks[index]["input"] = json.loads(text_json)
        message["content"] = blocks
        return message
    if api == "openai":
        assert events[-1][1] == "[DONE]", events[-1]
        content: str | None = None
        calls: list[dict[str, Any]] = []
        finish = None
        for _name, chunk in events[:-1]:
            for choice in chunk["choices"]:
                delta = choice["delta"]
                if delta.get("content"):
                    content = (content or "") + delta["content"]
                for piece in delta.get("tool_calls") or ():
                    index = piece["index"]
                    if index == len(calls):
                        assert piece.get("id"), piece
                        calls.append(
                            {
                                "id": piece["id"],
                                "type": "function",
                                "function": {"name": "", "arguments": ""},
                            }
                        )
                    assert index < len(calls), (index, calls)
                    function = piece.get("function") or {}
                    calls[index]["function"]["name"] += function.get("name") or ""
                    calls[index]["function"]["arguments"] += function.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        reply: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            reply["tool_calls"] = calls
        return {"choices": [{"index": 0, "message": reply, "finish_reason": finish}]}
    kinds = [data["type"] for _name, data in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    numbers = [data["sequence_number"] for _name, data in events]
    assert numbers == list(range(len(numbers))), numbers
    done = [data for _name, data in events if data["type"] == "response.output_item.done"]
    assert [d["output_index"] for d in done] == list(range(len(done))), done
    final = events[-1][1]["response"]
    assert final["output"] == [d["item"] for d in done], (final["output"], done)
    return dict(final)


def tool_calls(api: str, response: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, name, arguments) of each tool call of a response."""
    if api == "anthropic":
        return [
            (b["id"], b["name"], b["input"]) for b in response["content"] if b["type"] == "tool_use"
        ]
    if api == "openai":
        message = response["choices"][0]["message"]
        return [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or ()
        ]
    return [
        (i["call_id"], i["name"], json.loads(i["arguments"]))
        for i in response["output"]
        if i["type"] == "function_call"
    ]


@attrs.define
class Agent:
    """One conversation with a model through ``base``, in one API."""

    api: str
    base: str
    task: str = "Fix the bug."
    stream: bool = False
    system: str = "You are a careful coding agent."
    headers: dict[str, str] = attrs.field(factory=dict)
    tools: list[str] = attrs.field(factory=lambda: ["bash"])
    run_tool: Callable[[str, dict[str, Any]], str] = lambda name, args: f"ran {name} {args}"
    conversation: list[dict[str, Any]] = attrs.field(factory=list)
    responses: list[dict[str, Any]] = attrs.field(factory=list)
    raw: list[str] = attrs.field(factory=list)
    """Each answer's body as the client got it."""

    def __attrs_post_init__(self) -> None:
        if self.api == "openai":
            self.conversation.append({"role": "system", "content": self.system})
        if self.api == "responses":
            self.conversation.append(
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": self.system}],
                }
            )
        self.conversation.append(self._user(self.task))

    def _user(self, text: str) -> dict[str, Any]:
        if self.api == "responses":
            return {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
        return {"role": "user", "content": text}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "scripted-model", "stream": self.stream}
        if self.api == "anthropic":
            body.update(
                max_tokens=1000,
                system=self.system,
                messages=self.conversation,
                tools=[
                    {"name": n, "description": n, "input_schema": {"type": "object"}}
                    for n in self.tools
                ],
            )
        elif self.api == "openai":
            body.update(
                messages=self.conversation,
                tools=[
                    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                    for n in self.tools
                ],
            )
        else:
            body.update(
                input=self.conversation,
                store=False,
                tools=[
                    {"type": "function", "name": n, "parameters": {"type": "object"}}
                    for n in self.tools
                ],
            )
        return body

    def send(self, client: httpx.Client) -> httpx.Response:
        headers = (
            {"x-api-key": "sk-dummy"}
            if self.api == "anthropic"
            else {"authorization": "Bearer sk-dummy"}
        )
        return client.post(
            self.base + PATHS[self.api],
            json=self.body(),
            headers={**headers, **self.headers},
            timeout=60,
        )

    def step(self, client: httpx.Client) -> list[tuple[str, str, dict[str, Any]]]:
        """One model call and the tool results it asks for; returns the calls."""
        answer = self.send(client)
        assert answer.status_code == 200, answer.text
        self.raw.append(answer.text)
        response = read_stream(self.api, answer.text) if self.stream else answer.json()
        self.responses.append(response)
        calls = tool_calls(self.api, response)
        if self.api == "anthropic":
            self.conversation.append({"role": "assistant", "content": response["content"]})
            if calls:
                self.conversation.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": i,
                                "content": self.run_tool(n, a),
                            }
                            for i, n, a in calls
                        ],
                    }
                )
        elif self.api == "openai":
            message = response["choices"][0]["message"]
            self.conversation.append(message)
            self.conversation += [
                {"role": "tool", "tool_call_id": i, "content": self.run_tool(n, a)}
                for i, n, a in calls
            ]
        else:
            self.conversation += [
                {k: v for k, v in item.items() if k not in ("id", "status")}
                for item in response["output"]
            ]
            self.conversation += [
                {"type": "function_call_output", "call_id": i, "output": self.run_tool(n, a)}
                for i, n, a in calls
            ]
        return calls

    def run(self, client: httpx.Client, limit: int = 20) -> None:
        """Call the model until it stops calling tools."""
        for _ in range(limit):
            if not self.step(client):
                return
        raise AssertionError("the model never stopped calling tools")
