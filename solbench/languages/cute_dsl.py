"""CuTe DSL (CUTLASS's Python DSL, nvidia-cutlass-dsl): Python-hosted. Its JIT compiles a kernel at the first
call (`cute.compile` or a `@cute.jit` function called directly), outside the timed block since the first
trials run it; its compiled-kernel cache (CUTE_DSL_CACHE_DIR) is pointed into the worker's scratch folder by the
orchestrator (`orchestrator.process.sandbox_env`), as Triton's is: private to the solution, gone with it."""

from solbench.languages import Language, python_module, register
from solbench.languages.python_entry import load_python_entry

register(Language("cute_dsl", load_python_entry, needs_cuda=True, marker_imports=("cutlass",),
                  requires=(python_module("cutlass", "nvidia-cutlass-dsl", "cute"),)))
