"""rLLM v0.2's `rllm.data.dataset` (Dataset, DatasetRegistry): the calls rLLM's examples make, in our own code, plus
our storage guarantees (JSONL under $RLLM_HOME/datasets, atomic replace, clear errors)."""

from __future__ import annotations

import json
import logging
import random

import pytest

from rllm.data.dataset import Dataset, DatasetRegistry


@pytest.fixture(autouse=True)
def rllm_home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLLM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


MATH_ROWS = [
    {"question": "What is 1+1?", "ground_truth": "2", "data_source": "math"},
    {"question": "What is 2*3?", "ground_truth": "6", "data_source": "math"},
]


# ---- the calls rLLM's examples make, in our own code ---------------------------------------------------------------


def register_lakes(train_count, test_count):
    """FrozenLake rows (`seed`, `size`, `p`, a tag) left as numpy scalars, registered as "frozenlake" train/test."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(3)

    def lakes(count):
        seeds, sides, frozen = rng.integers(0, 50_000, count), rng.integers(2, 10, count), rng.uniform(0.6, 0.85, count)
        return [{"seed": s, "size": n, "p": p, "tag": f"{s}-{n}"} for s, n, p in zip(seeds, sides, frozen, strict=True)]

    train_rows, test_rows = lakes(train_count), lakes(test_count)
    return (
        DatasetRegistry.register_dataset("frozenlake", train_rows, "train"),
        DatasetRegistry.register_dataset("frozenlake", test_rows, "test"),
    )


def lake_test_tasks():
    """The test split's rows, registering the lakes first when there are none (`dataset_exists`)."""
    if not DatasetRegistry.dataset_exists("frozenlake", "test"):
        register_lakes(8, 4)
    return DatasetRegistry.load_dataset("frozenlake", "test").get_data()


def test_frozenlake_numpy_rows_round_trip_as_plain_python():
    train_dataset, test_dataset = register_lakes(8, 4)
    assert len(train_dataset.get_data()) == 8 and len(test_dataset.get_data()) == 4
    row = train_dataset.get_data()[0]
    assert type(row["seed"]) is int and type(row["size"]) is int and type(row["p"]) is float
    assert row["tag"] == f"{row['seed']}-{row['size']}"
    assert 2 <= row["size"] <= 9 and 0.6 <= row["p"] <= 0.85

    tasks = lake_test_tasks()  # now from disk
    assert tasks == test_dataset.get_data()

    from rllm.data import DatasetRegistry as FromPackage  # rLLM's training scripts import it from rllm.data

    assert FromPackage is DatasetRegistry
    train_dataset = FromPackage.load_dataset("frozenlake", "train")
    val_dataset = FromPackage.load_dataset("frozenlake", "test")
    assert train_dataset.get_data() == register_lakes(8, 4)[0].get_data()
    assert (train_dataset.name, train_dataset.split, len(val_dataset)) == ("frozenlake", "train", 4)


def test_the_lake_tasks_are_registered_when_missing():
    assert not DatasetRegistry.dataset_exists("frozenlake", "test")
    assert len(lake_test_tasks()) == 4
    assert DatasetRegistry.dataset_exists("frozenlake", "test")


def test_repeat_for_pass_at_k():
    DatasetRegistry.register_dataset("aime2024", MATH_ROWS, "test")
    test_dataset = DatasetRegistry.load_dataset("aime2024", "test")
    tasks = test_dataset.repeat(n=8)  # eight attempts per problem, for pass@k
    assert isinstance(tasks, Dataset) and len(tasks) == 16
    assert [t["ground_truth"] for t in tasks] == ["2"] * 8 + ["6"] * 8  # copies adjacent
    tasks[0]["question"] = "changed"  # each copy is its own dict
    assert tasks[1]["question"] == "What is 1+1?" and test_dataset[0]["question"] == "What is 1+1?"
    assert (tasks.name, tasks.split) == ("aime2024", "test")
    with pytest.raises(ValueError, match="positive"):
        test_dataset.repeat(0)


class FakeHFDataset:
    """What `datasets.load_dataset(...)` returns, as far as register_dataset looks at it (to_list, no pandas)."""

    def __init__(self, rows):
        self._rows = rows

    def select(self, indices):
        return FakeHFDataset([self._rows[i] for i in indices])

    def to_list(self):
        return [dict(r) for r in self._rows]


def countdown_rows(n):
    rows = []
    for i in range(n):
        nums, target = [i, i + 1, i + 2], 3 * i + 3
        question = f"Make {target} from {nums}, each number once."
        rows.append({"question": question, "ground_truth": str(target), "data_source": "countdown"})
        rows[-1].update(target=target, nums=nums)
    return rows


def test_hub_dataset_splits_and_data_path(rllm_home):
    hub_rows = FakeHFDataset(countdown_rows(10))
    # a held-out test split, the rest for training, and a two-row slice of it as a third split
    held_out, rest = hub_rows.select(range(3)), hub_rows.select(range(3, 10))
    train_dataset = DatasetRegistry.register_dataset("countdown", rest, "train")
    DatasetRegistry.register_dataset("countdown", held_out, "test")
    DatasetRegistry.register_dataset("countdown", rest.select([0, 1]), "stage2_train")

    assert train_dataset.get_data_path() == str((rllm_home / "datasets" / "countdown" / "train.jsonl").resolve())
    assert train_dataset.get_verl_data_path() is None  # documented: no verl-formatted copy is written
    assert DatasetRegistry.get_dataset_splits("countdown") == ["stage2_train", "test", "train"]
    assert Dataset(MATH_ROWS).get_data_path() is None

    # iterating a loaded split, as evaluation scripts do to build their tasks
    dataset = DatasetRegistry.load_dataset("countdown", "test")
    tasks = [{"question": row["question"], "target": row["target"], "idx": i} for i, row in enumerate(dataset)]
    assert [task["idx"] for task in tasks] == [0, 1, 2] and tasks[2]["target"] == 9
    assert dataset[1]["nums"] == [1, 2, 3]  # nested lists round-trip

    # docs/core-concepts/workflow-engine.md
    rows = DatasetRegistry.load_dataset("countdown", "test").data
    assert rows == countdown_rows(3)


def test_missing_dataset_or_split_is_none_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="rllm.data.dataset"):
        assert DatasetRegistry.load_dataset("geo3k", "test") is None
        DatasetRegistry.register_dataset("geo3k", MATH_ROWS, "train")
        assert DatasetRegistry.load_dataset("geo3k", "test") is None
    assert "Dataset 'geo3k' not found" in caplog.text and "Split 'test' not found in dataset 'geo3k'" in caplog.text

    dataset = DatasetRegistry.load_dataset("geo3k", "test")  # load it, else register it
    if dataset is None:
        dataset = DatasetRegistry.register_dataset("geo3k", MATH_ROWS, "test")
    assert len(dataset) == 2


# ---- the registry ----------------------------------------------------------------------------------------------


def test_default_split_names_exists_and_removal(rllm_home):
    assert DatasetRegistry.get_dataset_names() == [] and DatasetRegistry.get_dataset_splits("x") == []
    DatasetRegistry.register_dataset("b", MATH_ROWS)
    DatasetRegistry.register_dataset("a", MATH_ROWS, "train")
    DatasetRegistry.register_dataset("a", MATH_ROWS[:1], "test")
    assert DatasetRegistry.load_dataset("b").split == "default"
    assert DatasetRegistry.get_dataset_names() == ["a", "b"]
    assert DatasetRegistry.dataset_exists("a") and DatasetRegistry.dataset_exists("a", "test")
    assert not DatasetRegistry.dataset_exists("a", "default") and not DatasetRegistry.dataset_exists("c")
    assert DatasetRegistry._load_registry()["a"]["train"].endswith("/a/train.jsonl")

    assert DatasetRegistry.remove_dataset_split("a", "train") is True
    assert DatasetRegistry.get_dataset_splits("a") == ["test"]
    assert DatasetRegistry.remove_dataset_split("a", "train") is False
    assert DatasetRegistry.remove_dataset_split("a", "test") is True
    assert not (rllm_home / "datasets" / "a").exists()  # the last split takes the dataset with it
    assert DatasetRegistry.remove_dataset("b") is True and DatasetRegistry.remove_dataset("b") is False
    assert DatasetRegistry.get_dataset_names() == []


def test_register_overwrites_a_split_whole_and_leaves_no_temp_files(rllm_home):
    DatasetRegistry.register_dataset("m", MATH_ROWS, "train")
    DatasetRegistry.register_dataset("m", [{"question": "only"}], "train")
    assert DatasetRegistry.load_dataset("m", "train").get_data() == [{"question": "only"}]
    assert sorted(p.name for p in (rllm_home / "datasets" / "m").iterdir()) == ["train.jsonl"]
    DatasetRegistry.register_dataset("m", [], "train")  # an empty split is still a split
    assert DatasetRegistry.dataset_exists("m", "train") and len(DatasetRegistry.load_dataset("m", "train")) == 0


def test_rows_round_trip_exactly():
    rows = [
        {"s": "ünïcode\nline", "i": -3, "f": 0.1, "b": True, "n": None, "l": [1, [2.5, "x"]], "d": {"k": {"z": []}}},
        {"tuple": (1, 2), "big": 2**70},
    ]
    returned = DatasetRegistry.register_dataset("rt", rows, "train").get_data()
    loaded = DatasetRegistry.load_dataset("rt", "train").get_data()
    assert loaded == returned
    assert loaded[0] == rows[0] and loaded[1] == {"tuple": [1, 2], "big": 2**70}


def test_numpy_values_become_plain_python():
    np = pytest.importorskip("numpy")
    row = {"arr": np.arange(3), "f": np.float32(0.5), "flag": np.bool_(True), "nested": [np.int8(7)]}
    returned = DatasetRegistry.register_dataset("np", [row], "train").get_data()
    assert returned == DatasetRegistry.load_dataset("np", "train").get_data()
    assert returned == [{"arr": [0, 1, 2], "f": 0.5, "flag": True, "nested": [7]}]
    assert type(returned[0]["flag"]) is bool and type(returned[0]["nested"][0]) is int


def test_a_row_that_is_not_json_names_the_dataset_and_row():
    rows = [{"ok": 1}, {"ok": 2}, {"image": {"bytes": b"\x89PNG"}}]
    with pytest.raises(
        TypeError, match=r"dataset 'img' split 'train': row 2 .*row\['image'\]\['bytes'\] is a builtins.bytes"
    ):
        DatasetRegistry.register_dataset("img", rows, "train")
    with pytest.raises(TypeError, match=r"row 0 .*key 1 \(int\)"):
        DatasetRegistry.register_dataset("img", [{1: "x"}], "train")
    with pytest.raises(TypeError, match="row 1 is a str, not a dict"):
        DatasetRegistry.register_dataset("img", [{"a": 1}, "row"], "train")
    assert not DatasetRegistry.dataset_exists("img")  # nothing half-written


def test_names_must_be_file_names():
    for name, split in (("../evil", "train"), ("a", "x/y"), ("", "train"), (".hidden", "train")):
        with pytest.raises(ValueError, match="cannot be used as a file name"):
            DatasetRegistry.register_dataset(name, MATH_ROWS, split)


# ---- Dataset ---------------------------------------------------------------------------------------------------


def test_dataset_sequence_shuffle_select():
    ds = Dataset([{"i": i} for i in range(6)], name="n", split="s")
    assert len(ds) == 6 and ds[-1] == {"i": 5} and ds[1:3] == [{"i": 1}, {"i": 2}] and list(ds) == ds.get_data()
    assert ds.get_data() is ds.data

    shuffled = ds.shuffle(seed=0)
    order = list(range(6))
    random.Random(0).shuffle(order)
    assert [r["i"] for r in shuffled] == order and (shuffled.name, shuffled.split) == ("n", "s")
    assert ds.select(range(2, 4)).get_data() == [{"i": 2}, {"i": 3}]
    assert ds.select([5, 99, -1, 0]).get_data() == [{"i": 5}, {"i": 0}]  # out of range dropped, as rLLM


def test_load_data_from_json_and_jsonl(tmp_path):
    (tmp_path / "rows.json").write_text(json.dumps(MATH_ROWS))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MATH_ROWS))
    assert Dataset.load_data(tmp_path / "rows.json").get_data() == MATH_ROWS
    assert Dataset.load_data(str(tmp_path / "rows.jsonl")).get_data() == MATH_ROWS
    with pytest.raises(FileNotFoundError):
        Dataset.load_data(tmp_path / "missing.json")
    (tmp_path / "rows.txt").write_text("x")
    with pytest.raises(ValueError, match="Unsupported file format"):
        Dataset.load_data(tmp_path / "rows.txt")


def test_parquet_without_pandas_says_what_to_install(tmp_path):
    try:
        import pandas  # noqa: F401

        pytest.skip("pandas is installed: parquet is read with it")
    except ImportError:
        pass
    (tmp_path / "rows.parquet").write_bytes(b"PAR1")
    with pytest.raises(ImportError, match="pip install pandas pyarrow"):
        Dataset.load_data(tmp_path / "rows.parquet")
