"""Token-budget batches: length-bucketed, deterministic from (seed, epoch), split across DDP ranks.

A batch's cost is its padded size ``B * max(S, T)`` with ``S`` the longest
source and ``T`` the longest target plus one (bos/eos), and it stays within
``batch_tokens`` (a single example longer than the budget forms a batch alone).

Order of one epoch (fairseq / tensor2tensor style bucketing):

1. permute all examples with a generator seeded by ``(seed, epoch)``;
2. cut the permutation into large chunks (about ``bucket_batches`` batches
   each) and sort each chunk by length (target, then source; a stable sort, so
   equal lengths keep their random order);
3. pack each sorted chunk greedily into batches under the budget;
4. split the largest batches in two until the count divides by ``world_size``
   (every rank gets the same number of steps, no example is dropped or repeated);
5. shuffle the batches with the same generator; rank ``r`` takes batches
   ``r, r + world_size, ...``.

Everything depends on the lengths, the budget, the seed and the epoch only, so
two model variants with the same seed see the same batches in the same order,
and training resumes exactly from ``(epoch, batch index)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch

from ablate.data.tokenize import BOS_ID, EOS_ID, PAD_ID


class _Split(Protocol):
    # read-only: a Split's list[list[int]] then matches the covariant Sequence types
    @property
    def src_ids(self) -> Sequence[Sequence[int]]: ...
    @property
    def tgt_ids(self) -> Sequence[Sequence[int]]: ...


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) long, right-padded with pad_id
    tgt_in: torch.Tensor  # (B, T) long: [bos] + tgt, padded
    tgt_out: torch.Tensor  # (B, T) long: tgt + [eos], padded
    n_src_tokens: int  # real source tokens
    n_tgt_tokens: int  # real target tokens = predicted positions (tgt + eos)
    n_padded: int  # pad positions in src and tgt_in together
    indices: list[int]  # example indices in the split, in row order

    @property
    def size(self) -> int:
        return int(self.src.shape[0])

    @property
    def targets(self) -> torch.Tensor:
        """What the loss compares the logits with (the trainer reads any batch through this)."""
        return self.tgt_out

    def model_inputs(self) -> tuple[torch.Tensor, ...]:
        """What the model is called with: ``model(src, tgt_in)``."""
        return self.src, self.tgt_in

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return replace(self, src=self.src.to(device, non_blocking=non_blocking),
                       tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
                       tgt_out=self.tgt_out.to(device, non_blocking=non_blocking))


class TokenBatcher:
    def __init__(self, split: _Split, batch_tokens: int, seed: int, shuffle: bool = True, rank: int = 0,
                 world_size: int = 1, *, bucket_batches: int = 100,
                 specials: tuple[int, int, int] = (PAD_ID, BOS_ID, EOS_ID)) -> None:
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be positive, found {batch_tokens}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        n = len(split.src_ids)
        if n < world_size:
            raise ValueError(f"the split has {n} examples, fewer than world_size {world_size}")
        self.split = split
        self.batch_tokens = batch_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.bucket_batches = bucket_batches
        self.pad_id, self.bos_id, self.eos_id = specials  # the tokenizer's (a tokenizer file keeps its own)
        self.src_len = np.fromiter((len(s) for s in split.src_ids), dtype=np.int64, count=n)
        self.tgt_len = np.fromiter((len(t) + 1 for t in split.tgt_ids), dtype=np.int64, count=n)  # + bos/eos
        self._src_cols = np.maximum(self.src_len, 1)  # an empty source still takes one (padded) column
        self._memo: tuple[int, list[np.ndarray]] | None = None

    # ---------------------------------------------------------- the epoch plan
    def all_batches(self, epoch: int) -> list[np.ndarray]:
        """The batches of every rank, in order (batch k belongs to rank k % world_size)."""
        if self._memo is not None and self._memo[0] == epoch:
            return self._memo[1]
        n = len(self.src_len)
        rng = np.random.default_rng([self.seed, epoch])
        if self.shuffle:
            order = rng.permutation(n)
            mean_cost = float(np.maximum(self._src_cols, self.tgt_len).mean())
            chunk = max(1, int(self.bucket_batches * self.batch_tokens / mean_cost))
        else:  # evaluation: one global length sort, fixed order
            order, chunk = np.arange(n), n
        batches: list[np.ndarray] = []
        for start in range(0, n, chunk):
            idx = order[start:start + chunk]
            cost = np.maximum(self._src_cols[idx], self.tgt_len[idx])
            idx = idx[np.lexsort((self._src_cols[idx] - self.tgt_len[idx], cost))]  # by cost, then shape
            batches.extend(self._pack(idx))
        self._even_out(batches)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._memo = (epoch, batches)
        return batches

    def _pack(self, idx: np.ndarray) -> list[np.ndarray]:
        """Greedy: extend the batch while (size) * max(longest src, longest tgt) fits the budget."""
        out: list[np.ndarray] = []
        src, tgt = self._src_cols[idx].tolist(), self.tgt_len[idx].tolist()
        start, max_s, max_t = 0, 0, 0
        for k in range(len(idx)):
            s, t = max(max_s, src[k]), max(max_t, tgt[k])
            if k > start and (k - start + 1) * max(s, t) > self.batch_tokens:
                out.append(idx[start:k])
                start, s, t = k, src[k], tgt[k]
            max_s, max_t = s, t
        if len(idx):
            out.append(idx[start:])
        return out

    def _even_out(self, batches: list[np.ndarray]) -> None:
        """Split the largest batches in two until every rank gets the same number."""
        while len(batches) % self.world_size:
            sizes = [len(b) for b in batches]
            k = int(np.argmax(sizes))
            if sizes[k] < 2:
                raise ValueError(f"cannot give {self.world_size} ranks equal batch counts: "
                                 f"{len(batches)} single-example batches")
            half = sizes[k] // 2
            batches[k:k + 1] = [batches[k][:half], batches[k][half:]]

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch`` as example-index lists (deterministic from seed and epoch)."""
        return [b.tolist() for b in self.all_batches(epoch)[self.rank::self.world_size]]

    def num_batches(self, epoch: int = 0) -> int:
        return len(self.all_batches(epoch)) // self.world_size

    def iter_epoch(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        """Collated batches of ``epoch`` from batch index ``start`` (resume mid-epoch)."""
        for indices in self.epoch_batches(epoch)[start:]:
            yield self.collate(indices)

    # ---------------------------------------------------------- tensors and statistics
    def collate(self, indices: Sequence[int]) -> Batch:
        rows = [int(i) for i in indices]
        src_ids, tgt_ids = self.split.src_ids, self.split.tgt_ids
        n_rows = len(rows)
        s_max = max(1, max(len(src_ids[i]) for i in rows))
        t_max = max(len(tgt_ids[i]) for i in rows) + 1
        src = np.full((n_rows, s_max), self.pad_id, dtype=np.int64)  # (B, S)
        tgt_in = np.full((n_rows, t_max), self.pad_id, dtype=np.int64)  # (B, T)
        tgt_out = np.full((n_rows, t_max), self.pad_id, dtype=np.int64)  # (B, T)
        n_src = n_tgt = 0
        for r, i in enumerate(rows):
            s, t = src_ids[i], tgt_ids[i]
            src[r, :len(s)] = s
            tgt_in[r, 0] = self.bos_id
            tgt_in[r, 1:len(t) + 1] = t
            tgt_out[r, :len(t)] = t
            tgt_out[r, len(t)] = self.eos_id
            n_src += len(s)
            n_tgt += len(t) + 1
        n_padded = n_rows * (s_max + t_max) - n_src - n_tgt
        return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out),
                     n_src, n_tgt, n_padded, rows)

    def batch_cost(self, indices: Sequence[int]) -> int:
        """Padded size ``B * max(S, T)`` that the budget bounds."""
        idx = np.asarray(indices, dtype=np.int64)
        return int(len(idx) * max(self._src_cols[idx].max(), self.tgt_len[idx].max()))

    def padding_fraction(self, epoch: int = 0) -> float:
        """Pad positions / all positions over src and tgt_in, for this rank's batches of ``epoch``."""
        total = real = 0
        for b in self.all_batches(epoch)[self.rank::self.world_size]:
            total += len(b) * (int(self._src_cols[b].max()) + int(self.tgt_len[b].max()))
            real += int(self.src_len[b].sum()) + int(self.tgt_len[b].sum())
        return 1.0 - real / total if total else 0.0
