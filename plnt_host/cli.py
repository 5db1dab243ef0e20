"""The `plnt` command line.

    plnt function NAME      serve one composition function over gRPC
    plnt render ...         preview XRs in-process, as `crossplane render` runs them
    plnt validate [PATH]    check XRDs, Compositions and XRs with `crossplane beta validate`
    plnt gate               smoke-test an OpenAI-compatible endpoint against TTFT/TPOT budgets
    plnt reconcile          scale ModelDeployments toward a tokens-per-second target
    plnt bench              print the benchmark figures and write bench/results.json
    plnt version            print plnt's version (also `plnt --version`)
    plnt completion bash    print a bash completion script

Exit codes: 0 success, 1 a failure the command reports, 2 bad arguments or input.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata

# Where Crossplane's package runtime tells a function its server certificates are (/tls/server).
TLS_CERTS_ENV = "TLS_SERVER_CERTS_DIR"

# Subcommands with their own argument parsers: name -> (module with main(argv), help).
DELEGATED = {
    "gate": ("plnt_host.gate_cli", "smoke-test an OpenAI-compatible endpoint"),
    "reconcile": ("plnt_reconciler.cli", "scale ModelDeployments toward a token rate"),
    "bench": ("plnt_host.bench.cli", "run the benchmarks"),
}

RENDER_EPILOG = """\
Two forms:
  plnt render [flags] DIR...                 scenario folders: xr.yaml, required/, observed/
  plnt render [flags] XR COMPOSITION FUNCTIONS
                                             crossplane render's form: an XR file, the
                                             Composition to run, and a Functions file or folder
                                             (each step's functionRef must name one; plnt runs
                                             its own functions in-process, so their runtime
                                             annotations are not needed)

--observed-resources and --required-resources add to a scenario folder's own. Unlike crossplane
render, -o picks the output format; --observed-resources has no short form.
"""


def version() -> str:
    try:
        return metadata.version("plnt")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def _version(_: argparse.Namespace) -> int:
    print(f"plnt {version()}")
    return 0


def _function(args: argparse.Namespace) -> int:
    from plnt_host import runtime

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
    from plnt_host import render_cli

    return render_cli.run(args)


def _validate(args: argparse.Namespace) -> int:
    from plnt_host import validate

    return validate.run(args)


def _completion(args: argparse.Namespace) -> int:
    from plnt_host import completion

    sys.stdout.write(completion.bash(build_parser(), delegated_parsers()))
    return 0


def delegated_parsers() -> dict[str, argparse.ArgumentParser]:
    import importlib

    return {
        name: importlib.import_module(module).build_parser()
        for name, (module, _) in DELEGATED.items()
    }


class _Help(argparse.RawDescriptionHelpFormatter):
    """Every flag's default that means something is shown; descriptions keep their lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or default in (None, False, [], argparse.SUPPRESS):
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plnt", description=__doc__.split("\n")[0], formatter_class=_Help
    )
    parser.add_argument("--version", action="version", version=f"plnt {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    fn = sub.add_parser(
        "function", help="serve one composition function over gRPC", formatter_class=_Help
    )
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
        metavar="DIR",
        help=f"directory with tls.crt, tls.key and ca.crt for mTLS (default from ${TLS_CERTS_ENV},"
        " which Crossplane sets to /tls/server)",
    )
    fn.add_argument("--debug", action="store_true", help="log at debug level")
    fn.set_defaults(handler=_function)

    rd = sub.add_parser(
        "render",
        help="preview XRs with no cluster, like crossplane render",
        description="Run each XR's Composition pipeline in-process and print what Crossplane\n"
        "would compose, the XR (with its status) first.",
        epilog=RENDER_EPILOG,
        formatter_class=_Help,
    )
    rd.add_argument(
        "paths", nargs="+", metavar="PATH", help="scenario folders, or XR COMPOSITION FUNCTIONS"
    )
    rd.add_argument("--tree", action="store_true", help="also render composed XRs, depth first")
    rd.add_argument("--all", action="store_true", help="each DIR holds scenario folders")
    rd.add_argument(
        "-o", "--output", choices=("yaml", "json"), default="yaml", help="output format"
    )
    rd.add_argument(
        "--observed-resources",
        metavar="PATH",
        help="a YAML file or folder: observed state of composed resources",
    )
    rd.add_argument(
        "-e",
        "--required-resources",
        metavar="PATH",
        help="a YAML file or folder: resources the functions may require",
    )
    rd.add_argument(
        "--extra-resources",
        metavar="PATH",
        help="deprecated name of --required-resources, as in crossplane render",
    )
    rd.add_argument(
        "-r",
        "--include-function-results",
        "--results",
        dest="include_function_results",
        action="store_true",
        help="include function results as resources of kind Result",
    )
    rd.add_argument(
        "-x",
        "--include-full-xr",
        action="store_true",
        help="copy the input XR's spec and metadata into the rendered XR",
    )
    rd.add_argument(
        "-c",
        "--include-context",
        action="store_true",
        help="include the pipeline's final context as a resource of kind Context",
    )
    rd.add_argument(
        "--context-files",
        metavar="KEY=FILE",
        action="append",
        default=[],
        help="a context key whose value is a JSON/YAML file (repeatable)",
    )
    rd.add_argument(
        "--context-values",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a context key with a JSON/YAML value; wins over --context-files (repeatable)",
    )
    rd.set_defaults(handler=_render)

    va = sub.add_parser(
        "validate",
        help="check XRDs, Compositions and XRs with crossplane beta validate",
        description="Validate plnt's XRDs and Compositions, and the given resources (XRs and\n"
        "what they require) against plnt's XRDs and any --crds, with the real Crossplane CLI.",
        formatter_class=_Help,
    )
    va.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="YAML files or folders to validate (default: ./examples, if it exists)",
    )
    va.add_argument(
        "--crds",
        action="append",
        default=[],
        metavar="PATH",
        help="more schemas (CRD files or folders, e.g. the providers'); repeatable",
    )
    va.add_argument(
        "--crossplane",
        metavar="PATH",
        help="the Crossplane CLI (default: crossplane on PATH, else .tools/bin/crank)",
    )
    va.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="crossplane beta validate's schema cache (default: its own, ~/.crossplane/cache)",
    )
    va.add_argument(
        "--crossplane-image",
        metavar="IMAGE",
        help="the Crossplane image whose CRDs validate Compositions (default: crossplane's)",
    )
    va.add_argument(
        "--error-on-missing-schemas",
        action="store_true",
        help="fail when a resource has no schema to validate against",
    )
    va.set_defaults(handler=_validate)

    ver = sub.add_parser("version", help="print plnt's version", formatter_class=_Help)
    ver.set_defaults(handler=_version)

    comp = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script: source <(plnt completion bash)",
        formatter_class=_Help,
    )
    comp.add_argument("shell", choices=("bash",), help="the shell")
    comp.set_defaults(handler=_completion)

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
