"""`make preview`: render every example, write the full YAML to a file, print a short summary.

    python hack/preview.py [--out FILE] [SCENARIO ...]

Per example, within 100 columns: the scenario, the top XR's kind and Ready status and how many
warnings the functions returned, then how many resources of each kind it composes (composed
XRs included, depth first), wrapped onto indented lines when they do not fit beside it.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import subprocess
import sys
from collections.abc import Sequence

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "preview.yaml"
WIDTH = 100  # the summary's columns: a terminal's default width is 80, few are narrower than 100
NAME_COLUMN = 28
INDENT = " " * 4


def ready(doc: dict) -> str:
    for c in (doc.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return f"Ready={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") else "")
    return "Ready=?"


def fit(line: str) -> str:
    """One line cut to WIDTH, its end marked, for text that has no better place to break."""
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def summary(name: str, docs: Sequence[dict]) -> list[str]:
    """The lines for one rendered example: head (scenario, kind, readiness, warnings), then the
    composed counts beside it when they fit, else wrapped below it."""
    results = [d for d in docs if d.get("kind") == "Result"]
    rest = [d for d in docs if d.get("kind") != "Result"]
    head = f"{rest[0].get('kind')} {ready(rest[0])}" if rest else "nothing rendered"
    warnings = sum(1 for r in results if str(r.get("severity", "")).lower() != "normal")
    if warnings:
        head += f", {warnings} warning{'s' if warnings > 1 else ''}"
    kinds = collections.Counter(str(d.get("kind")) for d in rest[1:])
    items = [f"{n} {k}" for k, n in sorted(kinds.items())] or ["nothing composed"]
    first = f"{name:{NAME_COLUMN}} {head}"
    beside = f"{first}; {', '.join(items)}"
    if len(beside) <= WIDTH:
        return [beside]
    return [fit(first), *(fit(line) for line in pack(items))]


def pack(items: Sequence[str]) -> list[str]:
    """Indented lines of comma-separated items, as many to a line as fit; an item ("2
    ModelReplica") is never split."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) + 1 <= WIDTH:
            lines[-1] += f", {item}"
        else:
            if lines:
                lines[-1] += ","
            lines.append(INDENT + item)
    return lines


def failure(name: str, stderr: str) -> list[str]:
    err = (stderr.strip().splitlines() or ["?"])[-1]
    return [fit(f"{name:{NAME_COLUMN}} FAILED: {err}")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/preview.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(OUT), help="the full YAML (default: build/)")
    parser.add_argument("scenarios", nargs="*", help="scenario folders (default: examples/)")
    args = parser.parse_args(argv)
    out_path = pathlib.Path(args.out).resolve()
    plnt = ROOT / ".venv" / "bin" / "plnt"
    folders = [pathlib.Path(s).resolve() for s in args.scenarios] or sorted(
        p.parent for p in (ROOT / "examples").rglob("xr.yaml")
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    failed = 0
    with out_path.open("w") as out:
        for ex in folders:
            name = str(ex.relative_to(ROOT / "examples") if ex.is_relative_to(ROOT) else ex)
            cmd = [str(plnt), "render", "--tree", "-r", str(ex)]
            run = subprocess.run(cmd, capture_output=True, text=True, check=False)
            out.write(f"# ===== {name}\n{run.stdout}")
            if run.returncode:
                failed += 1
                lines = failure(name, run.stderr)
            else:
                lines = summary(name, [d for d in yaml.safe_load_all(run.stdout) if d])
            sys.stdout.write("".join(line + "\n" for line in lines))
    shown = out_path.relative_to(ROOT) if out_path.is_relative_to(ROOT) else out_path
    sys.stdout.write(f"full YAML: {shown} ({out_path.stat().st_size // 1024} KiB)\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
