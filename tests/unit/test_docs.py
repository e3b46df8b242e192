"""The docs' examples must stay true: every ```python block in docs/ and README.md is run by a test here (found by
a marker it contains) or listed in ILLUSTRATIVE with the reason. The custom agent + env: it runs (with a scripted
model in place of the embedded one), fits the promised 30 lines, and passes the env checker. The others run too
(workflow, tool, openai agent, the "Add a task" file registered with its one registry line, the rLLM block)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rllm import check_env
from rllm.models.fake import FakeModel

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"

# The marker that picks each executed block, and the test that runs it.
RUN_BY_TESTS = {
    "class GuessEnv": "test_custom_agent_and_env_example_runs_and_solves_with_a_scripted_model",
    "AgentTrainer(agent_class=GuessAgent": "test_training_block_runs_from_the_public_api",
    "class DraftAndCheck": "test_workflow_example_runs_and_scores_both_roles",
    "@tool": "test_tool_example_derives_the_schema_from_signature_and_docstring",
    "@rllm.rollout": "test_openai_sdk_agent_example_runs",
    "agents.Runner.run": "test_agents_sdk_example_runs",
    'name="reverse"': "test_add_a_task_example_registers_generates_and_runs",
    '"reverse": "rllm.tasks.reverse",': "test_add_a_task_example_registers_generates_and_runs",
    "class Add(Tool)": "test_coming_from_rllm_block_runs_a_custom_rllm_tool_and_deepscalers_reward",
    'source="openai/gsm8k",          # the Hugging Face dataset': "test_the_catalog_page_shows_the_real_gsm8k_entry",
    "rllm.runtime.enable()  # or enable(": "test_the_speed_pages_opt_in_turns_every_tuning_on",
}
# Blocks no test runs, by a marker they contain, with the reason. Keep this short.
ILLUSTRATIVE: dict[str, str] = {}


def _pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


def _block(marker: str, page: Path | None = None) -> str:
    """The one ```python block holding `marker` (on `page`, else anywhere in the docs)."""
    assert marker in RUN_BY_TESTS, f"add {marker!r} to RUN_BY_TESTS"
    pages = [page] if page else _pages()
    found = [block for p in pages for block in _python_blocks(p) if marker in block]
    assert found, f"no ```python block holds {marker!r}"
    return found[0]


def _example(page: Path = GETTING_STARTED) -> str:
    return _block("class GuessEnv", page)


def test_every_python_block_is_run_by_a_test_or_listed_as_illustrative():
    markers = [*RUN_BY_TESTS, *ILLUSTRATIVE]
    unrun = [
        f"{page.relative_to(ROOT)}: {block.splitlines()[0]!r}"
        for page in _pages()
        for block in _python_blocks(page)
        if not any(marker in block for marker in markers)
    ]
    assert not unrun, f"run these blocks in tests/unit/test_docs.py or list them in ILLUSTRATIVE: {unrun}"


def test_readme_example_is_the_getting_started_one():
    assert _example(README) == _example(GETTING_STARTED)


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


@pytest.mark.parametrize("page", [README, GETTING_STARTED], ids=["README", "getting-started"])
def test_custom_agent_and_env_example_runs_and_solves_with_a_scripted_model(page, capsys):
    code = _example(page).replace("LocalModel.from_pretrained()", "SCRIPTED_MODEL")
    namespace = {"SCRIPTED_MODEL": FakeModel(_binary_search)}
    exec(compile(code, str(page), "exec"), namespace)
    episodes = namespace["episodes"]
    assert [ep.id for ep in episodes] == ["0:0", "1:0"]
    assert all(ep.is_correct and ep.termination_reason.value == "env_done" for ep in episodes)
    assert "('0:0', True, 'env_done')" in capsys.readouterr().out


def test_custom_env_passes_the_checker():
    namespace: dict = {}
    code = _example().split("engine =")[0]
    exec(compile(code, str(GETTING_STARTED), "exec"), namespace)
    report = check_env(namespace["GuessEnv"], {"secret": 3}, actions=[1, 5, 3])
    assert report.steps > 0


def test_workflow_example_runs_and_scores_both_roles(capsys):
    code = _block("class DraftAndCheck").replace("LocalModel.from_pretrained()", "MODEL")

    def script(messages, sampling=None) -> str:
        return "yes" if "Is '" in messages[0]["content"] else "4"

    namespace = {"MODEL": FakeModel(script)}
    exec(compile(code, "docs", "exec"), namespace)
    episodes = namespace["episodes"]
    assert [[t.name for t in ep.trajectories] for ep in episodes] == [["writer", "checker"]] * 2
    assert all(ep.is_correct and [t.reward for t in ep.trajectories] == [1.0, 1.0] for ep in episodes)
    printed = "{'role/writer/count': 2, 'role/writer/reward_mean': 1.0, 'role/writer/success_rate': 1.0}"
    assert printed in capsys.readouterr().out


def test_tool_example_derives_the_schema_from_signature_and_docstring():
    namespace: dict = {}
    exec(compile(_block("@tool"), "docs", "exec"), namespace)
    parameters = namespace["convert"].parameters
    assert parameters["required"] == ["value", "from_unit", "to_unit"]
    assert parameters["properties"]["value"] == {"type": "number", "description": "the amount"}


def test_training_block_runs_from_the_public_api(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """The "Train" block imports from `rllm` and trains the Guess pair; the test only shrinks the run (tiny model,
    one step) by adding overrides to the block's own `load_config` call."""
    import rllm.config
    from rllm.runs import load_metrics

    code = _block("AgentTrainer(agent_class=GuessAgent")
    assert "from rllm import AgentTrainer, load_config" in code
    real = rllm.config.load_config
    shrink = [
        f"model.name={tiny_model_dir}",
        "trainer.total_steps=1",
        "rollout.max_tokens=4",
        "rollout.max_steps=2",
        "trainer.tensorboard=false",
        f"trainer.run_dir={tmp_path}",
    ]
    monkeypatch.setattr(rllm.config, "load_config", lambda path, overrides: real(path, [*overrides, *shrink]))
    namespace: dict = {}
    exec(compile(_example().split("engine =")[0] + code, "docs", "exec"), namespace)
    run_dir = namespace["result"]["run_dir"]
    assert run_dir in capsys.readouterr().out
    steps = [m for m in load_metrics(run_dir) if "reward_mean" in m]
    assert (
        len(steps) == 1 and steps[0]["skipped_update"] == 0 and steps[0]["role/agent/count"] == 8 * 4
    )  # trainer.tasks_per_step x rollout.n


def test_openai_sdk_agent_example_runs(capsys):
    """The `@rllm.rollout` example: an openai-SDK agent through the gateway, with a scripted model."""
    code = _block("@rllm.rollout")
    exec(compile(code, "docs", "exec"), {"__name__": "readme_rollout"})
    assert capsys.readouterr().out.splitlines()[-1] == "1.0 2 0"


def test_agents_sdk_example_runs(capsys):
    """The OpenAI Agents SDK example: a Responses-API agent with a tool through the gateway, scripted model."""
    pytest.importorskip("agents")
    code = _block("agents.Runner.run")
    exec(compile(code, "docs", "exec"), {"__name__": "docs_agents_sdk"})
    assert capsys.readouterr().out.splitlines()[-1] == "1.0 2 0"


def test_add_a_task_example_registers_generates_and_runs(tmp_path, monkeypatch):
    """The "Add a task" file, registered with its one registry line, is found by get_task and the config, makes
    rows deterministically and runs in its default workflow (single_turn) with a scripted model."""
    import rllm
    from rllm.config import load_config
    from rllm.tasks import REGISTRY, get_task
    from rllm.workflows.resolve import resolve_workflow

    (tmp_path / "readme_reverse.py").write_text(_block('name="reverse"'), encoding="utf-8")
    registry_line = _block('"reverse": "rllm.tasks.reverse",')
    assert registry_line.strip() == '"reverse": "rllm.tasks.reverse",'
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(REGISTRY, "reverse", "readme_reverse")  # the registry line, pointing at the page's file

    task = get_task("reverse")
    assert task.name == "reverse" and load_config(None, ["data.task=reverse"]).data.task == "reverse"
    rows = task.make_tasks(4, seed=1)
    assert rows == task.make_tasks(4, seed=1) and len({row["id"] for row in rows}) == 4

    def reverse_the_word(messages, sampling=None) -> str:
        word = messages[-1]["content"].split()[3]  # "Write the word <word> backwards. ..."
        return f"{word[::-1]}." if word != rows[-1]["word"] else word  # the last task answered wrong

    workflow_class, workflow_args = resolve_workflow(task)
    engine = rllm.AgentWorkflowEngine(
        workflow_class=workflow_class, workflow_args=workflow_args, model=FakeModel(reverse_the_word)
    )
    episodes = engine.execute_tasks(rows)
    expected = [row["word"] != rows[-1]["word"] for row in rows]
    assert [ep.is_correct for ep in episodes] == expected and expected[0]


def test_coming_from_rllm_block_runs_a_custom_rllm_tool_and_deepscalers_reward(capsys):
    code = _block("class Add(Tool)")
    exec(compile(code, "docs", "exec"), {})
    assert capsys.readouterr().out.split("\n")[:2] == ["5", "1.0 True"]


def test_readme_is_short_and_its_links_reach_files_in_the_repository():
    """mkdocs checks the links between docs pages; the README is outside the site, so its links are checked here."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert targets and not missing, missing


def _nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        for value in entry.values():
            pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


@pytest.mark.parametrize(
    ("page", "section", "prefix"),
    [(README, "## Documentation", "docs/"), (ROOT / "docs" / "index.md", "", "")],
    ids=["README", "docs-index"],
)
def test_the_page_lists_are_the_mkdocs_nav(page, section, prefix):
    """README's Documentation list and the site's home page link exactly the pages of mkdocs.yml's nav: a page added,
    renamed or removed there fails here until both lists say so."""
    nav = [name for name in _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]) if name != "index.md"]
    text = page.read_text(encoding="utf-8")
    text = text.split(section, 1)[1].split("\n## ", 1)[0] if section else text
    linked = set(re.findall(rf"\]\({prefix}([\w/-]+\.md)(?:#[^)]*)?\)", text))
    assert sorted(set(nav) - linked) == [] and sorted(linked - set(nav)) == []


def test_the_catalog_page_shows_the_real_gsm8k_entry():
    from dataclasses import fields

    from rllm.tasks.catalog import CATALOG
    from rllm.tasks.catalog.entries import BOXED
    from rllm.tasks.catalog.entry import Benchmark

    block = _block('source="openai/gsm8k",          # the Hugging Face dataset', ROOT / "docs" / "catalog.md")
    shown = eval(block, {"Benchmark": Benchmark, "BOXED": BOXED})  # the block is one expression
    real = CATALOG["gsm8k"]
    assert {f.name: getattr(shown, f.name) for f in fields(Benchmark) if f.name != "homepage"} == {
        f.name: getattr(real, f.name) for f in fields(Benchmark) if f.name != "homepage"
    }


def test_the_speed_pages_opt_in_turns_every_tuning_on():
    """docs/training/speed.md's one call a library user makes to get the tuning the rllm commands run with."""
    from rllm import runtime

    assert runtime.options() == runtime.OFF
    exec(_block("rllm.runtime.enable()  # or enable(", ROOT / "docs" / "training" / "speed.md"), {})
    assert runtime.options() == runtime.RuntimeOptions()
