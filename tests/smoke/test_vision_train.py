"""A vision-language agent end to end through the CLI, on a tiny random-init Idefics3 (SmolVLM's architecture, the
real SmolLM2 tokenizer): `rllm sft` on pictures, then `rllm train` (GRPO) from the SFT weights with the image tower
trained; the sampler's and the trainer's log-probs agree and the run keeps its images once each."""

from __future__ import annotations

import json

import torch

from rllm.runs import load_metrics, read_episodes
from tests.support.cli import rllm_run

SMALL = [
    "rollout.n=2",
    "trainer.tasks_per_step=2",
    "data.train_size=4",
    "data.val_size=2",
    "optim.micro_batch_size=4",
    "optim.lr=1e-2",
    "rollout.max_tokens=4",
]


def test_sft_then_grpo_on_pictures_with_a_trainable_tower(tmp_path, tiny_vlm_dir):
    from rllm.tasks.shapes import make_shapes_tasks, sft_records

    messages = tmp_path / "shapes.jsonl"
    messages.write_text("".join(json.dumps(r) + "\n" for r in sft_records(make_shapes_tasks(8, seed=5))))
    sft_args = ["configs/shapes_sft.yaml", f"model.name={tiny_vlm_dir}", f"sft.messages={messages}", "sft.batch_size=4"]
    _, sft = rllm_run("sft", *sft_args, *SMALL, run_root=tmp_path, name="sft")
    grpo_args = ["configs/shapes_grpo.yaml", f"model.name={tiny_vlm_dir}", "trainer.total_steps=1"]
    _, grpo = rllm_run("train", *grpo_args, f"model.init_from={sft}", *SMALL, run_root=tmp_path, name="grpo")
    (step,) = [m for m in load_metrics(grpo) if "reward_mean" in m]
    assert step["mismatch/tokens"] > 0 and step["mismatch/abs_diff_max"] < 1e-4  # trainer == sampler
    episodes = read_episodes(tmp_path / "grpo", split="train")
    outputs = [s.model_output for e in episodes for t in e.trajectories for s in t.steps]
    assert len(outputs) == 4 and all(
        o.prompt_images and o.prompt_images[0].startswith("data:image/png") for o in outputs
    )
    stored = list((tmp_path / "grpo" / "images").iterdir())
    assert len(stored) == len({o.prompt_images[0] for o in outputs} | _val_images(tmp_path / "grpo"))


def _val_images(run):
    return {
        s.model_output.prompt_images[0]
        for e in read_episodes(run, split="val")
        for t in e.trajectories
        for s in t.steps
    }


def test_init_from_carries_the_trained_tower(tmp_path, tiny_vlm_dir):
    """The SFT run trained the tower whole (peft's saved copy): init_from puts those weights in the plain model."""
    from rllm.models.registry import load_causal_lm
    from rllm.tasks.shapes import make_shapes_tasks, sft_records
    from rllm.training.init_from import apply_init_weights

    messages = tmp_path / "shapes.jsonl"
    messages.write_text("".join(json.dumps(r) + "\n" for r in sft_records(make_shapes_tasks(4, seed=6))))
    sft_args = ["configs/shapes_sft.yaml", *SMALL, f"model.name={tiny_vlm_dir}", f"sft.messages={messages}"]
    rllm_run("sft", *sft_args, "sft.batch_size=4", "data.val_size=0", run_root=tmp_path, name="sft")
    model = load_causal_lm(tiny_vlm_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    apply_init_weights(model, tmp_path / "sft")
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any(n.startswith("model.vision_model.") for n in changed)  # the tower
    assert any(n.startswith("model.text_model.") for n in changed)  # the merged adapters


def test_frozenlake_with_pictures_of_the_board_trains_one_row_per_episode(tmp_path, tiny_vlm_dir):
    """configs/frozenlake_image_grpo.yaml: multi-turn, one picture per observation, trained exactly as sampled."""
    lake_args = ["configs/frozenlake_image_grpo.yaml", f"model.name={tiny_vlm_dir}", "trainer.total_steps=1"]
    _, lake = rllm_run(
        "train", *lake_args, "rollout.max_steps=3", "rollout.val_n=1", *SMALL, run_root=tmp_path, name="lake"
    )
    (step,) = [m for m in load_metrics(lake) if "reward_mean" in m]
    assert step["mismatch/tokens"] > 0 and step["mismatch/abs_diff_max"] < 1e-4
    assert step["batch/rows_split"] == 0, step
    trajectories = [t for e in read_episodes(lake, split="train") for t in e.trajectories]
    for trajectory in trajectories:  # each turn's prompt holds every board so far
        assert [len(s.model_output.prompt_images) for s in trajectory.steps] == list(
            range(1, len(trajectory.steps) + 1)
        )
    assert max(len(t.steps) for t in trajectories) > 1
