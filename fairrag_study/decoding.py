"""Greedy decoding of many prompts in one running batch, each answer the one its prompt gets
alone: the local model's engine (docs/SPEC.md, "The study" → Local generator).

:class:`Decoder` holds the rows being answered. :meth:`Decoder.admit` reads a prompt alone
(a padded batch read prompts at 1.5x the CPU time: wasted padding, masked attention) and
adds its key/value cache to the batch, left-padded to the batch's width; :meth:`Decoder.step`
takes one greedy token for every row, lets finished rows (their end token, or
``max_new_tokens``) leave, and runs the model once for the rest. A row can be admitted between
any two steps (continuous batching: a slot freed by a short answer is filled by the next
prompt instead of idling until the longest answer of a fixed batch ends), which is what the
token-by-token part needs: there a batch reads the weights once for all its rows.

Positions count from each row's first token (padding masked), as transformers' ``generate``
does, so each answer equals the one its prompt gets alone (``tests/study/decoding_test.py``,
``benchmarks/bench_local_llm.py`` counts the equal answers). The key/value cache grows in
place (:func:`_growing_layer`): transformers' ``DynamicCache`` concatenates every layer's
whole cache at every token.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, cast

from .paper_format import AnswerConstraint, forbid_outside

__all__ = ["Decoder", "greedy_batch"]


@dataclass
class _Row:
    key: Hashable
    constraint: AnswerConstraint | None
    tokens: list[int] = field(default_factory=list)


class Decoder:
    """A running batch of greedy answers over ``model`` (a transformers causal LM), each at
    most ``max_new_tokens`` new tokens, ended by ``eos``. Not thread-safe: one caller at a
    time (:class:`fairrag_study.local_llm.LocalChatModel` passes it between its callers)."""

    def __init__(self, model: Any, max_new_tokens: int, eos: int) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens!r}")
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.eos = eos
        self._rows: list[_Row] = []
        self._cache: Any = None  # a DynamicCache of growing layers while rows are held
        self._mask: Any = None  # [rows, width]: 1 where a row has a token
        self._logits: Any = None  # [rows, vocabulary]: each row's next-token scores
        self._ending: list[Hashable] = []  # rows ended by a step whose model call is running

    def __len__(self) -> int:
        """Rows being answered."""
        return len(self._rows)

    @property
    def keys(self) -> list[Hashable]:
        """The rows' keys, in admission order of those still held."""
        return [row.key for row in self._rows]

    def admit(
        self,
        prompt: Sequence[int],
        key: Hashable,
        constraint: AnswerConstraint | None = None,
    ) -> None:
        """Read ``prompt`` (token ids) alone and add it as a row named ``key`` (given back by
        :meth:`step` with its answer); ``constraint``: the tokens its answer may take."""
        import torch
        from transformers import DynamicCache

        if len(prompt) == 0:
            raise ValueError("prompt must hold at least one token, got none")
        alone: Any = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=torch.tensor([list(prompt)]), cache=alone, use_cache=True, logits_to_keep=1
        )
        first = out.logits[:, -1, :]
        layer_class = _growing_layer()
        if not self._rows:
            self._cache = DynamicCache(config=self.model.config)
            self._cache.layers = [
                layer_class(layer.keys, layer.values, self.max_new_tokens) for layer in alone.layers
            ]
            self._mask = torch.ones((1, len(prompt)), dtype=torch.long)
            self._logits = first
        else:
            width = self._mask.shape[1]
            if len(prompt) > width:  # the rows held move right to make room
                for layer in self._cache.layers:
                    layer.pad_left(len(prompt) - width)
                self._mask = torch.nn.functional.pad(self._mask, (len(prompt) - width, 0))
                width = len(prompt)
            for held, layer in zip(self._cache.layers, alone.layers, strict=True):
                held.add_row(layer.keys, layer.values)
            row = [0] * (width - len(prompt)) + [1] * len(prompt)
            self._mask = torch.cat([self._mask, torch.tensor([row])])
            self._logits = torch.cat([self._logits, first])
        self._rows.append(_Row(key, constraint))

    def step(self) -> list[tuple[Hashable, list[int]]]:
        """One greedy token for every row; the rows that finished, as ``(key, new tokens)``
        (with the end token when they took it), leave the batch."""
        import torch

        if not self._rows:
            return []
        scores = self._logits.float()
        constraints = [row.constraint for row in self._rows]
        if any(c is not None for c in constraints):
            scores = forbid_outside(scores, constraints)
        tokens = scores.argmax(-1)
        finished: list[tuple[Hashable, list[int]]] = []
        keep: list[int] = []
        for at, (row, token) in enumerate(zip(self._rows, tokens.tolist(), strict=True)):
            row.tokens.append(token)
            if row.constraint is not None:
                row.constraint.advance(token)
            if token == self.eos or len(row.tokens) >= self.max_new_tokens:
                finished.append((row.key, row.tokens))
            else:
                keep.append(at)
        if not keep:
            self.clear()
            return finished
        self._ending = [key for key, _ in finished]  # given to clear() if the call below fails
        if len(keep) < len(self._rows):
            rows = torch.tensor(keep)
            self._cache.batch_select_indices(rows)
            self._mask, tokens = self._mask[rows], tokens[rows]
            self._rows = [self._rows[at] for at in keep]
            empty = int((self._mask.sum(0) == 0).long().cumprod(0).sum())
            if empty:  # columns no row holds any more: padding only
                for layer in self._cache.layers:
                    layer.trim_left(empty)
                self._mask = self._mask[:, empty:]
        self._mask = torch.cat([self._mask, self._mask.new_ones((len(self._rows), 1))], dim=1)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=self._mask,
            position_ids=self._mask.sum(-1, keepdim=True) - 1,
            cache=self._cache,
            use_cache=True,
        )
        self._logits = out.logits[:, -1, :]
        self._ending = []
        return finished

    def clear(self) -> list[Hashable]:
        """Drop every row (after an error); their keys, with those of the rows that ended in
        a step whose model call then failed (their answers were never given back)."""
        keys = [*self._ending, *self.keys]
        self._rows, self._cache, self._mask, self._logits = [], None, None, None
        self._ending = []
        return keys


def greedy_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos: int,
    constraints: Sequence[AnswerConstraint | None] | None = None,
    max_rows: int | None = None,
) -> list[list[int]]:
    """The greedy continuation of each prompt (token ids; up to and with ``eos``, at most
    ``max_new_tokens``), at most ``max_rows`` (None: all) decoded at once by a
    :class:`Decoder`, the next prompt admitted as soon as a row finishes.

    transformers' ``generate`` on a batch runs every row until the longest is done; here a
    row that reached ``eos`` leaves the batch, so a batch costs the decoding steps its answers
    take, and each answer is the one its prompt gets alone."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be at least 1 or None, got {max_rows!r}")
    if constraints is not None and len(constraints) != len(prompts):
        raise ValueError(
            f"constraints must hold one entry per prompt ({len(prompts)}), got {len(constraints)}"
        )
    decoder = Decoder(model, max_new_tokens, eos)
    limit = len(prompts) if max_rows is None else max_rows
    generated: list[list[int]] = [[] for _ in prompts]
    following = 0
    while following < len(prompts) or len(decoder):
        while following < len(prompts) and len(decoder) < limit:
            constraint = None if constraints is None else constraints[following]
            decoder.admit(prompts[following], following, constraint)
            following += 1
        for key, tokens in decoder.step():
            generated[cast(int, key)] = tokens
    return generated


@cache
def _growing_layer() -> type:
    """transformers' ``DynamicLayer`` whose keys and values grow in place: a buffer with room
    for more tokens, the cache a view of its filled part (``DynamicLayer`` concatenates the
    whole cache at every token). Made on first use: transformers loads with the model."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def __init__(self, keys: Any, values: Any, room: int) -> None:
            super().__init__()
            self.device = keys.device
            self.is_initialized = True
            self._room = room
            self._filled = keys.shape[-2]
            self._keys = self._placed(keys, 0, 0)
            self._values = self._placed(values, 0, 0)
            self._view()

        def _placed(self, held: Any, rows: int, columns: int) -> Any:
            """A new zeroed buffer of ``rows`` more rows and ``columns`` more (left) columns
            than ``held``'s filled part, with room for ``_room`` tokens, ``held`` copied in.
            Room is added in fixed steps, not doubled: the buffers stay near the width."""
            shape = (held.shape[0] + rows, held.shape[1], self._filled + columns, held.shape[-1])
            out = held.new_zeros((*shape[:2], shape[2] + self._room, shape[3]))
            out[: held.shape[0], :, columns : columns + self._filled] = held[:, :, : self._filled]
            return out

        def _view(self) -> None:
            self.keys = self._keys[:, :, : self._filled]
            self.values = self._values[:, :, : self._filled]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            new = key_states.shape[-2]
            if self._filled + new > self._keys.shape[-2]:
                self._room = max(self._room, new)
                self._keys = self._placed(self._keys, 0, 0)
                self._values = self._placed(self._values, 0, 0)
            self._keys[:, :, self._filled : self._filled + new] = key_states
            self._values[:, :, self._filled : self._filled + new] = value_states
            self._filled += new
            self._view()
            return self.keys, self.values

        def batch_select_indices(self, indices: Any) -> None:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self._view()

        def add_row(self, keys: Any, values: Any) -> None:
            """A row read alone (``[1, heads, n, dim]``, n at most the width) appended,
            left-padded to the width."""
            start = self._filled - keys.shape[-2]
            self._keys = self._placed(self._keys, 1, 0)
            self._values = self._placed(self._values, 1, 0)
            self._keys[-1, :, start : self._filled] = keys[0]
            self._values[-1, :, start : self._filled] = values[0]
            self._view()

        def pad_left(self, columns: int) -> None:
            """Every row moved ``columns`` to the right (padding before its first token)."""
            self._keys = self._placed(self._keys, 0, columns)
            self._values = self._placed(self._values, 0, columns)
            self._filled += columns
            self._view()

        def trim_left(self, columns: int) -> None:
            """The first ``columns`` dropped (padding in every row)."""
            self._keys = self._keys[:, :, columns:]
            self._values = self._values[:, :, columns:]
            self._filled -= columns
            self._view()

    return GrowingLayer
