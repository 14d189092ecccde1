"""Problems travel to cluster nodes by content, not by path: no node is assumed to share a file system.

The driver packs a problem's folder (its definition, workloads, any blobs and helper files, and the
optimised baseline shipped beside it in `reference_impls/`) into one tar in memory, named by a hash of
its contents. The bytes go through Ray's object store once per problem; a node unpacks them into a
private folder of its own, once per hash, and loads the problem from there. Solutions need no folder:
a `Solution` carries its sources.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from solbench.spec.errors import SpecError
from solbench.spec.problem import BASELINE_FILE, Problem, load_problem

SKIPPED_NAMES = {"__pycache__", ".git", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class ShippedProblem:
    """A problem folder as bytes: `name` (the folder's name), `digest` (sha256 of the contents), `data` (tar)."""

    name: str
    digest: str
    data: bytes

    @property
    def size_bytes(self) -> int:
        return len(self.data)


def _folder_files(directory: Path) -> list[tuple[str, Path]]:
    """(relative name, path) of every file under the folder, in a fixed order."""
    files = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part in SKIPPED_NAMES for part in rel.parts) or not path.is_file():
            continue
        files.append((rel.as_posix(), path))
    return files


def pack_problem(problem: Problem) -> ShippedProblem:
    """The problem's folder (and its shipped baseline, as `baseline.py` inside it) as one tar."""
    if problem.directory is None:
        raise SpecError(f"problem {problem.name} has no folder to ship to a cluster")
    directory = Path(problem.directory)
    files = _folder_files(directory)
    baseline = problem.baseline_path
    if baseline is not None and baseline.parent.resolve() != directory.resolve():
        files.append((BASELINE_FILE, baseline))  # reference_impls/<group>/<name>.baseline.py travels inside
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, path in files:
            content = path.read_bytes()
            digest.update(name.encode() + b"\0" + len(content).to_bytes(8, "little") + content)
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(content))
    return ShippedProblem(directory.name, digest.hexdigest(), buffer.getvalue())


def unpack_problem(shipped: ShippedProblem, root: Path) -> Problem:
    """Load a shipped problem on this node from `root/<digest>/<name>`, unpacking it there the first time."""
    folder = Path(root) / shipped.digest[:32] / shipped.name
    if not folder.is_dir():
        partial = folder.with_name(folder.name + ".partial")
        partial.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(shipped.data), mode="r") as tar:
            for member in tar.getmembers():
                target = (partial / member.name).resolve()
                if not member.isfile() or partial.resolve() not in target.parents:
                    raise SpecError(f"shipped problem {shipped.name}: unsafe member {member.name!r}")
            tar.extractall(partial, filter="data")
        partial.rename(folder)
    return load_problem(folder)
