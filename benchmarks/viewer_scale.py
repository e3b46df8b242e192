"""`rllm view` at scale: a run with 100,000 episodes (default), its first page of episodes and a filtered page.

    python benchmarks/viewer_scale.py                 # 100,000 episodes of 2 turns (~600 MB)
    python benchmarks/viewer_scale.py --episodes 20000

The run is written by `rllm.runs.RunLog` as a training run writes it (episodes of 2 chat turns with their token ids
and log-probs, 500 steps, validation every 50), then a viewer server is started in a fresh process twice: once with
no index (it is built: `index build`) and once with the index it cached (what every later `rllm view` of the run
does). Times are from starting the server to the HTTP answer. Then 1,000 episodes are appended (the run grows) and
the next page is timed (the index only reads what was appended). Prints `first page: S` (seconds, cached index)
last.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from smoke import add_smoke_flag, device_line

SERVER = """
import sys, time
from rllm.viewer import start_server
server = start_server([sys.argv[1]], cache_dir=sys.argv[2])
print(server.url, flush=True)
time.sleep(3600)
"""


def write_run(path: Path, episodes: int, seed: int = 0) -> None:
    from rllm.runs import RunLog, write_json
    from rllm.types import Episode, ModelOutput, Step, Trajectory

    rng = random.Random(seed)
    path.mkdir(parents=True)
    write_json(path / "manifest.json", {"kind": "train", "model": "qwen2.5-coder-0.5b-instruct"})
    (path / "config.yaml").write_text("model:\n  name: qwen2.5-coder-0.5b-instruct\ndata:\n  task: synthetic\n")
    log = RunLog(path)
    per_step = 200
    for step in range(episodes // per_step):
        batch = []
        for i in range(per_step):
            steps, prompt = [], [rng.randrange(150_000) for _ in range(80)]
            for turn in range(2):
                completion = [rng.randrange(150_000) for _ in range(30)]
                logprobs = [-rng.random() for _ in completion]
                output = ModelOutput(
                    text=f"reply {turn} of task {i}",
                    prompt_ids=list(prompt),
                    completion_ids=completion,
                    logprobs=logprobs,
                )
                messages = [{"role": "user", "content": f"task {i} turn {t}: move the piece"} for t in range(turn + 1)]
                steps.append(Step(chat_completions=messages, model_output=output, reward=float(rng.random() < 0.3)))
                prompt = prompt + completion + [rng.randrange(150_000) for _ in range(20)]
            reward = steps[-1].reward
            ending = "env_done" if reward else "max_turns"
            batch.append(
                Episode(
                    id=f"task-{step % 50}-{i // 4}:{i % 4}",
                    trajectories=[Trajectory(steps=steps)],
                    is_correct=reward > 0,
                    termination_reason=ending,
                )
            )
        log.log_episodes(step + 1, batch, "train")
        log.log(step + 1, {"reward_mean": sum(e.is_correct for e in batch) / per_step})


def timed_get(url: str) -> tuple[float, dict]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as response:
        data = json.loads(response.read())
    return time.perf_counter() - started, data


def open_viewer(run: Path, cache: Path, query: str) -> tuple[float, dict, subprocess.Popen, str]:
    """Start a viewer process and time start -> the answer to `query` (its server startup included)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(run), str(cache)], stdout=subprocess.PIPE, text=True)
    url = process.stdout.readline().strip()
    _, data = timed_get(f"{url}api/run/{run.name}/episodes?{query}")
    return time.perf_counter() - started, data, process, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.episodes = 200
    print(device_line())
    with tempfile.TemporaryDirectory() as tmp:
        run, cache = Path(tmp) / "big-run", Path(tmp) / "index"
        started = time.perf_counter()
        write_run(run, args.episodes)
        size = (run / "episodes.jsonl").stat().st_size
        print(
            f"run: {args.episodes} episodes, {size / 1e6:.0f} MB episodes.jsonl, written in "
            f"{time.perf_counter() - started:.1f} s"
        )

        cold, page, process, _ = open_viewer(run, cache, "page=1")
        process.kill()
        assert page["total"] == args.episodes, page["total"]
        print(f"index build + first page (no index yet): {cold:.2f} s")

        first, page, process, url = open_viewer(run, cache, "page=1")
        try:
            filtered, data = timed_get(f"{url}api/run/{run.name}/episodes?split=train&correct=1&step=250&sort=-tokens")
            print(f"filtered page (step, correct, sorted): {filtered:.3f} s, {data['total']} episodes")
            search, data = timed_get(f"{url}api/run/{run.name}/episodes?q=TASK-7-3:")
            print(f"text search over the whole file: {search:.3f} s, {data['total']} episodes")
            _, data = timed_get(f"{url}api/run/{run.name}/episodes?page=1")
            line = data["rows"][0]["line"]
            first_episode, _ = timed_get(f"{url}api/run/{run.name}/episode/{line}")
            episode, data = timed_get(f"{url}api/run/{run.name}/episode/{line + 1}")
            tokens = sum(len(r["ids"]) for t in data["trajectories"] for r in t["overlay"]["rows"])
            print(
                f"one episode with its overlay ({tokens} tokens): {episode:.3f} s "
                f"(the first: {first_episode:.2f} s, loading the tokenizer)"
            )
            write_run(Path(tmp) / "more", 1000, seed=1)
            with open(run / "episodes.jsonl", "ab") as f:
                f.write((Path(tmp) / "more" / "episodes.jsonl").read_bytes())
            grown, data = timed_get(f"{url}api/run/{run.name}/episodes?page=1")
            assert data["total"] == args.episodes + 1000
            print(f"first page after the run grew by 1,000 episodes: {grown:.3f} s")
        finally:
            process.kill()
        print(f"first page: {first:.2f}")


if __name__ == "__main__":
    main()
