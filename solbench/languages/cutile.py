"""cuTile (CUDA's tile programming model from Python): Python-hosted."""

from solbench.languages import Language, register
from solbench.languages.python_entry import load_python_entry

register(Language("cutile", load_python_entry))
