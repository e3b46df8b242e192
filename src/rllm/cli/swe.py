"""`rllm swe build`: make SWE tasks (SWE-bench rows) from PyPI sdists by mutation, offline and without Docker.

rllm swe build --jobs 2 --out tasks.jsonl          # the default packages: the shipped set's recipe
rllm swe build --packages toolz==1.2.0 boltons==26.2.0 --per-package 20 --validation-packages boltons --out t.jsonl
rllm swe restate old_tasks.jsonl --out tasks.jsonl  # rows built before: their statements written anew
"""

from __future__ import annotations

import argparse
import sys
import time


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("swe", help="software-engineering tasks: build task sets from PyPI packages")
    commands = p.add_subparsers(dest="swe_command", required=True)
    b = commands.add_parser("build", help="make tasks by mutating packages' code and running their tests (sandboxed)")
    b.add_argument(
        "--packages",
        nargs="+",
        metavar="NAME==VERSION",
        help="packages to mutate (default: the pinned default set, rllm.tasks.swe.build.DEFAULT_PACKAGES)",
    )
    b.add_argument(
        "--validation-packages",
        nargs="*",
        metavar="NAME",
        help="packages whose tasks form the validation split (default with the default packages: "
        "tabulate; otherwise none)",
    )
    b.add_argument("--seed", type=int, default=0, help="chooses the mutations (default 0)")
    b.add_argument(
        "--per-package",
        type=int,
        help="tasks to make per package at most (default 45; with the default packages, the shipped "
        "set's counts: rllm.tasks.swe.build.DEFAULT_COUNTS)",
    )
    b.add_argument("--jobs", type=int, default=1, help="candidate mutants tested at once (default 1)")
    b.add_argument("--timeout", type=float, default=30.0, help="seconds for one test run on a mutant (default 30)")
    b.add_argument("--out", default="swe_tasks.jsonl", help="the JSONL file to write (default swe_tasks.jsonl)")
    b.add_argument("--quiet", action="store_true", help="print only the per-package counts")
    what = "write the problem statements of built task rows anew (the call that fails, what it gives, what it should)"
    r = commands.add_parser("restate", help=what)
    r.add_argument("file", help="a JSONL file of `rllm swe build` rows (.jsonl or .jsonl.gz)")
    r.add_argument("--out", required=True, help="the JSONL file to write")
    r.add_argument("--jobs", type=int, default=1, help="rows restated at once (default 1)")
    p.set_defaults(run=run)


def restate(args: argparse.Namespace) -> int:
    import gzip
    import json

    from rllm.tasks.swe import build
    from rllm.tasks.swe.statements import restate_tasks

    with (gzip.open if args.file.endswith(".gz") else open)(args.file, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    kept, dropped = restate_tasks(rows, jobs=args.jobs)
    build.write_tasks(kept, args.out)
    left_out = f"; left out {len(dropped)} whose statement repeats an earlier task's: {', '.join(dropped)}"
    print(f"wrote {len(kept)} tasks to {args.out}" + (left_out if dropped else ""))
    return 0


def run(args: argparse.Namespace) -> int:
    from rllm.tasks.swe import build

    if args.swe_command == "restate":
        return restate(args)
    if args.swe_command != "build":  # argparse allows build and restate; a new command must be wired here
        raise SystemExit(f"unknown swe command {args.swe_command!r}")
    packages = args.packages or [f"{n}=={v}" for n, v, _ in build.DEFAULT_PACKAGES]
    pins = {(n, v): sha for n, v, sha in build.DEFAULT_PACKAGES}
    specs = []
    for spec in packages:
        name, version, _ = build.parse_package(spec)
        specs.append((name, version, pins.get((name, version))))  # a default package keeps its pinned hash
    validation = args.validation_packages
    if validation is None:
        validation = build.DEFAULT_VALIDATION if not args.packages else ()
    started = time.monotonic()

    def report(r: build.PackageReport) -> None:
        print(r.line(), flush=True)

    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    per_package = args.per_package or (build.DEFAULT_COUNTS if not args.packages else build.DEFAULT_PER_PACKAGE)
    rows = build.build_tasks(
        specs,
        seed=args.seed,
        per_package=per_package,
        validation_packages=validation,
        jobs=args.jobs,
        timeout_s=args.timeout,
        on_package=report,
        log=log,
    )
    build.write_tasks(rows, args.out)
    splits = {s: sum(r["split"] == s for r in rows) for s in ("train", "validation")}
    print(
        f"wrote {len(rows)} tasks ({splits['train']} train, {splits['validation']} validation) to {args.out} "
        f"in {time.monotonic() - started:.0f} s"
    )
    return 0
