"""`rllm view`'s index and API (`rllm.viewer`) on run directories written by `rllm.runs.RunLog`. The browser test
on a real training run is tests/smoke/test_viewer_browser.py."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from rllm.engine import AgentExecutionEngine
from rllm.models.fake import FakeModel
from rllm.runs import RunLog, write_json
from rllm.tasks.frozenlake import FrozenLakeAgent, FrozenLakeEnv
from rllm.training.batch import build_rows, episode_trajectories, trained_steps
from rllm.types import Episode, ModelOutput, Step, Trajectory
from rllm.viewer import EpisodeIndex, NotARunError, discover_runs, start_server
from rllm.viewer import index as index_module
from rllm.viewer.data import query_episodes
from tests.support.cli import run_rllm

LAKE = {"id": "lake", "desc": ["SFFF", "FFFF", "FFFF", "FFFG"], "max_steps": 10}


def _episode(task: str, rollout: int, reward: float, text: str = "", role: str = "agent") -> Episode:
    step = Step(chat_completions=[{"role": "user", "content": text}], reward=reward)
    return Episode(
        id=f"{task}:{rollout}",
        trajectories=[Trajectory(name=role, steps=[step])],
        is_correct=reward > 0,
        termination_reason="env_done" if reward > 0 else "max_turns",
    )


def _run(tmp_path, steps=3, per_step=4):
    run = tmp_path / "run"
    run.mkdir()
    write_json(run / "manifest.json", {"kind": "train", "model": "m"})
    log = RunLog(run)
    for step in range(steps):
        episodes = [
            _episode(f"t{i}", step, float((i + step) % 2), f"Question {i} at step {step}") for i in range(per_step)
        ]
        log.log_episodes(step, episodes, "train")
        log.log(step, {"reward_mean": step / 10})
    return run


# ---- the index ---------------------------------------------------------------------------------------------------


def test_index_holds_the_table_columns_of_every_record(tmp_path):
    index = EpisodeIndex(_run(tmp_path) / "episodes.jsonl").refresh()
    assert len(index.entries) == 12 and index.pending_bytes == 0
    first = index.entries[0]
    assert (first["line"], first["step"], first["split"], first["task_id"], first["episode_id"]) == (
        1,
        0,
        "train",
        "t0",
        "t0:0",
    )
    assert (first["reward"], first["correct"], first["termination"], first["roles"]) == (
        0.0,
        False,
        "max_turns",
        ["agent"],
    )
    assert index.steps() == {"train": [0, 1, 2]}
    raw = index.read_line(5)
    assert json.loads(raw)["episode"]["id"] == "t0:1"


def test_a_task_is_keyed_by_its_content_not_its_id():
    from rllm.viewer.index import task_key

    question = {"id": "arith-1-3", "question": "What is 7 * 9?", "answer": 63}
    assert task_key(question, "arith-1-3") == task_key({**question, "id": "7"}, "7")  # the same question
    assert task_key(question, "arith-1-3") != task_key({**question, "question": "What is 886 * 8?"}, "arith-1-3")
    assert task_key(None, "t0") == "id:t0"  # no task recorded: its id is all there is


def test_reading_in_chunks_smaller_than_a_line_indexes_the_same(tmp_path, monkeypatch):
    path = _run(tmp_path) / "episodes.jsonl"
    whole = EpisodeIndex(path).refresh().entries
    monkeypatch.setattr(index_module, "CHUNK_BYTES", 100)  # lines are ~400 bytes: each spans several chunks
    assert EpisodeIndex(path).refresh().entries == whole


def test_bare_episodes_of_older_eval_runs_read_as_eval_step_0(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(_episode("q", i, 1.0).model_dump_json() for i in range(3)) + "\n")
    index = EpisodeIndex(path).refresh()
    assert [(e["split"], e["step"], e["correct"]) for e in index.entries] == [("eval", 0, True)] * 3


def test_refresh_parses_only_what_was_appended(tmp_path, monkeypatch):
    run = _run(tmp_path)
    index = EpisodeIndex(run / "episodes.jsonl").refresh()
    parsed = []
    real = index_module.summarize_record
    monkeypatch.setattr(index_module, "summarize_record", lambda data: parsed.append(data) or real(data))
    RunLog(run).log_episodes(3, [_episode("t9", 3, 1.0)], "train")
    index.refresh()
    assert len(parsed) == 1 and len(index.entries) == 13 and index.entries[-1]["step"] == 3
    index.refresh()
    assert len(parsed) == 1  # nothing new


def test_a_half_written_last_line_waits_and_a_corrupt_line_is_marked(tmp_path):
    run = _run(tmp_path, steps=1)
    path = run / "episodes.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"step": 0, "split": "tr\n' + b"".join(lines[1:]) + lines[1][:40])
    index = EpisodeIndex(path).refresh()
    assert len(index.entries) == 5 and index.pending_bytes == 40  # the torn tail is not indexed yet
    assert index.entries[1]["error"] and "not an episode record" in index.entries[1]["error"]
    assert [e["error"] is None for e in index.entries] == [True, False, True, True, True]
    with open(path, "ab") as f:  # the writer finishes its line
        f.write(lines[1][40:])
    index.refresh()
    assert len(index.entries) == 6 and index.pending_bytes == 0 and index.entries[-1]["episode_id"] == "t1:0"


def test_a_file_cut_by_a_resume_is_indexed_again(tmp_path):
    run = _run(tmp_path)
    index = EpisodeIndex(run / "episodes.jsonl").refresh()
    RunLog(run, resume_step=0)  # a resume from step 0's checkpoint drops steps 1 and 2
    RunLog(run).log_episodes(1, [_episode("new", 1, 1.0)], "train")
    index.refresh()
    assert [e["task_id"] for e in index.entries] == ["t0", "t1", "t2", "t3", "new"]


def test_the_index_is_cached_on_disk_and_reused(tmp_path, monkeypatch):
    run = _run(tmp_path)
    cache = tmp_path / "cache"
    EpisodeIndex(run / "episodes.jsonl", cache).refresh()
    assert len(list(cache.glob("*.json"))) == 1

    def refuse(data):
        raise AssertionError("a cached index must not parse the file again")

    monkeypatch.setattr(index_module, "summarize_record", refuse)
    again = EpisodeIndex(run / "episodes.jsonl", cache).refresh()
    assert len(again.entries) == 12 and again.entries[11]["episode_id"] == "t3:2"
    next(cache.glob("*.json")).write_text('{"version": 1, "rows": [[')  # a torn cache: indexed again, no error
    monkeypatch.undo()
    assert len(EpisodeIndex(run / "episodes.jsonl", cache).refresh().entries) == 12


def test_search_is_case_insensitive_and_finds_escaped_text(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    RunLog(run).log_episodes(
        0, [_episode("a", 0, 1.0, 'He said "Hello"\nthen left'), _episode("b", 0, 0.0, "bye")], "eval"
    )
    index = EpisodeIndex(run / "episodes.jsonl").refresh()
    assert index.search('said "hello"\nTHEN') == {1}
    assert index.search("BYE") == {2}
    assert index.search("nowhere") == set()


# ---- queries -----------------------------------------------------------------------------------------------------


def test_queries_filter_sort_and_page(tmp_path):
    index = EpisodeIndex(_run(tmp_path) / "episodes.jsonl").refresh()
    page = query_episodes(index, {"step": "1", "correct": "1"})
    assert page["total"] == 2 and {r["task_id"] for r in page["rows"]} == {"t0", "t2"}
    assert query_episodes(index, {"task": "t3", "reward_min": "0.5"})["total"] == 2
    assert query_episodes(index, {"q": "question 2 at step 1"})["rows"][0]["episode_id"] == "t2:1"
    ordered = query_episodes(index, {"sort": "-reward", "per_page": "5", "page": "2"})
    assert ordered["total"] == 12 and len(ordered["rows"]) == 5 and ordered["page"] == 2
    assert [r["reward"] for r in ordered["rows"]] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert query_episodes(index, {"role": "judge"})["total"] == 0
    with pytest.raises(ValueError, match="sort must be one of"):
        query_episodes(index, {"sort": "colour"})


def test_a_folder_that_is_not_a_run_is_refused_naming_what_was_expected(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotARunError, match="manifest.json, episodes.jsonl, metrics.jsonl"):
        discover_runs([tmp_path / "empty"])
    with pytest.raises(NotARunError, match="does not exist"):
        discover_runs([tmp_path / "missing"])
    run = _run(tmp_path)
    assert discover_runs([run]) == [run] and discover_runs([tmp_path]) == [run]
    out = run_rllm("view", str(tmp_path / "empty"))
    assert out.returncode == 2 and "is not a run directory" in out.stderr


# ---- the HTTP API, on a run with real token ids ------------------------------------------------------------------


@pytest.fixture
def lake_run(tmp_path, smollm2_tokenizer):
    """A run logged the way the trainer logs it: real chat-template token ids (FakeModel replies through the real
    SmolLM2 tokenizer), step advantages through build_rows, `trained` from the rows; plus a validation episode."""
    model = FakeModel(
        script=["Action: right", "Action: down", "Action: left"], tokenizer=smollm2_tokenizer, logprob=-0.25
    )
    engine = AgentExecutionEngine(
        agent_class=FrozenLakeAgent, env_class=FrozenLakeEnv, model=model, max_steps=3, env_workers=0
    )
    episode = engine.execute_tasks([LAKE])[0]
    pairs = episode_trajectories([episode])
    rows, _ = build_rows(pairs, step_advantages=[[0.5, -1.0, 2.0]], max_prompt_length=4096, max_response_length=4096)
    run = tmp_path / "lake"
    run.mkdir()
    write_json(run / "manifest.json", {"kind": "train", "model": "smollm2-135m-instruct"})
    (run / "config.yaml").write_text(
        "model:\n  name: smollm2-135m-instruct\nrollout:\n  max_prompt_length: 4096\n  max_response_length: 4096\n"
    )
    log = RunLog(run)
    log.log(1, {"reward_mean": 0.25, "approx_kl": 0.01, "skipped_update": 0})
    log.log_episodes(1, [episode], "train", trained_steps(pairs, rows))
    log.log_episodes(1, [episode], "val")
    steps = [
        Step(model_output=ModelOutput(prompt_ids=prompt, completion_ids=[5, 6], logprobs=[-0.5, -0.25]))
        for prompt in ([1, 2, 3], [1, 9, 3, 5, 6, 7])
    ]  # step 1 re-rendered token 1: a new row
    rewritten = Episode(id="rewritten:0", trajectories=[Trajectory(steps=steps)])
    log.log_episodes(1, [rewritten], "val")
    return run, rows


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_api_serves_runs_metrics_pages_and_the_token_overlay(lake_run, tmp_path):
    run, rows = lake_run
    server = start_server([run.parent], cache_dir=tmp_path / "cache")
    try:
        base = server.url + "api/"
        status, runs = _get(base + "runs")
        assert status == 200 and [(r["id"], r["kind"], r["episodes"], r["steps"]) for r in runs["runs"]] == [
            ("lake", "train", 3, 1)
        ]
        _, info = _get(base + "run/lake")
        assert info["facets"]["steps"] == {"train": [1], "val": [1]} and "max_prompt_length" in info["config"]
        _, metrics = _get(base + "run/lake/metrics")
        assert metrics["series"]["approx_kl"] == [[1, 0.01]]
        _, page = _get(base + "run/lake/episodes?split=val")
        assert page["total"] == 2 and page["rows"][0]["line"] == 2

        _, trained = _get(base + "run/lake/episode/1")
        overlay = trained["trajectories"][0]["overlay"]
        (row,) = overlay["rows"]
        assert row["ids"] == rows[0].input_ids and row["mask"] == rows[0].loss_mask
        assert row["trained_tokens"] == rows[0].num_loss_tokens > 0
        assert [a for a, m in zip(row["advantage"], row["mask"], strict=True) if m] == [
            a for a, m in zip(rows[0].advantages, rows[0].loss_mask, strict=True) if m
        ]
        assert {a for a in row["advantage"] if a is not None} == {0.5, -1.0, 2.0}
        assert "".join(row["text"]).startswith("<|im_start|>system")
        assert overlay["advantages"] == "recorded" and len(trained["trajectories"][0]["turns"]) == 3
        assert trained["trajectories"][0]["turns"][1]["messages"][0]["role"] == "user"  # the observation turn

        _, val = _get(base + "run/lake/episode/2")  # validation: same tokens, no advantages recorded
        assert val["trajectories"][0]["overlay"]["advantages"] is None
        assert set(val["trajectories"][0]["overlay"]["rows"][0]["advantage"]) == {None}

        _, rewritten = _get(base + "run/lake/episode/3")
        split = rewritten["trajectories"][0]["overlay"]
        assert [(r["ids"], r["split_before"], r["loss_tokens"]) for r in split["rows"]] == [
            ([1, 2, 3, 5, 6], False, 2),
            ([1, 9, 3, 5, 6, 7, 5, 6], True, 2),
        ]
        assert [r["trained_tokens"] for r in split["rows"]] == [0, 0]  # a validation episode: never trained
        assert split["stats"]["rows_split"] == 1

        assert _get(base + "run/nope")[0] == 404
        assert _get(base + "run/lake/episode/99")[0] == 404
        status, error = _get(base + "run/lake/episodes?sort=colour")
        assert status == 400 and "sort must be one of" in error["error"]
    finally:
        server.shutdown()


def test_rllm_view_prints_its_url_and_serves(lake_run, tmp_path):
    run, _ = lake_run
    with socket.socket() as probe:  # a port that is free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "rllm.cli.main", "view", str(run), "--no-index-cache", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith(f"rllm view: http://127.0.0.1:{port}/") and "(1 runs" in line
        url = line.split()[2]
        assert _get(url + "api/runs")[1]["runs"][0]["id"] == "lake"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert b"/static/app.js" in response.read()
        with urllib.request.urlopen(url + "static/app.js", timeout=30) as response:
            assert response.headers["Content-Type"].startswith("text/javascript")
    finally:
        process.terminate()
        process.wait(timeout=30)


# ---- images ------------------------------------------------------------------------------------------------------


def test_images_are_served_by_their_stored_name_and_linked_from_the_conversation(tmp_path):
    import http.client

    from rllm.images import image_part
    from tests.support.envs import picture, picture_run

    run = picture_run(tmp_path)
    names = sorted(p.name for p in (run / "images").iterdir())
    assert len(names) == 2  # the first screen and the second, each once
    server = start_server([run], cache_dir=tmp_path / "cache")
    try:
        _, view = _get(server.url + "api/run/pics/episode/1")
        turns = view["trajectories"][0]["turns"]
        first = turns[0]["messages"][0]["content"][0]
        url = first["image_url"]["url"]
        assert url.startswith("/api/run/pics/images/") and url.rsplit("/", 1)[1] in names
        assert turns[0]["observation"] is None  # the second screen is shown once, in the next prompt
        assert turns[1]["messages"][0]["content"][0]["type"] == "image_url"
        with urllib.request.urlopen(server.url + url[1:], timeout=30) as response:
            assert response.headers["Content-Type"] == "image/png"
            assert response.read() == base64.b64decode(image_part(picture())["image_url"]["url"].split(",")[1])

        host, port = server.server_address[:2]
        for path in (
            "/api/run/pics/images/../manifest.json",
            "/api/run/pics/images/..%2Fmanifest.json",
            "/api/run/pics/images/%2E%2E%2F%2E%2E%2Fpics%2Fmanifest.json",
            "/api/run/pics/images/" + "0" * 64 + ".png",
            "/api/run/nope/images/" + names[0],
        ):
            connection = http.client.HTTPConnection(host, port, timeout=30)  # sends the path as written
            connection.request("GET", path)
            response = connection.getresponse()
            assert response.status == 404 and b"kind" not in response.read(), path
            connection.close()
    finally:
        server.shutdown()


def test_the_run_page_gets_the_exactness_report_judged_by_the_current_rules(lake_run, tmp_path):
    run, _ = lake_run
    server = start_server([run.parent], cache_dir=tmp_path / "cache")
    try:
        url = server.url + "api/run/lake"
        assert _get(url)[1]["exactness"] is None  # a run written before the report existed
        RunLog(run).log(2, {"exactness/turns": 3, "exactness/prefix_breaks": 1, "exactness/template_breaks": 1})
        report = _get(url)[1]["exactness"]
        assert report["totals"]["turns"] == 3 and report["problems"] == []
        stale = {**report, "steps": [{"step": 2, "turns": 3, "round_trip_failures": 1}], "problems": []}
        write_json(run / "exactness.json", stale)  # problems as an older version judged them: judged again
        (problem,) = _get(url)[1]["exactness"]["problems"]
        assert "round trip" in problem and "first at step 2" in problem
    finally:
        server.shutdown()
