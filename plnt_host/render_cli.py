"""`plnt render`: its two input forms turned into scenarios, and its output formats.

The scenario-folder form (``DIR...``) is plnt's own; the positional form (``XR COMPOSITION
FUNCTIONS``) and the flags follow `crossplane render` (names, meanings, the Context and Result
kinds it prints), except that ``-o`` chooses yaml or json and the functions run in-process.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import yaml

from plnt_host import render, runtime

RENDER_API = "render.crossplane.io/v1beta1"


@dataclasses.dataclass(frozen=True)
class Job:
    label: str
    scenario: render.Scenario
    composition: dict[str, Any] | None = None  # the positional form's; else the shipped one


def run(args: argparse.Namespace) -> int:
    label = ""
    try:
        jobs = _jobs(args)
        context = _context(args.context_files, args.context_values)
        catalogue = render.compositions()
        outputs = []
        for job in jobs:
            label = job.label
            known = catalogue
            if job.composition is not None:
                ref = job.composition["spec"]["compositeTypeRef"]
                known = {**catalogue, (ref["apiVersion"], ref["kind"]): job.composition}
            out = render.render(job.scenario, tree=args.tree, catalogue=known, context=context)
            outputs.append((job.label, list(_objects(out, args, top=True))))
    except render.ScenarioError as err:
        sys.stderr.write(f"plnt render: {err}\n")
        return 2
    except render.PipelineError as err:
        sys.stderr.write(f"plnt render: {label}: {err}\n")
        return 1
    sys.stdout.write(_format(outputs, args.output))
    return 0


# --- inputs ------------------------------------------------------------------------------------


def _jobs(args: argparse.Namespace) -> list[Job]:
    paths = [pathlib.Path(p) for p in args.paths]
    if paths[0].is_file():
        if len(paths) != 3 or args.all:
            raise render.ScenarioError(
                f"{paths[0]} is a file: give XR COMPOSITION FUNCTIONS (crossplane render's form)"
                " or scenario folders"
            )
        jobs = [_positional(*paths)]
    else:
        folders: list[pathlib.Path] = []
        for path in paths:
            if args.all:
                found = render.scenario_folders(path)
                if not found:
                    raise render.ScenarioError(f"{path}: no scenario folders (with xr.yaml) inside")
                folders.extend(found)
            else:
                folders.append(path)
        jobs = [Job(str(f), render.load_scenario(f)) for f in folders]
    observed = _extra(args.observed_resources)
    required = _extra(args.required_resources) + _extra(args.extra_resources)
    for job in jobs:
        job.scenario.observed.extend(copy.deepcopy(observed))
        job.scenario.required.extend(copy.deepcopy(required))
    return jobs


def _extra(path: str | None) -> list[dict[str, Any]]:
    return render.load_path(pathlib.Path(path)) if path else []


def _positional(xr_file: pathlib.Path, comp_file: pathlib.Path, fns: pathlib.Path) -> Job:
    docs = render.load_yaml_docs(xr_file)
    if len(docs) != 1:
        raise render.ScenarioError(f"{xr_file}: must hold exactly one XR, found {len(docs)}")
    xr = docs[0]
    compositions = [d for d in render.load_yaml_docs(comp_file) if d["kind"] == "Composition"]
    if len(compositions) != 1:
        raise render.ScenarioError(f"{comp_file}: must hold exactly one Composition")
    composition = compositions[0]
    spec = composition.get("spec") or {}
    ref = spec.get("compositeTypeRef") or {}
    if spec.get("mode") != "Pipeline" or not isinstance(spec.get("pipeline"), list):
        raise render.ScenarioError(f"{comp_file}: spec.mode must be Pipeline, with a pipeline")
    if (ref.get("apiVersion"), ref.get("kind")) != (xr["apiVersion"], xr["kind"]):
        raise render.ScenarioError(
            f"{comp_file}: composes {ref.get('kind')} ({ref.get('apiVersion')}), not the XR's "
            f"{xr['kind']} ({xr['apiVersion']})"
        )
    _check_pipeline(spec["pipeline"], comp_file, fns)
    scenario = render.Scenario(xr=xr, required=[], observed=[], path=xr_file.parent)
    return Job(str(xr_file), scenario, composition)


def _check_pipeline(pipeline: list[Any], comp_file: pathlib.Path, fns: pathlib.Path) -> None:
    """Every step names a Function of `fns`, and one of plnt's own (the only ones it runs)."""
    functions = {
        (d.get("metadata") or {}).get("name")
        for d in render.load_path(fns)
        if d["kind"] == "Function" and d["apiVersion"].startswith("pkg.crossplane.io/")
    }
    for i, step in enumerate(pipeline):
        name = ((step or {}).get("functionRef") or {}).get("name")
        where = f"{comp_file}: spec.pipeline[{i}].functionRef.name"
        if not isinstance(name, str) or name not in functions:
            raise render.ScenarioError(f"{where}: {fns} has no Function named {name!r}")
        try:
            runtime.load(name)
        except runtime.UnknownFunction as err:
            raise render.ScenarioError(
                f"{where}: plnt runs only its own functions: {err}"
            ) from None


def _context(files: list[str], values: list[str]) -> dict[str, Any] | None:
    """crossplane render's --context-files / --context-values: KEY=FILE and KEY=VALUE, each
    value JSON or YAML; a value wins over a file for the same key."""
    out: dict[str, Any] = {}
    for flag, entries in (("--context-files", files), ("--context-values", values)):
        for entry in entries:
            key, sep, value = entry.partition("=")
            if not sep or not key:
                raise render.ScenarioError(f"{flag} {entry!r}: want KEY=VALUE")
            text = value
            if flag == "--context-files":
                try:
                    text = pathlib.Path(value).read_text()
                except OSError as err:
                    raise render.ScenarioError(f"{flag} {key}: {value}: {err.strerror}") from None
            try:
                out[key] = yaml.safe_load(text)
            except yaml.YAMLError:
                raise render.ScenarioError(f"{flag} {key}: not JSON or YAML") from None
    return out or None


# --- outputs -----------------------------------------------------------------------------------


def _objects(node: render.Rendered, args: argparse.Namespace, *, top: bool) -> Iterator[dict]:
    xr = node.xr
    if args.include_full_xr:  # as crossplane render -x: the input's spec and metadata
        xr = {**xr, "metadata": copy.deepcopy(node.input_xr.get("metadata", {}))}
        if "spec" in node.input_xr:
            xr["spec"] = copy.deepcopy(node.input_xr["spec"])
    yield xr
    yield from node.composed
    if args.include_function_results:
        yield from node.results
    if top and args.include_context:
        yield {"apiVersion": RENDER_API, "kind": "Context", "fields": node.context}
    for child in node.children:
        yield from _objects(child, args, top=False)


def _format(outputs: list[tuple[str, list[dict]]], fmt: str) -> str:
    if fmt == "json":
        items = [obj for _, objs in outputs for obj in objs]
        return (
            json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": items}, indent=2, sort_keys=True
            )
            + "\n"
        )
    chunks = []
    for label, objs in outputs:
        text = render.dump(objs)
        chunks.append(f"# {label}\n{text}" if len(outputs) > 1 else text)
    return "".join(chunks)
