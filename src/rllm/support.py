"""Which config keys each training backend, rollout server and device honours: the one place that says so.

`UNSUPPORTED` lists every (key, context) where a key of `TrainConfig` parses and would then do nothing, with what
to use instead. The context is the training backend (`trainer.backend`), the rollout server (`rollout.server`),
the device of the local rollout model and the command (`rllm train`, `rllm eval`); a key not listed for a context
takes effect there. From this one table come:

- the refusal: `TrainConfig`'s validator (every command) and `rllm.config.check_support(config, command)` at the
  start of `rllm train` and `rllm eval` (entries for one command) call `refusal`, which names the first refused key
  in one line: `rollout.vllm.dtype is set but rollout.server=local does not use it (...); remove it or use ...`;
- the support table of `docs/training/settings.md` (`support_table`, written by `python -m rllm.support`; a test
  fails when the page is out of date);
- `tests/unit/test_support.py`, which walks every leaf key x backend x server and fails on a key that is neither
  refused here nor read by the code of that path (found by scanning the source).

Design choices:

- "Set" means "differs from its default", not "named in the YAML": `override_config` and resume round-trip the
  config through `model_dump`, which forgets which fields were given, and a key set to its default asks for what
  happens anyway. So a config may write `model.dtype: float32` and run on any server; a default never refuses.
- An entry may refuse one value of a key rather than the key (`algorithm.advantage: gae` on verl: the key itself is
  honoured there): `when` says which values, `value` names them in the message and the table.
- A key may be a section (`rollout.vllm.*`): every leaf under it is refused there; the message names the leaf set.
- An entry may also need another key's setting (`condition`): `rollout.vllm.dtype` does nothing once
  `rollout.vllm.base_url` attaches to a running server. Such entries are few and named in the table; the walk
  (`tests/unit/test_support.py`) checks backends and servers, not every combination of values.
- The device is the local rollout model's: `model.device` on the torch backend and in `rllm eval`, the driver's CPU
  on verl (its workers place themselves). Entries for a device apply with `rollout.server: local` only.
- Out of scope, on purpose, and listed on the docs page: keys `rllm eval` leaves alone because they describe
  training (`TRAINING_ONLY`: one config trains and evaluates, so eval does not refuse them), and the sections of
  other commands (`OTHER_COMMANDS`: `sft`, `dpo`, `rft`, read by their own commands; a config may carry them for a
  later `rllm sft`).
- The module sits with the small shared modules (docs/architecture.md, layer 18), below `rllm.config`, and reads
  the config by attribute only (duck typing on the pydantic models), so the config's validator can call it; it
  imports nothing but the standard library (`import rllm` stays light).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "OTHER_COMMANDS",
    "TRAINING_ONLY",
    "UNSUPPORTED",
    "Unsupported",
    "context_of",
    "refusal",
    "support_table",
    "write_support_table",
]

BACKENDS = ("torch", "verl")
SERVERS = ("local", "vllm", "openai")
COMMANDS = ("train", "eval")


@dataclass(frozen=True)
class Unsupported:
    """`key` does nothing where every given condition holds (None: any); `why` says why, `instead` what to do."""

    key: str
    why: str
    instead: str
    backend: tuple[str, ...] | None = None
    server: tuple[str, ...] | None = None
    device: tuple[str, ...] | None = None
    command: tuple[str, ...] | None = None
    value: str | None = None  # the refused value, shown as key=value; None: any value but the default
    # which values are refused (None: any but the default); a str result names the refused key itself
    when: Callable[[Any], bool | str | None] | None = None
    label: str | None = None  # how the docs table names the key, where key=value does not say it
    # another key's setting the refusal needs: in words (for the message and the table), and its test on the config
    condition: tuple[str, Callable[[Any], bool]] | None = None

    def applies(self, context: dict[str, str | None]) -> bool:
        conditions = {"backend": self.backend, "server": self.server, "device": self.device, "command": self.command}
        return all(allowed is None or context[name] in allowed for name, allowed in conditions.items())

    def where(self) -> str:
        """The context in words, as the message and the table show it."""
        parts = []
        if self.command:
            parts.append(" or ".join(f"rllm {c}" for c in self.command))
        for key, values in (("trainer.backend", self.backend), ("rollout.server", self.server)):
            if values:
                parts.append(f"{key}={' or '.join(values)}")
        if self.device:
            parts.append(f"a local rollout model on {' or '.join(self.device)}")
        if self.condition:
            parts.append(self.condition[0])
        return " with ".join(parts) if parts else "any backend or server"


def _others(values: tuple[str, ...], *kept: str) -> tuple[str, ...]:
    return tuple(v for v in values if v not in kept)


def _role_sets(*fields: str) -> Callable[[Any], str | None]:
    """The first `algorithm.roles.<role>.<field>` set among `fields`, for the message to name."""

    def first_set(roles: dict[str, Any]) -> str | None:
        found = [f"algorithm.roles.{n}.{f}" for n, r in roles.items() for f in fields if getattr(r, f) is not None]
        return found[0] if found else None

    return first_set


_VERL = ("verl",)
_TORCH_ONLY = "use trainer.backend=torch"
_CRITIC = "PPO with a critic trains on the torch backend only: verl's critic workers are not wired in yet"

UNSUPPORTED: tuple[Unsupported, ...] = (
    # ------------------------------------------------------------------ the rollout server
    Unsupported(
        "rollout.server",
        "the trainer cannot update an endpoint's weights",
        "train with rollout.server=local or vllm (openai is for rllm eval)",
        command=("train",),
        value="openai",
        when=lambda server: server == "openai",
    ),
    Unsupported(
        "rollout.vllm.*",
        "no vLLM server is started or attached",
        "remove it or use rollout.server=vllm",
        server=_others(SERVERS, "vllm"),
    ),
    Unsupported(
        "rollout.openai.*",
        "no OpenAI-compatible endpoint is sampled",
        "remove it or use rollout.server=openai (rllm eval)",
        server=_others(SERVERS, "openai"),
    ),
    Unsupported(
        "inference.*",
        "these are the local engine's (LocalModel) settings",
        "remove them or use rollout.server=local (a vLLM server takes rollout.vllm.extra_args)",
        server=_others(SERVERS, "local"),
    ),
    Unsupported(
        "rollout.dtype",
        "it is the local rollout model's dtype",
        "set the server's dtype instead (rollout.vllm.dtype) and drop rollout.dtype",
        server=_others(SERVERS, "local"),
    ),
    Unsupported(
        "inference.cuda_graphs",
        "CUDA graphs exist on a GPU only",
        "remove it, or sample on a GPU (model.device=cuda)",
        server=("local",),
        device=("cpu",),
    ),
    Unsupported(
        "inference.packed_linears",
        "packed linears are fp32 CPU layers (oneDNN)",
        "remove it",
        server=("local",),
        device=("cuda",),
    ),
    *(
        Unsupported(
            f"rollout.vllm.{key}",
            "rllm attaches to the running server and starts none",
            "remove it, or start the server with it yourself",
            server=("vllm",),
            condition=("rollout.vllm.base_url set", lambda config: config.rollout.vllm.base_url is not None),
        )
        for key in ("python", "dtype", "max_model_len", "max_lora_rank", "startup_timeout", "extra_args")
    ),
    Unsupported(
        "rollout.vllm.max_lora_rank",
        "the server takes LoRA adapters only to hot-load them, with rollout.vllm.sync=lora",
        "remove it or use rollout.vllm.sync=lora",
        server=("vllm",),
        condition=("rollout.vllm.sync=reload or nccl", lambda config: config.rollout.vllm.sync != "lora"),
    ),
    # ------------------------------------------------------------------ rllm eval's model
    Unsupported(
        "model.init_from",
        "rllm eval serves model.name's folder with vLLM as it is",
        "evaluate another run's weights with rollout.server=local",
        command=("eval",),
        server=("vllm",),
    ),
    Unsupported(
        "model.dtype",
        "the server loads the model itself",
        "remove it; set rollout.vllm.dtype (vllm) or the endpoint's own dtype (openai)",
        command=("eval",),
        server=("vllm", "openai"),
    ),
    Unsupported(
        "model.device",
        "the server places the model itself",
        "remove it (rllm eval runs no model in this process)",
        command=("eval",),
        server=("vllm", "openai"),
    ),
    Unsupported(
        "model.init_from",
        "the endpoint serves its own weights",
        "evaluate another run's weights with rollout.server=local",
        command=("eval",),
        server=("openai",),
    ),
    # ------------------------------------------------------------------ the backends
    Unsupported(
        "trainer.nodes",
        "the torch backend runs in one process",
        "set trainer.backend=verl to train on several workers",
        backend=("torch",),
    ),
    Unsupported(
        "trainer.workers_per_node",
        "the torch backend runs in one process",
        "set trainer.backend=verl to train on several workers",
        backend=("torch",),
    ),
    Unsupported(
        "verl.*",
        "it configures the verl backend's workers",
        "remove it or set trainer.backend=verl",
        backend=("torch",),
    ),
    Unsupported(
        "distill.*",
        "on-policy distillation trains on the torch backend only",
        _TORCH_ONLY,
        backend=_VERL,
    ),
    Unsupported(
        "model.init_from",
        "the verl backend's workers load model.name",
        _TORCH_ONLY,
        backend=_VERL,
    ),
    Unsupported(
        "model.device",
        "the verl backend places its workers itself (one GPU per worker where there are GPUs)",
        "drop model.device",
        backend=_VERL,
    ),
    Unsupported(
        "model.lora.dropout",
        "the verl backend's LoRA adapters take no dropout",
        f"remove it or {_TORCH_ONLY}",
        backend=_VERL,
    ),
    Unsupported(
        "model.vision_tower",
        "the verl backend trains text models only",
        _TORCH_ONLY,
        backend=_VERL,
    ),
    Unsupported(
        "rollout.dtype",
        "the verl backend's rollout model is its driver's float32 copy (or a vLLM server)",
        "drop rollout.dtype (with rollout.server=vllm: set rollout.vllm.dtype)",
        backend=_VERL,
    ),
    Unsupported(
        "rollout.max_staleness",
        "asynchronous training runs on the torch backend only: verl's workers keep no separate rollout copy",
        _TORCH_ONLY,
        backend=_VERL,
    ),
    Unsupported(
        "rollout.partial_rollouts",
        "it acts with rollout.max_staleness > 0, which runs on the torch backend only",
        _TORCH_ONLY,
        backend=_VERL,
    ),
    Unsupported(
        "rollout.partial_rollouts",
        "it changes how asynchronous training pushes weights; synchronous training waits for no rollout",
        "remove it or set rollout.max_staleness >= 1",
        condition=("rollout.max_staleness=0", lambda config: not config.rollout.max_staleness),
    ),
    *(
        Unsupported(
            f"algorithm.off_policy.{key}",
            "off-policy corrections train on the torch backend only: verl's workers take no behaviour log-probs yet",
            _TORCH_ONLY,
            backend=_VERL,
        )
        for key in ("mode", "is_level", "is_mode", "is_high", "is_low")
    ),
    Unsupported(
        "algorithm.advantage",
        _CRITIC,
        f"{_TORCH_ONLY} or another estimator",
        backend=_VERL,
        value="gae",
        when=lambda advantage: advantage == "gae",  # a role's gae implies it: gae is all roles or none
    ),
    Unsupported(
        "algorithm.roles",
        "a policy loss per role trains on the torch backend only: verl's workers do not receive the rows' roles yet",
        f"{_TORCH_ONLY} or set them in algorithm for every role",
        backend=_VERL,
        when=_role_sets("policy_loss", "clip_low", "clip_high"),
        label="algorithm.roles.<role>.policy_loss / clip_low / clip_high",
    ),
    *(
        Unsupported(key, _CRITIC, _TORCH_ONLY, backend=_VERL)
        for key in ("algorithm.lam", "algorithm.value_coef", "algorithm.value_clip", "optim.critic_lr")
    ),
    Unsupported(
        "rollout.vllm.sync",
        "the verl backend hands rollouts merged weights",
        "use rollout.vllm.sync=reload",
        backend=_VERL,
        server=("vllm",),
        value="lora",
        when=lambda sync: sync == "lora",
    ),
    # ------------------------------------------------------------------ everywhere
    Unsupported(
        "distill.endpoint.timeout",
        "the served teacher (EndpointTeacher) waits a fixed 120 s for each request",
        "remove it",
    ),
    Unsupported(
        "distill.endpoint.max_retries",
        "the served teacher (EndpointTeacher) retries a failed request a fixed 3 times",
        "remove it",
    ),
)

# Keys `rllm eval` reads nothing of, by design: they describe training, and one config trains and evaluates.
TRAINING_ONLY = (
    "algorithm",
    "optim",
    "verl",
    "distill",
    "model.lora",
    "model.gradient_checkpointing",
    "model.vision_tower",
    "rollout.n",
    "rollout.temperature",
    "rollout.max_staleness",
    "rollout.partial_rollouts",
    "rollout.dtype",
    "rollout.vllm.sync",
    "rollout.vllm.max_lora_rank",
    "rollout.vllm.logprob_tolerance",
    "trainer.backend",
    "trainer.nodes",
    "trainer.workers_per_node",
    "trainer.total_steps",
    "trainer.tasks_per_step",
    "trainer.val_every",
    "trainer.save_every",
    "trainer.save_every_minutes",
    "trainer.keep_checkpoints",
    "trainer.resume",
    "trainer.stop_after",
    "trainer.tensorboard",
    "trainer.log_episodes",
    "trainer.max_nonfinite_updates",
    "data.train_size",
    "data.seed",
)

# Sections that belong to other commands, which read them (and train on the torch backend only).
OTHER_COMMANDS = {"sft": "rllm sft (and rllm rft's SFT)", "dpo": "rllm dpo", "rft": "rllm rft"}


def under(key: str, prefixes: tuple[str, ...] | Any) -> bool:
    """Whether `key` is one of `prefixes` or inside one of those sections."""
    return any(key == p or key.startswith(f"{p}.") for p in prefixes)


# ------------------------------------------------------------------------------------------------------ refusing


def context_of(config: Any, command: str | None = None) -> dict[str, str | None]:
    """The backend, server, local rollout device and command a config runs with (module docstring)."""
    backend = config.trainer.backend
    device = "cpu" if backend == "verl" and command != "eval" else config.model.device.split(":")[0]
    return {"backend": backend, "server": config.rollout.server, "device": device, "command": command}


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, value, default) for every leaf under the pydantic model `node`."""
    for name, field in type(node).model_fields.items():
        value = getattr(node, name)
        dotted = f"{prefix}.{name}" if prefix else name
        if hasattr(type(value), "model_fields"):
            yield from _leaves(value, dotted)
        else:
            yield dotted, value, field.get_default(call_default_factory=True)


def _set_keys(config: Any, key: str) -> Iterator[tuple[str, Any, Any]]:
    """(key, value, default) of `key`, or of every leaf under it for a section (`rollout.vllm.*`)."""
    key = key.removesuffix(".*")
    node, parent = config, None
    for part in key.split("."):
        parent, node = node, getattr(node, part)
    if hasattr(type(node), "model_fields"):
        yield from _leaves(node, key)
    else:
        yield key, node, type(parent).model_fields[key.rsplit(".", 1)[-1]].get_default(call_default_factory=True)


def refusal(config: Any, command: str | None = None) -> str | None:
    """The first key `config` sets that does nothing where it runs, as one line; None when every key takes effect.
    `command` None checks the entries for every command (config validation); "train" or "eval" those for it."""
    context = context_of(config, command)
    for entry in UNSUPPORTED:
        if (entry.command is None) != (command is None) or not entry.applies(context):
            continue
        if entry.condition is not None and not entry.condition[1](config):
            continue
        for key, value, default in _set_keys(config, entry.key):
            refused = entry.when(value) if entry.when is not None else value != default
            if refused:
                shown = refused if isinstance(refused, str) else f"{key}={entry.value}" if entry.value else key
                verb = "does not support it" if entry.when is not None else "does not use it"
                return f"{shown} is set but {_actual(entry, context)} {verb} ({entry.why}); {entry.instead}"
    return None


def _actual(entry: Unsupported, context: dict[str, str | None]) -> str:
    """The context as this config has it, e.g. `rollout.server=local` (only the conditions the entry names)."""
    parts = [f"rllm {context['command']}"] if entry.command else []
    if entry.backend:
        parts.append(f"trainer.backend={context['backend']}")
    if entry.server:
        parts.append(f"rollout.server={context['server']}")
    if entry.device:
        parts.append(f"a local rollout model on {context['device']}")
    if entry.condition:
        parts.append(entry.condition[0])
    return " with ".join(parts) if parts else "rllm"


# ------------------------------------------------------------------------------------------------- the docs table

BEGIN, END = "<!-- support-table:begin (python -m rllm.support) -->", "<!-- support-table:end -->"
DOCS_PAGE = Path("docs/training/settings.md")


def support_table() -> str:
    """The markdown the docs page holds between its markers: one row per declaration, then the scopes."""
    lines = ["| key | does nothing with | why | instead |", "|---|---|---|---|"]
    for entry in UNSUPPORTED:
        shown = f"`{entry.label or (f'{entry.key}={entry.value}' if entry.value else entry.key)}`"
        lines.append(f"| {shown} | {entry.where()} | {entry.why} | {entry.instead} |")
    training_only = ", ".join(f"`{k}`" for k in TRAINING_ONLY)
    others = "; ".join(f"`{section}.*`: {command}" for section, command in OTHER_COMMANDS.items())
    return "\n".join(
        [
            *lines,
            "",
            f"Read by training only (`rllm eval` leaves them alone and does not refuse them): {training_only}.",
            "",
            f"Read by their own commands only (not refused by `rllm train` or `rllm eval`): {others}.",
        ]
    )


def write_support_table(page: Path = DOCS_PAGE) -> bool:
    """Put `support_table()` between the page's markers; returns whether the page changed."""
    text = page.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    if not rest or END not in rest:
        raise ValueError(f"{page} has no {BEGIN} ... {END} markers")
    new = f"{head}{BEGIN}\n{support_table()}\n{END}{tail}"
    page.write_text(new)
    return new != text


if __name__ == "__main__":
    changed = write_support_table()
    print(f"{DOCS_PAGE}: {'updated' if changed else 'up to date'}")
