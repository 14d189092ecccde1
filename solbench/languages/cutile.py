"""cuTile (cuda-tile: CUDA's tile programming model from Python): Python-hosted. Its compiler, tileiras 13.2,
targets Blackwell and Ampere/Ada but not Hopper: on a Hopper GPU a cuTile solution is SKIPPED, decided by the
orchestrator from the GPU's compute capability before a worker starts."""

from __future__ import annotations

from solbench.languages import Language, python_module, register
from solbench.languages.python_entry import load_python_entry

UNSUPPORTED_MAJORS = {9: "Hopper"}


def unsupported_on(capability: tuple[int, int]) -> str | None:
    family = UNSUPPORTED_MAJORS.get(capability[0])
    if family is None:
        return None
    return (f"cutile solutions cannot run on this {family} GPU (sm_{capability[0]}{capability[1]}): cuTile's "
            f"compiler, tileiras 13.2, targets Blackwell and Ampere/Ada but not Hopper")


register(Language("cutile", load_python_entry, needs_cuda=True, marker_imports=("cuda.tile",),
                  requires=(python_module("cuda.tile", "cuda-tile", "cutile"),), unsupported_on=unsupported_on))
