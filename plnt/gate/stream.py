"""Reading an OpenAI-compatible chat completion stream, as vLLM, SGLang, TGI and llama.cpp send it.

The wire format (vLLM's `chat_completion_stream_generator`): server-sent events, each
`data: {json}` followed by a blank line; a role chunk (`delta: {role, content: ""}`), one chunk
per detokenized step with `delta.content`, a chunk carrying `finish_reason`, then, with
`stream_options.include_usage`, a usage chunk with `choices: []` and `usage.completion_tokens`,
and finally `data: [DONE]`. An error inside the stream arrives as a chunk with an `error` object
(or `object: "error"`) before `[DONE]`.

Real engines vary it, and each variant is read as what it is: a role chunk without `content` or
with `content: null`, a finish chunk with an empty delta, no usage chunk at all (llama-cpp-python
ignores `stream_options`), SSE comments as keep-alives, extra fields (llama-server's `timings`).

Everything here is pure: bytes go in with the monotonic time they arrived, a tally comes out, and
anything unexpected raises `PromptError` so that the gate fails closed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

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


class Event(NamedTuple):
    """One server-sent event: its `data:` payload and when its first byte arrived."""

    payload: str
    arrived_ns: int


class EventParser:
    """Bytes off the wire in, events out, each stamped with the arrival time of its first byte.

    Time is taken where the bytes arrive, before anything is decoded: a large event (a 1 MB
    chunk) or a slow JSON parse must not make a token look later than it reached the client.
    `data:` lines up to a blank line form one payload; comments (`: keep-alive`) and the other
    fields (`event:`, `id:`, `retry:`) carry nothing the gate needs. Lines end with LF or CRLF.
    """

    def __init__(self) -> None:
        self._line = bytearray()
        self._line_ns = 0  # arrival of the first byte of the line being assembled
        self._data: list[str] = []
        self._event_ns: int | None = None
        self.comments = 0

    def feed(self, data: bytes, now_ns: int) -> list[Event]:
        """Take the bytes one read delivered at now_ns; return the events they complete."""
        events = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            if self._line:
                self._line += data[start:end]
                line, line_ns = bytes(self._line), self._line_ns
                self._line.clear()
            else:
                line, line_ns = data[start:end], now_ns
            start = end + 1
            event = self._line_done(line.removesuffix(b"\r"), line_ns)
            if event is not None:
                events.append(event)
        if start < len(data):
            if not self._line:
                self._line_ns = now_ns
            self._line += data[start:]
        return events

    def close(self) -> list[Event]:
        """The body ended: a last line without its line break, then any pending event."""
        events = []
        if self._line:
            line, self._line = bytes(self._line), bytearray()
            event = self._line_done(line.removesuffix(b"\r"), self._line_ns)
            if event is not None:
                events.append(event)
        event = self._flush()
        if event is not None:
            events.append(event)
        return events

    def _line_done(self, line: bytes, line_ns: int) -> Event | None:
        if not line:
            return self._flush()
        if line.startswith(b":"):
            self.comments += 1
            return None
        name, _, value = line.partition(b":")
        if name == b"data":
            try:
                text = value.removeprefix(b" ").decode()
            except UnicodeDecodeError:
                raise _malformed("an event is not valid UTF-8") from None
            if self._event_ns is None:
                self._event_ns = line_ns
            self._data.append(text)
        return None

    def _flush(self) -> Event | None:
        if not self._data:
            return None
        assert self._event_ns is not None
        event = Event("\n".join(self._data), self._event_ns)
        self._data, self._event_ns = [], None
        return event


# A server's completion_tokens may exceed what its text can hold by the tokens that print
# nothing: the end-of-sequence token, and a reasoning model's think delimiters.
SILENT_TOKENS = 3


@dataclass
class StreamTally:
    """What one streamed answer looked like, with monotonic nanosecond times.

    The gate decides on what arrived: `deltas` (chunks that carried generated text, one
    generation step each) and their arrival times. A server's usage.completion_tokens is only a
    claim: it is checked against the stream and never used to compute a figure.
    """

    max_tokens: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    max_gap_ns: int = 0  # the longest wait between two consecutive text chunks
    deltas: int = 0
    chars: int = 0
    text_bytes: int = 0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False

    def add_event(self, payload: str, now_ns: int) -> None:
        """Account for one event payload whose first byte arrived at now_ns."""
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
            text = delta.get(name)  # absent, null and "" (a role or finish chunk) carry nothing
            if text is not None and not isinstance(text, str):
                raise _malformed(f"delta.{name} is not a string")
            if text:
                self._add_text(text, now_ns)
                break  # one delta is one generation step, whichever field carries it
        finish = choice.get("finish_reason")
        if finish is not None:
            self.finish_reason = str(finish)

    def _add_text(self, text: str, now_ns: int) -> None:
        if self.first_token_ns is None:
            self.first_token_ns = now_ns
        else:
            assert self.last_token_ns is not None
            self.max_gap_ns = max(self.max_gap_ns, now_ns - self.last_token_ns)
        self.last_token_ns = now_ns
        self.deltas += 1
        self.chars += len(text)
        self.text_bytes += len(text.encode())

    def finish(self) -> int:
        """Check the completed stream; return the number of generation steps that arrived."""
        if not self.done:
            raise PromptError("no-done", "stream ended without data: [DONE]")
        if self.first_token_ns is None:
            raise PromptError("empty", "empty answer: no generated text")
        if self.max_tokens is not None and self.deltas > self.max_tokens:
            raise PromptError(
                "malformed",
                f"malformed answer: {self.deltas} text chunks streamed "
                f"but max_tokens was {self.max_tokens}",
            )
        if self.usage_tokens is not None:
            self._check_claim(self.usage_tokens)
        return self.deltas

    def _check_claim(self, claimed: int) -> None:
        """A token count the stream contradicts fails closed: the figures are not to be trusted."""
        can_hold = self.text_bytes + SILENT_TOKENS  # a token prints at least one byte, or nothing
        contradiction = None
        if claimed < self.deltas:
            contradiction = "fewer than the text chunks that streamed"
        elif self.max_tokens is not None and claimed > self.max_tokens:
            contradiction = f"more than max_tokens {self.max_tokens}"
        elif claimed > can_hold:
            contradiction = f"more than {self.text_bytes} bytes of text can hold"
        if contradiction:
            raise PromptError(
                "malformed",
                f"malformed answer: usage.completion_tokens {claimed} is {contradiction} "
                f"({self.deltas} text chunks, {self.text_bytes} bytes streamed)",
            )


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    if isinstance(error, dict):
        text = error.get("message", error)
    elif error is not None:
        text = error
    else:
        text = chunk.get("message", "unknown error")
    return str(text)[:200]
