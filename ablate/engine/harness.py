"""ablate's decoder-only model behind EleutherAI's lm-evaluation-harness (``lm_eval.api.model.LM``), so that a
downstream task's prompts, few-shot examples and scoring are the harness's own and ablate only answers its
three requests (Gao et al. 2024, "The Language Model Evaluation Harness"):

* ``loglikelihood((context, continuation))``: the summed log-probability of the continuation's tokens after
  bos and the context, and whether greedy decoding would have produced them (multiple-choice tasks:
  accuracy, length-normalised accuracy);
* ``loglikelihood_rolling(text)``: a whole text's log-likelihood, scored in disjoint windows of the model's
  positions (perplexity tasks), every token once, as the harness's own models do;
* ``generate_until(context, until)``: a greedy continuation through the KV cache, cut at the first stop
  string.

Text is tokenized as the run's own documents were (``Tokenizers.encode_tgt``: its normalisation, bos
first). A continuation's tokens are those of ``context + continuation`` after the context's, as the
harness's Hugging Face model takes them, so a token that spans the boundary is scored once. A sequence
longer than the model's positions keeps its last ``max_positions`` tokens (the harness's own truncation).
Imported only where downstream tasks are asked for: ``lm-eval`` is an optional extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from ablate.data.tokenize import Tokenizers
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.lm_eval import generate

DEFAULT_GEN_TOKENS = 256  # the harness's own default for generate_until


class AblateLM(LM):
    """An lm-evaluation-harness model over a :class:`DecoderOnlyLM` and the run's tokenizers (fp32, eval
    mode, ``batch_size`` sequences a forward)."""

    def __init__(self, model: DecoderOnlyLM, tok: Tokenizers, *, batch_size: int = 16,
                 device: torch.device | None = None) -> None:
        super().__init__()
        self.model, self.tok, self.batch_size = model.eval(), tok, batch_size
        self.place = device if device is not None else model.generator.weight.device
        self.max_length = model.max_positions

    # ---------------------------------------------------------------- tokens
    def encode(self, text: str) -> list[int]:
        return self.tok.encode_tgt(text) if text.strip() else []

    def split_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context ids with bos first, continuation ids): the continuation's tokens are those of the whole
        text after the context's where the context's tokens are its prefix, else its own tokens. Spaces that
        end the context move to the continuation first (the harness's Hugging Face model does the same)."""
        moved = len(context) - len(context.rstrip())
        if moved:
            context, continuation = context[:-moved], context[-moved:] + continuation
        ctx = self.encode(context)
        whole = self.encode(context + continuation)
        prefixed = whole[:len(ctx)] == ctx and len(whole) > len(ctx)
        cont = whole[len(ctx):] if prefixed else self.encode(continuation)
        return [self.tok.bos_id, *ctx], cont

    # ---------------------------------------------------------------- scoring
    @torch.no_grad()
    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(summed log-probability of each continuation, whether each of its tokens is the argmax), a batch
        of right-padded sequences a forward (a causal model's earlier positions never see the padding)."""
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            rows, spans = [], []
            for i in chunk:
                ctx, cont = pairs[i]
                seq = (ctx + cont)[-(self.max_length + 1):]  # inputs seq[:-1] fit the positions
                rows.append(seq)
                spans.append(min(len(cont), len(seq) - 1))  # a token with nothing before it is not scored
            width = max(len(r) for r in rows) - 1
            ids = torch.full((len(rows), width), self.tok.pad_id, dtype=torch.long)
            for j, seq in enumerate(rows):
                ids[j, : len(seq) - 1] = torch.tensor(seq[:-1])
            logp = F.log_softmax(self.model(ids.to(self.place)).float(), dim=-1)  # (B, T, V)
            for j, (i, seq, n) in enumerate(zip(chunk, rows, spans, strict=True)):
                if n == 0:
                    out[i] = (0.0, True)
                    continue
                end = len(seq) - 1
                target = torch.tensor(seq[-n:], device=logp.device)
                row = logp[j, end - n:end]  # (n, V): the predictions of the continuation's tokens
                out[i] = (float(row.gather(1, target[:, None]).sum()), bool((row.argmax(-1) == target).all()))
        return out

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self.score([self.split_pair(*r.args) for r in requests])

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        out = []
        for request in requests:
            (text,) = request.args
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                self.encode(text), self.tok.bos_id, self.max_length, 1)]
            out.append(sum(ll for ll, _ in self.score(windows)))
        return out

    @torch.no_grad()
    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        out = []
        for request in requests:
            context, kwargs = request.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.get("max_gen_toks", DEFAULT_GEN_TOKENS))
            prompt = [self.tok.bos_id, *self.encode(context)][-(self.max_length - 1):]
            ids = generate(self.model, prompt, max_new, greedy=True, eos_id=self.tok.eos_id)
            text = self.tok.decode_tgt(ids)
            cuts = [text.index(stop) for stop in until if stop and stop in text]
            out.append(text[: min(cuts)] if cuts else text)
        return out

    @property
    def tokenizer_name(self) -> str:
        return "ablate"

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
                            ) -> str:
        return "\n".join(turn["content"] for turn in chat_history)


def harness_model(model: DecoderOnlyLM, tok: Tokenizers, **options: Any) -> AblateLM:
    """The harness's view of ``model`` (see :class:`AblateLM`)."""
    return AblateLM(model, tok, **options)
