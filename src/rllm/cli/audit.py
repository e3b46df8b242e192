"""`rllm audit RUN`: a run's alarms for reward hacking and instability (`rllm.audit`, rules in `rllm.health`) and
the problems of its token-exactness report (`rllm.exactness`).

rllm audit runs/train-arithmetic-grpo-20261202-101500          # one line per alarm; exit 1 on any, 0 when clean
rllm audit runs/a --json                                       # the report as JSON, for CI
rllm audit --rules                                             # every detector and its rule
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="a run's alarms (reward hacking, instability); exit 1 on any")
    p.add_argument("run_dir", nargs="?", metavar="RUN", help="a run directory")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--rules", action="store_true", help="print every detector's rule and exit")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rllm.audit import audit_run
    from rllm.health import DETECTORS

    if args.rules:
        for detector in DETECTORS:
            print(f"{detector.name:<24} {detector.rule}")
        return 0
    if not args.run_dir:
        args.parser.error("give a run directory, e.g. rllm audit runs/<name> (or --rules)")
    report = audit_run(args.run_dir)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.ok else 1
    for span in report.alarms:
        print(span.line())
        if span.episodes:
            shown = ", ".join(f"{episode} (step {step})" for step, episode in span.episodes)
            print(f"  episodes: {shown}")
    for problem in report.exactness:
        print(f"token exactness: {problem}")
    found = [f"{len(report.alarms)} alarm{'s' if len(report.alarms) > 1 else ''}"] if report.alarms else []
    found += [f"{len(report.exactness)} token-exactness problems"] if report.exactness else []
    verdict = "no alarms" if report.ok else f"{', '.join(found)}; see them in rllm view {report.run_dir}"
    print(f"rllm audit {report.run_dir}: {report.kind} run, {report.steps} steps, {verdict}", file=sys.stderr)
    return 0 if report.ok else 1
