"""Shapes: a visual question task drawn with PIL, for vision-language models (`rllm.models.vision`).

One task = one picture of coloured shapes on a plain background and a question with a one-word answer:
- `question="colour"` (default): "What colour is the shape?" (one shape; red, green, blue or yellow);
- `question="shape"`: "Which shape is it?" (circle, square or triangle);
- `question="count"`: "How many shapes are there?" (1 to 4 shapes of one colour; answered as a digit or a word).
The picture is stored in the row as a PNG data URL (`rllm.images`), so rows are plain JSON and every run of the same
seed shows the model the same pixels. Sizes, positions and backgrounds vary with the seed, so an answer cannot be
read from a fixed pixel.

The env's only step reads the first answer word of the reply (a choice, or for counts a digit or number word) and
gives reward 1 if it is the answer. The agent's system prompt lists the choices: a text-only guess is right about one
time in the number of choices, and anything above that comes from the image.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rllm.agents.base import BaseAgent
from rllm.envs.base import BaseEnv
from rllm.images import image_part
from rllm.tasks import Task

__all__ = [
    "QUESTIONS",
    "ShapesAgent",
    "ShapesEnv",
    "draw_shapes",
    "make_shapes_tasks",
    "parse_answer",
    "sft_records",
]

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (235, 210, 40)}
SHAPES = ("circle", "square", "triangle")
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4}
QUESTIONS = {
    "colour": ("What colour is the shape? Answer with one word: red, green, blue or yellow.", tuple(COLOURS)),
    "shape": ("Which shape is it? Answer with one word: circle, square or triangle.", SHAPES),
    "count": ("How many shapes are there? Answer with one number from 1 to 4.", ("1", "2", "3", "4")),
}
_WORD = re.compile(r"[a-z]+|\d+")


def parse_answer(text: Any, question: str) -> str | None:
    """The first answer word of `text` for `question` (lower-cased; a count as its digit), or None."""
    choices = QUESTIONS[question][1]
    for word in _WORD.findall(str(text or "").lower()):
        if question == "count" and word in _NUMBERS:
            word = str(_NUMBERS[word])
        if word in choices:
            return word
    return None


class ShapesAgent(BaseAgent):
    system_prompt = "You look at a picture and answer the question about it with one word."

    def format_observation(self, observation: Any) -> Any:
        """The picture, then the question (the env's observation `{"image", "question"}`)."""
        if isinstance(observation, dict) and "image" in observation:
            return [image_part(observation["image"]), {"type": "text", "text": observation["question"]}]
        return super().format_observation(observation)


class ShapesEnv(BaseEnv):
    blocking = False  # pure Python state: the engine steps it inline

    def __init__(self, image: str, question: str, answer: str, kind: str = "colour") -> None:
        if kind not in QUESTIONS:
            raise ValueError(f"question kind must be one of {sorted(QUESTIONS)}, got {kind!r}")
        self.image, self.question, self.answer, self.kind = image, question, str(answer), kind
        self.done = False

    @classmethod
    def from_dict(cls, task: dict) -> ShapesEnv:
        return cls(task["image"], task["question"], task["answer"], task.get("kind", "colour"))

    def reset(self) -> tuple[dict, dict]:
        self.done = False
        return {"image": self.image, "question": self.question}, {}

    def step(self, action: Any) -> tuple[str, float, bool, dict]:
        if self.done:
            raise RuntimeError("the episode is over (one answer per picture); call reset()")
        self.done = True
        given = parse_answer(action, self.kind)
        success = given == self.answer
        info = {"success": success, "answer": self.answer, "given": given, "invalid_action": given is None}
        return ("Correct." if success else f"Wrong; the answer is {self.answer}."), float(success), True, info


def draw_shapes(rng: random.Random, *, colour: str, shape: str, count: int, size: int) -> Any:
    """A `size` x `size` PIL picture of `count` shapes of one `shape` and `colour` on a light grey background."""
    from PIL import Image, ImageDraw

    grey = rng.randint(200, 250)
    picture = Image.new("RGB", (size, size), (grey, grey, grey))
    draw = ImageDraw.Draw(picture)
    cells = rng.sample(range(4), count)  # one shape per quadrant (a single shape may fill the middle)
    for cell in cells:
        span = size // 2 if count > 1 else size
        radius = rng.randint(span // 5, span // 3)
        left = (cell % 2) * (size // 2) if count > 1 else 0
        top = (cell // 2) * (size // 2) if count > 1 else 0
        cx = left + rng.randint(radius + 1, span - radius - 1)
        cy = top + rng.randint(radius + 1, span - radius - 1)
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        if shape == "circle":
            draw.ellipse(box, fill=COLOURS[colour])
        elif shape == "square":
            draw.rectangle(box, fill=COLOURS[colour])
        else:
            draw.polygon(
                [(cx, cy - radius), (cx - radius, cy + radius), (cx + radius, cy + radius)], fill=COLOURS[colour]
            )
    return picture


def make_shapes_tasks(n: int, *, seed: int = 0, question: str = "colour", size: int = 64) -> list[dict]:
    """`n` pictures with their question and answer, deterministic in `seed`; answers are balanced (each choice
    appears `n / choices` times, in shuffled order), so always giving one answer scores 1 / choices."""
    if question not in QUESTIONS:
        raise ValueError(f"question must be one of {sorted(QUESTIONS)}, got {question!r}")
    text, choices = QUESTIONS[question]
    rng = random.Random(seed)
    answers = [choices[i % len(choices)] for i in range(n)]
    rng.shuffle(answers)
    tasks = []
    for i, answer in enumerate(answers):
        colour = answer if question == "colour" else rng.choice(tuple(COLOURS))
        shape = answer if question == "shape" else rng.choice(SHAPES)
        count = int(answer) if question == "count" else 1
        picture = draw_shapes(rng, colour=colour, shape=shape, count=count, size=size)
        url = image_part(picture)["image_url"]["url"]
        tasks.append(
            {"id": f"shapes-{question}-{seed}-{i}", "image": url, "question": text, "answer": answer, "kind": question}
        )
    return tasks


def sft_records(tasks: list[dict]) -> list[dict]:
    """Supervised conversations for `rllm sft` (`sft.messages`): the agent's prompt and the right one-word answer."""
    agent = ShapesAgent()
    return [
        {
            "messages": [
                {"role": "system", "content": ShapesAgent.system_prompt},
                {"role": "user", "content": agent.format_observation(t)},
                {"role": "assistant", "content": t["answer"]},
            ]
        }
        for t in tasks
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m rllm.tasks.shapes OUT.jsonl [--n N] [--seed S] [--question colour|shape|count]`: write SFT
    conversations (seeds other than the config's data seeds keep them apart from the RL and validation pictures)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m rllm.tasks.shapes", description=main.__doc__)
    parser.add_argument("out")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--question", choices=sorted(QUESTIONS), default="colour")
    args = parser.parse_args(argv)
    records = sft_records(make_shapes_tasks(args.n, seed=args.seed, question=args.question))
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)
    print(f"wrote {len(records)} conversations to {args.out}")
    return 0


TASK = Task(
    name="shapes",
    description="Answer a question about a drawn picture (colour, shape or count) in one word; needs a "
    "vision-language model. Reward 1 for the right word.",
    make_tasks=make_shapes_tasks,
    agent=ShapesAgent,
    env=ShapesEnv,
)


if __name__ == "__main__":
    raise SystemExit(main())
