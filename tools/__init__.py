"""Tools agents can call: typed Python functions whose docstrings a model reads.

Tools that need the episode's sandbox take a keyword-only ``sandbox: SandboxSession``
argument, which the ToolSet injects (it is not part of the tool's schema).
"""

from tools.calculator import calculator
from tools.files import read_file, write_file
from tools.python import python
from tools.shell import shell

__all__ = ["calculator", "python", "read_file", "shell", "write_file"]
