"""Writes the binder's `plnt.work/binding` annotation into example ModelReplica XRs, as
`plnt reconcile --bind` would after committing them (whole nodes from node 0, per pool).

    python hack/bind-examples.py examples/model-replica-*/xr.yaml

Run it after changing an example replica's spec: an annotation with a stale digest leaves the
replica unbound, so it renders nothing (tests/functions/test_model_replica.py checks).
"""

from __future__ import annotations

import pathlib
import re
import sys

import yaml

from plnt import binding


def main(paths: list[str]) -> None:
    for path in map(pathlib.Path, paths):
        text = path.read_text()
        obj = yaml.safe_load(text)
        value = binding.preview(obj)
        line = f"    {binding.BINDING}: '{value}'\n"
        if binding.BINDING in text:
            text = re.sub(rf"    {re.escape(binding.BINDING)}: .*\n", line, text)
        elif "\n  annotations:\n" in text.split("\nspec:")[0]:
            text = text.replace("\n  annotations:\n", "\n  annotations:\n" + line, 1)
        else:
            text = re.sub(r"(\n  namespace: [^\n]+\n)", r"\1  annotations:\n" + line, text, count=1)
        path.write_text(text)
        assert binding.state_of(yaml.safe_load(text)).state == binding.BOUND, path


if __name__ == "__main__":
    main(sys.argv[1:])
