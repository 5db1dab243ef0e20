#!/usr/bin/env bash
# Idempotent set-up: a virtualenv at .venv with plnt and its pinned dependencies, and the
# real Crossplane CLI at .tools/bin/crank. Reruns only do what is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
# `hack/setup.sh runtime` (make preview): plnt's runtime dependencies only, no Crossplane CLI.
extras="[dev]"; stamp=.venv/.plnt-installed
if [[ "${1:-}" == runtime ]]; then extras=""; stamp=.venv/.plnt-runtime; fi
# An install is current while its stamp is newer than pyproject.toml, so a dependency pinned there
# reaches an existing .venv on the next run; the dev install carries the runtime's dependencies.
current() { [[ -f "$1" && ! pyproject.toml -nt "$1" ]]; }
if ! current .venv/.plnt-installed && ! current "$stamp"; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".$extras"
  touch "$stamp"
fi
[[ "${1:-}" == runtime ]] || hack/install-crossplane.sh
