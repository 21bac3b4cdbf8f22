"""The report states what ran: a tokenizer file's own vocabulary (not the spec's default for a trained
tokenizer, which the file ignores) and no decoding settings for a language model, which is judged by its
loss and never decodes."""

from __future__ import annotations

import pandas as pd

from ablate.report.compute.loaded_study import Study, build_study
from ablate.report.sections.environment import data_rows, unused


def one_run_study(params: dict[str, str], metrics: dict[str, float]) -> Study:
    row = {"run_id": "r0", "status": "FINISHED", "start_time": pd.Timestamp(0, unit="s"),
           "tags.ablate.variant": "baseline", "tags.ablate.seed": "0", "tags.ablate.status": "finished",
           "tags.ablate.kind": "cell", "metrics.final/val/loss": 3.0,
           **{f"params.{k}": v for k, v in params.items()}, **{f"metrics.{k}": v for k, v in metrics.items()}}
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "params": {"ablation.metric": "val/loss"}, "metrics": {},
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"}}
    return build_study(parent, pd.DataFrame([row]))


LM_FILE = {"model.arch": "decoder_only", "data.tokenizer.kind": "file", "data.tokenizer.path": "tok.json",
           "data.tokenizer.vocab_size": "8000", "data.tokenizer.min_freq": "2", "eval.decode.beam": "4",
           "eval.decode.strategy": "greedy"}


def test_a_language_model_shows_no_decoding_and_a_tokenizer_file_its_own_vocabulary() -> None:
    assert [k for k in LM_FILE if unused(k, LM_FILE)] == [
        "data.tokenizer.vocab_size", "data.tokenizer.min_freq", "eval.decode.beam", "eval.decode.strategy"]
    study = one_run_study(LM_FILE, {"data/vocab_size": 4000.0})
    rows = data_rows(LM_FILE, study)
    assert ["`data.tokenizer.path`", "tok.json"] in rows and ["`data.tokenizer.kind`", "file"] in rows
    assert not any("vocab_size" in k or "min_freq" in k for k, _ in rows)  # the ignored 8000 is not shown
    assert rows[-1] == ["vocabulary (tokens the model embeds)", "4,000"]
    older = data_rows(LM_FILE, one_run_study(LM_FILE, {}))  # runs from before the metric
    assert older[-1] == ["vocabulary (tokens the model embeds)",
                         "the tokenizer file's (not recorded by these runs)"]


def test_a_translation_model_keeps_its_decoding_and_its_trained_tokenizers_settings() -> None:
    seq2seq = {"model.arch": "encoder_decoder", "data.tokenizer.kind": "bpe",
               "data.tokenizer.vocab_size": "8000", "eval.decode.beam": "4"}
    assert not any(unused(k, seq2seq) for k in seq2seq)


def test_a_language_model_shows_no_source_side() -> None:
    # a decoder-only run has no source: its src/tgt languages (default 'src', 'tgt') and the source's
    # markers were listed in the report's data table as if they had shaped the run
    lm = {**LM_FILE, "data.src_lang": "src", "data.tgt_lang": "tgt", "data.source_bos": "false",
          "data.source_eos": "false", "data.reverse_source": "false", "data.max_len": "64"}
    rows = [k for k, _ in data_rows(lm, one_run_study(lm, {"data/vocab_size": 4000.0}))]
    source = ("src_lang", "tgt_lang", "source_bos", "source_eos", "reverse")
    assert not any(f in k for k in rows for f in source)
    assert "`data.max_len`" in rows
    seq2seq = {"model.arch": "encoder_decoder", "data.src_lang": "de", "data.source_bos": "true"}
    assert not any(unused(k, seq2seq) for k in seq2seq)


def test_document_lines_is_shown_only_where_the_text_is_cut_by_lines() -> None:
    # `data.text.documents: paragraphs` reads no line count: the resolved default 1 beside it read as if
    # every line were a document
    prose = {**LM_FILE, "data.source": "text", "data.text.documents": "paragraphs",
             "data.document_lines": "1"}
    assert unused("data.document_lines", prose)
    for documents in ("lines", None):  # cut by lines; a hub column (no data.text) groups its rows by it
        spec = {**prose, "data.text.documents": documents} if documents else {
            k: v for k, v in prose.items() if k != "data.text.documents"}
        assert not unused("data.document_lines", spec)
