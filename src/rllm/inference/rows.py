"""The per-row state of `LocalModel`'s decode loop, kept on the model's device.

Row i is running sequence i (the K/V cache's slot i). Everything a decode step reads or writes per row lives here
as one device vector per field: the token to feed next, its position, how many tokens the row sampled (the index of
its next uniform), its sampling settings and its stream of uniforms. So a decode step needs no host-to-device copy,
and its one device-to-host copy is `out` (the new ids and their log-probs). A step is the same few operations
whatever the number of rows, and it can be replayed from a CUDA graph: it reads and writes only these fixed
tensors. Rows past the running ones (the padding of a graph's fixed batch) are inactive: they feed token 0 at
position 0 of their own empty slot, and `active` keeps their positions still.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from rllm.inference.sampling import RowSampler, SamplingMode, sample_rows

__all__ = ["RowState"]


class RowState:
    """Device vectors of every row, `max_rows` long. Written only by the scheduler's thread."""

    def __init__(self, max_rows: int, device: torch.device) -> None:
        self.max_rows = max_rows
        self.device = device

        def vector(fill: float, dtype: torch.dtype) -> Tensor:
            return torch.full((max_rows,), fill, dtype=dtype, device=device)

        self.next_ids = vector(0, torch.long)  # the last sampled token: the input of the next decode step
        self.positions = vector(0, torch.long)  # K/V positions the row holds = the position of `next_ids`
        self.steps = vector(0, torch.long)  # tokens sampled so far = the index of the next uniform
        self.active = vector(0, torch.long)  # 1 for running rows
        self.temperatures = vector(1.0, torch.float32)  # 1 for greedy rows (the logprob convention)
        self.greedy = vector(True, torch.bool)
        self.top_k = vector(0, torch.long)
        self.top_p = vector(1.0, torch.float32)
        self.uniforms = torch.zeros(max_rows, 1, dtype=torch.float64, device=device)
        self.out = torch.zeros(2, max_rows, dtype=torch.float64, device=device)  # ids and logprobs, for the host
        self.index = torch.arange(max_rows, device=device)
        self.generation = 0  # bumped when a tensor above is reallocated (a captured graph holds the old one)

    # ------------------------------------------------------------ admission

    def start_rows(self, first: int, samplers: Sequence[RowSampler], positions: Sequence[int]) -> None:
        """Rows `first..first+len(samplers)-1` begin: their settings, uniforms and prompt lengths (K/V held)."""
        rows = slice(first, first + len(samplers))
        width = max((len(s.uniforms) for s in samplers if s.uniforms is not None), default=1)
        if width > self.uniforms.shape[1]:
            self._widen_uniforms(width)
        self.temperatures[rows] = self._host([1.0 if s.greedy else s.temperature for s in samplers], torch.float32)
        self.greedy[rows] = self._host([s.greedy for s in samplers], torch.bool)
        self.top_k[rows] = self._host([s.top_k for s in samplers], torch.long)
        self.top_p[rows] = self._host([s.top_p for s in samplers], torch.float32)
        self.positions[rows] = self._host(list(positions), torch.long)
        self.steps[rows] = 0
        self.active[rows] = 1
        streams = [s.uniforms if s.uniforms is not None else self.uniforms.new_zeros(1) for s in samplers]
        padded = torch.nn.utils.rnn.pad_sequence(streams, batch_first=True)
        self.uniforms[rows, : padded.shape[1]] = padded

    def _widen_uniforms(self, width: int) -> None:
        wider = torch.zeros(
            self.max_rows, max(width, 2 * self.uniforms.shape[1]), dtype=torch.float64, device=self.device
        )
        wider[:, : self.uniforms.shape[1]] = self.uniforms
        self.uniforms = wider
        self.generation += 1

    def _host(self, values: list, dtype: torch.dtype) -> Tensor:
        return torch.tensor(values, dtype=dtype).to(self.device, non_blocking=True)

    # ------------------------------------------------------------ sampling

    def sample(self, logits: Tensor, first: int, mode: SamplingMode) -> tuple[Tensor, Tensor]:
        """Sample rows `first..first+len(logits)-1` from their `logits` at their current step; advance nothing."""
        rows = slice(first, first + logits.shape[0])
        steps = self.steps[rows].clamp(max=self.uniforms.shape[1] - 1)  # inactive rows may run past their stream
        uniforms = self.uniforms[self.index[rows], steps]
        return sample_rows(
            logits,
            temperatures=self.temperatures[rows],
            greedy=self.greedy[rows],
            top_k=self.top_k[rows],
            top_p=self.top_p[rows],
            uniforms=uniforms,
            mode=mode,
        )

    def record(self, first: int, tokens: Tensor, logprobs: Tensor, *, advance: bool) -> None:
        """Store sampled `tokens` as the rows' next input and in `out`; `advance`: their previous input's K/V were
        just written (a decode step), so their positions move on."""
        rows = slice(first, first + tokens.shape[0])
        self.next_ids[rows] = tokens
        if advance:
            self.positions[rows] += self.active[rows]
        self.steps[rows] += self.active[rows]
        self.out[0, rows] = tokens.double()
        self.out[1, rows] = logprobs.double()

    def read_out(self, first: int, count: int) -> tuple[list[int], list[float]]:
        """The host copy of rows' newest tokens and log-probs: the step's one device-to-host transfer."""
        ids, logprobs = self.out[:, first : first + count].cpu().tolist()
        return [int(t) for t in ids], logprobs

    # ------------------------------------------------------------ retiring

    def move(self, targets: list[int], sources: list[int]) -> None:
        """Row `sources[i]` becomes row `targets[i]` (filling the holes finished rows left)."""
        target = torch.tensor(targets, device=self.device)
        source = torch.tensor(sources, device=self.device)
        for vector in (
            self.next_ids,
            self.positions,
            self.steps,
            self.active,
            self.temperatures,
            self.greedy,
            self.top_k,
            self.top_p,
            self.uniforms,
        ):
            vector[target] = vector[source]

    def stop_rows(self, first: int, last: int) -> None:
        """Rows `first..last-1` are no longer running: they become padding that keeps still."""
        rows = slice(first, last)
        self.active[rows] = 0
        self.positions[rows] = 0
        self.steps[rows] = 0
        self.next_ids[rows] = 0
