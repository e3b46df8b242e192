"""The token-exactness report of a run: what it counts, where each count comes from, and which counts are problems
(docs/guarantees.md, "Token exactness"). Pure functions on episodes and metric dicts; imports only `rllm.types`, so
the trainer, `rllm eval`, `rllm view` and `rllm audit` read one definition.

Counts, per step under `exactness/<key>` in metrics.jsonl and as totals and a per-step series in the run's
`exactness.json` (`report`):

    turns                 model calls of the step's episodes
    prefix_breaks         turns whose prompt did not extend the previous prompt + the sampled reply (the episodes'
                          `token_mismatch`); each starts a new training row. By cause (`rllm.models.exactness`):
    template_breaks         the template printed an earlier reply differently once later turns followed (strips
                            earlier `<think>` blocks, trims content): legitimate, counted
    history_breaks          the agent changed earlier messages (rewrote, shortened, dropped its reply): legitimate
    round_trip_failures     the reply as the agent stored it (parsed into tool calls, its content edited) does not
                            render back to the text that was sampled
    tool_format_failures  turns with tools whose chat template writes tool calls that rllm's parser does not read
                          back (rendered then parsed: the model is taught a format its calls would parse as 0 calls)
    retokenized           turns whose prompt was tokenized again from text holding an earlier sampled reply (every
                          prefix break is one; 0 on the exact path)
    outputs_without_ids   model outputs that carried no token ids (a chat endpoint without a tokenizer): never
                          re-tokenized, and refused for training
    rows_split            training: steps that started a new row in `build_rows` (the batch's view of prefix breaks,
                          over the trajectories that trained)
    logprob_abs_diff_mean, logprob_abs_diff_max, logprob_frac_beyond, logprob_tokens, logprob_threshold
                          training: |log p_train - log p_sample| over the sampled tokens the update measured (the
                          backend's `mismatch/*`: the first mini-batch's log-probs, which its loss computes anyway,
                          before the first optimizer step; every row under `off_policy.mode=decoupled`): mean, max,
                          the share above `algorithm.off_policy.mismatch_threshold` (logprob_threshold), tokens

What fails an audit (`exactness_findings`), and why:

- any round-trip failure: a reply that does not print back as sampled after the agent's parse is what the reference
  bug looked like (a tool-call format parsed as zero calls); the model is then trained in a context it never wrote;
- any tool-format failure: the template teaches calls that rllm parses as none, so tool use earns no reward;
- in a run that trains, outputs without ids, and a step whose rows split more often than its prefix breaks were
  counted: neither can happen on rllm's paths (training refuses outputs without ids; `build_rows` splits by the
  same rule the renderer counts by), so either is a bug to look at;
- logprobs: a step whose largest |log p_train - log p_sample| is over `MAX_LOGPROB_DIFF` (1.0: one token e times
  more or less likely under the trainer), or whose share of tokens over the threshold is over `MAX_FRAC_BEYOND`
  (1%). A float32 LocalModel stays at rounding level (~1e-6); bf16 sampling measured 0.02 mean, 0.16 max.

Counted, not failures: prefix breaks from the template or the history (the new row is exactly what the model was
sent: docs/guarantees.md, "A rewritten history trains as sampled"), and re-tokenizations. A re-tokenized prompt
never puts a re-tokenized token into training: a turn merges only when the ids tokenized again start with the
sampled ids (compared id for id), and otherwise starts a new row of what the model was sent; its cause is one of
the breaks above, or a reply whose decoded text the template prints otherwise while its ids agree (a SentencePiece
vocabulary's leading space), which is exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rllm.types import Episode

__all__ = [
    "EPISODE_KEYS",
    "MAX_FRAC_BEYOND",
    "MAX_LOGPROB_DIFF",
    "PREFIX",
    "REPORT_FILE",
    "episode_counts",
    "exactness_findings",
    "report",
    "step_metrics",
]

PREFIX = "exactness/"
REPORT_FILE = "exactness.json"
MAX_LOGPROB_DIFF = 1.0
MAX_FRAC_BEYOND = 0.01
# what a workflow records in `episode.metrics` (as exactness/<key>, only when not 0: exact episodes stay as they were)
EPISODE_KEYS = ("template_breaks", "history_breaks", "round_trip_failures", "tool_format_failures", "retokenized")
_COUNTS = ("turns", "prefix_breaks", *EPISODE_KEYS, "outputs_without_ids", "rows_split")
_LOGPROB = ("logprob_abs_diff_mean", "logprob_abs_diff_max", "logprob_frac_beyond", "logprob_tokens")
# the backend's mismatch/* metrics (rllm.training.off_policy.MISMATCH_KEYS) -> ours
_FROM_MISMATCH = {
    "mismatch/abs_diff_mean": "logprob_abs_diff_mean",
    "mismatch/abs_diff_max": "logprob_abs_diff_max",
    "mismatch/frac_beyond": "logprob_frac_beyond",
    "mismatch/tokens": "logprob_tokens",
}


def episode_counts(episodes: Iterable[Episode]) -> dict[str, int]:
    """The counts of `episodes` (turns, prefix breaks and their causes, re-tokenizations, outputs without ids)."""
    counts = dict.fromkeys(_COUNTS[:-1], 0)
    for episode in episodes:
        metrics = episode.metrics or {}
        counts["prefix_breaks"] += int(metrics.get("token_mismatch", 0))
        for key in EPISODE_KEYS:
            counts[key] += int(metrics.get(PREFIX + key, 0))
        for step in (s for t in episode.trajectories for s in t.steps if s.model_output is not None):
            counts["turns"] += 1
            counts["outputs_without_ids"] += not step.model_output.has_token_ids
    return counts


def step_metrics(
    episodes: Iterable[Episode], metrics: Mapping[str, Any] | None = None, *, threshold: float | None = None
) -> dict[str, float]:
    """A step's `exactness/*` metrics: the counts of its episodes, plus, from the step's other `metrics` where they
    are there, `batch/rows_split` and the update's `mismatch/*` (measured with `threshold`)."""
    out: dict[str, float] = dict(episode_counts(episodes))
    metrics = metrics or {}
    if "batch/rows_split" in metrics:
        out["rows_split"] = metrics["batch/rows_split"]
    if metrics.get("mismatch/tokens"):
        out.update({ours: metrics[theirs] for theirs, ours in _FROM_MISMATCH.items()})
        if threshold is not None:
            out["logprob_threshold"] = threshold
    return {PREFIX + key: value for key, value in out.items()}


def report(kind: str, steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`exactness.json`: the run's `kind`, one entry per step (`{"step": n, <key>: value}`: the `exactness/*`
    metrics of that step, prefix removed), their totals, and `problems` (`exactness_findings`)."""
    series = [dict(step) for step in steps]
    data = {
        "kind": kind,
        "limits": {"max_logprob_diff": MAX_LOGPROB_DIFF, "max_frac_beyond": MAX_FRAC_BEYOND},
        "totals": _totals(series),
        "steps": series,
    }
    data["problems"] = exactness_findings(data)
    return data


def _totals(series: list[dict[str, Any]]) -> dict[str, Any]:
    totals: dict[str, Any] = {"steps": len(series)}
    for key in _COUNTS:
        values = [step[key] for step in series if key in step]
        if values:
            totals[key] = sum(values)
    measured = [step for step in series if step.get("logprob_tokens")]
    if measured:
        tokens = sum(step["logprob_tokens"] for step in measured)
        totals["logprob_tokens"] = tokens
        totals["logprob_steps"] = len(measured)
        for key in ("logprob_abs_diff_mean", "logprob_frac_beyond"):  # token-weighted, as over one batch
            totals[key] = sum(step[key] * step["logprob_tokens"] for step in measured) / tokens
        totals["logprob_abs_diff_max"] = max(step["logprob_abs_diff_max"] for step in measured)
    return totals


def exactness_findings(report: Mapping[str, Any]) -> list[str]:
    """The one-line problems of an `exactness.json` report that should fail an audit (the rules are in the module
    docstring); [] for an exact run. Each line names its count and the first step it happened at."""
    steps = [step for step in report.get("steps") or [] if isinstance(step, Mapping)]
    trains = report.get("kind") != "eval"
    findings = []
    for key, words in (
        ("round_trip_failures", "replies did not render back as sampled after the agent stored them (round trip)"),
        ("tool_format_failures", "turns had tools whose chat template writes calls rllm's parser reads as none"),
    ):
        findings += _counted(steps, lambda step, key=key: _number(step, key), words)
    if trains:
        findings += _counted(steps, lambda step: _number(step, "outputs_without_ids"), "model outputs had no token ids")
        findings += _counted(
            steps,
            lambda step: _number(step, "rows_split") - _number(step, "prefix_breaks"),
            "training rows split without a counted prefix break",
        )
    for step in steps:
        worst = _number(step, "logprob_abs_diff_max")
        share = _number(step, "logprob_frac_beyond")
        if worst > MAX_LOGPROB_DIFF or share > MAX_FRAC_BEYOND:
            findings.append(
                f"step {step.get('step')}: |logp_train - logp_sample| up to {worst:.3g} (mean "
                f"{_number(step, 'logprob_abs_diff_mean'):.3g}; {share:.1%} of tokens over "
                f"{step.get('logprob_threshold', '?')}): over the limits {MAX_LOGPROB_DIFF:g} / {MAX_FRAC_BEYOND:.0%}"
            )
            break  # the first step says enough; the series is in the report
    return findings


def _counted(steps: list[Mapping[str, Any]], count: Any, words: str) -> list[str]:
    per_step = [(step.get("step"), count(step)) for step in steps]
    total = sum(n for _, n in per_step if n > 0)
    if not total:
        return []
    first = next(step for step, n in per_step if n > 0)
    return [f"{total:g} {words} (first at step {first})"]


def _number(step: Mapping[str, Any], key: str) -> float:
    value = step.get(key, 0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
