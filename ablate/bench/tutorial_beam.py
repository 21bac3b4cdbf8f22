"""The tutorials' beam search, the baseline ``ablate bench`` times the batched, cached beam against
(ablate/bench/decode_speed.py): one sentence at a time, the whole prefix re-decoded at every step, with the
rules and scores of :func:`ablate.engine.decode.beam_search` (GNMT length penalty, Wu et al. 2016), so both
return the same hypotheses. The decode tests use it as their oracle; no training or evaluation path calls
it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ablate.engine.decode import MaxLen, best_finished, gnmt_length_penalty, inference, step_limits
from ablate.engine.encoder_decoder import Seq2SeqTransformer


def beam_search_reference(
    model: Seq2SeqTransformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    beam: int,
    length_penalty: float,
    max_len: MaxLen,
) -> list[list[int]]:
    """The tutorials' beam search: one sentence at a time, the whole prefix re-decoded every step
    (no cache). Same rules and scores as :func:`ablate.engine.decode.beam_search`."""
    k, alpha = beam, length_penalty
    limits = step_limits(model, max_len, src.size(0)).tolist()
    out: list[list[int]] = []
    with inference(model):
        for b, limit in enumerate(limits):
            one = model.encode(src[b : b + 1])
            enc = one.index_select(torch.zeros(k, dtype=torch.long, device=src.device))  # k copies
            scores = [0.0] + [float("-inf")] * (k - 1)
            seqs: list[list[int]] = [[] for _ in range(k)]
            finished: list[tuple[float, list[int]]] = []
            for t in range(limit):
                prefix = torch.tensor([[bos_id] + s for s in seqs], dtype=torch.long, device=src.device)
                logp = F.log_softmax(model.decode(prefix, enc)[:, -1].float(), dim=-1)  # (k, V)
                V = logp.size(-1)
                cand = (torch.tensor(scores, device=logp.device)[:, None] + logp).view(-1)
                top_s, top_i = cand.topk(2 * k)
                alive: list[tuple[float, list[int]]] = []
                for r, (s, i) in enumerate(zip(top_s.tolist(), top_i.tolist(), strict=True)):
                    origin, tok = divmod(i, V)
                    if tok == eos_id:
                        if r < k and math.isfinite(s):
                            finished.append((s / gnmt_length_penalty(t + 1, alpha), list(seqs[origin])))
                    elif len(alive) < k:
                        alive.append((s, seqs[origin] + [tok]))
                scores = [s for s, _ in alive]
                seqs = [h for _, h in alive]
                if t + 1 >= limit:
                    lp = gnmt_length_penalty(t + 1, alpha)
                    finished += [(s / lp, h) for s, h in alive if math.isfinite(s)]
                    break
                if top_i[0].item() % V == eos_id and math.isfinite(top_s[0].item()):
                    break  # the best extension ends the sentence
            out.append(best_finished(finished))
    return out
