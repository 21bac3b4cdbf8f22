"""Corpora -> tokenizers -> length-bucketed token batches.

Owns the corpora (``corpus``: synthetic tasks, text files, the Hugging Face Hub through ``datasets``;
``synthetic``: the generated tasks), tokenizer training and caching (``tokenize``), token-budget batches
bucketed by length (``batching``) and the whole preparation of one spec's data (``prepare``, its result
in ``prepared``); where the paths a spec names point (``paths``) and the check of those files before
anything runs (``check``: every command's one validation path); for a decoder-only language model,
documents packed into blocks and evaluation windows (``lm_corpus``), the synthetic tasks that need
positions (``lm_tasks``), generated English captions that need no file (``captions``: the LM
quickstart's), and a long-document corpus that needs no download, prepared from the Python documentation
Debian ships (``python_docs``).

May import: ``ablate.spec``, ``ablate.errors``. Never torch models, training or tracking.
"""
