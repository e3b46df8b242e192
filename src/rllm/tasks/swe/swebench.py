"""SWE-bench-format rows from a file a user already has: SWE-bench (full, Lite, Verified), SWE-Gym, and R2E-Gym's
SWE-bench-format sets (R2E-Gym/SWE-Bench-Verified, -Lite). Their repositories are not pure-Python sdists on PyPI,
so each row runs in its task's Docker image (rllm.tasks.swe.docker) and is marked `backend: "docker"`.

- `load_swe_rows(path, images=...)`: JSONL, a JSON list, or parquet (with `pyarrow`, or `pandas` and an engine).
  FAIL_TO_PASS / PASS_TO_PASS arrive as JSON-encoded strings in SWE-bench's dumps: they become lists. A row keeps
  SWE-bench's fields (`_KEPT`), swebench>=5's own grading fields when it has them (`eval_script`, `log_parser`,
  `eval_type`, `image_assets`), and `image`: the row's own image (`image` in swebench>=5 rows, `docker_image` in
  R2E-Gym's, `image_name` in SWE-smith's), else the one `images` names. Hints and dates are dropped: an agent
  trained on SWE-bench does not see the hints. A Hugging Face dataset: `load_dataset(...).to_json("swe.jsonl")`.
- `image_name(instance_id, rule)`: the published image of an instance. "swebench" is swebench's own rule (its
  `ImageSpec.name` / `TestSpec.instance_image_key`: `swebench/sweb.eval.x86_64.<id>:latest`, "__" written
  "_1776_" because Docker Hub refuses "__", all lower case); "swegym" is SWE-Gym's (OpenHands'
  `get_instance_docker_image`: `xingyaoww/sweb.eval.x86_64.<id>`, "__" written "_s_", lower case).
- `eval_spec(task)`: how swebench itself tests a row (its eval script, which applies the test_patch and runs the
  test command) and reads the log (its own log parsers). `pip install swebench` (not a dependency of rllm: it pulls
  docker, datasets and modal). swebench>=5 takes the script and parser from the row (its current datasets carry
  them); older rows are tested with swebench<5's `make_test_spec` (MAP_REPO_VERSION_TO_SPECS, MAP_REPO_TO_PARSER).

R2E-Gym's own rows (R2E-Gym-Lite, -Subset: `expected_output_json`, no FAIL_TO_PASS) are graded by R2E-Gym's
scripts, not SWE-bench's, and are refused with that said.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rllm.tasks.swe.store import SWEDataError

__all__ = ["IMAGE_RULES", "EvalSpec", "docker_image", "eval_spec", "image_name", "load_swe_rows", "normalize_swe_row"]

REQUIRED = (
    "instance_id",
    "repo",
    "version",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
_KEPT = REQUIRED + ("environment_setup_commit", "eval_script", "log_parser", "eval_type", "image_assets")
_IMAGE_FIELDS = ("image", "docker_image", "image_name")
# rule -> (namespace, what "__" becomes, tag)
IMAGE_RULES = {"swebench": ("swebench", "_1776_", ":latest"), "swegym": ("xingyaoww", "_s_", "")}


def image_name(instance_id: str, rule: str = "swebench") -> str:
    if rule not in IMAGE_RULES:
        raise ValueError(f"unknown image rule {rule!r}: use one of {sorted(IMAGE_RULES)}")
    namespace, dunder, tag = IMAGE_RULES[rule]
    return f"{namespace}/sweb.eval.x86_64.{instance_id}{tag}".replace("__", dunder).lower()


def docker_image(task: dict) -> str:
    """The task's image: its own when the row names one, else SWE-bench's published one."""
    for key in _IMAGE_FIELDS:
        if task.get(key):
            return str(task[key])
    return image_name(str(task["instance_id"]))


# ---- loading ----------------------------------------------------------------------------------------------------


def load_swe_rows(path: str | Path, *, images: str = "swebench") -> list[dict]:
    """The rows of a SWE-bench-format file, normalized (see the module docstring). `images` names the image rule
    for rows that carry no image: "swebench", or "swegym" for SWE-Gym's rows."""
    if images not in IMAGE_RULES:
        raise ValueError(f"unknown image rule {images!r}: use one of {sorted(IMAGE_RULES)}")
    path = Path(path)
    if not path.is_file():
        raise SWEDataError(f"{path} is not a file: give a .jsonl, .json or .parquet file of SWE-bench-format rows")
    return [normalize_swe_row(row, f"{path} row {i}", images) for i, row in enumerate(_read_rows(path))]


def _read_rows(path: Path) -> list:
    if path.suffix == ".parquet":
        return _read_parquet(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" or text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as e:
            raise SWEDataError(f"{path} is not valid JSON: {e}") from None
        if not isinstance(rows, list):
            raise SWEDataError(f"{path} holds a JSON {type(rows).__name__}: give a list of rows (or JSON lines)")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise SWEDataError(f"{path} line {number} is not JSON: {e}") from None
    return rows


def _read_parquet(path: Path) -> list:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    if pq is not None:
        return pq.read_table(path).to_pylist()
    try:
        import pandas
    except ImportError:
        raise SWEDataError(f"reading {path} needs pyarrow: pip install pyarrow") from None
    try:
        return pandas.read_parquet(path).to_dict("records")
    except ImportError as e:  # pandas without a parquet engine
        raise SWEDataError(f"reading {path} needs pyarrow: pip install pyarrow ({e})") from None


def normalize_swe_row(row: object, where: str, images: str) -> dict:
    """One SWE-bench-format row (a dict with SWE-bench's fields) as rllm's task; `where` names it in errors."""
    if not isinstance(row, dict):
        raise SWEDataError(f"{where} is a {type(row).__name__}, not an object with SWE-bench's fields")
    name = f"{where} ({row['instance_id']})" if row.get("instance_id") else where
    if "FAIL_TO_PASS" not in row and ("expected_output_json" in row or "parsed_commit_content" in row):
        raise SWEDataError(
            f"{name} is an R2E-Gym row graded by R2E-Gym's own scripts (expected_output_json), "
            "which rllm does not run: use R2E-Gym's SWE-bench-format sets (R2E-Gym/SWE-Bench-Verified) "
            "or SWE-bench's"
        )
    for key in REQUIRED:
        if row.get(key) is None:
            raise SWEDataError(f"{name} lacks {key!r}; SWE-bench-format rows need {', '.join(REQUIRED)}")
    task = {key: row[key] for key in _KEPT if row.get(key) is not None}
    task["version"] = str(task["version"])
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        task[key] = _test_list(task[key], f"{name} {key}")
    task["image"] = next((str(row[k]) for k in _IMAGE_FIELDS if row.get(k)), None) or image_name(
        str(task["instance_id"]), images
    )
    task["backend"] = "docker"
    return task


def _test_list(value: object, where: str) -> list[str]:
    if isinstance(value, str):  # SWE-bench's dumps hold the lists JSON-encoded
        try:
            value = json.loads(value)
        except ValueError:
            raise SWEDataError(f"{where} is a string but not a JSON list: {value[:100]!r}") from None
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise SWEDataError(f"{where} must be a list of test names, not {type(value).__name__}")
    return [str(test) for test in value]  # parquet gives numpy arrays, JSON gives lists


# ---- swebench's own test spec -------------------------------------------------------------------------------------


@dataclass
class EvalSpec:
    """How a task is tested in its image: `eval_script` (bash, run in /testbed after the submission is applied; it
    applies the test_patch itself) and `read_log(log)` -> {test name: "passed" | "failed" | ...} for the task's
    FAIL_TO_PASS and PASS_TO_PASS tests, or None when the log shows no valid run (tests errored, never started, or
    a log that contradicts the test command's exit status)."""

    eval_script: str
    read_log: Callable[[str], dict[str, str] | None]


def eval_spec(task: dict) -> EvalSpec:
    try:
        from swebench.harness import grading
    except ImportError as e:
        raise SWEDataError(
            f"grading SWE-bench rows in Docker needs the swebench package ({e}): pip install swebench "
            "(an optional install: it is not a dependency of rllm)"
        ) from None
    spec = _make_test_spec(task)
    f2p, p2p = list(task["FAIL_TO_PASS"]), list(task["PASS_TO_PASS"])
    # swebench>=5 counts a skipped PASS_TO_PASS test as kept; older releases only a passed one
    kept = getattr(grading, "test_maintained", grading.test_passed)

    def read_log(log: str) -> dict[str, str] | None:
        with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as f:
            f.write(log)
            f.flush()
            status, valid = grading.get_logs_eval(spec, f.name)
        if not valid:
            return None
        outcomes = {t: "passed" if grading.test_passed(t, status) else status.get(t, "missing").lower() for t in f2p}
        outcomes.update({t: "passed" if kept(t, status) else status.get(t, "missing").lower() for t in p2p})
        return outcomes

    return EvalSpec(spec.eval_script, read_log)


def _make_test_spec(task: dict):
    where = f"{task.get('instance_id')} ({task.get('repo')} {task.get('version')})"
    if task.get("eval_script") and task.get("log_parser"):
        try:  # swebench>=5: the row carries its own script and parser
            from swebench.harness.utils import make_test_spec
        except ImportError:
            raise SWEDataError(f"{where} carries swebench>=5's eval_script: pip install 'swebench>=5'") from None
        return make_test_spec({"eval_type": "pass_and_fail", **task, "image": docker_image(task)})
    try:
        from swebench.harness.test_spec.test_spec import make_test_spec
    except ImportError:
        raise SWEDataError(
            f"{where} carries no eval_script/log_parser, which swebench>=5 reads from the row: "
            "use SWE-bench's current datasets, or pip install 'swebench<5' for older dumps"
        ) from None
    try:
        return make_test_spec(task)
    except KeyError as e:
        raise SWEDataError(
            f"swebench has no test spec for {where} (missing {e}): SWE-Gym's repositories are in "
            "SWE-Gym's fork of swebench (github.com/SWE-Gym/SWE-Bench-Fork)"
        ) from None
