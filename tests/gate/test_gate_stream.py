"""Parsing the SSE stream, on transcripts shaped like vLLM's (no network)."""

import json

import pytest

from plnt.gate.stream import EventDecoder, PromptError, StreamTally

BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(delta, finish=None):
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return json.dumps({**BASE, "choices": [choice]})


def usage(tokens, choices=True):
    body = {
        **BASE,
        "usage": {"prompt_tokens": 9, "total_tokens": 9 + tokens, "completion_tokens": tokens},
    }
    if choices:
        body["choices"] = []
    return json.dumps(body)


def vllm_transcript(words, usage_tokens=None):
    """Events as vLLM sends them: role, one delta per token, finish, usage, [DONE]."""
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": w}) for w in words]
    events.append(chunk({"content": ""}, "stop"))
    events.append(usage(len(words) if usage_tokens is None else usage_tokens))
    events.append("[DONE]")
    return events


def tally_of(events, times=None):
    tally = StreamTally()
    for i, payload in enumerate(events):
        tally.add_event(payload, (times or {}).get(i, 1000 * i))
    return tally


def test_decoder_groups_data_lines_into_events():
    decoder = EventDecoder()
    lines = [": keep-alive", 'data: {"a": 1}', "", "event: x", "data:[DONE]", ""]
    assert [decoder.feed(line) for line in lines] == [None, None, '{"a": 1}', None, None, "[DONE]"]


def test_decoder_joins_multi_line_data_and_flushes_at_end():
    decoder = EventDecoder()
    assert decoder.feed('data: {"a":') is None
    assert decoder.feed("data: 1}") is None
    assert decoder.flush() == '{"a":\n1}'
    assert decoder.flush() is None


def test_vllm_stream_counts_tokens_from_usage_and_times_text_deltas():
    events = vllm_transcript(["Hel", "lo", " there"], usage_tokens=4)
    tally = tally_of(events)
    assert tally.finish() == 4  # usage wins over the 3 deltas
    assert tally.deltas == 3
    assert tally.first_token_ns == 1000  # event 1; the role chunk's "" is not a token
    assert tally.last_token_ns == 3000
    assert tally.finish_reason == "stop"


def test_without_usage_the_deltas_are_counted():
    events = [e for e in vllm_transcript(["a", "b"]) if '"usage"' not in e]
    assert tally_of(events).finish() == 2


@pytest.mark.parametrize("choices", [False, True])
def test_usage_chunk_with_null_or_missing_choices_is_accepted(choices):
    events = vllm_transcript(["a", "b"])
    usage_only = {**BASE, "usage": {"completion_tokens": 7}}
    if choices:
        usage_only["choices"] = None
    events[-2] = json.dumps(usage_only)
    assert tally_of(events).finish() == 7


def test_reasoning_deltas_are_generated_tokens():
    events = vllm_transcript(["answer"])
    events.insert(1, chunk({"reasoning_content": "thinking"}))
    tally = tally_of(events)
    assert tally.first_token_ns == 1000
    assert tally.deltas == 2


def test_events_after_done_are_ignored():
    events = [*vllm_transcript(["a"]), "not json at all"]
    assert tally_of(events).finish() == 1


def test_choice_other_than_the_first_is_ignored():
    events = vllm_transcript(["a"])
    events.insert(2, json.dumps({**BASE, "choices": [{"index": 1, "delta": {"content": "zz"}}]}))
    assert tally_of(events).chars == 1


@pytest.mark.parametrize(
    ("payload", "outcome", "message"),
    [
        ('{"id": "x", "choices": [', "malformed", "invalid JSON"),
        ("[1, 2]", "malformed", "not a JSON object"),
        (json.dumps({**BASE}), "malformed", "neither choices nor usage"),
        (json.dumps({**BASE, "choices": {"0": {}}}), "malformed", "choices is not a list"),
        (json.dumps({**BASE, "choices": ["x"]}), "malformed", "a choice is not an object"),
        (json.dumps({**BASE, "choices": [{"index": 0}]}), "malformed", "without a delta"),
        (chunk({"content": 5}), "malformed", "delta.content is not a string"),
        (json.dumps({**BASE, "usage": {"prompt_tokens": 3}}), "malformed", "completion_tokens"),
        (json.dumps({**BASE, "usage": {"completion_tokens": "4"}}), "malformed", "completion"),
        (
            json.dumps({"error": {"message": "engine died", "type": "InternalError"}}),
            "server-error",
            "server error in stream: engine died",
        ),
        (
            json.dumps({"object": "error", "message": "out of memory", "code": 500}),
            "server-error",
            "server error in stream: out of memory",
        ),
    ],
)
def test_bad_chunks_fail_the_prompt(payload, outcome, message):
    events = vllm_transcript(["a", "b"])
    events.insert(2, payload)
    with pytest.raises(PromptError) as caught:
        tally_of(events)
    assert caught.value.outcome == outcome
    assert message in caught.value.message


def test_stream_without_done_fails():
    events = vllm_transcript(["a", "b"])[:-1]
    with pytest.raises(PromptError) as caught:
        tally_of(events).finish()
    assert caught.value.outcome == "no-done"


def test_empty_answer_fails():
    events = vllm_transcript([], usage_tokens=0)
    with pytest.raises(PromptError) as caught:
        tally_of(events).finish()
    assert caught.value.outcome == "empty"


def test_usage_of_zero_tokens_with_text_fails():
    events = vllm_transcript(["a"], usage_tokens=0)
    with pytest.raises(PromptError) as caught:
        tally_of(events).finish()
    assert caught.value.outcome == "malformed"
