"""Decoding: the KV cache is exact, beam search agrees with greedy and with the tutorials' beam."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ablate.bench.tutorial_beam import beam_search_reference
from ablate.engine.builders import build_model
from ablate.engine.decode import (
    beam_search,
    decode_batch,
    greedy_decode,
    sequence_logprob,
)
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.spec.experiment import DecodeSpec, ModelSpec

# Small tensors: one thread is faster and makes reductions bitwise repeatable (reference values).
pytestmark = pytest.mark.usefixtures("single_thread")

PAD, BOS, EOS, V = 0, 1, 2, 14


def tiny(attention: str = "sdpa", seed: int = 0, **overrides: object) -> Seq2SeqTransformer:
    spec = ModelSpec(d_model=32, heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
                     attention=attention, **overrides)  # type: ignore[arg-type]
    return build_model(spec, V, V, pad_id=PAD, seed=seed).eval()


def sources() -> torch.Tensor:
    rows = [[5, 9, 3, 12, 7, 4], [4, 8, 13], [6, 11, 10, 13, 3, 7, 9, 5], [3, 3], [10, 12, 5, 6, 7]]
    out = torch.zeros(len(rows), 8, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_incremental_decoding_equals_full_decoding(attention: str) -> None:
    model = tiny(attention)
    src = sources()
    tgt = torch.randint(3, V, (src.size(0), 7), generator=torch.Generator().manual_seed(0))
    tgt[:, 0] = BOS
    with torch.no_grad():
        enc = model.encode(src)
        full = model.decode(tgt, enc)  # (B, 7, V)
        cache = model.init_cache(enc)
        chunks = [(0, 1), (1, 3), (3, 4), (4, 5), (5, 7)]  # one token, then two at once (the masked path) ...
        steps = [model.decode(tgt[:, a:b], enc, cache, start_pos=a) for a, b in chunks]
    assert cache.length == 7
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="start_pos"):
        model.decode(tgt[:, :1], enc, cache, start_pos=3)


def test_cache_reorder_moves_hypotheses() -> None:
    model = tiny()
    src = sources()[:3]
    tgt = torch.randint(3, V, (3, 5), generator=torch.Generator().manual_seed(1))
    index = torch.tensor([2, 0, 0, 1])  # reorder, duplicate and grow the batch
    with torch.no_grad():
        enc = model.encode(src)
        cache = model.init_cache(enc)
        model.decode(tgt[:, :4], enc, cache, start_pos=0)
        cache.reorder(index)
        last = model.decode(tgt[index, 4:5], enc, cache, start_pos=4)
        expected = model(src[index], tgt[index])[:, 4:5]
    torch.testing.assert_close(last, expected, atol=1e-5, rtol=1e-5)


def test_cache_grows_past_its_first_buffer() -> None:
    """Self-attention K/V live in buffers with spare positions (16 first, doubled when full): decoding
    40 positions one at a time, with a reorder half-way, still equals decoding the whole prefix."""
    model = tiny(max_positions=64)
    src = sources()[:3]
    tgt = torch.randint(3, V, (3, 40), generator=torch.Generator().manual_seed(4))
    index = torch.tensor([1, 2, 0])
    with torch.no_grad():
        enc = model.encode(src)
        cache = model.init_cache(enc)
        steps = [model.decode(tgt[:, t : t + 1], enc, cache, start_pos=t) for t in range(20)]
        cache.reorder(index)
        steps = [s[index] for s in steps]
        steps += [model.decode(tgt[index, t : t + 1], enc, cache, start_pos=t) for t in range(20, 40)]
        full = model(src[index], tgt[index])
    assert cache.length == 40
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_beams_share_their_sentence_source_side(attention: str) -> None:
    """select_beams: one cross-attention row per sentence serves its beams, sentences can leave, and
    a general reorder afterwards still works: every step equals decoding the beams' prefixes whole."""
    model = tiny(attention)
    src = sources()[:3]
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        enc = model.encode(src)
        cache = model.init_cache(enc)  # 3 rows, one per sentence
        model.decode(torch.full((3, 1), BOS), enc, cache, start_pos=0)
        # two beams per sentence, both from the sentence's single row
        cache.select_beams(torch.tensor([0, 0, 1, 1, 2, 2]), None, beams=2)
        prefix = torch.full((6, 1), BOS)
        nxt = torch.randint(3, V, (6, 1), generator=g)
        got = model.decode(nxt, enc, cache, start_pos=1)
        want = model(src.repeat_interleave(2, 0), torch.cat((prefix, nxt), 1))[:, 1:2]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        prefix = torch.cat((prefix, nxt), 1)
        # sentence 1 finishes; the beams of sentences 0 and 2 swap and duplicate
        rows = torch.tensor([1, 1, 5, 4])
        cache.select_beams(rows, torch.tensor([0, 2]), beams=2)
        prefix, kept_src = prefix[rows], src[torch.tensor([0, 0, 2, 2])]
        nxt = torch.randint(3, V, (4, 2), generator=g)  # two positions at once: (beam, position) order
        got = model.decode(nxt, enc, cache, start_pos=2)
        want = model(kept_src, torch.cat((prefix, nxt), 1))[:, 2:4]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        prefix = torch.cat((prefix, nxt), 1)
        # a general reorder of a shared cache gives each row its own source row
        index = torch.tensor([3, 0, 2])
        cache.reorder(index)
        assert cache.beams == 1 and cache.src_pad.size(0) == 3
        nxt = torch.randint(3, V, (3, 1), generator=g)
        got = model.decode(nxt, enc, cache, start_pos=4)
        want = model(kept_src[index], torch.cat((prefix[index], nxt), 1))[:, 4:5]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _eos_prone(model: Seq2SeqTransformer, boost: float) -> Seq2SeqTransformer:
    """A random model that ends some hypotheses early: raise the eos logit."""
    with torch.no_grad():
        model.generator.bias[EOS] += boost
    return model


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_beam_one_is_greedy(alpha: float) -> None:
    model = _eos_prone(tiny(seed=2), 0.5)
    src = sources()
    limits = torch.tensor([9, 4, 12, 3, 7])
    greedy = greedy_decode(model, src, BOS, EOS, limits)
    assert greedy == beam_search(model, src, BOS, EOS, 1, alpha, limits)
    assert any(len(h) < int(n) for h, n in zip(greedy, limits, strict=True))  # some stop at eos ...
    assert any(len(h) == int(n) for h, n in zip(greedy, limits, strict=True))  # ... some at max_len


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
@pytest.mark.parametrize("beam,alpha", [(3, 0.6), (4, 0.0), (4, 1.0)])
def test_batched_beam_equals_the_reference_beam(attention: str, beam: int, alpha: float) -> None:
    model = _eos_prone(tiny(attention, seed=3), 0.5)
    src = sources()
    limits = torch.tensor([10, 5, 12, 4, 8])
    batched = beam_search(model, src, BOS, EOS, beam, alpha, limits)
    reference = beam_search_reference(model, src, BOS, EOS, beam, alpha, limits)
    assert batched == reference
    assert len({len(h) for h in batched}) > 1  # sentences finish at different steps
    assert all(len(h) <= int(n) for h, n in zip(batched, limits, strict=True))


def test_beam_scores_the_vocabulary_a_chunk_of_sentences_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """VOCAB_CHUNK sentences are projected and scored at a time and the chunks' top-k joined: with
    chunks of 2 (3 chunks for 5 sentences, fewer as sentences finish) the result is unchanged."""
    import ablate.engine.decode

    model = _eos_prone(tiny(seed=3), 0.5)
    src = sources()
    limits = torch.tensor([10, 5, 12, 4, 8])
    whole = beam_search(model, src, BOS, EOS, 3, 0.6, limits)
    rows: list[int] = []  # rows projected by each generator call
    hook = model.generator.register_forward_hook(lambda _m, args, _out: rows.append(args[0].size(0)))
    monkeypatch.setattr(ablate.engine.decode, "VOCAB_CHUNK", 2)
    try:
        chunked = beam_search(model, src, BOS, EOS, 3, 0.6, limits)
    finally:
        hook.remove()
    assert rows[:3] == [2, 2, 1]  # first step: one row per sentence, in chunks of 2 sentences
    assert max(rows) == 2 * 3 and len(rows) > int(limits.max())  # later steps: 2 sentences x 3 beams
    assert chunked == whole == beam_search_reference(model, src, BOS, EOS, 3, 0.6, limits)
    assert len({len(h) for h in chunked}) > 1  # sentences leave the batch at different steps


def _copy_batch(g: torch.Generator, n: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.randint(3, 7, (n,), generator=g)
    src = torch.zeros(n, 6, dtype=torch.long)
    tgt_in = torch.zeros(n, 7, dtype=torch.long)
    tgt_out = torch.zeros(n, 7, dtype=torch.long)
    for i, length in enumerate(lengths.tolist()):
        row = torch.randint(3, V, (length,), generator=g)
        src[i, :length] = row
        tgt_in[i, 0], tgt_in[i, 1 : length + 1] = BOS, row
        tgt_out[i, :length], tgt_out[i, length] = row, EOS
    return src, tgt_in, tgt_out


@pytest.fixture(scope="module")
def copy_model() -> tuple[Seq2SeqTransformer, list[float]]:
    """A tiny model trained for 100 steps on the copy task (about 2 s on one core)."""
    torch.manual_seed(0)
    spec = ModelSpec(d_model=32, heads=2, d_ff=64, encoder_layers=1, decoder_layers=1, dropout=0.0)
    model = build_model(spec, V, V, pad_id=PAD, seed=0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(100):
        src, tgt_in, tgt_out = _copy_batch(g)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model.eval(), losses


def test_beam_log_probability_is_never_below_greedy_on_a_trained_copy_model(
    copy_model: tuple[Seq2SeqTransformer, list[float]],
) -> None:
    model, losses = copy_model
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])  # it did learn something
    model.train()
    src = _copy_batch(torch.Generator().manual_seed(99), n=12)[0]
    greedy = greedy_decode(model, src, BOS, EOS, 10)
    beam = beam_search(model, src, BOS, EOS, 4, 0.0, 10)
    assert model.training  # decoding ran in eval mode and gave the caller's mode back
    model.eval()
    gaps = []
    for i in range(src.size(0)):
        one = src[i : i + 1]
        beam_lp = sequence_logprob(model, one, beam[i], BOS, EOS)
        gaps.append(beam_lp - sequence_logprob(model, one, greedy[i], BOS, EOS))
    assert min(gaps) >= -1e-4, gaps
    # Not vacuous: the hypotheses are real, and on some sentence the beam kept a hypothesis greedy dropped,
    # one that scores strictly higher (greedy's first choice is not always the best sequence).
    assert all(greedy) and all(beam)
    differ = [gap for gap, g, b in zip(gaps, greedy, beam, strict=True) if g != b]
    assert differ and min(differ) > 1e-4, (gaps, greedy, beam)


@pytest.mark.parametrize("beam,alpha", [(2, 0.6), (4, 1.0)])
def test_batched_beam_equals_the_reference_beam_on_the_trained_model(
    copy_model: tuple[Seq2SeqTransformer, list[float]], beam: int, alpha: float
) -> None:
    model = copy_model[0]
    src = _copy_batch(torch.Generator().manual_seed(7), n=10)[0]
    limits = (src != PAD).sum(1) + 2
    batched = beam_search(model, src, BOS, EOS, beam, alpha, limits)
    assert batched == beam_search_reference(model, src, BOS, EOS, beam, alpha, limits)
    assert len({len(h) for h in batched}) > 1


def test_decode_batch_follows_the_decode_spec() -> None:
    model = _eos_prone(tiny(seed=4), 1.0)
    src = sources()
    src_len = (src != PAD).sum(1)
    spec = DecodeSpec(strategy="greedy", max_len_a=0.5, max_len_b=1)
    limits = (0.5 * src_len).floor().long() + 1
    out = decode_batch(model, src, spec, BOS, EOS)
    assert out == greedy_decode(model, src, BOS, EOS, limits)
    assert all(len(h) <= int(n) for h, n in zip(out, limits, strict=True))
    beam_spec = DecodeSpec(strategy="beam", beam=3, length_penalty=0.6, max_len_a=1.0, max_len_b=2)
    expected = beam_search(model, src, BOS, EOS, 3, 0.6, src_len + 2)
    assert decode_batch(model, src, beam_spec, BOS, EOS) == expected


def test_max_len_edge_cases() -> None:
    model = tiny(positions="learned", max_positions=8)
    src = sources()  # up to 8 tokens
    assert greedy_decode(model, src, BOS, EOS, 0) == [[]] * 5
    assert beam_search(model, src, BOS, EOS, 2, 0.6, 0) == [[]] * 5
    capped = greedy_decode(model, src, BOS, EOS, 50)  # capped at max_positions, not an error
    assert all(len(h) <= 8 for h in capped) and any(len(h) == 8 for h in capped)
    beam = beam_search(model, src, BOS, EOS, 3, 0.6, 50)
    assert beam == beam_search_reference(model, src, BOS, EOS, 3, 0.6, 50)
