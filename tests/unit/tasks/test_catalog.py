"""The benchmark catalog's machinery (rllm.tasks.catalog): names, local copies, pull, bad data, the judge, and an
evaluation through the real loop (a scripted model speaking the real tokenizer's ids)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rllm.config import load_config
from rllm.errors import InfraError
from rllm.models.fake import FakeModel
from rllm.rewards.base import RewardError
from rllm.tasks import UnknownTaskError, get_task
from rllm.tasks.catalog import CATALOG, UnknownBenchmarkError, get_benchmark, loading
from rllm.tasks.catalog.judge import judge_reward, parse_verdict
from rllm.tasks.catalog.loading import BenchmarkDataError, load_source_rows, pull
from rllm.tasks.catalog.task import catalog_prompt, load_tasks
from rllm.testing import FakeReply, run_fake_server

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "catalog"
GSM8K = FIXTURES / "openai" / "gsm8k"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("RLLM_DATA", raising=False)


def _copy_gsm8k(tmp_path: Path) -> Path:
    shutil.copytree(GSM8K, tmp_path / "openai" / "gsm8k")
    return tmp_path / "openai" / "gsm8k" / "main" / "test-00000-of-00001.jsonl"


def test_names_resolve_to_tasks_and_a_wrong_name_gets_one_line_with_the_closest():
    assert len(CATALOG) >= 40
    assert get_task("gsm8k").name == "gsm8k" and get_task("gsm8k").default_workflow == "single_turn"
    with pytest.raises(UnknownBenchmarkError, match=r"unknown benchmark 'gsm8kk'; did you mean gsm8k\?"):
        get_benchmark("gsm8kk")
    with pytest.raises(UnknownTaskError, match=r"did you mean gsm8k\?"):
        get_task("gsm8kk")
    with pytest.raises(UnknownTaskError, match="unknown environment hub 'reasoning_gim'.*did you mean reasoning_gym"):
        get_task("reasoning_gim:leg_counting")
    config = load_config(None, ["data.task=gsm8k", f"data.data_dir={FIXTURES}", "data.val_size=2"])
    assert [r["data_source"] for r in config.data.make_tasks("val")] == ["gsm8k", "gsm8k"]
    with pytest.raises(Exception, match="data.data_dir is set but task 'arithmetic' reads no data files"):
        load_config(None, ["data.task=arithmetic", f"data.data_dir={FIXTURES}"]).data.make_tasks("val")


def test_local_copies_are_found_by_source_or_name_or_file_and_rllm_data(tmp_path, monkeypatch):
    bench = get_benchmark("gsm8k")
    by_source = load_source_rows(bench, "val", FIXTURES)
    assert len(by_source) == 3 and set(by_source[0]) == {"question", "answer", "_config"}
    shutil.copytree(GSM8K, tmp_path / "named" / "gsm8k")
    assert load_source_rows(bench, "val", tmp_path / "named") == by_source
    (tmp_path / "file").mkdir()
    rows = [{k: r[k] for k in ("question", "answer")} for r in by_source]
    (tmp_path / "file" / "gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["answer"] for r in load_source_rows(bench, "train", tmp_path / "file")] == [r["answer"] for r in rows]
    monkeypatch.setenv("RLLM_DATA", str(FIXTURES))
    assert load_source_rows(bench, "train", None)[0]["question"].startswith("Tom has 3 boxes")
    with pytest.raises(BenchmarkDataError, match=r"no local copy under .*rllm datasets pull gsm8k --data-dir"):
        load_source_rows(bench, "val", tmp_path / "empty")


def test_without_network_or_copy_the_error_says_how_to_pull():
    with pytest.raises(
        BenchmarkDataError, match=r"cannot read openai/gsm8k from the Hugging Face hub .*--data-dir DIR"
    ):
        load_source_rows(get_benchmark("gsm8k"), "val")


def test_an_edited_copy_is_read_again_not_served_from_the_cache(tmp_path):
    test_file = _copy_gsm8k(tmp_path)
    assert len(load_source_rows(get_benchmark("gsm8k"), "val", tmp_path)) == 3
    test_file.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "1 + 1 = 2\n#### 2"}) + "\n")
    assert [r["question"] for r in load_source_rows(get_benchmark("gsm8k"), "val", tmp_path)] == ["What is 1 + 1?"]


def test_pull_writes_a_folder_that_loads_back_with_the_same_configs_and_splits(tmp_path, monkeypatch):
    real_load = loading._load
    monkeypatch.setattr(loading, "_load", lambda bench, copy, config, split: real_load(bench, GSM8K, config, split))
    target = pull(get_benchmark("gsm8k"), tmp_path)  # "the hub" is the fixture here
    monkeypatch.setattr(loading, "_load", real_load)
    assert target == tmp_path / "openai" / "gsm8k" and (target / "main" / "test-00000-of-00001.parquet").is_file()
    for split in ("train", "val"):
        pulled = load_source_rows(get_benchmark("gsm8k"), split, tmp_path)
        assert pulled == load_source_rows(get_benchmark("gsm8k"), split, FIXTURES)


def test_bad_rows_are_named_and_kept_as_failing_tasks_while_the_others_run(tmp_path, caplog):
    test_file = _copy_gsm8k(tmp_path)
    rows = [json.loads(line) for line in test_file.read_text().splitlines()]
    rows[0]["answer"] = "no marker here"  # the converter cannot find the answer
    rows[1]["question"] = "x" * 3_000_000  # larger than any context
    lines = [json.dumps(r) for r in rows]
    test_file.write_bytes(("\n".join(lines) + "\n").encode() + b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    tasks = load_tasks(get_benchmark("gsm8k"), "val", str(tmp_path))
    reasons = [t.get("invalid") for t in tasks]
    assert reasons[0] == (
        "gsm8k row 0 (config main): field 'answer' has no '#### <number>' line, which every GSM8K solution ends with"
    )
    assert "gsm8k row 1 (config main) makes a prompt of 3.0M characters" in reasons[1] and "drop the row" in reasons[1]
    assert reasons[2] is None
    assert "row 3 of" in reasons[3] and "is not UTF-8" in reasons[3] and "re-encode it as UTF-8" in reasons[3]
    with pytest.raises(BenchmarkDataError, match="field 'answer' has no"):
        catalog_prompt(tasks[0])  # its episode fails before the model is called, with that line
    assert "3 of 4 rows are unusable" in caplog.text


def test_a_row_missing_a_mapped_field_or_of_the_wrong_type_is_named(tmp_path):
    test_file = _copy_gsm8k(tmp_path)
    test_file.write_text(
        json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}) + "\n" + json.dumps({"answer": "#### 5"}) + "\n"
    )
    tasks = load_tasks(get_benchmark("gsm8k"), "val", str(tmp_path))
    assert "invalid" not in tasks[0]
    assert (
        tasks[1]["invalid"] == "gsm8k row 1 (config main): field 'question' is missing, the math verifier needs str; "
        "fix the row or the data file"
    )


def test_a_split_of_only_bad_rows_stops_with_the_first_reason(tmp_path):
    test_file = _copy_gsm8k(tmp_path)
    test_file.write_text(json.dumps({"question": "Q?", "answer": "no marker"}) + "\n")
    with pytest.raises(BenchmarkDataError, match="every row of gsm8k is unusable; the first: gsm8k row 0"):
        load_tasks(get_benchmark("gsm8k"), "val", str(tmp_path))


def test_eval_through_the_real_loop_scores_references_1_and_ends_a_bad_row_as_an_error(
    tmp_path, smollm2_tokenizer, monkeypatch
):
    from rllm.evaluation import evaluate

    test_file = _copy_gsm8k(tmp_path / "data")
    rows = [json.loads(line) for line in test_file.read_text().splitlines()]
    rows[2]["answer"] = "no marker"
    test_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    references = {
        t["question"]: t["reference"]
        for t in load_tasks(get_benchmark("gsm8k"), "val", str(tmp_path / "data"))
        if "reference" in t
    }

    def reply(prompt, sampling):
        text = smollm2_tokenizer.decode(prompt)
        return next(ref for question, ref in references.items() if question in text)

    monkeypatch.setattr(
        "rllm.evaluation.make_eval_model", lambda config, run_dir: FakeModel(reply, tokenizer=smollm2_tokenizer)
    )
    config = load_config(
        None,
        [
            "data.task=gsm8k",
            f"data.data_dir={tmp_path / 'data'}",
            "data.val_size=3",
            f"trainer.run_dir={tmp_path / 'runs'}",
            "rollout.max_tokens=128",
        ],
    )
    summary, run_dir = evaluate(config)
    assert summary["episodes"] == 3 and summary["success_rate"] == pytest.approx(2 / 3)
    assert summary["termination/error"] == pytest.approx(1 / 3)
    episodes = [json.loads(line)["episode"] for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    failed = [e for e in episodes if e["termination_reason"] == "error"]
    assert len(failed) == 1 and "field 'answer' has no '#### <number>' line" in json.dumps(failed[0])


def test_the_judge_asks_an_openai_compatible_endpoint_and_refuses_what_it_cannot_read(monkeypatch):
    task = {"id": "q1", "question": "Who wrote Hamlet?", "answer": "William Shakespeare"}
    assert parse_verdict("The answer names him.\nCORRECT") is True and parse_verdict("INCORRECT") is False
    assert parse_verdict("no idea") is None
    with run_fake_server() as server:
        args = {"base_url": server.base_url, "model": server.model}
        server.queue_replies(FakeReply("Same person.\nCORRECT"), FakeReply("A different author.\nINCORRECT"))
        assert judge_reward(task, "It was Shakespeare.", **args).correct
        assert judge_reward(task, "Marlowe.", **args).reward == 0.0
        prompt = server.requests[-1][1]["messages"][0]["content"]
        assert "William Shakespeare" in prompt and "Marlowe." in prompt and "Who wrote Hamlet?" in prompt
        server.queue_replies(FakeReply("Hard to say."))
        with pytest.raises(RewardError, match="gave no CORRECT/INCORRECT verdict"):
            judge_reward(task, "Bacon.", **args)
        monkeypatch.setenv("RLLM_JUDGE_BASE_URL", server.base_url)
        monkeypatch.setenv("RLLM_JUDGE_MODEL", server.model)
        server.queue_replies(FakeReply("CORRECT"))
        assert judge_reward(task, "Shakespeare").correct  # the endpoint from the environment
    with pytest.raises(InfraError, match="did not answer"):
        judge_reward(task, "Shakespeare", base_url="http://127.0.0.1:9/v1", model="judge", timeout_s=2)
    monkeypatch.delenv("RLLM_JUDGE_BASE_URL")
    with pytest.raises(RewardError, match="needs an OpenAI-compatible endpoint: set data.reward_args.base_url"):
        judge_reward(task, "Shakespeare")


def test_the_cli_lists_shows_and_refuses_in_one_line(capsys):
    from rllm.cli.main import main

    assert main(["datasets", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{len(CATALOG)} benchmarks" in out and "openai/gsm8k" in out
    assert main(["datasets", "list", "--category", "math"]) == 0
    assert "mmlu" not in capsys.readouterr().out.split("benchmarks")[0]
    assert main(["datasets", "show", "gsm8k"]) == 0
    shown = capsys.readouterr().out
    assert "source      openai/gsm8k" in shown and "Put your final answer within \\boxed{}." in shown
    assert main(["datasets", "show", "gsm8kk"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "error: unknown benchmark 'gsm8kk'; did you mean gsm8k? (`rllm datasets list` shows them all)"
    )


def test_the_docs_page_lists_every_entry_as_the_cli_does(capsys):
    from rllm.cli.main import main

    assert main(["datasets", "list", "--markdown"]) == 0
    table = capsys.readouterr().out.strip()
    page = (Path(__file__).resolve().parents[3] / "docs" / "catalog.md").read_text()
    shown = page.split("<!-- catalog:start -->\n")[1].split("\n<!-- catalog:end -->")[0]
    assert shown == table, "docs/catalog.md is out of date: paste `rllm datasets list --markdown` between its markers"
    assert all(f"| `rllm eval {name}` |" in shown for name in CATALOG)


def test_a_verifier_that_hangs_or_raises_ends_the_row_as_a_named_reward_error(monkeypatch):
    import time

    from rllm.tasks.catalog import task as catalog_task

    row = load_tasks(get_benchmark("gsm8k"), "val", str(FIXTURES))[0]
    reward_fn = get_task("gsm8k").reward_fn
    monkeypatch.setattr(catalog_task, "verifier_fn", lambda name: lambda task, response: time.sleep(30))
    started = time.monotonic()
    with pytest.raises(
        RewardError, match=rf"the math verifier of gsm8k did not return within 0.5 s on row {row['id']}"
    ):
        reward_fn(row, "\\boxed{1}", verifier_timeout_s=0.5)
    assert time.monotonic() - started < 5

    def broken(task, response):
        return {}["missing"]

    monkeypatch.setattr(catalog_task, "verifier_fn", lambda name: broken)
    with pytest.raises(RewardError, match=rf"the math verifier of gsm8k raised KeyError on row {row['id']}: 'missing'"):
        reward_fn(row, "\\boxed{1}")
