"""Reading an OpenAI-compatible chat completion stream, as vLLM, SGLang and TGI send it.

The wire format (vLLM's `chat_completion_stream_generator`): server-sent events, each
`data: {json}` followed by a blank line; a role chunk (`delta: {role, content: ""}`), one chunk
per detokenized step with `delta.content`, a chunk carrying `finish_reason`, then, with
`stream_options.include_usage`, a usage chunk with `choices: []` and `usage.completion_tokens`,
and finally `data: [DONE]`. An error inside the stream arrives as a chunk with an `error` object
(or `object: "error"`) before `[DONE]`.

Everything here is pure: lines go in with the monotonic time they arrived, a tally comes out, and
anything unexpected raises `PromptError` so that the gate fails closed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"

# Why a prompt failed, as a short machine-readable outcome; "ok" means it succeeded.
OUTCOMES: dict[str, str] = {
    "ok": "the answer streamed completely",
    "connect-error": "the server could not be reached (after the bounded retries)",
    "timeout": "the request did not finish within the per-request timeout",
    "http-error": "the server answered with a non-2xx status",
    "stream-error": "the connection broke while the answer was streaming",
    "server-error": "the server reported an error inside the stream",
    "malformed": "a chunk was not valid JSON or lacked a required field",
    "no-done": "the stream ended without `data: [DONE]`",
    "empty": "the answer had no generated text",
    "client-error": "the gate client itself failed (counted as a failure, never a pass)",
}

# Delta fields that carry generated text. Reasoning models stream their thinking as
# `reasoning_content` (vLLM, SGLang) or `reasoning`; those tokens are generated and are counted in
# usage.completion_tokens, so they are timed too.
TEXT_FIELDS = ("content", "reasoning_content", "reasoning")


class PromptError(Exception):
    """A prompt failed; `outcome` is a key of OUTCOMES and the message says why."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


def _malformed(message: str) -> PromptError:
    return PromptError("malformed", f"malformed chunk: {message}")


class EventDecoder:
    """Groups SSE lines into events: `data:` lines up to a blank line form one payload."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """Take one line (without its line break); return a payload when an event completes."""
        if line == "":
            return self.flush()
        if line.startswith(":"):
            return None  # an SSE comment, e.g. a keep-alive
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value.removeprefix(" "))
        # `event:`, `id:` and `retry:` carry nothing the gate needs.
        return None

    def flush(self) -> str | None:
        """The pending payload, if any (also used at the end of the body)."""
        if not self._data:
            return None
        payload = "\n".join(self._data)
        self._data = []
        return payload


@dataclass
class StreamTally:
    """What one streamed answer looked like, with monotonic nanosecond times."""

    first_token_ns: int | None = None
    last_token_ns: int | None = None
    deltas: int = 0
    chars: int = 0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False

    def add_event(self, payload: str, now_ns: int) -> None:
        """Account for one event payload that arrived at now_ns."""
        if self.done:
            return  # anything after [DONE] is not part of the answer
        if payload.strip() == DONE:
            self.done = True
            return
        try:
            chunk = json.loads(payload)
        except ValueError as err:
            raise _malformed(f"invalid JSON ({err})") from None
        if not isinstance(chunk, dict):
            raise _malformed("not a JSON object")
        if "error" in chunk or chunk.get("object") == "error":
            raise PromptError("server-error", f"server error in stream: {_error_text(chunk)}")
        self._add_usage(chunk)
        choices = chunk.get("choices")
        if choices is None:
            if "usage" not in chunk:
                raise _malformed("neither choices nor usage")
            return  # some servers send the usage chunk with `choices: null` or no choices
        if not isinstance(choices, list):
            raise _malformed("choices is not a list")
        for choice in choices:
            self._add_choice(choice, now_ns)

    def _add_usage(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if usage is None:
            return
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise _malformed("usage without a valid completion_tokens")
        self.usage_tokens = tokens

    def _add_choice(self, choice: Any, now_ns: int) -> None:
        if not isinstance(choice, dict):
            raise _malformed("a choice is not an object")
        if choice.get("index", 0) != 0:
            return  # the gate asks for one choice (n=1)
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            raise _malformed("a choice without a delta object")
        for name in TEXT_FIELDS:
            text = delta.get(name)
            if text is not None and not isinstance(text, str):
                raise _malformed(f"delta.{name} is not a string")
            if text:
                if self.first_token_ns is None:
                    self.first_token_ns = now_ns
                self.last_token_ns = now_ns
                self.deltas += 1
                self.chars += len(text)
                break  # one delta is one generation step, whichever field carries it
        finish = choice.get("finish_reason")
        if finish is not None:
            self.finish_reason = str(finish)

    def finish(self) -> int:
        """Check the completed stream and return its completion token count."""
        if not self.done:
            raise PromptError("no-done", "stream ended without data: [DONE]")
        if self.first_token_ns is None:
            raise PromptError("empty", "empty answer: no generated text")
        if self.usage_tokens is None:
            return self.deltas
        if self.usage_tokens < 1:
            raise _malformed(f"usage.completion_tokens is {self.usage_tokens} but text streamed")
        return self.usage_tokens


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    if isinstance(error, dict):
        text = error.get("message", error)
    elif error is not None:
        text = error
    else:
        text = chunk.get("message", "unknown error")
    return str(text)[:200]
