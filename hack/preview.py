"""`make preview`: render every example, write the full YAML to a file, print a short summary.

One line per example: the top XR's kind and Ready status, then how many resources of each kind
it composes (composed XRs included, depth first), then warnings from the functions' results.
"""

from __future__ import annotations

import collections
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "preview.yaml"


def ready(doc: dict) -> str:
    for c in (doc.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return f"Ready={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") else "")
    return "Ready=?"


def main() -> int:
    plnt = ROOT / ".venv" / "bin" / "plnt"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    failed = 0
    with OUT.open("w") as out:
        for ex in sorted(p.parent for p in (ROOT / "examples").rglob("xr.yaml")):
            name = str(ex.relative_to(ROOT / "examples"))
            cmd = [str(plnt), "render", "--tree", "-r", str(ex)]
            run = subprocess.run(cmd, capture_output=True, text=True, check=False)
            out.write(f"# ===== {ex.relative_to(ROOT)}\n{run.stdout}")
            if run.returncode:
                failed += 1
                err = (run.stderr.strip().splitlines() or ["?"])[-1]
                sys.stdout.write(f"{name:26} FAILED: {err}\n")
                continue
            docs = [d for d in yaml.safe_load_all(run.stdout) if d]
            results = [d for d in docs if d.get("kind") == "Result"]
            rest = [d for d in docs if d.get("kind") != "Result"]
            head = f"{rest[0]['kind']} {ready(rest[0])}" if rest else "nothing rendered"
            kinds = collections.Counter(d.get("kind") for d in rest[1:])
            counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
            warn = sum(1 for r in results if str(r.get("severity", "")).lower() != "normal")
            line = f"{name:26} {head}; {counts or 'nothing composed'}"
            sys.stdout.write(line + (f"; {warn} warning(s)" if warn else "") + "\n")
    rel = OUT.relative_to(ROOT)
    sys.stdout.write(f"full YAML: {rel} ({OUT.stat().st_size // 1024} KiB)\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
