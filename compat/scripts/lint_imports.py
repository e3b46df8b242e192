"""`lint-imports` for the rllm-compat package, with its contracts (this folder's pyproject.toml).

grimp builds an import graph from top-level packages only, and `rllm` on the path is the core's regular package,
whose graph cannot see a package installed from another folder. So the graph is built from compat/src alone: the
core's src/ is taken off the path and compat/src put first, where `rllm` is then a namespace holding `rllm.compat`
only (its imports of the core are outside that graph). Run from anywhere: `python compat/scripts/lint_imports.py`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

COMPAT = Path(__file__).resolve().parents[1]
CORE_SRC = COMPAT.parent / "src"


def main() -> int:
    sys.path[:] = [str(COMPAT / "src")] + [p for p in sys.path if p and Path(p).resolve() != CORE_SRC]
    os.chdir(COMPAT)  # lint-imports reads the pyproject.toml of the folder it runs in
    from importlinter.cli import lint_imports

    return lint_imports(no_cache=True)


if __name__ == "__main__":
    sys.exit(main())
