"""rLLM v0.2's `rllm.data.dataset`: `Dataset` (a list of task rows) and `DatasetRegistry` (named, split datasets
stored on disk), so that rLLM's `prepare_*_data.py` / `run_*.py` / `train_*.py` scripts run here unchanged.

Same calls and return values as rLLM v0.2.1 for everything user code touches. Where we differ, and why:

- **Storage.** rLLM writes parquet files (pandas/polars/pyarrow) and a registry JSON *inside the installed package*.
  We write one JSONL file per split, `$RLLM_HOME/datasets/<name>/<split>.jsonl` (`$RLLM_HOME` defaults to
  `~/.cache/rllm`, the same root as the model cache; tests point it at a tmp dir). Each file is written atomically
  (temp file, fsync, rename), so a crash or a concurrent reader never sees half a split, and re-registering a split
  replaces it whole. There is no separate registry index: the registry *is* the folder (a split exists iff its file
  does), so two processes registering different datasets cannot lose each other's entries.
  `get_dataset_names()` and `get_dataset_splits()` are sorted, where rLLM gives registration order.
- **Rows** must be JSON values: str/int/float/bool/None, lists/tuples, dicts with string keys. numpy scalars and
  arrays (and anything else with `.tolist()`) become plain Python numbers and lists, tuples become lists. Anything
  else (bytes, PIL images, datetimes, int dict keys) is a `TypeError` naming the dataset, split, row index and where
  in the row. `register_dataset` returns those normalised rows, i.e. exactly what a later `load_dataset` returns
  (rLLM returns the caller's original objects, numpy scalars included; values compare equal).
- **`get_data_path()`** is the JSONL path (rLLM: a parquet path). **`get_verl_data_path()`** is always `None`: rLLM
  writes a second, verl-formatted parquet for verl's own data loader, but our trainer (verl backend included) takes
  the rows from the `Dataset` itself, so no such file exists. `apply_verl_postprocessing` is kept as a pure function.
- **`Dataset`** is a `collections.abc.Sequence`, not a `torch.utils.data.Dataset` (importing rllm never imports
  torch); anything that takes a list of rows takes it, and `torch.utils.data.DataLoader` accepts it too.
- **`Dataset.load_data(path)`**: `.json` and `.jsonl` always; `.csv` and `.parquet` only when pandas (and, for
  parquet, pyarrow) is installed, which rllm does not require — otherwise an `ImportError` that says so.
- Missing dataset or split: `load_dataset` returns `None` and logs a warning, exactly as rLLM does (rLLM's
  `run_*.py` scripts test for `None` and then prepare the data). Names and splits must be usable as file names
  (no `/`, `\\`, leading `.`, or empty string): `ValueError` otherwise.
- Not provided: `rllm.data.dataset_types` (`DatasetEnum`, `DatasetConfig`, `Problem`, `TrainDataset`,
  `TestDataset`: rLLM's enums of its own hosted datasets) and `_save_registry` (there is no index to save).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rllm.fsutil import write_text_atomically

__all__ = ["Dataset", "DatasetRegistry"]

logger = logging.getLogger(__name__)

_SUFFIX = ".jsonl"


class Dataset(Sequence):
    """An in-memory list of task rows (dicts), with the `name` and `split` it was registered under, if any."""

    def __init__(self, data: list[dict[str, Any]], name: str | None = None, split: str | None = None):
        self.data = data
        self.name = name
        self.split = split

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, idx):  # an int gives a row, a slice a list of rows (as rLLM, which indexes its list)
        return self.data[idx]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.data)

    def __repr__(self) -> str:
        return f"Dataset(name={self.name!r}, split={self.split!r}, rows={len(self.data)})"

    def get_data(self) -> list[dict[str, Any]]:
        """The rows themselves (not a copy), as rLLM."""
        return self.data

    def repeat(self, n: int) -> Dataset:
        """Each row `n` times, the copies adjacent (`[a, a, b, b]`, so pass@k groups stay together); each copy is a
        shallow copy of its row."""
        if n <= 0:
            raise ValueError(f"repeat count must be positive, got {n}")
        return self._derived([row.copy() for row in self.data for _ in range(n)])

    def shuffle(self, seed: int | None = None) -> Dataset:
        """A new dataset with the rows in random order; the same seed gives rLLM's order."""
        order = list(range(len(self.data)))
        (random.Random(seed) if seed is not None else random).shuffle(order)
        return self._derived([self.data[i] for i in order])

    def select(self, indices: Iterable[int]) -> Dataset:
        """A new dataset with the rows at `indices`; indices out of range are skipped silently, as in rLLM."""
        size = len(self.data)
        return self._derived([self.data[i] for i in indices if 0 <= i < size])

    def get_data_path(self) -> str | None:
        """The registry file holding this dataset's split, or None when (name, split) is not registered."""
        if self.name is None or self.split is None:
            return None
        return DatasetRegistry._load_registry().get(self.name, {}).get(self.split)

    def get_verl_data_path(self) -> str | None:
        """Always None here: no verl-formatted copy is written (see the module docstring)."""
        return None

    @classmethod
    def load_data(cls, path: str | os.PathLike) -> Dataset:
        """Rows from a `.json` (a list), `.jsonl`, `.csv` or `.parquet` file, with no name or split."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"Dataset file not found at {path}")
        ext = path.suffix.lower()
        if ext == ".json":
            return cls(data=json.loads(path.read_text(encoding="utf-8")))
        if ext == ".jsonl":
            return cls(data=_read_jsonl(path))
        if ext in (".csv", ".parquet"):
            try:
                import pandas as pd
            except ImportError as e:
                raise ImportError(
                    f"reading {ext} files needs pandas{' and pyarrow' if ext == '.parquet' else ''}, which rllm does "
                    f"not install: `pip install pandas{' pyarrow' if ext == '.parquet' else ''}`, or convert {path} "
                    "to .jsonl"
                ) from e
            frame = pd.read_csv(path) if ext == ".csv" else pd.read_parquet(path)
            return cls(data=frame.to_dict("records"))
        raise ValueError(f"Unsupported file format: {ext} (supported: .json, .jsonl, .csv, .parquet)")

    def _derived(self, rows: list[dict[str, Any]]) -> Dataset:
        return Dataset(data=rows, name=self.name, split=self.split)


class DatasetRegistry:
    """Named datasets with splits, stored under `$RLLM_HOME/datasets`. All methods are classmethods, as in rLLM."""

    @classmethod
    def _root(cls) -> Path:
        from rllm.models.registry import rllm_home  # read on every call: RLLM_HOME may change (tests)

        return rllm_home() / "datasets"

    @classmethod
    def _ensure_directories(cls) -> None:
        cls._root().mkdir(parents=True, exist_ok=True)

    @classmethod
    def _split_path(cls, name: str, split: str) -> Path:
        for what, value in (("dataset name", name), ("split", split)):
            if not isinstance(value, str) or not value or value.startswith(".") or "/" in value or "\\" in value:
                raise ValueError(f"{what} {value!r} cannot be used as a file name (empty, '/', '\\' or leading '.')")
        return cls._root() / name / f"{split}{_SUFFIX}"

    @classmethod
    def _load_registry(cls) -> dict[str, dict[str, str]]:
        """`{name: {split: absolute path}}`, read from the folder (rLLM reads it from an index file)."""
        root = cls._root()
        if not root.is_dir():
            return {}
        registry: dict[str, dict[str, str]] = {}
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            splits = {
                f.name[: -len(_SUFFIX)]: str(f.resolve())
                for f in sorted(folder.iterdir())
                if f.is_file() and f.name.endswith(_SUFFIX) and not f.name.startswith(".")
            }
            if splits:
                registry[folder.name] = splits
        return registry

    @classmethod
    def register_dataset(cls, name: str, data: Any, split: str = "default") -> Dataset:
        """Store `data` as `name`'s `split` (replacing an existing one) and return it as a `Dataset`.

        `data` is a list of dict rows, a `Dataset`, or a Hugging Face-style dataset (anything with `to_list()`, or
        `to_pandas()`, or iterable of mappings)."""
        path = cls._split_path(name, split)
        rows = [_json_row(row, name, split, i) for i, row in enumerate(_as_rows(data, name, split))]
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, text)
        logger.info("Registered dataset %r split %r with %d examples at %s", name, split, len(rows), path)
        return Dataset(data=rows, name=name, split=split)

    @classmethod
    def load_dataset(cls, name: str, split: str = "default") -> Dataset | None:
        """The stored split, or None (with a logged warning) when the dataset or the split is not registered."""
        path = cls._split_path(name, split)
        if not path.is_file():
            if name not in cls._load_registry():
                logger.warning("Dataset '%s' not found in registry.", name)
            else:
                logger.warning("Split '%s' not found in dataset '%s'.", split, name)
            return None
        rows = _read_jsonl(path)
        logger.info("Loaded dataset %r split %r with %d examples.", name, split, len(rows))
        return Dataset(data=rows, name=name, split=split)

    @classmethod
    def get_dataset_names(cls) -> list[str]:
        return list(cls._load_registry())

    @classmethod
    def get_dataset_splits(cls, name: str) -> list[str]:
        return list(cls._load_registry().get(name, {}))

    @classmethod
    def dataset_exists(cls, name: str, split: str | None = None) -> bool:
        registry = cls._load_registry()
        return name in registry and (split is None or split in registry[name])

    @classmethod
    def remove_dataset_split(cls, name: str, split: str) -> bool:
        """Delete one split; the dataset goes with its last split. False (and a warning) when it is not there."""
        path = cls._split_path(name, split)
        if not path.is_file():
            logger.warning("Dataset '%s' split '%s' not found in registry.", name, split)
            return False
        path.unlink()
        if name not in cls._load_registry():
            shutil.rmtree(path.parent, ignore_errors=True)  # only leftovers of interrupted writes can remain
        logger.info("Removed dataset %r split %r from registry.", name, split)
        return True

    @classmethod
    def remove_dataset(cls, name: str) -> bool:
        """Delete a dataset and all its splits. False (and a warning) when it is not registered."""
        cls._split_path(name, "default")  # validates the name
        if name not in cls._load_registry():
            logger.warning("Dataset '%s' not found in registry.", name)
            return False
        shutil.rmtree(cls._root() / name)
        logger.info("Removed dataset %r from registry.", name)
        return True

    @classmethod
    def apply_verl_postprocessing(cls, data: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """rLLM's verl row wrapper: a placeholder prompt, a rule reward with no ground truth, the row as extra_info."""
        return [
            {
                "prompt": [{"role": "user", "content": "placeholder"}],
                "reward_model": {"style": "rule", "ground_truth": None},
                "extra_info": entry,
            }
            for entry in data
        ]


def _as_rows(data: Any, name: str, split: str) -> Iterable[Any]:
    if isinstance(data, Dataset):
        return data.data
    if isinstance(data, list | tuple):
        return data
    for method in ("to_list", "to_pandas"):  # a Hugging Face datasets.Dataset has both; to_list needs no pandas
        if callable(getattr(data, method, None)):
            out = getattr(data, method)()
            return out if method == "to_list" else out.to_dict("records")
    if isinstance(data, Iterable) and not isinstance(data, str | bytes | Mapping):
        return data
    raise TypeError(f"dataset {name!r} split {split!r}: expected a list of dict rows, got {type(data).__name__}")


def _json_row(row: Any, name: str, split: str, index: int) -> dict[str, Any]:
    if not isinstance(row, Mapping):
        raise TypeError(f"dataset {name!r} split {split!r}: row {index} is a {type(row).__name__}, not a dict")
    try:
        return _json_value(row, "row")
    except _NotJSON as e:
        raise TypeError(f"dataset {name!r} split {split!r}: row {index} is not JSON-serialisable: {e}") from None


class _NotJSON(Exception):
    pass


def _json_value(value: Any, where: str) -> Any:
    """`value` as plain JSON types (exact str/int/float/bool), or _NotJSON saying where it is not."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):  # subclasses (StrEnum, np.str_) become plain str with the same characters
        return str.__str__(value)
    if isinstance(value, int | float):  # IntEnum, np.float64 (a float subclass): the plain number
        return (int if isinstance(value, int) else float)(value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJSON(f"{where} has the key {key!r} ({type(key).__name__}); JSON keys must be strings")
            out[str.__str__(key)] = _json_value(item, f"{where}[{key!r}]")
        return out
    if isinstance(value, list | tuple):
        return [_json_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if callable(getattr(value, "tolist", None)):  # numpy scalars and arrays, without importing numpy
        return _json_value(value.tolist(), where)
    raise _NotJSON(f"{where} is a {type(value).__module__}.{type(value).__qualname__}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}, line {lineno}: not valid JSON ({e})") from None
    return rows
