"""One thread computes in a synchronous CPU training run (`rllm.cpus`' docstring: libgomp's teams wait to wake once
a process holds more of them than cores): the update runs on the rollout LocalModel's worker, the model loads in a
thread that exits, so the main thread starts no OpenMP team. The speed is benchmarks/grpo_vs_trl.py's."""

from __future__ import annotations

import threading

from rllm.config import load_config
from rllm.training import step as step_module
from rllm.training.trainer import AgentTrainer


def test_a_synchronous_update_runs_on_the_rollout_worker_and_the_model_loads_in_a_passing_thread(
    tmp_path, tiny_model_dir, monkeypatch
):
    from transformers import AutoModelForCausalLM

    threads: dict[str, list[threading.Thread]] = {"update": [], "load": []}
    update_policy, from_pretrained = step_module.update_policy, AutoModelForCausalLM.from_pretrained

    def recorded_update(*args, **kwargs):
        threads["update"].append(threading.current_thread())
        return update_policy(*args, **kwargs)

    def recorded_load(*args, **kwargs):
        threads["load"].append(threading.current_thread())
        return from_pretrained(*args, **kwargs)

    monkeypatch.setattr(step_module, "update_policy", recorded_update)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", recorded_load)
    overrides = [f"model.name={tiny_model_dir}", "data.task=arithmetic", "data.train_size=4", "data.val_size=0"]
    overrides += ["rollout.n=2", "rollout.max_tokens=2", "trainer.tasks_per_step=2", "trainer.total_steps=2"]
    overrides += ["trainer.tensorboard=false", "trainer.save_every=0", f"trainer.run_dir={tmp_path}"]
    trainer = AgentTrainer(config=load_config(None, overrides), progress=False)
    trainer.train()
    assert [thread.name for thread in threads["update"]] == ["rllm-local-model"] * 2
    assert threads["load"] and all(
        thread is not threading.main_thread() and not thread.is_alive() for thread in threads["load"]
    )
