"""Core data shared by every layer: what a model returned, what an agent did, what a rollout produced.

Everything here is a pydantic model that round-trips through JSON without loss, so every run can write its
episodes to disk as JSONL and read them back for training, viewing or debugging. This module imports nothing
of ours: it is the bottom level every other layer builds on (docs/architecture.md, "Layers and the import rule").

Fields that hold free-form user data (`task`, `info`, `observation`, `action`) must be JSON-serialisable;
`rllm.envs.check_env` tells a user when their environment returns something that is not.
"""

from __future__ import annotations

import json
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_serializer, model_validator

__all__ = [
    "Action",
    "Episode",
    "ModelOutput",
    "Step",
    "TerminationReason",
    "ToolCall",
    "Trajectory",
]


class _Strict(BaseModel):
    # extra="forbid": a typo in a field name is an error, not a silently dropped value.
    model_config = ConfigDict(extra="forbid", validate_assignment=False, arbitrary_types_allowed=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (rLLM's `to_dict`)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return cls.model_validate(data)


class TerminationReason(str, Enum):
    """Why a rollout ended. Infra errors are ours (retried, then masked out of training); policy errors are the
    model's (they get the configured reward)."""

    ENV_DONE = "env_done"
    MAX_TURNS = "max_turns"
    MAX_PROMPT_LENGTH = "max_prompt_length"
    MAX_RESPONSE_LENGTH = "max_response_length"
    TIMEOUT = "timeout"
    POLICY_ERROR = "policy_error"
    INFRA_ERROR = "infra_error"
    ERROR = "error"  # an unexpected exception in user code (agent/workflow); the traceback is kept in `info`

    @property
    def is_infra(self) -> bool:
        return self is TerminationReason.INFRA_ERROR


class ToolCall(_Strict):
    """A tool call parsed from a completion. `arguments` stays a string when it was not valid JSON."""

    id: str | None = None
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    @staticmethod
    def decode_arguments(arguments: Any) -> dict[str, Any] | str:
        """OpenAI's `function.arguments` (a JSON string) as a dict; a string that is not a JSON object stays the
        raw string (whoever reads the call decides what a malformed call means); empty means no arguments."""
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return arguments
            arguments = parsed if isinstance(parsed, dict) else arguments
        return arguments or {}


class ModelOutput(_Strict):
    """What one model call returned.

    `prompt_ids`/`completion_ids`/`logprobs` are the exact tokens the server saw and sampled; they are `None` only
    for clients that cannot get them (an OpenAI-compatible server reached without a tokenizer) and then training on
    these outputs is refused. `logprobs[i]` is the sampling log-probability of `completion_ids[i]`.
    """

    text: str = ""
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None  # "stop" (EOS or a stop string), "length" (max tokens), or the server's word
    weight_version: int = 0
    # A vision-language model's prompt: its images (data URLs) in the order of their placeholder tokens in
    # `prompt_ids`, so training rebuilds exactly the inputs that were sampled from (`rllm.models.vision`).
    prompt_images: list[str] | None = None
    info: dict[str, Any] = Field(default_factory=dict)

    @property
    def has_token_ids(self) -> bool:
        return self.prompt_ids is not None and self.completion_ids is not None

    @property
    def prompt_length(self) -> int:
        return len(self.prompt_ids or [])

    @property
    def completion_length(self) -> int:
        return len(self.completion_ids or [])


class Action(_Strict):
    """What an agent decided after a model call: `action` is handed to `env.step` as it is. `Action(x)` is
    `Action(action=x)` (rLLM's agents write it positionally)."""

    action: Any = None

    def __init__(self, *args: Any, **data: Any) -> None:
        if args:
            if len(args) > 1 or "action" in data:
                raise TypeError("Action takes one action: Action(x) or Action(action=x)")
            data["action"] = args[0]
        super().__init__(**data)


class Step(_Strict):
    """One model call and what followed it.

    `chat_completions` are the messages the model saw, `model_output` what it returned, `action` what the agent made
    of it, then `observation`, `reward`, `done` and `info` as returned by the environment for that action.

    rLLM v0.2's fields are here too, for agents written against it (`rllm.agents.agent`): `thought` and
    `model_response` (the reasoning and the reply's text, as the agent recorded them), `mc_return` (the discounted
    return its engine fills in), and `prompt_ids`/`response_ids`/`logprobs`, kept in `model_output` (given to the
    constructor or assigned, they are written there: one place holds a step's tokens). An rLLM agent's
    `chat_completions` also hold its own reply: rLLM records the messages after the call.
    """

    chat_completions: list[dict[str, Any]] = Field(default_factory=list)
    model_output: ModelOutput | None = None
    action: Any = None
    observation: Any = None
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = Field(default_factory=dict)
    thought: str | None = ""
    model_response: str = ""
    mc_return: float = 0.0

    @model_validator(mode="before")
    @classmethod
    def _tokens_into_model_output(cls, data: Any) -> Any:
        """`Step(prompt_ids=..., response_ids=..., logprobs=...)`: the ids go into `model_output`."""
        if not isinstance(data, dict) or not _TOKEN_FIELDS.keys() & data.keys():
            return data
        data = dict(data)
        tokens = {_TOKEN_FIELDS[key]: data.pop(key) for key in list(data) if key in _TOKEN_FIELDS}
        tokens = {key: list(value) for key, value in tokens.items() if value is not None}
        if tokens:
            output = data.get("model_output")
            if isinstance(output, ModelOutput):
                data["model_output"] = output.model_copy(update=tokens)
            else:
                data["model_output"] = {**(output or {}), **tokens}
        return data

    @property
    def prompt_ids(self) -> list[int]:
        return list(self.model_output.prompt_ids or []) if self.model_output else []

    @prompt_ids.setter
    def prompt_ids(self, value: list[int]) -> None:
        self._set_tokens(prompt_ids=list(value))

    @property
    def response_ids(self) -> list[int]:
        return list(self.model_output.completion_ids or []) if self.model_output else []

    @response_ids.setter
    def response_ids(self, value: list[int]) -> None:
        self._set_tokens(completion_ids=list(value))

    @property
    def logprobs(self) -> list[float]:
        return list(self.model_output.logprobs or []) if self.model_output else []

    @logprobs.setter
    def logprobs(self, value: list[float]) -> None:
        self._set_tokens(logprobs=list(value))

    def _set_tokens(self, **tokens: list) -> None:
        self.model_output = (self.model_output or ModelOutput()).model_copy(update=tokens)


# rLLM's Step field names -> ModelOutput's
_TOKEN_FIELDS = {"prompt_ids": "prompt_ids", "response_ids": "completion_ids", "logprobs": "logprobs"}


class Trajectory(_Strict):
    """The ordered steps of one agent. `name` is its role ("agent", "solver", "judge", ...); rollouts are grouped
    for advantages by `task_id:name`.

    `reward` is the trajectory's reward. Until it is given (to the constructor or by assignment) it reads 0.0 and
    `has_reward()` is False: the workflow then sets it when the episode is built (by default the sum of step
    rewards, `final_reward()`). An unset reward is written as null in JSON, so a round trip keeps it unset.

    `uid` is a unique id (rLLM's, to deduplicate on), made on first use; it is not written to JSON, so the episodes
    a run writes are the same bit for bit when it runs again."""

    name: str = "agent"
    steps: list[Step] = Field(default_factory=list)
    reward: float = 0.0
    is_correct: bool | None = None  # set by workflows that know; None: judged by a positive reward
    info: dict[str, Any] = Field(default_factory=dict)
    task: Any = None  # rLLM v0.2's engine hands back trajectories with their task; ours leave it to the episode
    _uid: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _uid_and_unset_reward(cls, data: Any, handler: Any) -> Any:
        """`uid=` is kept aside (not a field); `reward=None` means not given."""
        uid = None
        if isinstance(data, dict) and ("uid" in data or data.get("reward", 0.0) is None):
            data = dict(data)
            uid = data.pop("uid", None)
            if data.get("reward", 0.0) is None:
                del data["reward"]
        trajectory = handler(data)
        if uid is not None:
            trajectory._uid = str(uid)
        return trajectory

    @field_serializer("reward")
    def _reward_or_null(self, reward: float) -> float | None:
        return reward if self.has_reward() else None

    @property
    def uid(self) -> str:
        if self._uid is None:
            self._uid = str(uuid.uuid4())
        return self._uid

    @uid.setter
    def uid(self, value: str) -> None:
        self._uid = str(value)

    def has_reward(self) -> bool:
        """Whether `reward` was given (to the constructor or by assignment), rather than read as its default."""
        return "reward" in self.model_fields_set

    def succeeded(self) -> bool:
        """`is_correct` when the workflow set it, else whether the trajectory's reward is positive."""
        return self.is_correct if self.is_correct is not None else self.final_reward() > 0

    def total_step_reward(self) -> float:
        return float(sum(step.reward for step in self.steps))

    def final_reward(self) -> float:
        """The trajectory's reward: `reward` when given, else the sum of its step rewards."""
        return float(self.reward) if self.has_reward() else self.total_step_reward()

    def is_cumulative(self) -> bool:
        """Whether each step's `chat_completions` extend the previous step's (rLLM's test for a conversation that
        only grows, as opposed to one whose history was rewritten)."""
        for previous, current in zip(self.steps, self.steps[1:], strict=False):
            before = previous.chat_completions
            if current.chat_completions[: len(before)] != before:
                return False
        return True


class Episode(_Strict):
    """One rollout of one task: `id` is `"{task_id}:{rollout_idx}"`. Multi-agent episodes hold several trajectories."""

    id: str = ""  # set by the engine; "" until then (rLLM's workflows may build an Episode before it has one)
    task: Any = None
    trajectories: list[Trajectory] = Field(default_factory=list)
    termination_reason: TerminationReason | None = None
    is_correct: bool = False
    metrics: dict[str, Any] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return self.id.rsplit(":", 1)[0]

    @property
    def rollout_idx(self) -> int:
        return int(self.id.rsplit(":", 1)[1])

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> Episode:
        return cls.model_validate_json(text)
