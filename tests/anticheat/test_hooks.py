"""The dispatcher watch (worker/hooks.py): what a solution may register, and what it may not."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from solbench.worker.hooks import make_dispatch_checker

    check = make_dispatch_checker()
    what = sys.argv[1]
    if what == "compile_and_custom_op":
        import triton  # noqa: F401
        torch.compile(lambda x: (x * 2).sum())(torch.randn(64))

        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        torch.library.custom_op("solution_ns::double", mutates_args=())(double)
    elif what == "aten_impl":
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("clone", lambda self, memory_format=None: torch.empty_like(self).copy_(self), "CPU")
    elif what == "dispatch_mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Passthrough(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        Passthrough().__enter__()
    elif what == "function_mode":
        from torch.overrides import TorchFunctionMode

        class Passthrough(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        Passthrough().__enter__()
    print(check())
""")


def checked(*whats: str) -> list[str]:
    """Each in a fresh interpreter (registrations cannot be undone inside one), the interpreters side by side."""
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, what], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for what in whats]
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err[-2000:]
        results.append(out.strip().splitlines()[-1])
    return results


def test_torch_compile_and_custom_ops_in_the_solutions_namespace_change_nothing():
    assert checked("compile_and_custom_op") == ["[]"]


def test_a_re_registered_harness_operator_is_seen():
    assert "aten::clone was re-registered" in checked("aten_impl")[0]


def test_modes_left_active_are_seen():
    dispatch_mode, function_mode = checked("dispatch_mode", "function_mode")
    assert "TorchDispatchMode" in dispatch_mode
    assert "TorchFunctionMode" in function_mode
