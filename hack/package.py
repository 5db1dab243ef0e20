"""`make package`: every plnt package, built offline with no Docker engine, into dist/.

    python hack/package.py [--dist DIR] [--only NAME ...]

Writes ``configuration-plnt-vX.xpkg``, one ``function-*-vX.xpkg`` per function and
``plnt-reconciler-vX.xpkg`` (a Provider package: the binder and autoscaler), each with its runtime
image embedded, so Crossplane's package manager can run it. ``--only`` limits the build to the
named packages (``configuration``, ``reconciler`` or a function name).

How an image is made, and why:
- The base layer is a minimal Debian bookworm rootfs from ``mmdebstrap`` (the Essential set plus
  python3 3.11, ca-certificates and libstdc++6, which grpc needs; the merged-usr hook keeps the
  ``usrmerge`` package, and with it perl, out). It is the slow step (minutes, network to the
  Debian mirror), so it is cached in ``.tools/cache/images`` under a name that hashes its recipe.
- The project's wheels (pinned to what the development virtualenv runs) are installed with pip
  *inside a chroot of that rootfs*, so paths, shebangs and the interpreter are the image's own.
  Each install goes to its own ``--root`` and becomes one layer: third-party dependencies (shared
  by every function), the reconciler's extra (the Kubernetes client, only in its image) and plnt
  itself (the only layer most commits change). The plnt layer leaves out what no function runs
  (``NOT_IN_IMAGES``: benchmarks, the test engine; ``RECONCILER_ONLY``: the reconciler's package,
  a last layer of the reconciler's image only). Bytecode is compiled with unchecked hashes, so it
  stays valid under a read-only root and the layers are byte-for-byte reproducible.
- ``umoci`` (Debian's) assembles the OCI layout and sets each image's config: platform
  linux/amd64, user 65532, entrypoint ``plnt function``, the function's name as the command, port
  9443. The functions differ only in that config, so they share every layer. The reconciler's
  image adds the Kubernetes client's layer; its command is the argument list of
  package/install/settings.yaml, the one place they are written.
- Each image is written as a docker-archive tarball that keeps the layers compressed (what
  ``docker save`` writes, with .tar.gz layers), and the real Crossplane CLI embeds it with
  ``crank xpkg build --embed-runtime-image-tarball``.
Everything but the final images is cached (layers by content hash in ``build/package``), so a
rerun after a code change rebuilds the plnt layer and the packages only.
"""

from __future__ import annotations

import argparse
import email.parser
import fcntl
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "package"
SHARED_CACHE = ROOT / ".tools" / "cache" / "images"
CRANK = ROOT / ".tools" / "bin" / "crank"
SETTINGS = ROOT / "package" / "install" / "settings.yaml"  # the reconciler's arguments

SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "ca-certificates", "libstdc++6")
MMDEBSTRAP_ARGS = (
    "--variant=essential",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--include=" + ",".join(DEBIAN_PACKAGES),
    # Nothing in an image reads documentation, manuals or translations.
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
)
WORK = "/plnt-build"  # inside the chroot: wheels in, layers out; never part of an image
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # Debian's scheme for pip's installs
# Layer file times (and the image's creation time): fixed, so identical inputs give identical
# digests. Bytecode does not depend on them (unchecked-hash .pyc files).
EPOCH = 1704067200  # 2024-01-01T00:00:00Z
CREATED = "2024-01-01T00:00:00Z"
NONROOT = "65532:65532"
FUNCTION_PORT = "9443/tcp"
RECONCILER_PORT = "8081/tcp"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the images take of plnt's own wheel (paths under site-packages). A function image carries
# only what functions run: the benchmarks and the test engine stay in the wheel, for `plnt bench`
# and the tests of a development install, and out of every image; the reconciler's package is a
# layer of its own, in the reconciler's image only.
NOT_IN_IMAGES = ("plnt_host/bench", "plnt/gate/fake_server.py")
RECONCILER_ONLY = ("plnt_reconciler",)


# --- what to build -------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """Names and versions, read from the files that declare them (never repeated here)."""

    version: str  # v0.1.0
    registry: str  # xpkg.crossplane.io/plnt/
    configuration: str  # configuration-plnt
    functions: tuple[str, ...]
    reconciler: str  # plnt-reconciler: the Provider package under the same registry path

    @classmethod
    def read(cls) -> Release:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        config = yaml.safe_load((ROOT / "crossplane.yaml").read_text())
        packages = [d["package"] for d in config["spec"]["dependsOn"] if d["kind"] == "Function"]
        registries = {p.rsplit("/", 1)[0] + "/" for p in packages}
        if len(registries) != 1:
            raise SystemExit(f"crossplane.yaml: functions under several registries: {registries}")
        functions = tuple(sorted(p.rsplit("/", 1)[1] for p in packages))
        on_disk = tuple(
            sorted(p.parent.name for p in ROOT.glob("package/function-*/crossplane.yaml"))
        )
        if functions != on_disk:
            raise SystemExit(f"crossplane.yaml depends on {functions}, package/ has {on_disk}")
        registry = registries.pop()
        providers = [
            d["package"].removeprefix(registry)
            for d in config["spec"]["dependsOn"]
            if d["kind"] == "Provider" and d["package"].startswith(registry)
        ]
        if (
            len(providers) != 1
            or not (ROOT / "package" / providers[0] / "crossplane.yaml").is_file()
        ):
            raise SystemExit(
                f"crossplane.yaml: want one Provider under {registry} with package/<name>/"
                f"crossplane.yaml (the reconciler), have {providers}"
            )
        return cls(
            version="v" + project["version"],
            registry=registry,
            configuration=config["metadata"]["name"],
            functions=functions,
            reconciler=providers[0],
        )

    def image(self, name: str) -> str:
        return f"{self.registry}{name}:{self.version}"


@dataclass
class Report:
    """What the build prints at the end: each artifact, each image's layers, each stage's time."""

    stages: list[tuple[str, float]] = field(default_factory=list)
    images: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    artifacts: list[pathlib.Path] = field(default_factory=list)
    wheelhouse: pathlib.Path | None = None
    plnt_wheel: pathlib.Path | None = None

    def as_json(self) -> dict:
        return {
            "artifacts": [str(p) for p in self.artifacts],
            "images": {
                name: [{"layer": w, "compressed": c, "unpacked": u} for w, c, u in layers]
                for name, layers in self.images.items()
            },
            "stages": dict(self.stages),
            "wheelhouse": str(self.wheelhouse) if self.wheelhouse else None,
            "plnt_wheel": str(self.plnt_wheel) if self.plnt_wheel else None,
        }

    def timed(self, stage: str, started: float) -> None:
        self.stages.append((stage, time.monotonic() - started))

    def print(self, out: io.TextIOBase) -> None:
        mib = 1024 * 1024
        out.write("\nimages (compressed = what a registry stores and pulls):\n")
        for name, layers in self.images.items():
            packed = sum(c for _, c, _ in layers) / mib
            unpacked = sum(u for _, _, u in layers) / mib
            parts = ", ".join(f"{what} {c / mib:.1f}" for what, c, _ in layers)
            out.write(f"  {name:32} {packed:6.1f} MiB compressed, {unpacked:6.1f} MiB unpacked")
            out.write(f"  [{parts}]\n")
        out.write("artifacts:\n")
        for path in self.artifacts:
            out.write(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
            out.write(f"  {path.stat().st_size / mib:.1f} MiB\n")
        out.write("stages: " + ", ".join(f"{s} {t:.1f}s" for s, t in self.stages) + "\n")


# --- running tools -------------------------------------------------------------------------


def run(*cmd: str | os.PathLike, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"package: {' '.join(map(str, cmd))} exited {proc.returncode}\n"
            f"{proc.stdout}{proc.stderr}"
        )
    return proc


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def replace_atomically(tmp: pathlib.Path, final: pathlib.Path) -> pathlib.Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
    return final


# --- the base layer --------------------------------------------------------------------------


def base_layer() -> pathlib.Path:
    """The Debian rootfs tarball, built once per recipe and shared through .tools/."""
    key = digest(SUITE, *MMDEBSTRAP_ARGS)
    path = SHARED_CACHE / f"debian-{SUITE}-python3-{key}.tar"
    if path.is_file():
        return path
    SHARED_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = SHARED_CACHE / f".{os.getpid()}.{path.name}"  # mmdebstrap picks the format by suffix
    sys.stderr.write(f"package: mmdebstrap {SUITE} (minutes, cached as {path.name}) ...\n")
    run("mmdebstrap", "--quiet", *MMDEBSTRAP_ARGS, SUITE, tmp)
    return replace_atomically(tmp, path)


# --- wheels ----------------------------------------------------------------------------------


def pinned_environment() -> str:
    """The versions the development virtualenv runs (and the tests passed with), as constraints.
    plnt itself is never one: it is installed editable, but with the checkout on PYTHONPATH pip
    also lists it from the plnt.egg-info a wheel build leaves there, and a pin of it would both
    change the wheelhouse's key and refuse a build at another version."""
    listing = run(sys.executable, "-m", "pip", "list", "--format=freeze", "--exclude-editable")
    own = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    return "".join(
        sorted(
            line + "\n"
            for line in listing.stdout.splitlines()
            if "==" in line and line.split("==")[0].lower() != own.lower()
        )
    )


def wheelhouse() -> pathlib.Path:
    """Every dependency's wheel for the image's Python (cp311, x86_64 glibc), plus pip itself."""
    constraints = pinned_environment()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # Only what decides the set of wheels: the pins and the declared requirements.
    wanted = {
        "dependencies": pyproject["project"]["dependencies"],
        "reconciler": pyproject["project"]["optional-dependencies"]["reconciler"],
        "build": pyproject["build-system"]["requires"],
    }
    path = BUILD / f"wheels-{digest(constraints, json.dumps(wanted, sort_keys=True))}"
    if path.is_dir():
        return path
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".wheels-", dir=BUILD))
    (tmp / "constraints.txt").write_text(constraints)
    pip = ("-m", "pip", "--disable-pip-version-check")
    common = ("--prefer-binary", "--constraint", tmp / "constraints.txt", "--wheel-dir", tmp)
    run(sys.executable, *pip, "wheel", "--quiet", *common, f"{ROOT}[reconciler]")
    pip_version = next(
        line.split("==")[1] for line in constraints.splitlines() if line.startswith("pip==")
    )
    run(sys.executable, *pip, "download", "--quiet", "--no-deps", "-d", tmp, f"pip=={pip_version}")
    # The build backend too, so building plnt's own wheel on every run needs no index.
    run(
        sys.executable,
        *pip,
        "download",
        "--quiet",
        "--only-binary=:all:",
        "-d",
        tmp,
        *wanted["build"],
    )
    for own in tmp.glob("plnt-*.whl"):
        own.unlink()  # built fresh on every run
    return replace_atomically(tmp, path)


def plnt_wheel(wheels: pathlib.Path) -> pathlib.Path:
    """plnt's own wheel, rebuilt only when its sources change (a build takes seconds)."""
    sources = [ROOT / "pyproject.toml", ROOT / "README.md"]
    for top in ("plnt", "plnt_host", "plnt_reconciler", "functions", "compositions"):
        sources += [
            p for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    key = digest(
        *(part for p in sorted(sources) for part in (str(p.relative_to(ROOT)), p.read_bytes()))
    )
    out = BUILD / f"plnt-wheel-{key}"
    if not out.is_dir():
        for stale in BUILD.glob("plnt-wheel-*"):
            shutil.rmtree(stale)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=".plnt-wheel-", dir=BUILD))
        run(
            sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--no-index", "--find-links", wheels, "--wheel-dir", tmp, ROOT,
        )  # fmt: skip
        replace_atomically(tmp, out)
    (wheel,) = out.glob("plnt-*.whl")
    return wheel


def requirements(wheel: pathlib.Path) -> tuple[list[str], list[str]]:
    """(runtime requirements, the reconciler extra's), from the wheel's own metadata."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(name).decode())
    base, reconciler = [], []
    for req in meta.get_all("Requires-Dist") or []:
        spec, _, marker = req.partition(";")
        if not marker.strip():
            base.append(spec.strip())
        elif marker.replace(" ", "") == 'extra=="reconciler"':
            reconciler.append(spec.strip())
    return base, reconciler


def wheel_digest(wheel: pathlib.Path) -> str:
    """The wheel's file contents, ignoring the zip's timestamps."""
    with zipfile.ZipFile(wheel) as z:
        return digest(*(part for n in sorted(z.namelist()) for part in (n, z.read(n))))


# --- Python layers, installed in a chroot of the base ------------------------------------------


class Chroot:
    """The base rootfs unpacked once per build; pip runs inside it with the image's python3."""

    def __init__(self, base: pathlib.Path, wheels: pathlib.Path, workdir: pathlib.Path):
        self.root = workdir / "rootfs"
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        run("tar", "-xf", base, "-C", self.root)
        shutil.copytree(wheels, self.root / WORK.lstrip("/") / "wheels")
        (self.pip_wheel,) = (self.root / WORK.lstrip("/") / "wheels").glob("pip-*.whl")

    def add(self, wheel: pathlib.Path) -> None:
        shutil.copy(wheel, self.root / WORK.lstrip("/") / "wheels")

    def install(self, name: str, specs: Sequence[str], *, deps: bool = True) -> pathlib.Path:
        """pip installs ``specs`` into WORK/layers/<name> (a --root); returns that directory."""
        target = self.root / WORK.lstrip("/") / "layers" / name
        shutil.rmtree(target, ignore_errors=True)
        pip = f"{WORK}/wheels/{self.pip_wheel.name}/pip"
        run(
            "chroot", self.root, "/usr/bin/python3", pip, "install", "--quiet",
            "--no-index", "--find-links", f"{WORK}/wheels", "--root", f"{WORK}/layers/{name}",
            "--no-compile", "--no-cache-dir", "--break-system-packages",
            "--root-user-action=ignore", "--disable-pip-version-check",
            "--no-warn-script-location", *([] if deps else ["--no-deps"]), *specs,
        )  # fmt: skip
        site = f"{WORK}/layers/{name}/{SITE_PACKAGES}"
        if (self.root / site.lstrip("/")).is_dir():
            run(
                "chroot", self.root, "/usr/bin/python3", "-m", "compileall", "-q",
                "--invalidation-mode", "unchecked-hash", "-s", f"{WORK}/layers/{name}", "-p", "/",
                site,
            )  # fmt: skip
        return target

    def merge(self, layer: pathlib.Path) -> None:
        """Makes a layer's files part of the chroot, so the next install sees them installed."""
        run("tar", "-xf", layer, "-C", self.root)


def layer_tar(directory: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """A reproducible layer: sorted entries, root-owned, fixed times; readable by any user
    (Crossplane runs functions as uid 2000, the image says 65532)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(directory.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(directory)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = EPOCH
            info.mode |= 0o444 if not info.isdir() else 0o555
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return replace_atomically(tmp, out)


def take_out(installed: pathlib.Path, paths: Sequence[str], into: pathlib.Path | None) -> None:
    """Moves each site-packages path in `paths` out of an install, bytecode included: into the
    same place under `into` (a layer of its own), or, with None, away, dropping its lines from
    the wheel's RECORD so the install lists what it holds."""
    site = installed / SITE_PACKAGES
    gone: list[str] = []
    for rel in paths:
        source = site / rel
        moved = [source]
        if source.suffix == ".py":
            moved += sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"))
        for path in moved:
            if not path.exists():
                raise SystemExit(f"package: {path.relative_to(installed)} is not in the wheel")
            if into is not None:
                target = into / path.relative_to(installed)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(path, target)
            elif path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        gone.append(rel)
    if into is not None:
        return
    for record in site.glob("*.dist-info/RECORD"):
        kept = [
            line
            for line in record.read_text().splitlines()
            if not any(line.split(",", 1)[0] in (g, g + "/") or line.startswith(g + "/")
                       for g in gone)
        ]  # fmt: skip
        record.write_text("".join(line + "\n" for line in kept))


@dataclass(frozen=True)
class Layers:
    base: pathlib.Path
    deps: pathlib.Path
    reconciler_deps: pathlib.Path
    plnt: pathlib.Path  # plnt's wheel without NOT_IN_IMAGES and RECONCILER_ONLY
    reconciler: pathlib.Path  # RECONCILER_ONLY


def python_layers(base: pathlib.Path, wheels: pathlib.Path, wheel: pathlib.Path) -> Layers:
    runtime_reqs, reconciler_reqs = requirements(wheel)
    cache = BUILD / "layers"
    available = sorted(p.name for p in wheels.glob("*.whl"))
    deps = cache / f"deps-{digest(base.name, *available, *runtime_reqs)}.tar"
    rdeps = cache / f"reconciler-deps-{digest(deps.name, *reconciler_reqs)}.tar"
    own = (
        cache
        / f"plnt-{digest(deps.name, wheel_digest(wheel), *NOT_IN_IMAGES, *RECONCILER_ONLY)}.tar"
    )
    rown = cache / f"reconciler-package-{digest(own.name)}.tar"
    if not all(p.is_file() for p in (deps, rdeps, own, rown)):
        chroot = Chroot(base, wheels, BUILD / "work")
        chroot.add(wheel)
        if not deps.is_file():
            layer_tar(chroot.install("deps", runtime_reqs), deps)
        if not (own.is_file() and rown.is_file()):
            installed = chroot.install("plnt", [f"{WORK}/wheels/{wheel.name}"], deps=False)
            take_out(installed, NOT_IN_IMAGES, None)
            apart = BUILD / "work" / "reconciler"
            shutil.rmtree(apart, ignore_errors=True)
            take_out(installed, RECONCILER_ONLY, apart)
            layer_tar(installed, own)
            layer_tar(apart, rown)
            shutil.rmtree(apart)
        if not rdeps.is_file():
            chroot.merge(deps)  # so pip adds only what the extra needs beyond the shared layer
            layer_tar(chroot.install("reconciler", reconciler_reqs), rdeps)
        shutil.rmtree(chroot.root)
    for stale in cache.glob("*.tar"):
        if stale not in (deps, rdeps, own, rown):
            stale.unlink()
    return Layers(base=base, deps=deps, reconciler_deps=rdeps, plnt=own, reconciler=rown)


# --- OCI images with umoci -------------------------------------------------------------------


class Layout:
    """An OCI image layout (build/package/oci) that umoci writes; tags name content keys."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        if not (path / "index.json").is_file():
            shutil.rmtree(path, ignore_errors=True)
            run("umoci", "init", "--layout", path)

    def ref(self, tag: str) -> str:
        return f"{self.path}:{tag}"

    def tags(self) -> set[str]:
        index = json.loads((self.path / "index.json").read_text())
        return {
            m.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
            for m in index.get("manifests") or []
        }

    def stack(self, layers: Iterable[tuple[str, pathlib.Path]]) -> str:
        """Tag of an image holding these layers in order; each prefix is built once, ever."""
        have = self.tags()
        tag = "empty"
        if tag not in have:
            run("umoci", "new", "--image", self.ref(tag))
        for what, layer in layers:
            child = f"{what}-{digest(tag, layer.name)}"
            if child not in have:
                run(
                    "umoci", "raw", "add-layer", "--image", self.ref(tag), "--tag", child,
                    "--history.created", CREATED, "--history.created_by", f"plnt: {what}",
                    layer,
                )  # fmt: skip
            tag = child
        return tag

    def configure(self, tag: str, out_tag: str, *flags: str) -> str:
        run(
            "umoci", "config", "--image", self.ref(tag), "--tag", out_tag,
            "--os", "linux", "--architecture", "amd64", "--created", CREATED,
            "--history.created", CREATED, "--config.user", NONROOT, "--config.workingdir", "/",
            "--config.env", PATH_ENV, "--config.env", "PYTHONDONTWRITEBYTECODE=1", *flags,
        )  # fmt: skip
        return out_tag

    def blob(self, descriptor: dict) -> pathlib.Path:
        algorithm, hexdigest = descriptor["digest"].split(":")
        return self.path / "blobs" / algorithm / hexdigest

    def manifest(self, tag: str) -> dict:
        index = json.loads((self.path / "index.json").read_text())
        for m in index.get("manifests") or []:
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
                return json.loads(self.blob(m).read_text())
        raise LookupError(tag)

    def docker_archive(self, tag: str, repo_tag: str, out: pathlib.Path) -> pathlib.Path:
        """The image as `docker save` lays it out, layers kept gzip-compressed (go-containerregistry
        and so crank read either): no layer is compressed twice."""
        manifest = self.manifest(tag)
        config = manifest["config"]["digest"].split(":")[1] + ".json"
        layers = [layer["digest"].split(":")[1] + ".tar.gz" for layer in manifest["layers"]]
        index = [{"Config": config, "RepoTags": [repo_tag], "Layers": layers}]
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        with tarfile.open(tmp, "w") as tar:
            tar.add(self.blob(manifest["config"]), arcname=config)
            for name, layer in zip(layers, manifest["layers"], strict=True):
                tar.add(self.blob(layer), arcname=name)
            data = json.dumps(index).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return replace_atomically(tmp, out)


def layer_sizes(layout: Layout, tag: str, names: Sequence[str]) -> list[tuple[str, int, int]]:
    manifest = layout.manifest(tag)
    out = []
    for what, layer in zip(names, manifest["layers"], strict=True):
        out.append((what, layer["size"], 0))
    return out


# --- packages --------------------------------------------------------------------------------


def configuration_ignores(root: pathlib.Path = ROOT) -> list[str]:
    """Every YAML file under the root that is not part of the Configuration package, relative to
    it, as `crank xpkg build --ignore` takes them. crank parses every YAML file it walks (it
    enters no symlinked folder but reads a symlinked file), and its ignore patterns cannot name a
    directory, so this lists files: the install manifests, the tests' fixtures, docs, a
    function's link to a vendored CRD, and anything in .venv/ or build/."""
    keep = ("apis/", "compositions/", "examples/")
    out = []
    for folder, dirs, files in os.walk(root):  # like crank: symlinked folders are not entered
        dirs.sort()
        for file in sorted(files):
            path = pathlib.Path(folder, file)
            if path.suffix not in (".yaml", ".yml"):
                continue
            rel = path.relative_to(root).as_posix()
            if rel == "crossplane.yaml" or rel.startswith(keep):
                continue
            out.append(fnmatch_escape(rel))
    return out


def fnmatch_escape(path: str) -> str:
    """Go's filepath.Match treats * ? [ and \\ specially; escape them in a literal path."""
    return "".join(f"\\{c}" if c in "*?[\\" else c for c in path)


def build_configuration(release: Release, dist: pathlib.Path) -> pathlib.Path:
    out = dist / f"{release.configuration}-{release.version}.xpkg"
    run(
        CRANK, "xpkg", "build", "--package-root", ROOT, "--examples-root", ROOT / "examples",
        "--ignore", ",".join(configuration_ignores()), "--package-file", out,
    )  # fmt: skip
    return out


def build_function(
    release: Release, name: str, layout: Layout, image: str, dist: pathlib.Path
) -> pathlib.Path:
    tag = layout.configure(
        image, name,
        "--config.entrypoint", "plnt", "--config.entrypoint", "function",
        "--config.cmd", name, "--config.exposedports", FUNCTION_PORT,
    )  # fmt: skip
    out = dist / f"{name}-{release.version}.xpkg"
    meta = (ROOT / "package" / name / "crossplane.yaml").read_bytes()
    key = digest(json.dumps(layout.manifest(tag), sort_keys=True), meta, release.image(name))
    if _up_to_date(out, key):
        return out
    tarball = layout.docker_archive(tag, release.image(name), BUILD / "images" / f"{name}.tar")
    # No examples for a Function package: point crank at an empty folder, not ./examples.
    empty = BUILD / "no-examples"
    empty.mkdir(parents=True, exist_ok=True)
    run(
        CRANK, "xpkg", "build", "--package-root", ROOT / "package" / name,
        "--examples-root", empty, "--embed-runtime-image-tarball", tarball, "--package-file", out,
    )  # fmt: skip
    tarball.unlink()  # the xpkg holds the same blobs
    _stamp(out, key)
    return out


def _up_to_date(out: pathlib.Path, key: str) -> bool:
    """Whether ``out`` was built from exactly these inputs (so reruns skip rewriting it)."""
    stamp = _stamp_path(out)
    return out.is_file() and stamp.is_file() and stamp.read_text() == key


def _stamp(out: pathlib.Path, key: str) -> None:
    _stamp_path(out).parent.mkdir(parents=True, exist_ok=True)
    _stamp_path(out).write_text(key)


def _stamp_path(out: pathlib.Path) -> pathlib.Path:
    return BUILD / "stamps" / f"{out.name}.{digest(str(out.resolve()))}"


def reconciler_args(settings: pathlib.Path = SETTINGS) -> list[str]:
    """The reconciler container's arguments in settings.yaml's DeploymentRuntimeConfig."""
    for doc in yaml.safe_load_all(settings.read_text()):
        if doc and doc.get("kind") == "DeploymentRuntimeConfig":
            containers = doc["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
            (container,) = [c for c in containers if c["name"] == "package-runtime"]
            return [str(a) for a in container["args"]]
    raise SystemExit(f"package: {settings} has no DeploymentRuntimeConfig")


def build_reconciler(
    release: Release, layout: Layout, image: str, dist: pathlib.Path
) -> pathlib.Path:
    name = release.reconciler
    command = [flag for arg in reconciler_args() for flag in ("--config.cmd", arg)]
    tag = layout.configure(
        image, name, "--config.entrypoint", "plnt", *command,
        "--config.exposedports", RECONCILER_PORT,
    )  # fmt: skip
    out = dist / f"{name}-{release.version}.xpkg"
    meta = (ROOT / "package" / name / "crossplane.yaml").read_bytes()
    key = digest(json.dumps(layout.manifest(tag), sort_keys=True), meta, release.image(name))
    if _up_to_date(out, key):
        return out
    tarball = layout.docker_archive(tag, release.image(name), BUILD / "images" / f"{name}.tar")
    empty = BUILD / "no-examples"
    empty.mkdir(parents=True, exist_ok=True)
    run(
        CRANK, "xpkg", "build", "--package-root", ROOT / "package" / name,
        "--examples-root", empty, "--embed-runtime-image-tarball", tarball, "--package-file", out,
    )  # fmt: skip
    tarball.unlink()
    _stamp(out, key)
    return out


# --- the command -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/package.py", description=__doc__.split("\n")[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"), help="output folder (default: dist/)")
    parser.add_argument("--report", metavar="FILE", help="also write what was built as JSON")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="build only this package: configuration, reconciler or a function (repeatable)",
    )
    args = parser.parse_args(argv)
    release = Release.read()
    known = {"configuration", "reconciler", *release.functions}
    wanted = set(args.only or known)
    if wanted - known:
        parser.error(f"unknown package(s) {sorted(wanted - known)}; known: {sorted(known)}")
    for tool in ("mmdebstrap", "umoci", "chroot"):
        if shutil.which(tool) is None:
            raise SystemExit(f"package: {tool} is missing: run hack/install-image-tools.sh")
    if not CRANK.is_file():
        raise SystemExit(f"package: {CRANK} is missing: run hack/setup.sh")
    dist = pathlib.Path(args.dist).resolve()
    dist.mkdir(parents=True, exist_ok=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    with (BUILD / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time shares build/package
        report = build(release, wanted, dist)
    report.print(sys.stdout)
    if args.report:
        pathlib.Path(args.report).write_text(json.dumps(report.as_json(), indent=2) + "\n")
    return 0


def build(release: Release, wanted: set[str], dist: pathlib.Path) -> Report:
    report = Report()

    if "configuration" in wanted:
        t = time.monotonic()
        report.artifacts.append(build_configuration(release, dist))
        report.timed("configuration", t)
    images = wanted - {"configuration"}
    if images:
        t = time.monotonic()
        base = base_layer()
        report.timed("debian rootfs", t)
        t = time.monotonic()
        wheels = wheelhouse()
        wheel = plnt_wheel(wheels)
        report.timed("wheels", t)
        t = time.monotonic()
        layers = python_layers(base, wheels, wheel)
        report.timed("python layers", t)
        t = time.monotonic()
        layout = Layout(BUILD / "oci")
        function_stack = [("base", layers.base), ("deps", layers.deps), ("plnt", layers.plnt)]
        function_image = layout.stack(function_stack)
        reconciler_stack = [*function_stack[:2], ("reconciler-deps", layers.reconciler_deps)]
        reconciler_stack += [("plnt", layers.plnt), ("reconciler", layers.reconciler)]
        report.timed("oci layers", t)
        t = time.monotonic()
        for name in release.functions:
            if name in wanted:
                report.artifacts.append(build_function(release, name, layout, function_image, dist))
                sizes = layer_sizes(layout, name, [w for w, _ in function_stack])
                report.images[name] = _with_unpacked(sizes, [p for _, p in function_stack])
        if "reconciler" in wanted:
            image = layout.stack(reconciler_stack)
            report.artifacts.append(build_reconciler(release, layout, image, dist))
            sizes = layer_sizes(layout, release.reconciler, [w for w, _ in reconciler_stack])
            report.images[release.reconciler] = _with_unpacked(
                sizes, [p for _, p in reconciler_stack]
            )
        report.timed("images and xpkgs", t)
        report.wheelhouse, report.plnt_wheel = wheels, wheel
    return report


def _with_unpacked(
    sizes: list[tuple[str, int, int]], tars: list[pathlib.Path]
) -> list[tuple[str, int, int]]:
    return [
        (what, packed, tar.stat().st_size)
        for (what, packed, _), tar in zip(sizes, tars, strict=True)
    ]


if __name__ == "__main__":
    sys.exit(main())
