"""Parsing the SSE stream, on transcripts shaped like vLLM's and llama.cpp's (no network)."""

import json

import pytest

from plnt.gate.stream import Event, EventParser, PromptError, StreamTally

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


def tally_of(events, times=None, max_tokens=None):
    tally = StreamTally(max_tokens=max_tokens)
    for i, payload in enumerate(events):
        tally.add_event(payload, (times or {}).get(i, 1000 * i))
    return tally


def test_parser_groups_data_lines_into_events():
    parser = EventParser()
    wire = b': keep-alive\n\ndata: {"a": 1}\n\nevent: x\ndata:[DONE]\n\n'
    assert parser.feed(wire, 7) == [Event('{"a": 1}', 7), Event("[DONE]", 7)]
    assert parser.comments == 1


def test_parser_joins_multi_line_data_and_flushes_at_end():
    parser = EventParser()
    assert parser.feed(b'data: {"a":\r\ndata: 1}', 1) == []
    assert parser.close() == [Event('{"a":\n1}', 1)]
    assert parser.close() == []


def test_an_event_is_stamped_when_its_first_byte_arrived():
    """A large event split over many reads is timed by its first read, not its last: the
    gate's clock must not run while a 1 MB chunk trickles in or is parsed."""
    parser = EventParser()
    head, body = b'data: {"choices": [{"index": 0, "delta": {"content": "', b"x" * 100_000
    assert parser.feed(head, 100) == []
    for k in range(10):
        assert parser.feed(body[k * 10_000 : (k + 1) * 10_000], 200 + k) == []
    events = parser.feed(b'"}}]}\n\ndata: [DONE]', 900)
    assert [e.arrived_ns for e in events] == [100]
    assert parser.close() == [Event("[DONE]", 900)]
    tally = tally_of([e.payload for e in [*events, Event("[DONE]", 900)]])
    assert tally.chars == 100_000


def test_a_comment_before_an_event_does_not_date_it():
    parser = EventParser()
    assert parser.feed(b": ping\n", 1) == []
    assert parser.feed(b"data: [DONE]\n\n", 5) == [Event("[DONE]", 5)]


def test_invalid_utf8_is_malformed():
    with pytest.raises(PromptError) as caught:
        EventParser().feed(b"data: \xff\xfe\n\n", 1)
    assert caught.value.outcome == "malformed"


def test_vllm_stream_counts_what_arrived_and_checks_the_usage_claim():
    events = vllm_transcript(["Hel", "lo", " there"], usage_tokens=4)
    tally = tally_of(events)
    assert tally.finish() == 3  # the 3 deltas that arrived; usage 4 is only a claim
    assert tally.usage_tokens == 4
    assert tally.deltas == 3
    assert tally.first_token_ns == 1000  # event 1; the role chunk's "" is not a token
    assert tally.last_token_ns == 3000
    assert tally.finish_reason == "stop"


@pytest.mark.parametrize(
    ("claimed", "max_tokens", "message"),
    [
        (5000, None, "usage.completion_tokens 5000 is more than 11 bytes of text can hold"),
        (65, 64, "usage.completion_tokens 65 is more than max_tokens 64"),
        (2, None, "usage.completion_tokens 2 is fewer than the text chunks that streamed"),
    ],
)
def test_a_token_count_the_stream_contradicts_fails_closed(claimed, max_tokens, message):
    """The fail-open found: a slow server claiming many tokens made TPOT look tiny. A claim the
    stream cannot hold fails the prompt as malformed, with the figures in the message."""
    events = vllm_transcript(["Hel", "lo", " th", "ere"], usage_tokens=claimed)
    with pytest.raises(PromptError) as caught:
        tally_of(events, max_tokens=max_tokens).finish()
    assert caught.value.outcome == "malformed"
    assert message in caught.value.message
    assert "(4 text chunks, 11 bytes streamed)" in caught.value.message


def test_more_text_chunks_than_max_tokens_fails_closed():
    with pytest.raises(PromptError) as caught:
        tally_of(vllm_transcript(["a", "b", "c"]), max_tokens=2).finish()
    assert "3 text chunks streamed but max_tokens was 2" in caught.value.message


def test_the_end_token_may_be_counted_without_text():
    events = vllm_transcript(["a", "b"], usage_tokens=3)  # "a", "b" and the end token
    assert tally_of(events, max_tokens=3).finish() == 2


def test_the_largest_gap_between_text_chunks_is_kept():
    events = vllm_transcript(["a", "b", "c", "d"])
    times = {1: 10, 2: 20, 3: 95, 4: 100}
    tally = tally_of(events, times)
    assert tally.max_gap_ns == 75
    assert tally.finish() == 4


@pytest.mark.parametrize(
    "role_delta",
    [
        {"role": "assistant"},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": ""},
    ],
)
def test_real_engines_role_chunks_carry_no_token(role_delta):
    """llama.cpp sends the role chunk with `content: null` (llama-server) or without `content`
    (llama-cpp-python), and the finish chunk with an empty delta."""
    events = [
        chunk(role_delta),
        chunk({"content": "a"}),
        chunk({"content": "b"}),
        chunk({}, "length"),
        "[DONE]",
    ]
    tally = tally_of(events)
    assert tally.finish() == 2
    assert tally.first_token_ns == 1000
    assert tally.finish_reason == "length"


def test_without_usage_the_deltas_are_counted():
    events = [e for e in vllm_transcript(["a", "b"]) if '"usage"' not in e]
    tally = tally_of(events)
    assert tally.finish() == 2
    assert tally.usage_tokens is None


@pytest.mark.parametrize("choices", [False, True])
def test_usage_chunk_with_null_or_missing_choices_is_accepted(choices):
    events = vllm_transcript(["a", "b"])
    usage_only = {**BASE, "usage": {"completion_tokens": 7}}
    if choices:
        usage_only["choices"] = None
    events[-2] = json.dumps(usage_only)
    with pytest.raises(PromptError, match="completion_tokens 7 is more than 2 bytes"):
        tally_of(events).finish()
    usage_only["usage"]["completion_tokens"] = 2
    events[-2] = json.dumps(usage_only)
    assert tally_of(events).finish() == 2


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
