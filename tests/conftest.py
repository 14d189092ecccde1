"""Shared fixtures: where the shared dataset is, and clean skipping of GPU tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

# pytest-xdist's workers set COLUMNS=80 and LINES=24 (execnet's terminal); solbench honours COLUMNS in piped
# output (a CI log read at that width), so under `-n 2` every table a test reads, and every child it starts,
# would be 80 columns wide. The tests read what a user's pipe gives: no width at all.
for _variable in ("COLUMNS", "LINES"):
    os.environ.pop(_variable, None)

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECKOUT_KEY = pytest.StashKey["set[str] | None"]()


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _has_cuda()
if not HAS_CUDA:  # Triton decides at decoration time whether to interpret: set it before any kernel module loads
    os.environ.setdefault("TRITON_INTERPRET", "1")


def private_folder(tmp_path_factory, variable: str, name: str):
    """`variable` names a fresh temporary folder for the session, then is restored."""
    previous = os.environ.get(variable)
    os.environ[variable] = str(tmp_path_factory.mktemp(name))
    yield
    if previous is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = previous


@pytest.fixture(scope="session", autouse=True)
def _private_sol_cache(tmp_path_factory):
    """Analyses cached by tests go to a private folder, never the user's ~/.cache (solbench.sol.cache)."""
    yield from private_folder(tmp_path_factory, "SOLBENCH_SOL_CACHE", "sol-cache")


@pytest.fixture(scope="session", autouse=True)
def _private_runs_dir(tmp_path_factory):
    """Runs that name no -o keep their traces in a temporary folder, never the checkout's .solbench/runs/
    (a later `solbench leaderboard .solbench/runs/` would show test fixtures as results)."""
    yield from private_folder(tmp_path_factory, "SOLBENCH_RUNS_DIR", "runs")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared data folder (../shared beside the checkout, or $SOLBENCH_SHARED)."""
    path = Path(os.environ.get("SOLBENCH_SHARED", REPO_ROOT.parent / "shared"))
    if not (path / "sol-execbench").is_dir():
        pytest.skip(shared_data_hint(path))
    return path


def shared_data_hint(looked_in: Path) -> str:
    """How to get the shared data, not only where it was not found (a fresh clone has no ../shared)."""
    how = ("NVIDIA's public SOL-ExecBench problems (sol-execbench/<category>/<problem>/ with definition.json "
           "and workload.jsonl) are not part of the repository; this project keeps them in a folder shared/ "
           "beside the checkout (../shared/sol-execbench): put a copy or a link there, or set SOLBENCH_SHARED "
           "to the folder that holds sol-execbench/")
    if "SOLBENCH_SHARED" in os.environ:
        return f"shared data: SOLBENCH_SHARED={looked_in} has no sol-execbench/ folder. {how}"
    return f"shared data not found. {how}"


@pytest.fixture(scope="session")
def sol_execbench_dir(shared_dir: Path) -> Path:
    return shared_dir / "sol-execbench"


@pytest.fixture(scope="session", autouse=True)
def _trace_keys_in_a_temporary_state_dir(tmp_path_factory):
    """Trace files' signing keys (report/signing.py) go to a folder of this test session, not the user's."""
    if "SOLBENCH_STATE_DIR" not in os.environ:
        os.environ["SOLBENCH_STATE_DIR"] = str(tmp_path_factory.mktemp("solbench_state"))
    yield


CACHE_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}  # written by Python and the tools, not by tests


def checkout_state() -> set[str] | None:
    """The checkout's untracked and ignored paths, as `git status` lists them (caches left out); None outside
    a git checkout. Edits to tracked files are not counted: a developer may be editing while the suite runs."""
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--ignored", "--untracked-files=all"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {line[3:] for line in out.splitlines()
            if line[:2] in ("??", "!!") and not CACHE_PARTS & set(Path(line[3:]).parts)}


def pytest_sessionstart(session):
    session.config.stash[CHECKOUT_KEY] = checkout_state()


def pytest_sessionfinish(session, exitstatus):
    """The suite writes only to temporary folders: a path it added to the checkout fails the session, named."""
    before = session.config.stash.get(CHECKOUT_KEY, None)
    after = checkout_state() if before is not None else None
    if before is None or after is None or session.config.option.collectonly:
        return
    added = sorted(after - before)
    if added:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"FAILED: the tests changed the checkout ({len(added)} path(s); tests must write to "
                                f"temporary folders): " + ", ".join(added[:20]), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
