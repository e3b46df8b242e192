"""Every catalog entry, end to end on its fixture: the fixture (tests/fixtures/catalog/<source>/, written in the
source's exact schema: its column names, types, config and split names) is read by `datasets.load_dataset` through
the same code path as the hub, every row converts, the verifier scores the row's reference reply 1 and a wrong
reply not correct."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.tasks.catalog import CATALOG
from rllm.tasks.catalog.task import benchmark_task, catalog_prompt, load_tasks

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "catalog"
# entries whose source has no reference solution in its rows: only the wrong reply is checked for them
NO_REFERENCE = {
    "livecodebench": "LiveCodeBench ships tests but no solutions",
    "ifeval": "IFEval ships prompts and instruction arguments, no responses",
    "multi_if": "Multi-IF ships prompts and instruction arguments, no responses",
    "countdown_tinyzero": "Countdown-Tasks-3to4 ships numbers and targets, no solutions",
}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _splits(name: str) -> list[str]:
    bench = CATALOG[name]
    return ["val", "train"] if bench.train_split else ["val"]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_the_fixture_is_read_like_the_hub_and_every_row_converts(name):
    bench = CATALOG[name]
    assert (FIXTURES / bench.source).is_dir(), f"{name} has no fixture at tests/fixtures/catalog/{bench.source}"
    for split in _splits(name):
        rows = load_tasks(bench, split, str(FIXTURES))
        assert len(rows) >= 2, f"{name} {split}: a fixture has at least 2 rows"
        assert not [r["invalid"] for r in rows if "invalid" in r]
        for row in rows:
            assert row["prompt"] and row["data_source"] == name
            assert catalog_prompt(row)


@pytest.mark.parametrize("name", sorted(n for n in CATALOG if CATALOG[n].verifier not in ("swe", "judge")))
def test_the_verifier_scores_the_reference_1_and_a_wrong_reply_not_correct(name):
    bench = CATALOG[name]
    task = benchmark_task(bench)
    for row in load_tasks(bench, "val", str(FIXTURES)):
        if name not in NO_REFERENCE:
            assert "reference" in row, f"{name}: its converter gives each row a reference reply"
            out = task.reward_fn(row, row["reference"])
            assert (out.reward, out.correct) == (1.0, True), (row["id"], out)
        wrong = task.reward_fn(row, "I am not sure.")
        assert not wrong.correct, (row["id"], wrong)
