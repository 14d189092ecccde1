"""CuTe DSL (CUTLASS's Python DSL): Python-hosted."""

from solbench.languages import Language, register
from solbench.languages.python_entry import load_python_entry

register(Language("cute_dsl", load_python_entry))
