"""The canary gate against a real inference server and a real client, both on loopback.

Server: llama.cpp's `llama-server` (hack/install-llama-server.sh), one thread, serving the tiny
GGUF the tests generate (tests/engine/tiny_gguf.py): a token takes a few milliseconds, and every
answer runs to max_tokens. Second measuring client: the official `openai` package, streaming the
same prompts and timing chunk arrivals itself (TTFT: just before the request is made -> first
chunk with content; TPOT: (last - first) / (chunks - 1)).

Agreement: the two clients take turns prompt by prompt on fresh prompts of one shape (a new
nonce each, so neither is flattered by the other's cached prefixes) and their medians are
compared. Rounds of ten prompts each differ by 15-50% from each other on this machine, and
alternating rounds let the load of other tests land on one client only (a run of three rounds
read the gate 35% above the client once), so the turns are single prompts. On a quiet machine
the medians agree within 20% (turn by turn, 24 pairs: gate 10.2 ms TTFT / 0.81 ms TPOT, openai
12.4 / 0.78). When other tests share the cores (the suite runs two at a time) the openai
client, which parses every chunk into objects, reads higher and the lighter gate does not: so
the test holds the gate to never reading higher than the independent clock (beyond AGREEMENT
or AGREEMENT_MS), and both to within FACTOR of each other (a wrong divisor or a clock started at
the wrong event is off by more).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import openai
import pytest

from plnt.gate import GateConfig, prompts, run_gate_async
from tests.engine import llama_server, tiny_gguf

MAX_TOKENS = 24
PROMPTS = 10
PAIRS = 24
AGREEMENT = 0.15  # the gate reads at most 15% higher than the openai client ...
AGREEMENT_MS = 3.0  # ... or 3 ms, whichever is larger
FACTOR = 3.0  # and the two are within this factor of each other


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tiny_gguf.write(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def server(model: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    with llama_server.serving(model, log=log) as url:
        yield url


def gate(url: str, nonce: str, **changes) -> object:
    config = {
        "base_url": url,
        "model": llama_server.MODEL_ALIAS,
        "prompts": PROMPTS,
        "max_tokens": MAX_TOKENS,
        "concurrency": 1,
        "ttft_budget_ms": 60_000,
        "tpot_budget_ms": 60_000,
        "timeout_s": 60,
        "nonce": nonce,
        **changes,
    }
    return asyncio.run(run_gate_async(GateConfig(**config)))


def openai_round(url: str, nonce: str, count: int = PROMPTS) -> tuple[list[float], list[float]]:
    """(TTFT ms, TPOT ms) per prompt, as the official client sees the same prompts."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
    ttfts, tpots = [], []
    for index in range(count):
        start = time.perf_counter()
        arrivals = []
        stream = client.chat.completions.create(
            model=llama_server.MODEL_ALIAS,
            messages=prompts.messages(index, nonce),
            max_tokens=MAX_TOKENS,
            stream=True,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.perf_counter())
        assert len(arrivals) == MAX_TOKENS, f"prompt {index}: {len(arrivals)} content chunks"
        ttfts.append((arrivals[0] - start) * 1000)
        tpots.append((arrivals[-1] - arrivals[0]) / (len(arrivals) - 1) * 1000)
    client.close()
    return ttfts, tpots


def agree(gate_ms: float, client_ms: float) -> bool:
    not_higher = gate_ms <= client_ms + max(AGREEMENT_MS, AGREEMENT * client_ms)
    return not_higher and max(gate_ms, client_ms) <= FACTOR * min(gate_ms, client_ms)


def test_the_gate_and_the_openai_client_agree(server: str) -> None:
    """The gate and the openai client take turns prompt by prompt on fresh prompts of one
    shape, so both see the same load (rounds of ten each read 15-50% apart when other tests
    share the cores): every prompt streams max_tokens chunks, and the medians of TTFT and TPOT
    agree."""
    openai_round(server, "warm-up")  # connection and first-request costs out of the pairs
    gate_ttft, gate_tpot, client_ttft, client_tpot = [], [], [], []
    for pair in range(PAIRS):
        verdict = gate(server, f"g{pair:03d}", prompts=1)
        assert verdict.passed, verdict.reason
        assert [p.tokens for p in verdict.prompts] == [MAX_TOKENS]
        gate_ttft.append(verdict.ttft_ms.p50)
        gate_tpot.append(verdict.tpot_ms.p50)
        ttfts, tpots = openai_round(server, f"c{pair:03d}", count=1)
        client_ttft += ttfts
        client_tpot += tpots
    medians = {
        "gate": (statistics.median(gate_ttft), statistics.median(gate_tpot)),
        "openai": (statistics.median(client_ttft), statistics.median(client_tpot)),
    }
    print(f"\nmedian (TTFT ms, TPOT ms) over {PAIRS} pairs: {medians}")
    # about 0.8 ms a token here when quiet, 1.8 ms under load; chunks the server flushed together
    # would arrive microseconds apart
    assert medians["gate"][1] >= 0.2, "a token should take most of a millisecond on this model"
    assert agree(medians["gate"][0], medians["openai"][0]), medians
    assert agree(medians["gate"][1], medians["openai"][1]), medians


def plnt_gate(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    plnt = pathlib.Path(sys.executable).parent / "plnt"
    target = ["--base-url", url, "--model", llama_server.MODEL_ALIAS, "--json"]
    return subprocess.run(
        [str(plnt), "gate", *target, "--max-tokens", str(MAX_TOKENS), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ},
    )


def test_plnt_gate_passes_generous_budgets_and_fails_below_what_was_measured(
    server: str,
) -> None:
    """`plnt gate`, the real CLI, against the real engine: exit 0 with generous budgets; exit 1
    with budgets at half of what the openai client measured."""
    ttfts, tpots = openai_round(server, "budget-probe")
    passed = plnt_gate(server, "--ttft-budget-ms", "60000", "--tpot-budget-ms", "60000")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    report = json.loads(passed.stdout)
    assert {p["outcome"] for p in report["prompts"]} == {"ok"}
    assert {p["tokens"] for p in report["prompts"]} == {MAX_TOKENS}
    assert report["max_gap_ms"] is not None and report["max_gap_ms"] > 0
    ttft_budget = f"{statistics.median(ttfts) / 2:.1f}"
    tpot_budget = f"{statistics.median(tpots) / 2:.2f}"
    failed = plnt_gate(server, "--ttft-budget-ms", ttft_budget, "--tpot-budget-ms", tpot_budget)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    reason = json.loads(failed.stdout)["reason"]
    assert f"> budget {float(ttft_budget):g} ms" in reason
    assert f"> budget {float(tpot_budget):g} ms" in reason


def long_prompt_ttfts(verdict) -> list[float]:
    """TTFT of the prompts whose prefill dominates (the three longest texts)."""
    lengths = sorted(range(PROMPTS), key=lambda i: -len(prompts.prompt(i)))[:3]
    return [p.ttft_ms for p in verdict.prompts if p.index in lengths]


def test_repeat_runs_are_not_flattered_by_the_prefix_cache(server: str) -> None:
    """llama-server caches prompt prefixes. With a fresh nonce per run a repeat run's long
    prompts take as long as the first's; the control (the same nonce again) shows what the
    cache would have flattered, so this test can tell the difference. A warm-up run first: a
    cold server's first long prompts are slow for reasons of its own (seen at twice the time)."""
    gate(server, "cache-warm-up")
    first = statistics.median(long_prompt_ttfts(gate(server, "cache-a")))
    fresh = statistics.median(long_prompt_ttfts(gate(server, "cache-b")))
    repeat = statistics.median(long_prompt_ttfts(gate(server, "cache-b")))
    print(f"\nlong-prompt TTFT ms: first {first:.1f}, fresh {fresh:.1f}, same {repeat:.1f}")
    assert repeat < 0.6 * fresh, "the control: a repeated prompt should be served from cache"
    # The cache's effect is the control's (7 ms against 150-290 ms seen here); the machine's noise
    # between two uncached runs is up to 2x (a fresh-clone run: first 285.6 ms, fresh 154.7 ms).
    assert fresh > 5 * repeat, "a fresh nonce must not be answered from the cache"
    assert fresh > 0.4 * first, "a fresh nonce must not be answered from the cache in part"


def test_what_llama_server_sends_is_what_the_fake_server_imitates(server: str) -> None:
    """The llama-server dialect of plnt.gate.fake_server is checked against the real thing:
    role chunk with `content: null` together with the first token, an empty-delta finish
    chunk with the finish reason, a usage chunk with `choices: []` and `timings`."""
    import httpx

    from plnt.gate.fake_server import DIALECTS

    dialect = DIALECTS["llama-server"]
    body = {
        "model": llama_server.MODEL_ALIAS,
        "messages": prompts.messages(0, "shape"),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4,
    }
    with (
        httpx.Client(trust_env=False, timeout=60) as client,
        client.stream("POST", f"{server}/v1/chat/completions", json=body) as response,
    ):
        text = response.read().decode()
    events = [block.removeprefix("data: ") for block in text.split("\n\n") if block.strip()]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == dialect.role_delta
    assert chunks[1]["choices"][0]["delta"].get("content")
    finish = chunks[-2]["choices"][0]
    assert (finish["delta"], finish["finish_reason"]) == (dialect.finish_delta, "length")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert "timings" in chunks[-1] and dialect.timings


def test_a_prompt_longer_than_the_context_fails_closed(model: pathlib.Path) -> None:
    """A server whose context cannot hold the long prompts: those prompts fail (an error
    from the engine), never pass, and the gate fails."""
    with llama_server.serving(model, slots=1, context_per_slot=256) as url:
        verdict = gate(url, "small-context", prompts=PROMPTS)
    outcomes = {p.index: p.outcome for p in verdict.prompts}
    long_ones = [i for i in range(PROMPTS) if len(prompts.prompt(i)) > 2000]
    assert long_ones
    assert all(outcomes[i] in ("http-error", "server-error", "stream-error") for i in long_ones)
    assert not verdict.passed
