"""The one run directory (`rllm.runs`): naming, the manifest, one episodes.jsonl record format for eval and train,
and reading every kind of run back."""

from __future__ import annotations

import json

import pytest

from rllm.config import load_config
from rllm.runs import (
    RunFormatError,
    RunLog,
    create_run_dir,
    is_unstarted_train_run,
    load_metrics,
    read_episode_records,
    read_episodes,
    write_manifest,
)
from rllm.types import Episode, Step, TerminationReason, Trajectory


def _episode(i: int) -> Episode:
    trajectory = Trajectory(steps=[Step(reward=float(i))])
    return Episode(id=f"t{i}:0", trajectories=[trajectory], termination_reason=TerminationReason.ENV_DONE)


def test_run_dirs_are_named_by_kind_task_and_time_and_never_reused(tmp_path):
    first = create_run_dir(tmp_path, None, "eval", "math")
    second = create_run_dir(tmp_path, None, "eval", "math")  # same second: a suffix, not the same folder
    assert first.name.startswith("eval-math-") and first != second and second.name.startswith(first.name)
    assert create_run_dir(tmp_path, "mine").name == "mine"
    with pytest.raises(RunFormatError, match="exists already"):
        create_run_dir(tmp_path, "mine")


def test_manifest_and_config_are_written_for_every_run(tmp_path):
    config = load_config(None, ["trainer.seed=7"])
    write_manifest(tmp_path, "eval", config)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["kind"] == "eval" and manifest["seed"] == 7 and "python" in manifest["versions"]
    assert load_config(tmp_path / "config.yaml") == config


def test_eval_and_train_records_read_back_with_their_step_and_split(tmp_path):
    log = RunLog(tmp_path)
    log.log_episodes(0, [_episode(0)], "val")
    log.log_episodes(1, [_episode(1), _episode(2)], "train")
    records = read_episode_records(tmp_path)
    assert [(r["step"], r["split"], r["episode"].id) for r in records] == [
        (0, "val", "t0:0"),
        (1, "train", "t1:0"),
        (1, "train", "t2:0"),
    ]
    assert [e.id for e in read_episodes(tmp_path / "episodes.jsonl", split="train")] == ["t1:0", "t2:0"]
    with pytest.raises(ValueError, match="split"):
        log.log_episodes(0, [], "test")


def test_bare_episodes_of_older_eval_runs_still_read(tmp_path):
    (tmp_path / "episodes.jsonl").write_text(_episode(3).model_dump_json() + "\n")
    (record,) = read_episode_records(tmp_path)
    assert (record["step"], record["split"], record["episode"].id) == (0, "eval", "t3:0")


def test_anything_else_is_a_clear_error_naming_file_and_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"step": 1, "split": "train", "episode": {"id": "a:0"}}\n{"loss": 0.5}\n')
    with pytest.raises(RunFormatError, match=r"episodes.jsonl, line 2 is neither an episode record .*'loss'"):
        read_episodes(path)
    path.write_text('not json\n{"id": "a:0", "trajectories": []}\n')
    with pytest.raises(RunFormatError, match="line 1 is not JSON"):
        read_episodes(path)


def test_a_torn_last_line_is_skipped_with_a_warning_and_dropped_on_resume(tmp_path):
    log = RunLog(tmp_path)
    log.log(1, {"reward_mean": 0.5})
    log.log(2, {"reward_mean": 0.7})
    log.log_episodes(1, [_episode(1)], "train")
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward_me')  # killed mid-write
    with pytest.warns(UserWarning, match="torn last line"):
        assert [m["step"] for m in load_metrics(tmp_path)] == [1, 2]
    with pytest.warns(UserWarning, match="dropped a torn last line"):
        RunLog(tmp_path, resume_step=1)  # resuming from the step-1 checkpoint
    assert [m["step"] for m in load_metrics(tmp_path)] == [1]
    assert [e.id for e in read_episodes(tmp_path)] == ["t1:0"]


def test_resume_refuses_a_log_corrupted_in_the_middle_naming_the_line(tmp_path):
    log = RunLog(tmp_path)
    for step in (1, 2, 3):
        log.log(step, {"reward_mean": 0.5})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = '{"step": 2, "rew\n'  # not a torn append: a damaged line with records after it
    (tmp_path / "metrics.jsonl").write_text("".join(lines))
    with pytest.raises(RunFormatError, match=r"metrics.jsonl:2 is not a log record"):
        RunLog(tmp_path, resume_step=3)
    assert (tmp_path / "metrics.jsonl").read_text() == "".join(lines)  # nothing rewritten


def test_resume_drops_a_torn_last_line_with_a_warning(tmp_path):
    log = RunLog(tmp_path)
    log.log(1, {"reward_mean": 0.5})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "rew')
    with pytest.warns(UserWarning, match="dropped a torn last line"):
        RunLog(tmp_path, resume_step=2)
    assert [m["step"] for m in load_metrics(tmp_path)] == [1]


def test_resume_refuses_a_record_after_one_of_a_later_step(tmp_path):
    """Resume cuts the log where the records of later steps begin (one truncate, so a kill during a resume cannot
    leave a half-rewritten log); records out of step order are not rllm's and are refused, nothing changed."""
    lines = ['{"step": 1}\n', '{"step": 3}\n', '{"step": 2}\n']
    (tmp_path / "metrics.jsonl").write_text("".join(lines))
    with pytest.raises(RunFormatError, match=r"metrics.jsonl:3 is a record of step 2 after one of a later step"):
        RunLog(tmp_path, resume_step=2)
    assert (tmp_path / "metrics.jsonl").read_text() == "".join(lines)
    RunLog(tmp_path, resume_step=3)  # nothing to drop: nothing refused
    assert (tmp_path / "metrics.jsonl").read_text() == "".join(lines)


def test_a_run_stopped_before_its_first_checkpoint_is_recognised(tmp_path):
    config = load_config(None, ["trainer.seed=7"])
    run = create_run_dir(tmp_path, "run", "train")
    assert is_unstarted_train_run(run)  # killed before it wrote anything
    write_manifest(run, "train", config)
    RunLog(run).log(0, {"val/reward_mean": 0.0})
    (run / "checkpoints" / ".step_000001.tmp-7").mkdir(parents=True)
    assert is_unstarted_train_run(run)
    (run / "images").mkdir()  # the images of its first episodes
    assert is_unstarted_train_run(run)
    (run / "manifest.json").write_text('{"kind": "tr')  # torn by the kill
    assert is_unstarted_train_run(run)
    (run / "checkpoints" / "step_000001").mkdir()
    assert not is_unstarted_train_run(run)  # it has a checkpoint (intact or not: resume decides)
    evaluation = create_run_dir(tmp_path, "eval", "eval")
    write_manifest(evaluation, "eval", config)
    assert not is_unstarted_train_run(evaluation)
    assert not is_unstarted_train_run(tmp_path)  # a folder of runs
    assert not is_unstarted_train_run(tmp_path / "missing")


# ---- images: stored once per run, by hash ----------------------------------------------------------------------


def _image_episode(url: str) -> Episode:
    """Two steps whose prompts both show the image (the second prompt repeats the first turn), as an agent's do."""
    first = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "What is shown?"}, {"type": "image_url", "image_url": {"url": url}}],
        }
    ]
    second = [*first, {"role": "assistant", "content": "a square"}, {"role": "user", "content": "Sure?"}]
    steps = [
        Step(chat_completions=first, observation={"type": "image_url", "image_url": {"url": url}}),
        Step(chat_completions=second, reward=1.0),
    ]
    return Episode(id="img:0", task={"id": "img"}, trajectories=[Trajectory(steps=steps)])


def test_an_episode_with_images_reads_back_equal_with_each_image_stored_once(tmp_path):
    from rllm.images import image_part

    pytest.importorskip("PIL")
    from PIL import Image

    url = image_part(Image.new("RGB", (6, 6), (9, 99, 199)))["image_url"]["url"]
    episode = _image_episode(url)
    log = RunLog(tmp_path)
    log.log_episodes(0, [episode], "eval")
    log.log_episodes(1, [episode], "train")
    (image,) = (tmp_path / "images").iterdir()  # three mentions a record, two records: one file
    line = (tmp_path / "episodes.jsonl").read_text().splitlines()[0]
    assert "data:image" not in line and line.count(f"rllm-image:{image.name}") == 3
    assert len(line) < len(json.dumps({"step": 0, "split": "eval", "episode": episode.model_dump(mode="json")}))
    assert read_episodes(tmp_path) == [episode, episode]
    assert [r["episode"] for r in read_episode_records(tmp_path / "episodes.jsonl", "train")] == [episode]
    image.unlink()
    with pytest.raises(ValueError, match=f"{image}"):
        read_episodes(tmp_path)


def test_a_text_only_episode_is_written_exactly_as_before(tmp_path):
    episode = _image_episode("https://example.com/cat.png")  # a remote image is a URL, not stored
    episode.trajectories[0].steps[1].info["note"] = "mentions data:image/png;base64,AAAA in passing"
    RunLog(tmp_path).log_episodes(3, [episode, _episode(1)], "val")
    before = [
        json.dumps({"step": 3, "split": "val", "episode": e.model_dump(mode="json")}) + "\n"
        for e in (episode, _episode(1))
    ]  # what runs.py wrote before images were stored
    assert (tmp_path / "episodes.jsonl").read_text() == "".join(before)
    assert not (tmp_path / "images").exists() and read_episodes(tmp_path) == [episode, _episode(1)]
