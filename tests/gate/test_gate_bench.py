"""The overhead benchmark runs end to end and reports figures per concurrency."""

from plnt_host.bench.gate import LONG_TOKENS, SHORT_TOKENS, bench


def test_bench_reports_cost_per_request_and_per_token():
    figures = bench(requests=8, concurrencies=(1, 4))
    assert figures["requests_per_run"] == 8
    assert figures["tokens_per_answer"] == [SHORT_TOKENS, LONG_TOKENS]
    for key in ("concurrency_1", "concurrency_4"):
        run = figures[key]
        assert set(run) == {"cpu", "wall", "wall_minus_server", "wall_ms"}
        for measure in ("cpu", "wall", "wall_minus_server"):
            assert set(run[measure]) == {"per_request_us", "per_token_us"}
            assert all(isinstance(v, float) for v in run[measure].values())
        assert run["cpu"]["per_request_us"] > 0
        assert run["wall_ms"][f"{LONG_TOKENS}_tokens"] > 0
