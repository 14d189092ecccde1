"""The cuDNN frontend's Python API (nvidia-cudnn-frontend): Python-hosted. A graph is built and its
execution plans chosen in the solution's own code, at import or first call, never inside the timed block
(the first trials make that call)."""

from solbench.languages import Language, python_module, register
from solbench.languages.python_entry import load_python_entry

register(Language("cudnn_frontend", load_python_entry, needs_cuda=True, marker_imports=("cudnn",),
                  requires=(python_module("cudnn", "nvidia-cudnn-frontend", "cudnn"),)))
