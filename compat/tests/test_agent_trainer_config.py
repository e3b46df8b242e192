"""rLLM v0.2's AgentTrainer config: the shipped Hydra yaml, the rLLM/verl key -> TrainConfig table
(rllm.trainer.translate), its errors, no-ops and warnings, and the constructor's semantics."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("hydra", reason="pip install rllm[compat]")

from rllm.config import ConfigError
from rllm.trainer.agent_trainer import AgentTrainer, compose_config
from rllm.trainer.translate import TABLE, _flatten, default_config, no_op_entry, translate

A = "actor_rollout_ref"
ROWS = [{"seed": s, "size": 3, "p": 0.8, "index": s, "uid": f"{s}_3_0.8"} for s in range(8)]


def translated(*overrides: str, workflow: bool = False, train_size: int = 8):
    return translate(
        compose_config(["data.train_batch_size=2", f"{A}.rollout.n=2", *overrides]),
        workflow=workflow,
        train_size=train_size,
    )


def test_every_key_of_the_shipped_yaml_is_in_the_table_or_a_no_op():
    free = ("rllm.agent.agent_args", "rllm.env.env_args", "rllm.agent.engine_args", "rllm.workflow.workflow_args")
    for key in _flatten(default_config()):
        known = key in TABLE or any(key.startswith(f + ".") or key == f for f in free)
        assert known or no_op_entry(key) is not None, key


def test_hydra_composes_the_yaml_as_rllm_scripts_do():
    from hydra import compose, initialize_config_module

    with initialize_config_module("rllm.trainer.config", version_base=None):
        cfg = compose(
            "agent_ppo_trainer",
            overrides=[
                "+rllm.env.env_args.max_steps=8",
                "data.train_batch_size=4",
                "rllm.rejection_sample.multiplier=2",
            ],
        )
        with pytest.raises(
            Exception, match="Could not override 'rllm.rllm.agent.trajectory_timeout'"
        ):  # a typo from upstream's swe script fails as in rLLM
            compose("agent_ppo_trainer", overrides=["rllm.rllm.agent.trajectory_timeout=10"])
        with pytest.raises(Exception, match="An item is already at"):  # the dict-valued keys are {} so `+` works, once
            compose("agent_ppo_trainer", overrides=["+rllm.workflow.workflow_args.gamma=1"])
    assert cfg.rllm.env.env_args.max_steps == 8 and cfg.data.gen_batch_size == 8  # the mul resolver


@pytest.mark.parametrize(
    ("override", "ours", "expected"),
    [
        (f"{A}.model.path=/models/m", "model.name", "/models/m"),
        ("data.train_batch_size=4", "trainer.tasks_per_step", 4),
        ("data.max_prompt_length=100", "rollout.max_prompt_length", 100),
        ("data.max_response_length=300", "rollout.max_response_length", 300),
        ("data.max_response_length=300", "rollout.max_tokens", 300),
        (f"{A}.rollout.n=8", "rollout.n", 8),
        (f"{A}.rollout.temperature=0.7", "rollout.temperature", 0.7),
        (f"{A}.rollout.top_p=0.95", "rollout.top_p", 0.95),
        (f"{A}.rollout.top_k=-1", "rollout.top_k", 0),
        (f"{A}.rollout.top_k=20", "rollout.top_k", 20),
        (f"{A}.rollout.val_kwargs.n=4", "rollout.val_n", 4),
        (f"{A}.rollout.val_kwargs.temperature=0.6", "rollout.val_temperature", 0.6),
        (f"{A}.rollout.val_kwargs.do_sample=False", "rollout.val_temperature", 0.0),
        ("algorithm.adv_estimator=grpo", "algorithm.advantage", "grpo"),
        ("algorithm.adv_estimator=reinforce_plus_plus", "algorithm.advantage", "reinforce_pp"),
        ("algorithm.adv_estimator=rloo", "algorithm.advantage", "rloo"),
        ("algorithm.norm_adv_by_std_in_grpo=false", "algorithm.norm_by_std", False),
        ("algorithm.gamma=0.9", "algorithm.gamma", 0.9),
        ("algorithm.lam=0.95", "algorithm.lam", 0.95),
        (f"{A}.actor.use_kl_loss=True", "algorithm.kl_coef", 0.001),
        (f"{A}.actor.kl_loss_coef=0.5", "algorithm.kl_coef", 0.0),  # without use_kl_loss: no KL
        (f"{A}.actor.kl_loss_type=mse", "algorithm.kl_kind", "k2"),
        (f"{A}.actor.optim.lr=3e-5", "optim.lr", 3e-5),
        (f"{A}.actor.optim.weight_decay=0.1", "optim.weight_decay", 0.1),
        (f"{A}.actor.optim.lr_warmup_steps=2", "optim.warmup_steps", 2),
        (f"{A}.actor.optim.warmup_style=cosine", "optim.schedule", "cosine"),
        (f"{A}.actor.clip_ratio_low=0.1", "algorithm.clip_low", 0.1),
        (f"{A}.actor.clip_ratio_high=0.28", "algorithm.clip_high", 0.28),
        (f"{A}.actor.clip_ratio=0.3", "algorithm.clip_high", 0.3),
        (f"{A}.actor.clip_ratio_c=5.0", "algorithm.dual_clip", 5.0),
        (f"{A}.actor.loss_agg_mode=seq-mean-token-sum", "algorithm.loss_agg", "seq-mean-token-sum"),
        (f"{A}.actor.entropy_coeff=0.01", "algorithm.entropy_coef", 0.01),
        (f"{A}.actor.ppo_epochs=2", "algorithm.ppo_epochs", 2),
        (f"{A}.actor.ppo_mini_batch_size=1", "algorithm.mini_batches", 2),
        (f"{A}.actor.ppo_micro_batch_size_per_gpu=3", "optim.micro_batch_size", 3),
        (f"{A}.actor.grad_clip=0.5", "optim.grad_clip", 0.5),
        (f"{A}.model.lora_rank=0", "model.lora.enabled", False),
        (f"{A}.model.lora_rank=32", "model.lora.rank", 32),
        (f"{A}.model.lora_rank=8", "model.lora.alpha", 16.0),  # verl's default alpha
        (f"{A}.model.enable_gradient_checkpointing=False", "model.gradient_checkpointing", False),
        ("trainer.total_epochs=3", "trainer.total_steps", 12),  # 3 epochs x (8 rows // 2 per step)
        ("trainer.total_training_steps=5", "trainer.total_steps", 5),
        ("trainer.test_freq=-1", "trainer.val_every", 0),
        ("trainer.test_freq=10", "trainer.val_every", 10),
        ("trainer.save_freq=40", "trainer.save_every", 40),
        ("trainer.default_local_dir=/tmp/x/run1", "trainer.name", "run1"),
        ("rllm.agent.max_steps=10", "rollout.max_steps", 10),
        ("rllm.agent.trajectory_timeout=60", "rollout.episode_timeout", 60.0),
        ("rllm.mask_truncated_samples=True", "algorithm.filter_overlong", True),
        ("rllm.agent.overlong_filter=True", "algorithm.filter_overlong", True),
        ("+rllm.agent.engine_args.n_parallel_agents=3", "rollout.n_parallel", 3),
        ("+rllm.agent.engine_args.retry_limit=5", "rollout.retry_limit", 4),
        ("rllm.rejection_sample.enable=True", "algorithm.drop_uniform_groups", True),
        ("rllm.stepwise_advantage.mode=per_step", "algorithm.stepwise", False),  # not enabled
    ],
)
def test_each_mapped_key(override, ours, expected):
    config = translated(override).train_config().model_dump()
    value = config
    for part in ours.split("."):
        value = value[part]
    assert value == pytest.approx(expected) if isinstance(expected, float) else value == expected


def test_defaults_are_verl_s_and_rllm_s():
    config = translated().train_config()
    assert config.algorithm.advantage == "gae" and config.optim.lr == 1e-6 and config.optim.weight_decay == 0.01
    assert not config.model.lora.enabled and config.model.gradient_checkpointing and config.algorithm.dual_clip == 3
    assert config.rollout.max_steps == 20 and config.rollout.n_parallel == 4  # train_batch_size x n, as rLLM
    assert config.trainer.total_steps == 30 * 4 and config.trainer.run_dir == "checkpoints/verl_examples"
    assert config.trainer.name.startswith("gsm8k-")


def test_workflow_keys():
    t = translated("rllm.workflow.n_parallel_tasks=7", "rllm.workflow.retry_limit=1", workflow=True)
    config = t.train_config()
    assert config.rollout.n_parallel == 7 and config.rollout.retry_limit == 0
    assert t.workflow_args == {
        "agent_args": {},
        "env_args": {},
        "timeout": 1e6,
        "gamma": 0.0,
        "reward_bonus_coeff": 0.0,
    }


def test_stepwise_per_step_and_kl():
    config = translated(
        "rllm.stepwise_advantage.enable=True",
        "rllm.stepwise_advantage.mode=per_step",
        f"{A}.actor.use_kl_loss=True",
        f"{A}.actor.kl_loss_coef=0.05",
    ).train_config()
    assert config.algorithm.stepwise and config.algorithm.kl_coef == 0.05 and config.algorithm.kl_kind == "k3"


def test_what_rllm_cannot_honour_is_one_error_naming_every_key_and_the_nearest_option():
    bad = [
        "algorithm.adv_estimator=opo",
        "algorithm.use_kl_in_reward=True",
        "rllm.stepwise_advantage.enable=True",
        "rllm.compact_filtering.enable=True",
        "rllm.disable_thinking=True",
        "trainer.critic_warmup=2",
        f"{A}.actor.strategy=megatron",
        f"{A}.actor.use_kl_loss=True",
        f"{A}.actor.kl_loss_type=abs",
        "+rllm.agent.engine_args.chat_parser=x",
        "+algorithm.clip_advantages=5",
        "rllm.stepwise_advantage.normalize_by_steps=True",
        f"{A}.actor.optim.min_lr_ratio=0.1",
    ]
    with pytest.raises(ConfigError) as info:
        translated(*bad)
    message = str(info.value)
    for key, nearest in [
        ("algorithm.adv_estimator=opo", "grpo"),
        ("use_kl_in_reward", "use_kl_loss"),
        ("stepwise_advantage.mode=broadcast", "per_step"),
        ("compact_filtering", "mask_truncated"),
        ("disable_thinking", "chat template"),
        ("critic_warmup", "set it to 0"),
        ("strategy=megatron", "fsdp"),
        ("kl_loss_type=abs", "k1"),
        ("engine_args.chat_parser", "n_parallel_agents"),
        ("algorithm.clip_advantages", "not an rLLM/verl key"),
        ("normalize_by_steps", "False"),
        ("min_lr_ratio", "decays to 0"),
    ]:
        line = next((line for line in message.splitlines() if key in line), None)
        assert line is not None and nearest in line, (key, message)


def test_oversampling_is_refused_for_workflows_and_ignored_for_agents_as_in_rllm():
    assert translated("rllm.rejection_sample.multiplier=2").train_config()
    with pytest.raises(ConfigError, match="rejection_sample.multiplier"):
        translated("rllm.rejection_sample.multiplier=2", workflow=True)


def test_epochs_that_make_no_step_are_an_error():
    with pytest.raises(ConfigError, match="0 training steps"):
        translated("data.train_batch_size=16", train_size=8)


def test_infrastructure_keys_are_accepted_and_listed():
    t = translated(
        f"{A}.rollout.gpu_memory_utilization=0.85",
        f"{A}.actor.use_dynamic_bsz=True",
        f"{A}.actor.fsdp_config.param_offload=True",
        "trainer.n_gpus_per_node=4",
        f"+{A}.rollout.engine_kwargs.vllm.enable_auto_tool_choice=True",
        "+ray_init._temp_dir=/tmp",
    )
    config = t.train_config()
    assert config.trainer.backend == "torch" and config.trainer.workers_per_node == 1 and not config.verl.param_offload
    assert any(i.startswith(f"{A}.rollout.gpu_memory_utilization=0.85") for i in t.ignored)
    assert any(i.startswith(f"{A}.rollout.engine_kwargs.vllm.enable_auto_tool_choice") for i in t.ignored)
    verl = translated(
        "trainer.backend=verl",
        "algorithm.adv_estimator=grpo",
        "trainer.n_gpus_per_node=2",
        f"{A}.actor.fsdp_config.param_offload=True",
        f"{A}.actor.strategy=fsdp2",
    ).train_config()
    assert verl.verl.param_offload and verl.trainer.workers_per_node == 2 and verl.verl.strategy == "fsdp2"


def test_wandb_is_accepted_with_one_warning_and_validation_differences_warn():
    t = translated("trainer.logger=['console','wandb']")
    assert len(t.warnings) == 1 and "wandb" in t.warnings[0] and "metrics.jsonl" in t.warnings[0]
    assert translated("trainer.logger=['console','tensorboard']").train_config().trainer.tensorboard
    t = translated(
        f"{A}.rollout.val_kwargs.temperature=0.7", f"{A}.rollout.val_kwargs.top_k=20", "trainer.val_before_train=False"
    )
    assert len(t.warnings) == 2 and "top_k" in t.warnings[0] and "val_before_train" in t.warnings[1]
    assert not translated(f"{A}.rollout.val_kwargs.top_k=20").warnings  # greedy validation: top_k is moot


def test_an_invalid_translated_value_names_the_rllm_key():
    with pytest.raises(ConfigError, match=r"rollout.n <- actor_rollout_ref.rollout.n=1"):
        translated("algorithm.adv_estimator=grpo", f"{A}.rollout.n=1").train_config()


def test_config_as_dict_or_list_and_typos_fail_like_hydra():
    as_dict = compose_config(
        {"data": {"train_batch_size": 3}, "rllm.env.env_args": {"size": 2}, "rllm.agent.agent_args.max_steps": 4}
    )
    assert as_dict["data"]["train_batch_size"] == 3 and as_dict["rllm"]["env"]["env_args"] == {"size": 2}
    assert as_dict["rllm"]["agent"]["agent_args"] == {"max_steps": 4}
    as_list = compose_config(["+rllm.env.env_args.size=2", "trainer.logger=['console']"])
    assert as_list["rllm"]["env"]["env_args"] == {"size": 2} and as_list["trainer"]["logger"] == ["console"]
    with pytest.raises(ConfigError, match="rllm.rllm"):
        compose_config(["rllm.rllm.agent.trajectory_timeout=10"])


def test_constructor_rllm_semantics(tmp_path):
    from rllm.agents.frozenlake_agent import FrozenLakeAgent
    from rllm.data.dataset import Dataset
    from rllm.environments.frozenlake.frozenlake import FrozenLakeEnv

    overrides = [
        "data.train_batch_size=2",
        f"{A}.rollout.n=2",
        "+rllm.env.env_args.size=2",
        "+rllm.agent.agent_args.max_steps=3",
        f"trainer.default_local_dir={tmp_path}/run",
    ]
    trainer = AgentTrainer(
        agent_class=FrozenLakeAgent,
        env_class=FrozenLakeEnv,
        env_args={"size": 5, "p": 0.9},
        agent_args={"max_steps": 9},
        config=overrides,
        train_dataset=Dataset(ROWS),
    )
    args = trainer.trainer.workflow_args
    assert args["env_args"] == {"size": 2, "p": 0.9} and args["env_args_win"]  # config over args; args over rows
    assert trainer.trainer.train_dataset == ROWS  # the rows stay as they are (env args may hold functions)
    assert args["agent_args"] == {"max_steps": 3}
    assert trainer.trainer.val_dataset == [] and trainer.config.trainer.total_steps == 30 * 4
    by_name = AgentTrainer(
        config=[*overrides, "rllm.agent.name=frozenlakeagent", "rllm.env.name=frozenlake"], train_dataset=ROWS
    )
    assert by_name.trainer.workflow_args["env_class"] is FrozenLakeEnv
    with pytest.raises(ValueError, match="rllm.env.name='webarena'"):
        AgentTrainer(
            config=[*overrides, "rllm.agent.name=frozenlakeagent", "rllm.env.name=webarena"], train_dataset=ROWS
        )
    with pytest.raises(ValueError, match="train_dataset=None"):
        AgentTrainer(agent_class=FrozenLakeAgent, env_class=FrozenLakeEnv, config=overrides, train_dataset=None)


def test_workflow_constructor_merges_config_args_and_refuses_agent_args_with_use_workflow():
    from rllm.workflows.workflow import Workflow

    class Flow(Workflow):
        async def run(self, task, uid, **kwargs):
            raise NotImplementedError

    overrides = [
        "data.train_batch_size=2",
        f"{A}.rollout.n=2",
        "+rllm.workflow.workflow_args.n_solutions=3",
        "rllm.workflow.workflow_args.gamma=0.5",
    ]
    trainer = AgentTrainer(
        workflow_class=Flow,
        workflow_args={"n_solutions": 1, "agent_args": {"a": 1}},
        config=overrides,
        train_dataset=ROWS,
    )
    args = trainer.trainer.workflow_args
    assert args["n_solutions"] == 3 and args["gamma"] == 0.5 and args["agent_args"] == {"a": 1}
    with pytest.raises(ValueError, match="agent_args is not supported when using workflow"):
        AgentTrainer(
            workflow_class=Flow,
            agent_args={"a": 1},
            config=[*overrides, "rllm.workflow.use_workflow=True"],
            train_dataset=ROWS,
        )


@pytest.mark.parametrize("kwargs", [{"backend": "tinker"}, {"backend": "fireworks"}, {"agent_run_func": print}])
def test_backends_we_lack_name_what_we_have(kwargs):
    with pytest.raises(NotImplementedError, match="not available here"):
        AgentTrainer(config=[], train_dataset=ROWS, **kwargs)


def test_import_rllm_does_not_import_hydra_and_missing_omegaconf_says_how_to_install(monkeypatch):
    code = "import sys, rllm, rllm.trainer; print(any(m in sys.modules for m in ('hydra', 'omegaconf')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    monkeypatch.setitem(sys.modules, "omegaconf", None)
    with pytest.raises(ImportError, match=r"pip install 'rllm\[compat\]'"):
        compose_config(None)
