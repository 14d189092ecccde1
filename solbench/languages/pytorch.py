"""PyTorch (and plain Python): the default language of a bare .py file."""

from solbench.languages import Language, register
from solbench.languages.python_entry import load_python_entry

register(Language("pytorch", load_python_entry))
register(Language("python", load_python_entry))
