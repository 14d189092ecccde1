"""The cuDNN frontend's Python API: Python-hosted."""

from solbench.languages import Language, register
from solbench.languages.python_entry import load_python_entry

register(Language("cudnn_frontend", load_python_entry))
