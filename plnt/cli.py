"""The `plnt` command line.

    plnt function NAME      serve one composition function over gRPC
    plnt render DIR         preview a scenario folder in-process, as Crossplane runs it
    plnt gate               smoke-test an OpenAI-compatible endpoint against TTFT/TPOT budgets
    plnt reconcile          scale ModelDeployments toward a tokens-per-second target
    plnt bench              print the benchmark figures and write bench/results.json

Exit codes: 0 success, 1 a failure the command reports, 2 bad arguments or input.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys
from collections.abc import Sequence

# Where Crossplane's package runtime tells a function its server certificates are (/tls/server).
TLS_CERTS_ENV = "TLS_SERVER_CERTS_DIR"

# Subcommands with their own argument parsers: name -> (module with main(argv), help).
DELEGATED = {
    "gate": ("plnt.gate.cli", "smoke-test an OpenAI-compatible endpoint"),
    "reconcile": ("plnt.reconcile.cli", "scale ModelDeployments toward a token rate"),
    "bench": ("plnt.bench.cli", "run the benchmarks"),
}


def _function(args: argparse.Namespace) -> int:
    from plnt import runtime

    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        runtime.load(args.name)
    except runtime.UnknownFunction as err:
        print(f"plnt function: {err}", file=sys.stderr)
        return 2
    # As in Crossplane's function template: --insecure ignores any certificate directory.
    certs = None if args.insecure else args.tls_certs_dir
    if not args.insecure and not certs:
        print(
            f"plnt function: give --insecure or --tls-certs-dir DIR (or set {TLS_CERTS_ENV})",
            file=sys.stderr,
        )
        return 2
    try:
        runtime.serve(args.name, args.address, insecure=args.insecure, tls_certs_dir=certs)
    except OSError as err:
        print(f"plnt function: cannot load TLS certificates: {err}", file=sys.stderr)
        return 2
    return 0


def _render(args: argparse.Namespace) -> int:
    from plnt import render

    folders: list[pathlib.Path] = []
    for d in args.dirs:
        path = pathlib.Path(d)
        if args.all:
            found = render.scenario_folders(path)
            if not found:
                print(
                    f"plnt render: {path}: no scenario folders (with xr.yaml) inside",
                    file=sys.stderr,
                )
                return 2
            folders.extend(found)
        else:
            folders.append(path)
    try:
        catalogue = render.compositions()
        chunks = []
        for folder in folders:
            scenario = render.load_scenario(folder)
            out = render.render(scenario, tree=args.tree, catalogue=catalogue)
            text = render.dump(out.stream(with_results=args.results))
            if len(folders) > 1:
                text = f"# {folder}\n{text}"
            chunks.append(text)
    except render.ScenarioError as err:
        print(f"plnt render: {err}", file=sys.stderr)
        return 2
    except render.PipelineError as err:
        print(f"plnt render: {folder}: {err}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(chunks))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plnt", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    fn = sub.add_parser("function", help="serve one composition function over gRPC")
    fn.add_argument("name", help="function name, e.g. function-model-replica")
    fn.add_argument("--address", default="0.0.0.0:9443", help="HOST:PORT to listen on")
    fn.add_argument(
        "--insecure",
        action="store_true",
        help="serve without TLS (local use); any certificate directory is ignored",
    )
    fn.add_argument(
        "--tls-certs-dir",
        default=os.environ.get(TLS_CERTS_ENV) or None,
        help=f"directory with tls.crt, tls.key and ca.crt for mTLS (default: ${TLS_CERTS_ENV}, "
        "which Crossplane sets to /tls/server)",
    )
    fn.add_argument("--debug", action="store_true", help="log at debug level")
    fn.set_defaults(handler=_function)

    rd = sub.add_parser("render", help="preview a scenario folder with no cluster")
    rd.add_argument("dirs", nargs="+", metavar="DIR", help="scenario folder holding xr.yaml")
    rd.add_argument("--tree", action="store_true", help="also render composed XRs, depth first")
    rd.add_argument("--results", action="store_true", help="include function results")
    rd.add_argument("--all", action="store_true", help="DIR holds scenario folders: render each")
    rd.set_defaults(handler=_render)

    for name, (_, text) in DELEGATED.items():
        # Listed for --help; main() hands their arguments to their own parsers.
        sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        import importlib

        module, _ = DELEGATED[argv[0]]
        sys.exit(importlib.import_module(module).main(argv[1:]))
    args = build_parser().parse_args(argv)
    sys.exit(args.handler(args))
