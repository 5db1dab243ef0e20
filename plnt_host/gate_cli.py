"""`plnt gate`: smoke-test any OpenAI-compatible endpoint against TTFT/TPOT budgets.

    plnt gate --base-url http://127.0.0.1:8000 --model meta-llama/Llama-3.1-8B-Instruct

Exit codes: 0 the gate passed, 1 it failed (for any reason, an unreachable server included),
2 bad arguments. The API key is read from the variable named by --api-key-env and never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from plnt.gate import client
from plnt.gate.client import GateConfig
from plnt.gate.runner import run_gate
from plnt.gate.verdict import Percentiles, Verdict


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plnt gate",
        description="Stream chat completions to an OpenAI-compatible server, time TTFT and "
        "TPOT on the client, and pass iff every prompt succeeds and both p95s are in budget.",
    )
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", required=True, help="the model name the server serves")
    parser.add_argument("--prompts", type=_at_least(1), default=client.DEFAULT_PROMPTS)
    parser.add_argument("--ttft-budget-ms", type=_positive, default=client.DEFAULT_TTFT_BUDGET_MS)
    parser.add_argument("--tpot-budget-ms", type=_positive, default=client.DEFAULT_TPOT_BUDGET_MS)
    parser.add_argument("--max-tokens", type=_at_least(2), default=client.DEFAULT_MAX_TOKENS)
    parser.add_argument("--concurrency", type=_at_least(1), default=client.DEFAULT_CONCURRENCY)
    parser.add_argument(
        "--timeout-s", type=_positive, default=client.DEFAULT_TIMEOUT_S, help="per request"
    )
    parser.add_argument(
        "--connect-retries",
        type=_at_least(0),
        default=client.DEFAULT_CONNECT_RETRIES,
        help="retries of a request that could not connect, before it counts as failed",
    )
    parser.add_argument(
        "--nonce",
        help="starts every prompt (default: random per run, so that no prefix cache answers "
        "from an earlier run)",
    )
    parser.add_argument("--api-key-env", metavar="VAR", help="send the bearer key held in VAR")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _figures(name: str, figures: Percentiles, budget: float) -> str:
    return f"{name} ms  p50 {_ms(figures.p50):>8}  p95 {_ms(figures.p95):>8}  budget {budget:g}"


def report(verdict: Verdict) -> str:
    """The human-readable table: a row per prompt, then p50/p95 and the verdict."""
    header = f"{'prompt':>6}  {'ttft_ms':>9}  {'tpot_ms':>8}  {'max_gap_ms':>10}  {'tokens':>6}"
    lines = [f"{header}  outcome"]
    for p in verdict.prompts:
        outcome = p.outcome if p.ok else f"{p.outcome}: {p.error}"
        figures = f"{_ms(p.ttft_ms):>9}  {_ms(p.tpot_ms):>8}  {_ms(p.max_gap_ms):>10}"
        lines.append(f"{p.index:>6}  {figures}  {p.tokens:>6}  {outcome}")
    lines.append(_figures("TTFT", verdict.ttft_ms, verdict.budgets.ttft_ms))
    lines.append(_figures("TPOT", verdict.tpot_ms, verdict.budgets.tpot_ms))
    lines.append(f"largest gap between two chunks: {_ms(verdict.max_gap_ms)} ms")
    lines.append(f"verdict: {verdict.verdict.upper()} ({verdict.reason})")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on bad arguments
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            parser.error(f"--api-key-env: environment variable {args.api_key_env} is not set")
    try:
        config = GateConfig(
            base_url=args.base_url,
            model=args.model,
            prompts=args.prompts,
            ttft_budget_ms=args.ttft_budget_ms,
            tpot_budget_ms=args.tpot_budget_ms,
            max_tokens=args.max_tokens,
            concurrency=args.concurrency,
            timeout_s=args.timeout_s,
            connect_retries=args.connect_retries,
            api_key=api_key,
            **({"nonce": args.nonce} if args.nonce else {}),
        )
    except ValueError as err:
        parser.error(str(err))
    verdict = run_gate(config)
    if args.json:
        sys.stdout.write(json.dumps(verdict.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(report(verdict))
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
