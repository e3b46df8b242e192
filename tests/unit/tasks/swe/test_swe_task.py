"""The `swe` task's rows: the shipped splits are different packages, `easiest` takes the smallest functions first,
a JSONL of `rllm swe build` rows (here, a local repository's) is played as it is, and asking for more rows than a
split has names how many there are."""

from __future__ import annotations

import json

import pytest

from rllm.tasks import get_task
from tests.support.swe import make_calc_task


def test_the_shipped_splits_are_different_packages():
    make = get_task("swe").make_tasks
    train, val = make(40, seed=0, split="train"), make(40, seed=0, split="val")
    assert {r["repo"] for r in train}.isdisjoint({r["repo"] for r in val})
    easiest = make(5, seed=0, split="train", easiest=True)
    assert [r["difficulty"] for r in easiest] == sorted(r["difficulty"] for r in easiest)
    assert max(r["difficulty"] for r in easiest) <= min(r["difficulty"] for r in train)
    only = make(3, seed=1, split="train", packages=["toolz"], scaffold="sweagent")
    assert {r["repo"] for r in only} == {"toolz"} and {r["scaffold"] for r in only} == {"sweagent"}
    with pytest.raises(ValueError, match=r"has 42 rows; asked for 1000: lower data.val_size"):
        make(1000, seed=0, split="val")


def test_a_file_of_built_rows_is_played_as_it_is(tmp_path):
    row = {**make_calc_task(tmp_path), "split": "train"}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (loaded,) = get_task("swe").make_tasks(1, seed=0, split="train", file=str(path))
    assert loaded["repo_dir"] == row["repo_dir"] and "backend" not in loaded and loaded["id"] == "calc__calc-0"
