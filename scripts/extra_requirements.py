"""Print the requirements of rllm's core and the given extras, one per line, from pyproject.toml (`rllm[x]`
references followed), for a venv that runs rllm from the checkout's src/ (PYTHONPATH) instead of installing it: such
a venv never builds the package, so it can be set up beside the builds that write the checkout's egg-info.

    python scripts/extra_requirements.py torch dev verifiers > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def requirements(extras: list[str]) -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    optional = project["optional-dependencies"]
    found, todo, seen = list(project["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        if extra not in optional:
            sys.exit(f"pyproject.toml has no extra {extra!r}; extras: {', '.join(optional)}")
        seen.add(extra)
        for requirement in optional[extra]:
            own = re.fullmatch(r"rllm\[([\w,-]+)\]", requirement)
            if own:
                todo.extend(own.group(1).split(","))
            else:
                found.append(requirement)
    return list(dict.fromkeys(found))


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
