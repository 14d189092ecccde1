"""Ray for a machine without internet: build a small carry bundle here, install it there.

The GPU image has no ray and no way to fetch it, and everything carried with the working tree must fit
64 MiB. So `build` downloads ray and its dependencies as wheels for the target Python, unpacks them, drops
what a solbench cluster never uses (Java jars, the dashboard's web build, the ML libraries, tests, debug
symbols) and packs the rest as one xz tarball with a manifest. `install` unpacks it on the device into a
directory on PYTHONPATH, taking a dependency only when the image lacks it or has a version ray refuses
(PYTHONPATH shadows site-packages, so copying everything would replace the image's own packages).

    python3 benchmarks/ray_bundle.py build --python 3.12 --out .whl/ray_bundle.tar.xz
    python3 benchmarks/ray_bundle.py install .whl/ray_bundle.tar.xz /tmp/site
    python3 benchmarks/ray_bundle.py check /tmp/site     (starts a 2-CPU local cluster and runs a task)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

# Parts of the ray wheel a local or multi-node solbench cluster never imports or starts.
DROP_RAY_PATHS = (
    "jars", "dashboard/client", "rllib", "tune", "train", "serve", "data", "llm", "workflow", "cpp",
    "setup-dev.py",
)
MANIFEST = "bundle.json"


def _download(python: str, dest: Path) -> None:
    """Ray and its whole dependency closure as binary wheels for the target interpreter."""
    cmd = [sys.executable, "-m", "pip", "download", "ray", "--python-version", python, "--platform",
           "manylinux2014_x86_64", "--only-binary=:all:", "--quiet", "-d", str(dest)]
    subprocess.run(cmd, check=True)


def _dist_entry(dist_info: Path, tops: set[str]) -> dict:
    """Name, version, requirements and top-level paths of one unpacked wheel."""
    fields = {"name": "", "version": "", "requires": []}
    for line in (dist_info / "METADATA").read_text(errors="replace").splitlines():
        key, _, value = line.partition(": ")
        if key == "Name":
            fields["name"] = value.strip()
        elif key == "Version":
            fields["version"] = value.strip()
        elif key == "Requires-Dist" and "extra ==" not in value:
            fields["requires"].append(value.split(";")[0].strip())
        elif not line:
            break
    fields["paths"] = sorted(tops | {dist_info.name})
    return fields


def _unpack_wheels(wheels: Path, stage: Path) -> list[dict]:
    """Unzip every wheel into stage and note which top-level paths each one brought."""
    dists = []
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            zf.extractall(stage)
            for member in zf.infolist():  # zipfile drops the mode bits: raylet and gcs_server must stay executable
                mode = member.external_attr >> 16
                if mode & 0o111 and not member.is_dir():
                    os.chmod(stage / member.filename, mode & 0o755)
        tops = {n.split("/")[0] for n in names}
        info = next(t for t in tops if t.endswith(".dist-info"))
        dists.append(_dist_entry(stage / info, tops - {info}))
    return dists


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _slim(stage: Path) -> None:
    """Drop unused ray parts, tests, caches and RECORDs; strip debug symbols from native code."""
    for rel in DROP_RAY_PATHS:
        target = stage / "ray" / rel
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for path in sorted(stage.rglob("*"), reverse=True):
        if path.is_dir() and path.name in ("tests", "__pycache__"):
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file() and path.name == "RECORD" and path.parent.name.endswith(".dist-info"):
            path.unlink()
    strip = shutil.which("strip")
    for path in stage.rglob("*"):
        if strip and path.is_file() and not path.is_symlink() and _is_elf(path):
            subprocess.run([strip, "--strip-unneeded", str(path)], check=False, capture_output=True)


def build(python: str, out: Path, wheels: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="ray_bundle_") as tmp:
        stage = Path(tmp) / "stage"
        stage.mkdir()
        if wheels is None:
            wheels = Path(tmp) / "wheels"
            _download(python, wheels)
        dists = _unpack_wheels(wheels, stage)
        _slim(stage)
        (stage / MANIFEST).write_text(json.dumps({"python": python, "dists": dists}, indent=1))
        out.parent.mkdir(parents=True, exist_ok=True)
        tar_path = Path(tmp) / "bundle.tar"
        with tarfile.open(tar_path, "w") as tar:
            for entry in sorted(stage.iterdir()):
                tar.add(entry, arcname=entry.name)
        with open(out, "wb") as fh:
            subprocess.run(["xz", "-9e", "-T2", "-c", str(tar_path)], stdout=fh, check=True)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB, {len(dists)} distributions for Python {python}")


def _missing(dist: dict, needed_by: dict[str, list[str]]) -> bool:
    """True when the running interpreter lacks the distribution or has a version ray's wheels refuse."""
    from importlib import metadata  # inner: only install needs it

    try:
        have = metadata.version(dist["name"])
    except metadata.PackageNotFoundError:
        return True
    try:
        from packaging.requirements import Requirement  # inner: optional, may be bundled itself
    except ImportError:
        return False
    for spec in needed_by.get(dist["name"].lower().replace("_", "-"), []):
        if not Requirement(spec).specifier.contains(have, prereleases=True):
            return True
    return False


def install(bundle: Path, target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="ray_bundle_") as tmp:
        with tarfile.open(bundle, "r:xz") as tar:
            tar.extractall(tmp, filter="tar") if hasattr(tarfile, "tar_filter") else tar.extractall(tmp)
        manifest = json.loads((Path(tmp) / MANIFEST).read_text())
        if manifest["python"] != f"{sys.version_info[0]}.{sys.version_info[1]}":
            raise SystemExit(f"ray bundle is for Python {manifest['python']}, this is {sys.version.split()[0]}")
        needed_by: dict[str, list[str]] = {}
        for dist in manifest["dists"]:
            for spec in dist["requires"]:
                name = spec.split(" ")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].split("~")[0]
                needed_by.setdefault(name.lower().replace("_", "-"), []).append(spec)
        target.mkdir(parents=True, exist_ok=True)
        taken = []
        for dist in manifest["dists"]:
            if dist["name"] != "ray" and not _missing(dist, needed_by):
                continue
            taken.append(dist["name"])
            for rel in dist["paths"]:
                dest = target / rel
                if dest.is_dir():
                    shutil.rmtree(dest)
                elif dest.exists():
                    dest.unlink()
                shutil.move(str(Path(tmp) / rel), dest)
    print(f"ray bundle installed to {target}: {', '.join(taken)}")


def check(site: Path) -> int:
    """Start a 2-CPU local cluster from the installed bundle and run one task on it."""
    code = (
        "import ray, sys; ray.init(num_cpus=2, include_dashboard=False)\n"
        "f = ray.remote(lambda x: x * 2)\n"
        "assert ray.get([f.remote(i) for i in range(4)]) == [0, 2, 4, 6]\n"
        "print('ray', ray.__version__, 'from', ray.__file__, 'ok; nodes:', len(ray.nodes()))\n"
        "ray.shutdown()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", code], env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--python", default="3.12", help="target interpreter version, e.g. 3.12")
    b.add_argument("--out", type=Path, default=Path(".whl/ray_bundle.tar.xz"))
    b.add_argument("--wheels", type=Path, help="use these downloaded wheels instead of downloading")
    i = sub.add_parser("install")
    i.add_argument("bundle", type=Path)
    i.add_argument("target", type=Path)
    c = sub.add_parser("check")
    c.add_argument("site", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        build(args.python, args.out, args.wheels)
        return 0
    if args.cmd == "install":
        install(args.bundle, args.target)
        return 0
    return check(args.site)


if __name__ == "__main__":
    sys.exit(main())
