"""Vision-language models: prompts with images render to ids + images, the local engine samples from them, and the
training forward sees exactly the rollout's inputs (rllm.models.vision). A tiny random-init Idefics3 (SmolVLM's
architecture) with its real processor and the real SmolLM2 tokenizer."""

from __future__ import annotations

import asyncio

import pytest
import torch
from PIL import Image

from rllm.agents.base import BaseAgent
from rllm.config import AlgorithmConfig, LoraConfig, ModelConfig, OptimConfig
from rllm.engine import AgentExecutionEngine
from rllm.errors import ImageError
from rllm.images import image_part
from rllm.inference import InferenceOptions
from rllm.inference.model import LocalModel
from rllm.models.base import ImagePrompt, SamplingParams
from rllm.models.chat import ChatRenderer
from rllm.models.vision import VisionProcessor
from rllm.models.vlm import build_tiny_vlm
from rllm.training.backends.torch import TorchBackend
from rllm.training.batch import build_rows, episode_trajectories
from rllm.types import TerminationReason
from tests.support.backends import sampler_gap
from tests.support.envs import PictureEnv
from tests.support.models import sharpen


@pytest.fixture(scope="module")
def vlm(smollm2_tokenizer):
    model, processor = build_tiny_vlm(smollm2_tokenizer, seed=0)
    return sharpen(model), VisionProcessor(processor)


def _picture(colour=(255, 0, 0), size=(20, 30)):
    return Image.new("RGB", size, colour)


def _ask(colour, text="What colour is it?"):
    return [
        {"role": "system", "content": "You look at pictures and name what you see, in one word."},
        {"role": "user", "content": [image_part(_picture(colour)), {"type": "text", "text": text}]},
    ]


def _generate(model, prompts, **sampling):
    async def go():
        return await asyncio.gather(*[model.generate(p, SamplingParams(max_tokens=6, **sampling)) for p in prompts])

    return asyncio.run(go())


# ---- rendering ---------------------------------------------------------------------------------------------------


def test_an_image_renders_as_its_placeholder_tokens_and_is_listed(vlm):
    _, vision = vlm
    text, urls = vision.render_text(_ask((0, 255, 0)))
    assert urls == [image_part(_picture((0, 255, 0)))["image_url"]["url"]]
    expansion = "<fake_token_around_image><global-img>" + "<image>" * 4 + "<fake_token_around_image>"
    assert f"<|im_start|>user\n{expansion}What colour is it?<|im_end|>\n<|im_start|>assistant\n" in text
    assert vision.image(urls[0]).num_image_tokens == 4


def test_a_turn_whose_history_shows_another_image_does_not_extend(vlm):
    _, vision = vlm
    renderer = ChatRenderer(vision.tokenizer, vision=vision)
    first = _ask((255, 0, 0))
    ids = renderer.render(first)
    renderer.record(_fake_output(ids, vision.tokenizer.encode("red<|im_end|>", add_special_tokens=False)))
    follow = [{"role": "assistant", "content": "red"}, {"role": "user", "content": "Sure?"}]
    renderer.render(first + follow)
    assert renderer.extended and renderer.mismatches == 0
    swapped = _ask((0, 0, 255)) + follow  # same ids for the placeholders, another image behind them
    renderer.render(swapped)
    assert not renderer.extended and renderer.mismatches == 1


def test_collapse_puts_each_image_back_to_the_one_token_a_server_expands(vlm):
    """What vLLM's /inference/v1/generate takes: the chat template's `<image>` per image, not its expansion."""
    _, vision = vlm
    messages = _ask((255, 0, 0)) + [
        {"role": "assistant", "content": "red"},
        {"role": "user", "content": [image_part(_picture((0, 0, 255)))]},
    ]
    text, urls = vision.render_text(messages)
    ids = vision.tokenizer.encode(text, add_special_tokens=False)
    collapsed = vision.collapse(ids, urls)
    assert collapsed.count(vision.image_token_id) == 2 and len(ids) - len(collapsed) == 2 * (
        len(vision.image(urls[0]).ids) - 1
    )
    placeholder_text = vision.processor.apply_chat_template(
        [
            {**m, "content": [{"type": "image"} if p.get("type") == "image_url" else p for p in m["content"]]}
            if isinstance(m["content"], list)
            else m
            for m in messages
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert vision.tokenizer.decode(collapsed) == placeholder_text  # exactly the template's own text
    with pytest.raises(ImageError, match="disagree"):
        vision.collapse(ids[:10], urls)


def _fake_output(prompt_ids, completion_ids):
    from rllm.types import ModelOutput

    return ModelOutput(
        prompt_ids=list(prompt_ids), completion_ids=list(completion_ids), logprobs=[0.0] * len(completion_ids)
    )


# ---- the local engine --------------------------------------------------------------------------------------------


def test_the_local_engine_samples_from_the_image_and_records_it(vlm):
    model, vision = vlm
    with LocalModel(model, vision.tokenizer, vision=vision) as local:
        red, green, red_again = _generate(local, [_ask((255, 0, 0)), _ask((0, 255, 0)), _ask((255, 0, 0))], seed=3)
    assert red.completion_ids == red_again.completion_ids
    assert red.completion_ids != green.completion_ids  # the picture changes what the model says
    assert red.prompt_images == [image_part(_picture())["image_url"]["url"]]
    assert red.prompt_ids.count(vision.image_token_id) == 4


def test_image_prompts_never_share_kv_across_different_images(vlm):
    """A warm model (prefix store and running prefixes from a red picture) answers for a green one exactly as a
    cold model does: the placeholder ids are equal, so only the image-aware prefix key keeps them apart."""
    model, vision = vlm
    with LocalModel(model, vision.tokenizer, vision=vision) as cold:
        (expected,) = _generate(cold, [_ask((0, 255, 0))], temperature=0)
    with LocalModel(model, vision.tokenizer, vision=vision) as warm:
        _generate(warm, [_ask((255, 0, 0))] * 2, temperature=0)
        (green,) = _generate(warm, [_ask((0, 255, 0))], temperature=0)
        stats = warm.stats
    assert green.completion_ids == expected.completion_ids
    assert green.logprobs == pytest.approx(expected.logprobs, abs=1e-5)
    assert stats["prefix_hit_tokens"] > 0  # the shared system prompt did come from the store


def test_ids_and_images_that_disagree_are_refused(vlm):
    model, vision = vlm
    text, urls = vision.render_text(_ask((255, 0, 0)))
    ids = vision.tokenizer.encode(text, add_special_tokens=False)
    with LocalModel(model, vision.tokenizer, vision=vision) as local:
        (ok,) = _generate(local, [ImagePrompt(ids, urls)], seed=1)
        with pytest.raises(ImageError, match="4 image tokens but its 0 images stand for 0"):
            _generate(local, [ids])
    assert ok.prompt_ids == ids and ok.prompt_images == urls


def test_a_text_only_local_model_refuses_an_image_prompt(smollm2_tokenizer):
    from rllm.models.registry import build_tiny_model

    with LocalModel(build_tiny_model(smollm2_tokenizer), smollm2_tokenizer) as local:
        with pytest.raises(ImageError, match="the model is text-only: images need a vision-language model"):
            _generate(local, [ImagePrompt([1, 2, 3], ["data:image/png;base64,AAAA"])])


# ---- rollouts to training rows: the trainer sees what the sampler saw ------------------------------------------


def _backend(model, vision, *, lora=True, vision_tower="frozen"):
    import copy

    config = ModelConfig(name="unused", lora=LoraConfig(enabled=lora, rank=4, alpha=8.0), vision_tower=vision_tower)
    return TorchBackend(
        config,
        AlgorithmConfig(),
        OptimConfig(lr=1e-2, micro_batch_size=4, grad_clip=None),
        total_steps=4,
        model=copy.deepcopy(model),
        tokenizer=vision.tokenizer,
        vision=vision,
    )


def _episodes(model, tasks, agent_class=BaseAgent, env_class=PictureEnv, max_tokens=5, max_steps=3, **engine):
    """The engine's episodes of `tasks` on `model` (environments inline, `max_tokens` a reply)."""
    sampling = SamplingParams(max_tokens=max_tokens)
    engine = AgentExecutionEngine(
        agent_class=agent_class,
        env_class=env_class,
        model=model,
        max_steps=max_steps,
        env_workers=0,
        sampling=sampling,
        **engine,
    )
    return engine.execute_tasks(tasks)


def _rollout_episodes(backend, tasks, **engine):
    """`_episodes` on the backend's rollout model (its LocalModel closed after)."""
    rollout = backend.make_rollout_model(InferenceOptions(max_batch_size=8))
    try:
        return _episodes(rollout, tasks, **engine)
    finally:
        rollout.close()


def _picture_episodes(backend, n=3, **engine):
    return _rollout_episodes(backend, [{"id": f"pic{i}"} for i in range(n)], **engine)


def test_multi_turn_image_rollouts_train_with_the_sampler_log_probs(vlm):
    """Two turns, each observation a picture: one row per trajectory holding both images, and the training
    forward's log-probs of the sampled tokens equal the sampler's."""
    model, vision = vlm
    backend = _backend(model, vision)
    episodes = _picture_episodes(backend)
    assert all(e.termination_reason is TerminationReason.ENV_DONE for e in episodes)
    pairs = episode_trajectories(episodes)
    rows, stats = build_rows(
        pairs, step_advantages=[[1.0] * len(t.steps) for _, t in pairs], max_prompt_length=512, max_response_length=512
    )
    assert stats["rows_split"] == 0 and len(rows) == 3
    assert all(len(row.images) == 2 and row.input_ids.count(vision.image_token_id) == 8 for row in rows)
    worst = sampler_gap(backend, rows)
    assert worst < 1e-4, worst
    # and without the images the same ids score differently: the images really are in the forward
    blind = [type(row)(**{**vars(row), "images": []}) for row in rows]
    with pytest.raises(ImageError, match="image inputs do not match"):
        backend.compute_logprobs(blind, temperature=1.0)


def test_frozenlake_board_pictures_train_as_one_row_per_episode(vlm):
    """The built-in FrozenLake with pictures of the board: every turn's prompt extends the last, so each episode is
    one row holding one picture per turn, scored by the trainer exactly as sampled."""
    from rllm.tasks.frozenlake import FrozenLakeAgent, FrozenLakeEnv, make_frozenlake_tasks

    model, vision = vlm
    backend = _backend(model, vision)
    tasks = make_frozenlake_tasks(3, seed=1, sizes=(3,), hole_prob=0.0, max_steps=3)
    images = {"agent_args": {"observation": "image"}, "env_args": {"observation": "image"}}
    episodes = _rollout_episodes(
        backend, tasks, agent_class=FrozenLakeAgent, env_class=FrozenLakeEnv, max_tokens=4, **images
    )
    pairs = episode_trajectories(episodes)
    turns = [len(t.steps) for _, t in pairs]
    assert sum(turns) > len(pairs)  # the random model wanders: episodes of several turns
    rows, stats = build_rows(
        pairs, step_advantages=[[1.0] * n for n in turns], max_prompt_length=2048, max_response_length=512
    )
    assert stats["rows_split"] == 0 and len(rows) == len(pairs)
    assert [len(row.images) for row in rows] == turns  # one board per turn
    worst = sampler_gap(backend, rows)
    assert worst < 1e-4, worst


def test_the_frozenlake_board_picture_holds_what_the_grid_holds():
    from rllm.tasks.frozenlake import FrozenLakeAgent, FrozenLakeEnv, render_board

    desc = ["SFH", "FFF", "HFG"]
    board = render_board(desc, (1, 2), cell=10)
    assert board.size == (30, 30)
    assert board.getpixel((25, 5)) == (25, 35, 90) and board.getpixel((25, 25)) == (40, 170, 60)  # hole, goal
    assert board.getpixel((25, 15)) == (220, 40, 40) and board.getpixel((5, 5)) == (205, 230, 255)  # you, ice
    env = FrozenLakeEnv(desc=desc, observation="image")
    first, _ = env.reset()
    assert first["text"] == "" and first["image"].getpixel((8, 8)) == (220, 40, 40)  # 16 px cells: you, top-left
    after, *_ = env.step("up")
    assert after["text"] == "You hit the edge and did not move."
    agent = FrozenLakeAgent(observation="image")
    assert "red disc" in agent.messages[0]["content"]
    parts = agent.format_observation(after)
    assert parts[0]["type"] == "image_url" and parts[1] == {
        "type": "text",
        "text": "You hit the edge and did not move.",
    }
    with pytest.raises(TypeError, match="agent_args and env_args"):
        FrozenLakeAgent().format_observation(after)
    with pytest.raises(ValueError, match="observation must be one of"):
        FrozenLakeEnv(desc=desc, observation="pixels")


@pytest.mark.parametrize("tower", ["frozen", "trainable"])
def test_an_update_trains_the_language_model_and_the_tower_only_when_asked(vlm, tower):
    from rllm.models.vision import vision_modules

    model, vision = vlm
    backend = _backend(model, vision, vision_tower=tower)
    episodes = _picture_episodes(backend, n=2)
    pairs = episode_trajectories(episodes)
    rows, _ = build_rows(
        pairs,
        step_advantages=[[1.0, -1.0][i % 2 :][:1] * len(t.steps) for i, (_, t) in enumerate(pairs)],
        max_prompt_length=512,
        max_response_length=512,
    )
    tower_names = tuple(vision_modules(backend.model))
    before = {n: p.detach().clone() for n, p in backend.model.named_parameters()}
    metrics = backend.update(rows, temperature=1.0)
    assert metrics["off_policy/nonfinite_tokens"] == 0
    changed = {n for n, p in backend.model.named_parameters() if not torch.equal(p, before[n])}
    assert any("lora_" in n and "text_model" in n for n in changed)
    assert not any("lora_" in n and any(t in n for t in tower_names) for n, _ in backend.model.named_parameters())
    tower_changed = any(any(t in n for t in tower_names) for n in changed)
    assert tower_changed == (tower == "trainable")


def test_full_fine_tuning_freezes_the_tower_by_default(vlm):
    from rllm.models.vision import vision_modules

    model, vision = vlm
    backend = _backend(model, vision, lora=False)
    tower = tuple(vision_modules(backend.model))
    trainable = [n for n, p in backend.model.named_parameters() if p.requires_grad]
    assert trainable and not any(n.startswith(tower) for n in trainable)


def test_image_tokens_count_toward_the_prompt_limit(vlm):
    """A prompt that only the image tokens push over `max_prompt_length` ends the episode as a truncation."""
    model, vision = vlm
    backend = _backend(model, vision)
    text, _ = vision.render_text([{"role": "user", "content": [image_part(_picture())]}])
    limit = len(vision.tokenizer.encode(text, add_special_tokens=False)) - 1
    (episode,) = _picture_episodes(backend, n=1, max_prompt_length=limit)
    assert episode.termination_reason is TerminationReason.MAX_PROMPT_LENGTH


def test_a_text_only_model_meeting_an_image_names_the_step(smollm2_tokenizer):
    from rllm.models.registry import build_tiny_model

    class LateImageEnv(PictureEnv):
        def reset(self):
            self.turn = 0
            return "Say something.", {}

    with LocalModel(build_tiny_model(smollm2_tokenizer), smollm2_tokenizer) as local:
        (episode,) = _episodes(local, [{"id": "late"}], env_class=LateImageEnv, max_tokens=3, retry_limit=1)
    assert episode.termination_reason is TerminationReason.ERROR
    assert "step 1 of conversation 'main'" in episode.info["error"]
    assert "text-only model" in episode.info["error"]


# ---- a saved VLM folder loads as a model name -------------------------------------------------------------------


def test_a_saved_vlm_folder_loads_for_rollouts_and_training(tmp_path, smollm2_tokenizer):
    model, processor = build_tiny_vlm(smollm2_tokenizer, seed=1)
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    with LocalModel.from_pretrained(str(tmp_path)) as local:
        assert local.vision is not None
        (out,) = _generate(local, [_ask((255, 0, 0))], temperature=0)
    backend = TorchBackend(ModelConfig(name=str(tmp_path)), AlgorithmConfig(), OptimConfig(), total_steps=1)
    assert backend.vision is not None and backend.vision.image_token_id == processor.tokenizer.convert_tokens_to_ids(
        "<image>"
    )
    assert out.prompt_images and out.completion_ids


def test_samples_of_one_picture_share_their_prompt_in_the_training_forward(vlm):
    """GRPO's samples of one picture: the shared-prefix forward runs each (ids, image) prompt once, and gives the
    plain forward's log-probs and gradients; two pictures with equal placeholder ids are never merged."""
    from rllm.tasks.shapes import ShapesAgent, ShapesEnv, make_shapes_tasks
    from rllm.training.backends.torch_model import attach_images, forward_targets
    from rllm.training.batch import collate

    model, vision = vlm
    backend = _backend(model, vision, vision_tower="trainable")  # the gradient reaches the tower too
    tasks = make_shapes_tasks(2, seed=0)
    episodes = _rollout_episodes(
        backend,
        [t for t in tasks for _ in range(3)],
        agent_class=ShapesAgent,
        env_class=ShapesEnv,
        max_tokens=4,
        max_steps=1,
    )
    pairs = episode_trajectories(episodes)
    rows, _ = build_rows(pairs, step_advantages=[[1.0]] * len(pairs), max_prompt_length=512, max_response_length=512)
    assert len({tuple(r.input_ids[: r.prompt_length]) for r in rows}) == 1  # same ids: only the image differs
    batch = attach_images(collate(rows, pad_id=backend.pad_id), rows, vision)
    positions = batch["target_mask"] > 0
    results = []
    for share in (True, False):
        backend.model.zero_grad()
        out = forward_targets(backend.model, batch, positions, temperature=1.0, share_prefix=share)
        out.logprobs.sum().backward()
        grads = [p.grad.clone() for p in backend.model.parameters() if p.grad is not None]
        results.append((out.logprobs.detach(), grads))
    (shared, shared_grads), (plain, plain_grads) = results
    tower = [p.grad for n, p in backend.model.named_parameters() if "vision_model" in n and p.grad is not None]
    assert tower and any(g.abs().sum() > 0 for g in tower)
    assert torch.allclose(shared, plain, atol=1e-5)
    # (sharp weights: gradients up to ~70, so float rounding shows at 1e-4 absolute; relative to each tensor's scale,
    # plus 1e-5 for the attention key biases, whose gradient is 0 in exact arithmetic and rounding noise here)
    assert all(
        (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-5 for a, b in zip(shared_grads, plain_grads, strict=True)
    )
    sampled = torch.tensor([lp for r in rows for lp, m in zip(r.old_logprobs[1:], r.loss_mask[1:], strict=True) if m])
    assert (shared - sampled).abs().max() < 1e-4


def test_the_plan_groups_rows_by_their_images(vlm):
    from rllm.training.backends.shared_prefix import plan_shared_prefixes
    from rllm.training.backends.torch_model import attach_images
    from rllm.training.batch import TrainingRow, collate

    _, vision = vlm
    red, blue = (image_part(_picture(c))["image_url"]["url"] for c in ((255, 0, 0), (0, 0, 255)))
    text, _ = vision.render_text(_ask((255, 0, 0)))
    prompt = vision.tokenizer.encode(text, add_special_tokens=False)

    def row(url):
        ids = prompt + [42, 43]
        return TrainingRow(
            input_ids=ids,
            prompt_length=len(prompt),
            loss_mask=[0] * len(prompt) + [1, 1],
            old_logprobs=[0.0] * len(ids),
            advantages=[0.0] * len(ids),
            group_key="g",
            episode_id="e",
            trajectory_name="t",
            images=[url],
        )

    rows = [row(red), row(red), row(blue)]
    batch = attach_images(collate(rows, pad_id=0), rows, vision)
    plan = plan_shared_prefixes(batch, batch["target_mask"] > 0)
    assert plan is not None and plan.group.tolist() == [0, 0, 1]


# ---- the embedded VLM: SmolVLM's architecture around a real text model ------------------------------------------


def test_a_vlm_built_around_a_text_model_answers_text_exactly_as_it(tiny_model_dir):
    from rllm.models.vlm import build_vlm_around

    model, processor, diff = build_vlm_around(tiny_model_dir, image_size=32, patch_size=8, vision_hidden=32)
    assert diff == 0.0  # without an image: the text model's logits, bitwise
    vision = VisionProcessor(processor)
    with LocalModel(model, vision.tokenizer, vision=vision) as local:
        (out,) = _generate(local, [_ask((255, 0, 0))], temperature=0)
    assert out.prompt_images and out.prompt_ids.count(vision.image_token_id) == 4


def test_the_embedded_vlm_not_yet_built_names_the_command(tmp_path, monkeypatch):
    from rllm.errors import ModelNotAvailableError
    from rllm.models import registry

    monkeypatch.setenv("RLLM_HOME", str(tmp_path))
    with pytest.raises(ModelNotAvailableError, match="run `rllm fetch smolvlm-smollm2-135m` \\(built from smollm2"):
        registry.resolve_model_path("smolvlm-smollm2-135m")


def test_lora_sync_to_vllm_is_refused_when_the_tower_trains_whole(tmp_path):
    """An adapter cannot carry a tower trained whole: the server would sample with the untrained one."""
    from types import SimpleNamespace

    from rllm.config import ConfigError, load_config
    from rllm.training.rollout_server import start_vllm_rollout

    config = load_config("configs/shapes_grpo.yaml", ["rollout.server=vllm", "rollout.vllm.sync=lora"])
    with pytest.raises(ConfigError, match="rollout.vllm.sync=reload"):
        start_vllm_rollout(config, SimpleNamespace(vision=object()), tmp_path)
