"""Triton: Python-hosted; on the CPU its kernels run in Triton's interpreter (the worker sets
TRITON_INTERPRET=1), which computes bfloat16 arithmetic on raw bit patterns (triton#11584)."""

from solbench.languages import Language, register
from solbench.languages.python_entry import load_python_entry

register(Language("triton", load_python_entry, marker_imports=("triton",), cpu_wrong_dtypes=("bfloat16",),
                  cpu_wrong_reason="Triton's CPU interpreter computes bfloat16 arithmetic wrongly (triton#11584)"))
