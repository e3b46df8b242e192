"""Runs in the grading sandbox (standard library + pytest): apply the submitted diff to /testbed with `git apply`,
then run pytest on the given node ids plus the two canary tests, outcomes going to fd 3 (rllm_swe_report).
argv: [--diff FILE] [--coverage] [--trace] -- pytest arguments. `--trace` records the calls each test makes into
the package (rllm_swe_trace), for task statements."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    options, pytest_args = argv[:split], argv[split + 1 :]
    if "--diff" in options:
        diff = options[options.index("--diff") + 1]
        command = ["git", "apply", "--whitespace=nowarn", diff]
        done = subprocess.run(command, check=False, cwd="/testbed", capture_output=True, text=True)
        if done.returncode != 0:
            send({"patch_failed": (done.stdout + done.stderr)[-2000:]})
            return 0
    nonce = os.environ["RLLM_SWE_CANARY"]
    canary = f"/tmp/rllm_canary_{nonce}.py"
    with open(canary, "w") as f:
        f.write(f"def test_canary_passes_{nonce}():\n    assert True\n\n\n")
        f.write(f"def test_canary_fails_{nonce}():\n    assert False\n")
    args = [
        *pytest_args,
        canary,
        "-p",
        "rllm_swe_report",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        "/testbed",
        "-q",
        "--no-header",
        "-rN",
        "--color=no",
        "--tb=short",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if "--trace" in options:
        args += ["-p", "rllm_swe_trace"]
    if "--coverage" in options:  # the generator: which tests run which lines
        import coverage

        cov = coverage.Coverage(data_file="/tmp/.coverage", source=["/testbed"], omit=["*/tests/*", "*/test_*"])
        cov.set_option("run:dynamic_context", "test_function")
        cov.start()
    import pytest
    import rllm_swe_report

    code = pytest.main(args)
    record = dict(rllm_swe_report.RECORD)
    if "--coverage" in options:
        cov.stop()
        data = cov.get_data()
        record["coverage"] = {
            os.path.relpath(path, "/testbed"): {
                str(line): sorted(c for c in contexts if c)
                for line, contexts in (data.contexts_by_lineno(path) or {}).items()
            }
            for path in data.measured_files()
        }
    if "--trace" in options:
        import rllm_swe_trace

        record["traces"] = rllm_swe_trace.TRACES
    send(record)
    return int(code)


def send(record: dict) -> None:
    with os.fdopen(3, "wb") as channel:
        channel.write(json.dumps(record).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
