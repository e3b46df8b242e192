"""Episodes as a run logs them, for the supervised-data tests: given rewards, turns and roles, with sampled ids."""

from __future__ import annotations

from rllm.types import Episode, ModelOutput, Step, Trajectory


def sampled_episode(task: str, index: int, reward: float, *, turns=1, name="agent", ids=True) -> Episode:
    """Episode `task:index` of one trajectory of `turns` steps and `reward`; `ids=False` leaves the sampled ids and
    log-probs out (an episode that cannot train on exact ids)."""
    steps, prompt = [], [1, 2, 3]
    for turn in range(turns):
        completion = [10 + turn, 20 + index]
        output = ModelOutput(
            prompt_ids=list(prompt) if ids else None,
            completion_ids=completion if ids else None,
            logprobs=[-0.5, -0.25] if ids else None,
        )
        steps.append(Step(model_output=output))
        prompt = prompt + completion + [7, 8]  # observation
    trajectory = Trajectory(name=name, steps=steps, reward=reward)
    return Episode(id=f"{task}:{index}", trajectories=[trajectory], is_correct=reward > 0)


def episode_records(episodes, split="train"):
    """`episodes` as the records a run log holds (read_episode_records)."""
    return [{"step": 1, "split": split, "episode": e} for e in episodes]
