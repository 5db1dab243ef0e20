"""The `plnt` command line's conventions: version, help on every flag, completion, and
`plnt render`'s positional form refusing bad input with exit 2 and the field it is about."""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tomllib

import pytest

from plnt_host import cli, completion

REPO = pathlib.Path(__file__).resolve().parents[2]
PLNT = pathlib.Path(sys.executable).parent / "plnt"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def plnt(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PLNT), *args], capture_output=True, text=True, check=False, timeout=120, cwd=cwd
    )


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version(argv: list[str]) -> None:
    proc = plnt(*argv)
    assert proc.returncode == 0
    assert proc.stdout == f"plnt {VERSION}\n"


def _parsers() -> dict[str, argparse.ArgumentParser]:
    own = completion._subcommands(cli.build_parser())
    parsers = {name: p for name, p in own.items() if name not in cli.DELEGATED}
    delegated = cli.delegated_parsers()
    # plnt gate's parser belongs to the gate's own module and is checked by its tests.
    return {**parsers, "reconcile": delegated["reconcile"], "bench": delegated["bench"]}


@pytest.mark.parametrize("name", sorted(_parsers()))
def test_every_flag_has_help_and_shows_its_default(name: str) -> None:
    parser = _parsers()[name]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"plnt {name} {'/'.join(action.option_strings) or action.dest}"
    text = "".join(parser.format_help().split())  # argparse wraps at spaces and hyphens
    for action in parser._actions:
        default = action.default
        if action.option_strings and default not in (None, False, [], argparse.SUPPRESS):
            shown = "".join(str(default).split())
            assert shown in text, f"plnt {name} {action.option_strings}: default not shown"


def test_bash_completion_completes_commands_flags_and_choices(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "plnt.bash"
    proc = plnt("completion", "bash")
    assert proc.returncode == 0, proc.stderr
    script.write_text(proc.stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        out = subprocess.run(
            ["bash", "-c", f'source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1};'
             ' _plnt; printf "%s\\n" "${COMPREPLY[@]}"'],
            capture_output=True, text=True, check=True, cwd=tmp_path,
        )  # fmt: skip
        return out.stdout.split()

    assert complete("plnt", "va") == ["validate"]
    assert complete("plnt", "render", "-o", "") == ["json", "yaml"]
    assert complete("plnt", "render", "--inc") == [
        "--include-context",
        "--include-full-xr",
        "--include-function-results",
    ]
    assert complete("plnt", "function", "function-model-r") == ["function-model-replica"]
    assert "--prometheus-url" in complete("plnt", "reconcile", "--p")


FUNCTIONS = """\
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata: {name: plnt-function-model-service}
"""


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        (
            "wrong-kind",
            "composes ModelEndpoint (modelplane.ai/v1alpha1), not the XR's ModelService",
        ),
        ("missing-function", "spec.pipeline[0].functionRef.name: "),
        ("foreign-function", "plnt runs only its own functions"),
        ("two-args", "give XR COMPOSITION FUNCTIONS"),
    ],
)
def test_positional_form_refuses_bad_input(tmp_path: pathlib.Path, case: str, needle: str) -> None:
    xr = REPO / "examples/model-service/xr.yaml"
    composition = REPO / "compositions/modelservices.yaml"
    functions = tmp_path / "functions.yaml"
    functions.write_text(FUNCTIONS)
    if case == "wrong-kind":
        composition = REPO / "compositions/modelendpoints.yaml"
    elif case == "missing-function":
        functions.write_text(FUNCTIONS.replace("model-service", "model-endpoint"))
    elif case == "foreign-function":
        composition = tmp_path / "composition.yaml"
        composition.write_text(
            (REPO / "compositions/modelservices.yaml")
            .read_text()
            .replace("plnt-function-model-service", "function-patch-and-transform")
        )
        functions.write_text(
            FUNCTIONS.replace("plnt-function-model-service", "function-patch-and-transform")
        )
    args = (
        [str(xr), str(composition)]
        if case == "two-args"
        else [str(xr), str(composition), str(functions)]
    )
    proc = plnt("render", *args)
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    assert needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
