#!/usr/bin/env bash
# Builds llama.cpp's own OpenAI-compatible server, `llama-server`, the real engine the canary
# gate's tests run against on loopback. The source is llama.cpp as vendored in PyPI's
# llama-cpp-python sdist (fetched with pip, the ordinary client); the binary is cached as
# .tools/bin/llama-server-<version>, so only the first run builds (about 6-10 min on 2 cores).
#
# One flavour only: llama-server rather than the llama-cpp-python[server] wheel. It is what
# people deploy, streams as vLLM does (role chunk, usage chunk, server-side timings), caches
# prompt prefixes (which the per-run nonce test needs) and needs no Python web stack. The
# wheel's server differs only in ways the fake server now imitates (no usage chunk).
#
# Built static, CPU only, generic x86-64 (no -march=native: the cache may outlive the CPU it was
# built on), without BLAS, GPU backends, tests, examples, OpenSSL or the web UI (whose prebuilt
# assets would be downloaded at build time).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
tools="$root/.tools"
binary="$tools/bin/llama-server-$version"
if [[ -x "$binary" ]]; then
  exit 0
fi
started=$(date +%s)
mkdir -p "$tools/bin" "$tools/src"
sdist="$tools/src/llama_cpp_python-$version.tar.gz"
if [[ ! -f "$sdist" ]]; then
  download="$(mktemp -d)"
  # --no-build-isolation: pip only fetches the file; it need not install a build backend.
  # (pip still reads the sdist's metadata, which fails without scikit-build-core: then the
  # second try installs it in an isolated build environment. The first try's error is noise.)
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary :all: --no-build-isolation -d "$download" "llama-cpp-python==$version" \
    2>/dev/null || .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary :all: -d "$download" "llama-cpp-python==$version"
  mv "$download/llama_cpp_python-$version.tar.gz" "$sdist"
  rm -rf "$download"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xzf "$sdist" -C "$work"
source_dir="$work/llama_cpp_python-$version/vendor/llama.cpp"
generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
echo "building llama-server from llama-cpp-python $version (once; cached in .tools/bin) ..." >&2
cmake -S "$source_dir" -B "$work/build" "${generator[@]}" -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
  -DGGML_OPENMP=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF >"$work/configure.log" 2>&1 || {
  tail -40 "$work/configure.log" >&2
  exit 1
}
cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  exit 1
}
# Install under a temporary name first: a concurrent reader never sees half a binary.
install -m 0755 "$work/build/bin/llama-server" "$binary.partial"
mv "$binary.partial" "$binary"
echo "built $binary in $(($(date +%s) - started)) s" >&2
