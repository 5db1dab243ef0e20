"""The checked-in renders of every example: `tests/golden/<scenario>.yaml` is what
`plnt render --tree -r examples/<scenario>` prints, whole.

    python -m tests.goldens            # rewrite every golden render from the current code,
                                       # and every function test's whole response
    python -m tests.goldens SCENARIO   # only these scenario folders (paths under examples/)

A change that alters a render shows up in review as a diff of these files; tests/unit/
test_goldens.py fails, with the diff, when the code and the files disagree. The renders live
outside examples/ because tests read every YAML file there as input. The function tests' whole
responses (tests/functions/responses/, see tests/functions/tables.py) are rewritten with them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import sys
from collections.abc import Sequence

from plnt_host import cli, render

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "golden"


def scenarios() -> list[pathlib.Path]:
    return render.scenario_folders(EXAMPLES)


def label(folder: pathlib.Path) -> str:
    """The scenario's path under examples/: `deploy-gang`, `workflowrun-phases/Ready`."""
    return folder.relative_to(EXAMPLES).as_posix()


def golden(folder: pathlib.Path) -> pathlib.Path:
    return GOLDEN / f"{label(folder)}.yaml"


def rendered(folder: pathlib.Path) -> str:
    """What `plnt render --tree -r FOLDER` prints, run in-process; a failed render's exit code
    and message instead, so that a scenario meant to fail keeps failing the same way."""
    out, err = io.StringIO(), io.StringIO()
    # The folder relative to the repository root, as a user in the checkout types it, so that
    # the text does not depend on where the checkout lives.
    relative = folder.relative_to(ROOT)
    code: int | str | None = 0
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(["render", "--tree", "-r", str(relative)])  # always exits
        except SystemExit as done:
            code = done.code
    if code:
        return f"# exit {code}\n# {err.getvalue().strip()}\n"
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.goldens", description=__doc__)
    parser.add_argument("scenarios", nargs="*", help="scenario folders (default: every example)")
    args = parser.parse_args(argv)
    folders = [pathlib.Path(s).resolve() for s in args.scenarios] or scenarios()
    changed = 0
    for folder in folders:
        path, text = golden(folder), rendered(folder)
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed += 1
            print(f"wrote {path.relative_to(ROOT)}")
    print(f"{len(folders)} scenarios, {changed} golden renders changed")
    if not args.scenarios:
        from tests.functions import tables

        cases, rewritten = tables.rewrite()
        print(f"{cases} function test cases, {rewritten} whole responses changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
