"""Reading a benchmark's rows with the `datasets` library: from the Hugging Face hub where there is a network, from a
local copy where there is not.

A local copy lives under a data directory (`data.data_dir`, `--data-dir`, or `$RLLM_DATA`) in one of three forms,
tried in this order:
- `<data_dir>/<source>/`: a folder laid out like the hub repository (what `rllm datasets pull` writes, or a
  `git clone` of the dataset repo). It is read by `datasets.load_dataset(folder, config, split=...)`: the same call,
  config names, split names and column types as from the hub.
- `<data_dir>/<name>/`: the same, under the catalog name.
- `<data_dir>/<name>.jsonl` / `.json` / `.parquet` / `.csv`: one file in the source's schema, serving every split.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rllm.errors import RllmError
from rllm.tasks.catalog.entry import Benchmark

__all__ = [
    "BenchmarkDataError",
    "SourceRows",
    "data_dir_from_env",
    "load_source_rows",
    "local_copy",
    "open_source",
    "pull",
]

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class BenchmarkDataError(RllmError, ValueError):
    """A benchmark's data cannot be read, or a row of it cannot become a task."""


def data_dir_from_env(data_dir: str | os.PathLike | None) -> Path | None:
    """The data directory: the one given, else `$RLLM_DATA`, else None (the hub)."""
    chosen = data_dir or os.environ.get("RLLM_DATA")
    return Path(chosen).expanduser() if chosen else None


def local_copy(bench: Benchmark, data_dir: Path) -> Path | None:
    """The local copy of `bench` under `data_dir` (a folder or a file), or None."""
    for folder in (data_dir / bench.source, data_dir / bench.name):
        if folder.is_dir():
            return folder
    for suffix in _FILE_BUILDERS:
        file = data_dir / f"{bench.name}{suffix}"
        if file.is_file():
            return file
    return None


def load_source_rows(bench: Benchmark, split: str, data_dir: str | os.PathLike | None = None) -> list[dict]:
    """The rows of `bench`'s hub split serving `split` ("train" or "val"), in the source's schema, configs
    concatenated (each row tagged `_config`)."""
    return list(open_source(bench, split, data_dir))


def open_source(bench: Benchmark, split: str, data_dir: str | os.PathLike | None = None) -> SourceRows:
    """`bench`'s split as a lazy sequence of rows (see `SourceRows`)."""
    where = data_dir_from_env(data_dir)
    copy = local_copy(bench, where) if where else None
    if where is not None and copy is None:
        raise BenchmarkDataError(
            f"{bench.name}: no local copy under {where} (looked for {where / bench.source}/, {where / bench.name}/ "
            f"and {bench.name}.jsonl/.parquet); fetch it with `rllm datasets pull {bench.name} --data-dir {where}`"
        )
    parts = [(config, _load(bench, copy, config, bench.hub_split(split))) for config in bench.configs or (None,)]
    return SourceRows(parts, str(copy or bench.source))


class SourceRows(Sequence):
    """The rows of one split, configs concatenated, read from the memory-mapped Arrow table only when asked for: a
    benchmark of 28K images decodes the 64 a run samples, not all of them. A row that cannot be decoded (a JSON file
    that is not UTF-8: pyarrow reads it and fails only on the value) is `{"_invalid": why}`, so it stops no other."""

    def __init__(self, parts: list[tuple[str | None, Any]], where: str) -> None:
        self._parts, self._where = parts, where
        self._len = sum(len(dataset) for _, dataset in parts)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict:  # type: ignore[override]
        if not 0 <= index < self._len:
            raise IndexError(index)
        for config, dataset in self._parts:
            if index < len(dataset):
                try:
                    row = dataset[index]
                except UnicodeDecodeError as error:
                    why = f"row {index} of {self._where} is not UTF-8 ({error.reason} at byte {error.start})"
                    return {"_invalid": f"{why}: re-encode it as UTF-8"}
                return {**row, "_config": config} if config else row
            index -= len(dataset)
        raise IndexError(index)


def _load(bench: Benchmark, copy: Path | None, config: str | None, split: str) -> Any:
    try:
        return _read(bench, copy, config, split)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise BenchmarkDataError(_explain(bench, copy, config, split, error)) from None


def _read(bench: Benchmark, copy: Path | None, config: str | None, split: str) -> Any:
    try:
        import datasets
    except ModuleNotFoundError:
        raise BenchmarkDataError(
            f"{bench.name}: benchmarks are read with the datasets library: pip install 'rllm[tasks]'"
        ) from None

    datasets.disable_progress_bars()
    if copy is not None and copy.is_file():
        builder, cache = _FILE_BUILDERS[copy.suffix], str(_cache_dir(copy))
        return datasets.load_dataset(builder, data_files=str(copy), split="train", cache_dir=cache)
    kwargs: dict[str, Any] = {"split": split}
    if copy is not None:
        kwargs["cache_dir"] = str(_cache_dir(copy))
    if bench.data_files:
        return _load_files(bench, copy, split, kwargs)
    if config:
        kwargs["name"] = config
    return datasets.load_dataset(str(copy) if copy is not None else bench.source, **kwargs)


def _load_files(bench: Benchmark, copy: Path | None, split: str, kwargs: dict[str, Any]) -> Any:
    """An entry read by file: the files themselves (from the copy, or downloaded from the hub repository), by their
    format's builder. Never the repository's loading script, which `datasets` no longer runs (LiveCodeBench's)."""
    import datasets

    if copy is not None:
        files = [str(copy / name) for name in bench.data_files]
    else:
        from huggingface_hub import hf_hub_download

        files = [hf_hub_download(bench.source, name, repo_type="dataset") for name in bench.data_files]
    builder = _FILE_BUILDERS[Path(bench.data_files[0]).suffix]
    return datasets.load_dataset(builder, data_files={split: files}, **kwargs)


def _cache_dir(copy: Path) -> Path:
    """A cache of its own for each local copy, named by its path and its files' sizes and times: `datasets` names
    the cache of a local folder by the folder's name, so two copies of one benchmark (or a copy edited in place)
    would otherwise be served each other's rows."""
    files = [copy] if copy.is_file() else sorted(f for f in copy.rglob("*") if f.is_file())
    stamp = [str(copy.resolve())] + [f"{f.relative_to(copy)}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files]
    digest = hashlib.sha256("\n".join(stamp).encode()).hexdigest()[:16]
    return (
        Path(os.environ.get("HF_DATASETS_CACHE", Path.home() / ".cache" / "huggingface" / "datasets"))
        / "rllm-local"
        / digest
    )


def _explain(bench: Benchmark, copy: Path | None, config: str | None, split: str, error: Exception) -> str:
    """One line for why `datasets` could not read the benchmark, and what to do."""
    offline = type(error).__name__ in ("LocalEntryNotFoundError", "OfflineModeIsEnabled")
    if copy is None and (offline or (isinstance(error, OSError) and not isinstance(error, FileNotFoundError))):
        return (
            f"{bench.name}: cannot read {bench.source} from the Hugging Face hub ({type(error).__name__}: "
            f"{_first_line(error)}); where there is no network, pull it elsewhere with `rllm datasets pull "
            f"{bench.name} --data-dir DIR` and pass --data-dir DIR (or set RLLM_DATA)"
        )
    if isinstance(error, RuntimeError):
        if "script" not in str(error):
            raise error
        return (
            f"{bench.name}: {copy or bench.source} is read by a loading script, which `datasets` no longer runs; "
            "convert it to parquet or JSON files (the hub's refs/convert/parquet branch has them) and pass --data-dir"
        )
    where = copy if copy is not None else f"the hub's {bench.source}"
    what = f"config {config!r}, split {split!r}" if config else f"split {split!r}"
    return f"{bench.name}: {where} has no {what} ({_first_line(error)}); the catalog entry expects the source's layout"


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def pull(bench: Benchmark, data_dir: str | os.PathLike) -> Path:
    """Download `bench` from the hub into `<data_dir>/<source>/`, laid out so `datasets.load_dataset` reads it back
    with the same config and split names (one parquet file per config and split, and a README declaring them)."""
    target = Path(data_dir).expanduser() / bench.source
    if bench.data_files:  # read by file: the files themselves, at their paths in the repository
        from huggingface_hub import hf_hub_download

        for file in bench.data_files:
            hf_hub_download(bench.source, file, repo_type="dataset", local_dir=str(target))
        return target
    entries = []
    for config in bench.configs or (None,):
        for split in sorted({bench.eval_split, bench.train_split} - {None}):
            rows = _load(bench, None, config, split)
            name = config or "default"
            relative = Path(name) / f"{split}-00000-of-00001.parquet"
            (target / name).mkdir(parents=True, exist_ok=True)
            rows.to_parquet(str(target / relative))
            entries.append((name, split, relative.as_posix()))
    _write_readme(target, entries, bench)
    return target


def _write_readme(target: Path, entries: list[tuple[str, str, str]], bench: Benchmark) -> None:
    """The dataset card's `configs:` block, which is how `load_dataset` maps config and split names to files."""
    lines = ["---", "configs:"]
    for config in dict.fromkeys(name for name, _, _ in entries):
        lines += [f"- config_name: {config}", "  data_files:"]
        lines += [f"  - split: {split}\n    path: {path}" for name, split, path in entries if name == config]
    lines += ["---", "", f"A local copy of {bench.source} for rllm's `{bench.name}` (`rllm datasets pull`)."]
    (target / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
