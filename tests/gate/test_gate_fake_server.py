"""The loopback vLLM-style server itself: its wire format and its side routes."""

import json
import socket
import subprocess
import sys

import httpx
import pytest

from plnt.gate.fake_server import Behaviour
from tests.support import serve_in_thread


def stream_events(url, body):
    with (
        httpx.Client(trust_env=False) as client,
        client.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["transfer-encoding"] == "chunked"
        text = response.read().decode()
    assert text.endswith("\n\n")
    return [block.removeprefix("data: ") for block in text.split("\n\n") if block]


BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 64,
}


def test_stream_is_shaped_like_vllm():
    with serve_in_thread(Behaviour(tokens=3)) as server:
        events = stream_events(server.url, BODY)
    assert len(server.received_ns) == 1
    assert len(server.token_ns[0]) == 3
    assert server.received_ns[0] <= server.token_ns[0][0] <= server.token_ns[0][-1]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "lorem "},
        {"content": "ipsum "},
        {"content": "dolor "},
        {"content": ""},
        None,
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 4 + ["stop"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def test_max_tokens_cuts_with_length_on_the_last_token():
    with serve_in_thread(Behaviour(tokens=10)) as server:
        events = stream_events(server.url, {**BODY, "max_tokens": 2})
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[2]["choices"][0] == {
        "index": 0,
        "delta": {"content": "ipsum "},
        "logprobs": None,
        "finish_reason": "length",
        "stop_reason": None,
    }
    assert chunks[3]["usage"]["completion_tokens"] == 2
    assert len(chunks) == 4


def test_without_include_usage_there_is_no_usage_chunk():
    with serve_in_thread(Behaviour(tokens=2)) as server:
        events = stream_events(server.url, {**BODY, "stream_options": None})
    assert not any("usage" in json.loads(e) for e in events[:-1])


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/health", None, 200),
        ("GET", "/v1/models", None, 200),
        ("GET", "/stats", None, 200),
        ("GET", "/nowhere", None, 404),
        ("POST", "/v1/chat/completions", {**BODY, "stream": False}, 400),
    ],
)
def test_side_routes(method, path, body, status):
    with serve_in_thread(Behaviour()) as server, httpx.Client(trust_env=False) as client:
        response = client.request(method, server.url + path, json=body)
    assert response.status_code == status


def test_garbage_request_gets_400():
    with (
        serve_in_thread(Behaviour()) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock,
    ):
        sock.sendall(b"NONSENSE\r\n\r\n")
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400 ")


def test_runs_as_a_module_and_refuses_bad_options():
    run = subprocess.run(
        [sys.executable, "-m", "plnt.gate.fake_server", "--tokens", "-1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "must not be negative" in run.stderr
