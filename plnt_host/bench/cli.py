"""`plnt bench`: the figures plnt is judged by, printed as a table and written to JSON.

Sections (each can be run alone with ``--only``):
  functions   RunFunction latency per function per example (median, p95 of N calls)
  scheduler   the fleet scheduler at (clusters, pools, replicas) sizes, with the CEL share
  fleet       one reconcile's request/response bytes and CPU at 10,000 clusters and 100,000
              replicas, and one resync's totals by fleet size: fleet view beside whole fleet
  render      `plnt render --tree` of the largest example, cold process
  grpc        one function server over loopback gRPC at 1, 8, 64 clients; its peak RSS
  gate        the canary gate client's own overhead per token and per request
  cel         compiling and evaluating a DRA selector
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from plnt_host import render, runtime

REPO = render.REPO_ROOT


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def time_calls(fn: Callable[[], Any], calls: int) -> dict[str, float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return {
        "calls": calls,
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(percentile(samples, 95), 3),
    }


def bench_functions(calls: int) -> list[dict[str, Any]]:
    """Every pipeline step of every example, timed on its final (requirements-answered) request."""
    rows = []
    catalogue = render.compositions()
    for folder in render.scenario_folders(REPO / "examples"):
        scenario = render.load_scenario(folder)
        composition = catalogue.get((scenario.xr["apiVersion"], scenario.xr["kind"]))
        if composition is None:
            continue
        trace: list = []
        try:
            render.run_pipeline(
                composition, scenario.xr, scenario.observed, scenario.required, trace=trace
            )
        except render.PipelineError:
            continue
        for function_name, req in trace:
            run = runtime.load(function_name)

            def once(run: runtime.RunFunction = run, req: Any = req, name: str = function_name):
                return runtime.call_sync(run, req, name)

            once()  # warm caches (compiled CEL, imports) as a long-running server would have
            example = str(folder.relative_to(REPO / "examples"))
            row = {"example": example, "function": function_name, **time_calls(once, calls)}
            rows.append(row)
    return rows


def bench_render_cold() -> dict[str, Any]:
    """Wall time of `plnt render --tree` on the example with the most output, in a new process."""
    plnt = pathlib.Path(sys.executable).parent / "plnt"
    sizes = {}
    for folder in render.scenario_folders(REPO / "examples"):
        try:
            out = render.render(render.load_scenario(folder), tree=True)
        except (render.PipelineError, render.ScenarioError):
            continue
        sizes[folder] = sum(1 for _ in out.stream())
    largest = max(sizes, key=lambda f: sizes[f])
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run(
            [str(plnt), "render", "--tree", str(largest)], capture_output=True, check=True
        )
        walls.append(time.perf_counter() - start)
    return {
        "example": largest.name,
        "objects": sizes[largest],
        "cold_wall_s": round(min(walls), 3),
        "cold_wall_s_median": round(statistics.median(walls), 3),
    }


def _optional(module: str, attr: str = "bench") -> Callable[..., Any]:
    import importlib

    return getattr(importlib.import_module(module), attr)


SECTIONS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "functions": lambda a: bench_functions(a.calls),
    "scheduler": lambda a: _optional("plnt_host.bench.scheduler")(),
    "fleet": lambda a: _optional("plnt_host.bench.fleet")(),
    "render": lambda a: bench_render_cold(),
    "grpc": lambda a: _optional("plnt_host.bench.grpc_load")(),
    "gate": lambda a: _optional("plnt_host.bench.gate")(),
    "cel": lambda a: _optional("plnt_host.bench.cel")(),
}


def _flat(value: Any, prefix: str = "") -> list[str]:
    """Nested figures as `a.b=1` pairs; lists of rows become one line per row."""
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _flat(v, f"{prefix}{k}.")]
    return [f"{prefix.rstrip('.')}={value}"]


def _fleet_table(value: Any) -> str:
    return str(_optional("plnt_host.bench.fleet", "table")(value))


# Sections whose figures read best as a table of their own.
TABLES: dict[str, Callable[[Any], str]] = {"fleet": _fleet_table}


def print_table(results: dict[str, Any]) -> None:
    for section, value in results.items():
        print(f"\n== {section}")
        if section in TABLES:
            print(TABLES[section](value))
            continue
        rows = value if isinstance(value, list) else [value]
        for row in rows:
            for line in _row_lines(row):
                print(line)


def _row_lines(row: Any) -> list[str]:
    """A row's scalars on one line, then a line per nested figure: each row of a nested list
    of rows, or a nested dict whole."""
    if not isinstance(row, dict):
        return [f"  {row}"]
    nested_rows = {k for k, v in row.items() if _is_rows(v)}
    scalars = {k: v for k, v in row.items() if k not in nested_rows and not isinstance(v, dict)}
    lines = ["  " + "  ".join(_flat(scalars))]
    for key, nested in row.items():
        if key in nested_rows:
            lines += [f"    {key}: " + "  ".join(_flat(item)) for item in nested]
        elif isinstance(nested, dict):
            lines.append(f"    {key}: " + "  ".join(_flat(nested)))
    return lines


def _is_rows(value: Any) -> bool:
    """A non-empty list of rows (dicts)."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plnt bench",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(SECTIONS), help="run a section (repeatable)"
    )
    parser.add_argument("--calls", type=int, default=25, help="calls per RunFunction timing")
    parser.add_argument(
        "--output", default=str(REPO / "bench" / "results.json"), help="where to write the JSON"
    )
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.calls < 20:
        parser.error("--calls must be at least 20")
    results: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": _cpus(),
            "platform": platform.platform(),
        }
    }
    for name in args.only or list(SECTIONS):
        print(f"running {name} ...", file=sys.stderr)
        results[name] = SECTIONS[name](args)
    print_table(results)
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))
