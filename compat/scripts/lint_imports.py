"""`lint-imports` for the rllm-compat package, with its contracts (this folder's pyproject.toml).

grimp builds an import graph from top-level packages only, and `rllm` on the path is the core's regular package,
whose graph cannot see a package installed from another folder. So the graph is built from compat/src alone: every
checkout's src/ that holds the core (this one's, an editable install's) is taken off the path and compat/src put
first, where `rllm` is then a namespace holding `rllm.compat` only (its imports of the core are outside that graph).
Run from anywhere: `python compat/scripts/lint_imports.py`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

COMPAT = Path(__file__).resolve().parents[1]


def _holds_the_core(entry: str) -> bool:
    """A checkout's src/ with the core package (not site-packages, where lint-imports itself is installed)."""
    return "site-packages" not in entry and (Path(entry or ".") / "rllm" / "__init__.py").is_file()


def main() -> int:
    sys.path[:] = [str(COMPAT / "src")] + [entry for entry in sys.path if entry and not _holds_the_core(entry)]
    os.chdir(COMPAT)  # lint-imports reads the pyproject.toml of the folder it runs in
    from importlinter.cli import lint_imports

    return lint_imports(no_cache=True)


if __name__ == "__main__":
    sys.exit(main())
