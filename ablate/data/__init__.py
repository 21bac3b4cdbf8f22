"""Corpora -> tokenizers -> length-bucketed token batches.

Owns the corpora (``corpus``: synthetic tasks, text files, the Hugging Face Hub through ``datasets``;
``synthetic``: the generated tasks), tokenizer training and caching (``tokenize``), a tokenizer of one's
own (``tokenizer_file``: a ``tokenizers`` JSON), token-budget batches
bucketed by length (``batching``) and the whole preparation of one spec's data (``prepare``, its result
in ``prepared``); where the paths a spec names point (``paths``) and the check of those files before
anything runs (``check``: every command's one validation path); for a decoder-only language model,
documents packed into blocks and evaluation windows (``lm_corpus``), read as streams of documents
(``lm_sources``), tokenized once into memory-mapped token shards (``token_shards``: the format;
``shard_build``: the streaming, resumable build), the synthetic tasks that need positions (``lm_tasks``),
generated English captions that need no file (``captions``: the LM quickstart's), and long-document corpora
that need no download, prepared from what Debian ships: the Python documentation (``python_docs``), the
Linux kernel's documentation and C source (``kernel_corpora``).

May import: ``ablate.spec``, ``ablate.errors``. Never torch models, training or tracking.
"""
