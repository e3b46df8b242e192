"""`rllm swe build`: SWE tasks made offline from PyPI sdists by mutation, and the shipped default set.

For each package (`build_package`):
0. The layout (`layout_fields`): code under `src/` gets `test_env = {"PYTHONPATH": "src"}`; a namespace package (a
   top directory without `__init__.py` holding packages) gets `test_cmd = "pytest -o
   consider_namespace_packages=true"`; a flat package needs neither (the repository's root is on the path). Every
   run below, and the row, use them.
1. The pristine sdist tree; its test files (`test_*.py` / `*_test.py`); two baseline runs in the sandbox: one with
   coverage (which test functions run which lines), one without, timed (`--durations`). A test counts as passing at
   baseline only if it passed in both runs, is not slower than `SLOW_TEST_S` and its node id holds no memory address
   (such ids change from run to run).
2. Candidate bugs: every site of rllm.tasks.swe.mutate in a non-test module whose line a passing test covers, in a
   seeded order that alternates between operators.
3. Per candidate: the tests covering the mutated function run on the mutant (the bug applied with `git apply` in the
   sandbox). FAIL_TO_PASS = those that passed at baseline and fail now; kept if 1 to `MAX_FAIL_TO_PASS`. Rejected:
   the mutant breaks collection or import, a run times out, a test's id disappears, no test fails, too many fail,
   or its fix would not pass the grader's policy (rllm.tasks.swe.grading.check_submission).
4. The hidden tests are the files holding a FAIL_TO_PASS test (their pristine text, as `test_patch`). PASS_TO_PASS
   is, as in SWE-bench, the other tests of those files that pass before and after, capped at `MAX_PASS_TO_PASS` so
   that grading takes seconds: those that cover the mutated module first, then the rest, each group in a fixed hashed
   order; they are run on the mutant (one that fails there joins FAIL_TO_PASS).
5. The statement (rllm.tasks.swe.statements.describe_task): the FAIL_TO_PASS tests run traced on the mutant and on
   the pristine tree; the first call into the package made alike in both whose outcome differs is the issue: the
   call with its argument values, what it returns (raises, yields) now and what it should, plus up to three other
   calls that changed. Where no call differs, pytest's failure report is used instead.
6. The oracle: `grade(row, row["patch"])` on the materialized task must give 1, or the task is dropped; so is a
   task whose statement is an earlier task's (its bug fails the same calls the same way: no test tells them apart).

Rows are SWE-bench's (`instance_id`, `repo`, `version`, `base_commit`, `problem_statement`, `patch` = the fix,
`test_patch`, `FAIL_TO_PASS`, `PASS_TO_PASS`) plus, where the layout needs them, `test_cmd` and `test_env` (named
as in SWE-bench's per-repository specs; read by rllm.tasks.swe.grading.task_test_setup), and `sdist`, `split` (by
package), `created_by`, `mutation` and `difficulty` (≈ lines an agent reads to find the bug: the mutated function
plus a tenth of its module; lower is easier). The same packages and seed give the same rows: everything is
sorted, nothing depends on the clock (the one caveat: a test that takes about `SLOW_TEST_S` may count as slow in
one build and not in another).

The shipped set (`data/swe_default.jsonl.gz` here, read by `load_default_tasks`) is `DEFAULT_PACKAGES` built with
`rllm swe build --seed 0 --jobs 2 --out swe_default.jsonl` (45 tasks per package, or `DEFAULT_COUNTS`), then
`gzip -9 -n` (5.7 MB of rows, each carrying its hidden test files, are 0.9 MB gzipped); `tabulate` is its
validation split. A package's first N tasks do not depend on how many are asked
for, so a smaller count gives a prefix of the same rows. Its statements were then written anew by
`rllm swe restate` (step 5, which came later), which left out the 6 tasks whose statement repeated an earlier one's:
a fresh build gives the same rows, and fills those places with later candidates (ids past the last shipped one).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rllm.tasks.swe.grading import NOT_SOURCE, is_test_path, task_test_setup, test_files
from rllm.tasks.swe.mutate import Mutation, apply_mutation, find_mutations, shuffled
from rllm.tasks.swe.statements import describe_task, problem_statement

__all__ = [
    "DEFAULT_COUNTS",
    "DEFAULT_PACKAGES",
    "DEFAULT_PER_PACKAGE",
    "DEFAULT_VALIDATION",
    "PackageReport",
    "build_package",
    "build_tasks",
    "layout_fields",
    "load_default_tasks",
    "parse_package",
    "problem_statement",
    "test_files",
    "write_tasks",
]

# (name, version, sha256 of the sdist): small pure-Python packages whose suites run with plain pytest in seconds.
DEFAULT_PACKAGES = (
    ("boltons", "26.2.0", "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c"),
    ("inflection", "0.5.1", "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"),
    ("more-itertools", "11.2.1", "cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63"),
    ("tabulate", "0.10.0", "e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d"),
    ("toolz", "1.2.0", "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490"),
)
DEFAULT_VALIDATION = ("tabulate",)  # held out: never trained on
DEFAULT_PER_PACKAGE = 45
# the shipped set's counts where they differ: more-itertools' hidden test file is 57 kB (a row carries it), boltons'
# are small; inflection runs out of candidates at 23
DEFAULT_COUNTS = {"boltons": 70, "more-itertools": 30}
MAX_FAIL_TO_PASS = 20
MAX_PASS_TO_PASS = 100
# a row carries its hidden test files whole (test_patch): files past this size would make the shipped set large
MAX_HIDDEN_BYTES = 64_000
SLOW_TEST_S = 1.0
REASONS = (
    "no_failing_test",
    "too_many_failing_tests",
    "import_broken",
    "timeout",
    "collection_changed",
    "hidden_tests_too_big",
    "fix_not_gradable",
    "does_not_compile",
    "oracle_failed",
    "same_statement",
)
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


@dataclass
class PackageReport:
    name: str
    version: str
    split: str
    tried: int = 0
    kept: int = 0
    rejected: Counter = field(default_factory=Counter)

    def line(self) -> str:
        reasons = ", ".join(f"{r.replace('_', ' ')} {n}" for r, n in sorted(self.rejected.items()))
        return f"{self.name} {self.version} ({self.split}): tried {self.tried}, kept {self.kept}" + (
            f"; rejected: {reasons}" if reasons else ""
        )


def parse_package(spec) -> tuple[str, str, str | None]:
    """'name==version' or a (name, version[, sha256]) tuple -> (name, version, sha256 or None)."""
    if isinstance(spec, str):
        name, sep, version = spec.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"a package is given as name==version, got {spec!r}")
        return name.strip(), version.strip(), None
    name, version, *rest = spec
    return name, version, (rest[0] if rest else None)


def layout_fields(tree: Path) -> dict:
    """The row fields a package's tests need by its layout (step 0 of the module docstring): {} for a flat one."""
    fields: dict = {}
    code_root = tree
    if (tree / "src").is_dir() and any(
        _is_source(p.relative_to(tree).as_posix()) for p in (tree / "src").rglob("*.py")
    ):
        fields["test_env"] = {"PYTHONPATH": "src"}
        code_root = tree / "src"
    if any(_is_namespace_package(d) for d in sorted(code_root.iterdir()) if _may_hold_code(d, tree)):
        fields["test_cmd"] = "pytest -o consider_namespace_packages=true"
    return fields


def _may_hold_code(directory: Path, tree: Path) -> bool:
    rel = directory.relative_to(tree).as_posix()
    return directory.is_dir() and not directory.name.startswith(".") and _is_source(f"{rel}/module.py")


def _is_namespace_package(directory: Path) -> bool:
    """A directory without `__init__.py` holding a package (PEP 420): pytest must be told to import its tests."""
    if (directory / "__init__.py").exists():
        return False
    return any((child / "__init__.py").is_file() for child in directory.iterdir() if child.is_dir())


def _file_of(node_id: str) -> str:
    return node_id.split("::", 1)[0]


def _function_id(node_id: str) -> str:
    return node_id.split("[", 1)[0]


class _Baseline:
    """The package's tests before any bug: which pass, which run which lines."""

    def __init__(self, tree: Path, files: list[str], timeout_s: float, fields: dict) -> None:
        from rllm.tasks.swe.grading import run_tests

        self.fields = fields  # the row's test_cmd / test_env (layout_fields)
        options, env = task_test_setup(fields)
        self.setup = {"test_options": options, "test_env": env}
        covered = run_tests(tree, files, coverage=True, timeout_s=timeout_s * 20, **self.setup)
        timed = run_tests(
            tree,
            [*files, "--durations=0", f"--durations-min={SLOW_TEST_S / 2}"],
            timeout_s=timeout_s * 20,
            **self.setup,
        )
        for run in (covered, timed):
            if run.killed_reason or run.tampered or run.broken or not run.outcomes:
                raise RuntimeError(
                    f"the baseline test run of {tree.name} failed ({run.killed_reason or run.tampered or run.broken}):"
                    f" {run.output[-1500:]}"
                )
        seconds = Counter()
        for match in re.finditer(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S.*)$", timed.output, re.M):
            seconds[match.group(2).strip()] += float(match.group(1))
        self.tree, self.all_ids = tree, sorted(covered.outcomes)
        self.passed = {
            t
            for t, o in covered.outcomes.items()
            if o == "passed"
            and timed.outcomes.get(t) == "passed"
            and seconds[t] < SLOW_TEST_S
            and not _ADDRESS.search(t)
        }
        by_function: dict[str, list[str]] = {}
        for node in sorted(self.passed):
            by_function.setdefault(_function_id(node), []).append(node)
        # coverage names a test by its dotted function (`pkg.tests.test_x.Class.test_y`): match it to node ids
        suffixes: dict[str, list[str]] = {}
        for function_id in by_function:
            path, *names = function_id.split("::")
            dotted = PurePosixPath(path).with_suffix("").parts + tuple(".".join(names).split("."))
            for i in range(len(dotted) - len(names)):
                suffixes.setdefault(".".join(dotted[i:]), []).append(function_id)
        self.lines: dict[str, dict[int, frozenset[str]]] = {}
        for path, lines in covered.coverage.items():
            if path.endswith(".py") and _is_source(path):
                self.lines[path] = {
                    int(n): frozenset(t for c in contexts for f in suffixes.get(c, ()) for t in by_function[f])
                    for n, contexts in lines.items()
                }

    def tests_on(self, path: str, lines) -> set[str]:
        covered = self.lines.get(path, {})
        return set().union(*(covered.get(n, frozenset()) for n in lines))


def _is_source(path: str) -> bool:
    return not is_test_path(path) and not NOT_SOURCE & set(PurePosixPath(path).parts)


def _candidates(base: _Baseline, seed: str) -> list[tuple[str, Mutation]]:
    found, sizes = [], {}

    def small(test_file: str) -> bool:  # a test in a file too big to hide cannot make a task
        if test_file not in sizes:
            sizes[test_file] = (base.tree / test_file).stat().st_size <= MAX_HIDDEN_BYTES
        return sizes[test_file]

    for path in sorted(base.lines):
        source = (base.tree / path).read_text(encoding="utf-8")
        for mutation in find_mutations(source):
            tests = base.tests_on(path, {mutation.line, mutation.stmt_line})
            if any(small(_file_of(t)) for t in tests):
                found.append((path, mutation))
    return shuffled(found, seed, key=lambda item: item[1])


@dataclass
class _Trial:
    reason: str | None  # None: kept
    bug: str = ""  # the diff that makes the mutant
    fix: str = ""
    f2p: list[str] = field(default_factory=list)
    p2p: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)


def _try(base: _Baseline, path: str, mutation: Mutation, timeout_s: float) -> _Trial:
    """Run one candidate on the mutant: step 3-4 of the module docstring."""
    from rllm.tasks.swe.grading import check_submission, run_tests
    from rllm.tasks.swe.patches import diff_files

    original = (base.tree / path).read_text(encoding="utf-8")
    mutant = apply_mutation(original, mutation)
    try:
        compile(mutant, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return _Trial("does_not_compile")
    trial = _Trial(None, diff_files(path, original, mutant), diff_files(path, mutant, original))
    if check_submission(trial.fix) is not None:
        trial.reason = "fix_not_gradable"
        return trial
    lines = range(mutation.function_lines[0], mutation.function_lines[1] + 1)
    covering = sorted(base.tests_on(path, lines) & base.passed)
    run = run_tests(base.tree, covering, diff=trial.bug, timeout_s=timeout_s, **base.setup)
    trial.reason = _broken(run, covering)
    if trial.reason is not None:
        return trial
    outcomes, trial.failures = dict(run.outcomes), dict(run.failures)
    f2p = {t for t in covering if outcomes[t] in ("failed", "error")}
    if not f2p or len(f2p) > MAX_FAIL_TO_PASS:
        trial.reason = "too_many_failing_tests" if f2p else "no_failing_test"
        return trial
    hidden = {_file_of(t) for t in f2p}
    if sum((base.tree / f).stat().st_size for f in hidden) > MAX_HIDDEN_BYTES:
        trial.reason = "hidden_tests_too_big"
        return trial
    module_tests = base.tests_on(path, base.lines[path])
    pool = sorted(
        (t for t in base.passed if _file_of(t) in hidden and t not in f2p),
        key=lambda t: (t not in module_tests, hashlib.sha256(t.encode()).hexdigest()),
    )
    pool = pool[:MAX_PASS_TO_PASS]
    if unknown := [t for t in pool if t not in outcomes]:
        more = run_tests(base.tree, unknown, diff=trial.bug, timeout_s=timeout_s, **base.setup)
        trial.reason = _broken(more, unknown)
        if trial.reason is not None:
            return trial
        outcomes.update(more.outcomes)
        trial.failures.update(more.failures)
    f2p |= {t for t in pool if outcomes[t] in ("failed", "error")}
    trial.f2p, trial.p2p = sorted(f2p), sorted(t for t in pool if outcomes[t] == "passed")
    if len(f2p) > MAX_FAIL_TO_PASS:
        trial.reason = "too_many_failing_tests"
    return trial


def _broken(run, wanted: list[str]) -> str | None:
    if run.killed_reason is not None:
        return "timeout" if run.killed_reason == "timeout" else "import_broken"
    if run.patch_failed:  # our bug diff always applies to our own tree: a broken setup, not a bad mutant
        raise RuntimeError(f"a mutant's diff did not apply in the sandbox: {run.patch_failed}")
    if run.collect_errors or run.tampered or run.broken:
        return "import_broken"
    if any(t not in run.outcomes for t in wanted):
        return "collection_changed"
    return None


def _row(
    name: str,
    version: str,
    sdist: dict,
    index: int,
    split: str,
    seed: int,
    base: _Baseline,
    path: str,
    mutation: Mutation,
    trial: _Trial,
) -> dict:
    from rllm.tasks.swe.patches import diff_files

    hidden = sorted({_file_of(t) for t in trial.f2p})
    test_patch = "".join(diff_files(f, None, (base.tree / f).read_text(encoding="utf-8")) for f in hidden)
    module_lines = (base.tree / path).read_text(encoding="utf-8").count("\n")
    function_lines = mutation.function_lines[1] - mutation.function_lines[0] + 1
    return {
        "instance_id": f"{name}__{name}-{version}__{index:04d}",
        "repo": name,
        "version": version,
        "base_commit": f"sdist-{sdist['sha256'][:12]}+mut-{hashlib.sha256(trial.bug.encode()).hexdigest()[:8]}",
        "problem_statement": "",  # written by _finish, once the row is kept
        "patch": trial.fix,
        "test_patch": test_patch,
        "FAIL_TO_PASS": trial.f2p,
        "PASS_TO_PASS": trial.p2p,
        **base.fields,
        "sdist": sdist,
        "split": split,
        "created_by": f"rllm swe build {seed}",
        "mutation": {
            "operator": mutation.operator,
            "file": path,
            "line": mutation.line,
            "function": mutation.function,
            "function_lines": function_lines,
            "module_lines": module_lines,
        },
        "difficulty": function_lines + module_lines // 10,
    }


def _finish(base: _Baseline, row: dict, bug: str, timeout_s: float) -> bool:
    """Write the row's statement (rllm.tasks.swe.statements) and run the oracle: whether the row is kept."""
    from rllm.tasks.swe.grading import grade

    statement = describe_task(
        row["repo"], base.tree, row["FAIL_TO_PASS"], bug=bug, timeout_s=timeout_s * 2, test_fields=base.fields
    )
    row["problem_statement"] = statement
    return grade(row, row["patch"]).reward == 1.0


def build_package(
    name: str,
    version: str,
    sha256: str | None = None,
    *,
    seed: int = 0,
    per_package: int = DEFAULT_PER_PACKAGE,
    split: str = "train",
    jobs: int = 1,
    timeout_s: float = 30.0,
    log=None,
) -> tuple[list[dict], PackageReport]:
    """Up to `per_package` task rows of one package (see the module docstring) and the counts of what was tried.
    `jobs` candidates run at once; the result does not depend on it (candidates are decided in their order)."""
    from rllm.sandbox import make_editable
    from rllm.tasks.swe.store import fetch_sdist, pristine_tree, swe_home

    archive = fetch_sdist(name, version, sha256)
    sdist = {
        "name": name,
        "version": version,
        "filename": archive.name,
        "sha256": sha256 or hashlib.sha256(archive.read_bytes()).hexdigest(),
    }
    pristine = pristine_tree(name, version, sdist["sha256"])
    with tempfile.TemporaryDirectory(dir=swe_home(), prefix=".build-") as tmp:
        # the sandbox's user applies each bug inside its overlay: the files must be its own (the pristine tree
        # stays as it is, shared with every task made from it)
        tree = Path(tmp, pristine.name)
        shutil.copytree(pristine, tree, symlinks=True)
        make_editable(tree)
        os.chmod(tmp, 0o755)
        base = _Baseline(tree, test_files(tree), timeout_s, layout_fields(tree))
        candidates = _candidates(base, f"{seed}:{name}=={version}")
        rows, report = _decide(name, version, sdist, split, seed, base, candidates, per_package, jobs, timeout_s, log)
    return rows, report


def _decide(name, version, sdist, split, seed, base, candidates, per_package, jobs, timeout_s, log):
    """Try candidates `jobs` at a time, deciding them in their order, until `per_package` pass the oracle."""
    report, rows = PackageReport(name, version, split), []
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        position = 0
        while len(rows) < per_package and position < len(candidates):
            batch = candidates[position : position + max(1, jobs)]
            position += len(batch)
            trials = list(pool.map(lambda c: _try(base, c[0], c[1], timeout_s), batch))
            accepted = []
            for (path, mutation), trial in zip(batch, trials, strict=True):
                if len(rows) + len(accepted) >= per_package:
                    break
                report.tried += 1
                if trial.reason is None:
                    index = (
                        len(rows) + len(accepted) + report.rejected["oracle_failed"] + report.rejected["same_statement"]
                    )
                    row = _row(name, version, sdist, index, split, seed, base, path, mutation, trial)
                    accepted.append((row, trial.bug))
                else:
                    report.rejected[trial.reason] += 1
            finished = pool.map(lambda item: _finish(base, *item, timeout_s), accepted)
            for (row, _), ok in zip(accepted, finished, strict=True):
                if not ok:
                    report.rejected["oracle_failed"] += 1
                elif any(r["problem_statement"] == row["problem_statement"] for r in rows):
                    report.rejected["same_statement"] += 1  # a bug no test tells apart from a kept one's
                else:
                    rows.append(row)
            if log is not None:
                log(f"  {name}: tried {report.tried}, kept {len(rows)}")
    report.kept = len(rows)
    return rows, report


def build_tasks(
    packages,
    *,
    seed: int = 0,
    per_package: int | dict = DEFAULT_PER_PACKAGE,
    validation_packages=(),
    jobs: int = 1,
    timeout_s: float = 30.0,
    on_package=None,
    log=None,
) -> list[dict]:
    """Task rows for `packages` ('name==version' strings or (name, version[, sha256]) tuples), sorted by id.
    A package named in `validation_packages` gives rows of split "validation", the others "train". `per_package`
    is a count for every package or a dict of counts by name (`DEFAULT_PER_PACKAGE` for a name it lacks).
    `on_package(report)` is called with each package's PackageReport."""
    rows = []
    for spec in packages:
        name, version, sha256 = parse_package(spec)
        count = per_package.get(name, DEFAULT_PER_PACKAGE) if isinstance(per_package, dict) else per_package
        split = "validation" if name in set(validation_packages) else "train"
        built, report = build_package(
            name, version, sha256, seed=seed, per_package=count, split=split, jobs=jobs, timeout_s=timeout_s, log=log
        )
        rows.extend(built)
        if on_package is not None:
            on_package(report)
    return sorted(rows, key=lambda r: r["instance_id"])


def write_tasks(rows: list[dict], path: str | Path) -> None:
    """One JSON row per line, sorted by instance_id, keys sorted: the same rows give the same bytes."""
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in sorted(rows, key=lambda r: r["instance_id"])]
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def load_default_tasks(split: str | None = None) -> list[dict]:
    """The shipped task set (`rllm/tasks/swe/data/swe_default.jsonl.gz`), optionally one split ("train",
    "validation")."""
    from importlib.resources import files

    shipped = files("rllm.tasks.swe").joinpath("data", "swe_default.jsonl.gz")
    text = gzip.decompress(shipped.read_bytes()).decode("utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if split not in (None, "train", "validation"):
        raise ValueError(f"the shipped SWE tasks have the splits 'train' and 'validation', not {split!r}")
    return [r for r in rows if split is None or r["split"] == split]
