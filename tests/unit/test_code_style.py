"""The formatter is settled: `ruff format` decides the layout of the code, with a handful of exceptions at most."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MOST_FMT_SKIPS = 20  # issue 41: a line length and rules the code can live with, `# fmt: skip` <= 20 in src/


@pytest.mark.parametrize("folder", ["src", "tests", "benchmarks", "examples", "scripts"])
def test_each_folder_has_at_most_a_handful_of_formatter_exceptions(folder):
    base = ROOT / folder
    marked = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(base.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ("# fmt: skip" in line or "# fmt: off" in line) and path != Path(__file__).resolve()
    ]
    assert len(marked) <= MOST_FMT_SKIPS, f"{len(marked)} formatter exceptions in {folder}/: {marked[:10]} ..."
