"""The README's examples must stay true. The custom agent + env: it runs (with a scripted model in place of the
embedded one), fits the promised 30 lines, and passes the env checker. The others run too (workflow, tool, openai
agent, and the "Add a task" file registered with its one registry line)."""

from __future__ import annotations

import re
from pathlib import Path

from rllm import check_env
from rllm.models.fake import FakeModel

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    return next(b for b in blocks if "class GuessEnv" in b)


def _binary_search(messages, sampling=None) -> str:
    low, high, guess = 1, 10, None
    for message in messages:
        if message["role"] == "assistant":
            guess = int(message["content"])
        elif message["role"] == "user" and guess is not None:
            low, high = (guess + 1, high) if message["content"].startswith("Higher") else (low, guess - 1)
    return str((low + high) // 2)


def test_custom_agent_and_env_fit_in_30_lines():
    lines = _example().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("class GuessEnv"))
    end = next(i for i, line in enumerate(lines) if line.startswith("engine ="))
    pair = [line for line in lines[start:end] if line.strip()]
    assert len(pair) <= 30, len(pair)


def test_readme_example_runs_and_solves_with_a_scripted_model(capsys):
    code = _example().replace("LocalModel.from_pretrained()", "SCRIPTED_MODEL")
    namespace = {"SCRIPTED_MODEL": FakeModel(_binary_search)}
    exec(compile(code, str(README), "exec"), namespace)
    episodes = namespace["episodes"]
    assert [ep.id for ep in episodes] == ["0:0", "1:0"]
    assert all(ep.is_correct and ep.termination_reason.value == "env_done" for ep in episodes)
    assert "('0:0', True, 'env_done')" in capsys.readouterr().out


def test_readme_env_passes_the_checker():
    namespace: dict = {}
    code = _example().split("engine =")[0]
    exec(compile(code, str(README), "exec"), namespace)
    report = check_env(namespace["GuessEnv"], {"secret": 3}, actions=[1, 5, 3])
    assert report.steps > 0


def test_readme_workflow_example_runs_and_scores_both_roles(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    code = next(b for b in blocks if "class DraftAndCheck" in b).replace("LocalModel.from_pretrained()", "MODEL")

    def script(messages, sampling=None) -> str:
        return "yes" if "Is '" in messages[0]["content"] else "4"

    namespace = {"MODEL": FakeModel(script)}
    exec(compile(code, str(README), "exec"), namespace)
    episodes = namespace["episodes"]
    assert [[t.name for t in ep.trajectories] for ep in episodes] == [["writer", "checker"]] * 2
    assert all(ep.is_correct and [t.reward for t in ep.trajectories] == [1.0, 1.0] for ep in episodes)
    printed = "{'role/writer/count': 2, 'role/writer/reward_mean': 1.0, 'role/writer/success_rate': 1.0}"
    assert printed in capsys.readouterr().out


def test_readme_tool_example_derives_the_schema_from_signature_and_docstring():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    namespace: dict = {}
    exec(compile(next(b for b in blocks if "@tool" in b), str(README), "exec"), namespace)
    parameters = namespace["convert"].parameters
    assert parameters["required"] == ["value", "from_unit", "to_unit"]
    assert parameters["properties"]["value"] == {"type": "number", "description": "the amount"}


def test_readme_training_block_runs_from_the_public_api(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """The "Train" block imports from `rllm` and trains the Guess pair; the test only shrinks the run (tiny model,
    one step) by adding overrides to the block's own `load_config` call."""
    import rllm.config
    from rllm.runs import load_metrics

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    code = next(b for b in blocks if "AgentTrainer(agent_class=GuessAgent" in b)
    assert "from rllm import AgentTrainer, load_config" in code
    real = rllm.config.load_config
    shrink = [f"model.name={tiny_model_dir}", "trainer.total_steps=1", "rollout.max_tokens=4", "rollout.max_steps=2",
              "trainer.tensorboard=false", f"trainer.run_dir={tmp_path}"]  # fmt: skip
    monkeypatch.setattr(rllm.config, "load_config", lambda path, overrides: real(path, [*overrides, *shrink]))
    namespace: dict = {}
    exec(compile(_example().split("engine =")[0] + code, str(README), "exec"), namespace)
    run_dir = namespace["result"]["run_dir"]
    assert run_dir in capsys.readouterr().out
    steps = [m for m in load_metrics(run_dir) if "reward_mean" in m]
    assert (
        len(steps) == 1 and steps[0]["skipped_update"] == 0 and steps[0]["role/agent/count"] == 8 * 4
    )  # trainer.tasks_per_step x rollout.n


def test_readme_openai_sdk_agent_example_runs(capsys):
    """The `@rllm.rollout` example: an openai-SDK agent through the gateway, with a scripted model."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    code = next(b for b in blocks if "@rllm.rollout" in b)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_rollout"})
    assert capsys.readouterr().out.splitlines()[-1] == "1.0 2 0"


def test_readme_add_a_task_example_registers_generates_and_runs(tmp_path, monkeypatch):
    """The "Add a task" file, registered with its one registry line, is found by get_task and the config, makes
    rows deterministically and runs in its default workflow (single_turn) with a scripted model."""
    import rllm
    from rllm.config import load_config
    from rllm.tasks import REGISTRY, get_task
    from rllm.workflows.resolve import resolve_workflow

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    (tmp_path / "readme_reverse.py").write_text(next(b for b in blocks if 'name="reverse"' in b), encoding="utf-8")
    registry_line = next(b for b in blocks if b.strip().startswith('"reverse":'))
    assert registry_line.strip() == '"reverse": "rllm.tasks.reverse",'
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(REGISTRY, "reverse", "readme_reverse")  # the registry line, pointing at the README's file

    task = get_task("reverse")
    assert task.name == "reverse" and load_config(None, ["data.task=reverse"]).data.task == "reverse"
    rows = task.make_tasks(4, seed=1)
    assert rows == task.make_tasks(4, seed=1) and len({row["id"] for row in rows}) == 4

    def reverse_the_word(messages, sampling=None) -> str:
        word = messages[-1]["content"].split()[3]  # "Write the word <word> backwards. ..."
        return f"{word[::-1]}." if word != rows[-1]["word"] else word  # the last task answered wrong

    workflow_class, workflow_args = resolve_workflow(task)
    engine = rllm.AgentWorkflowEngine(workflow_class=workflow_class, workflow_args=workflow_args,
                                      model=FakeModel(reverse_the_word))  # fmt: skip
    episodes = engine.execute_tasks(rows)
    expected = [row["word"] != rows[-1]["word"] for row in rows]
    assert [ep.is_correct for ep in episodes] == expected and expected[0]


def test_readme_coming_from_rllm_block_runs_a_custom_rllm_tool_and_deepscalers_reward(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    code = next(b for b in blocks if "class Add(Tool)" in b)
    exec(compile(code, str(README), "exec"), {})
    assert capsys.readouterr().out.split("\n")[:2] == ["5", "1.0 True"]
