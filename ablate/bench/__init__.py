"""Benchmarks that print figures: ``ablate bench``.

Owns training-step throughput against ``torch.nn.Transformer`` and per variant, with model FLOPs
utilisation (``train_speed``), batched beam search against the tutorials' per-sentence beam
(``decode_speed``; that beam itself, also the decode tests' oracle: ``tutorial_beam``), the framework's
own overhead over a bare step loop (``overhead``), the decoder-only language model's step (``lm_speed``)
and its KV cache by key/value heads while decoding (``kv_cache``) and the command that runs them
(``suite``).

May import every layer below it: ``ablate.spec``, ``ablate.data``, ``ablate.engine``,
``ablate.tracking``, ``ablate.run``, ``ablate.errors``.
"""
