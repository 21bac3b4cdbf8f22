"""The field guide's worked examples (docs/spec.md): one complete spec for each data source and each study
design, written by hand. Each validates as it stands (tests/spec/test_spec_guide.py loads every one, and
expands each study's cells as `ablate study --dry-run` does)."""

from __future__ import annotations

from typing import NamedTuple


class Example(NamedTuple):
    title: str
    text: str  # one paragraph of Markdown before the spec
    spec: str  # a whole spec file


DATA_EXAMPLES: tuple[Example, ...] = (
    Example("A synthetic task", "No download and no files: random token sequences and their targets, "
            "drawn from the run's seed. A spec that names nothing else trains on `reverse`.", """\
name: reverse-small
data:
  source: synthetic
  synthetic: {task: reverse, vocab_size: 20, min_len: 3, max_len: 12, train_size: 8000}
  max_len: 16                 # the longest sequence plus bos and eos
  batch_tokens: 2048
train: {max_steps: 1000}
"""),
    Example("Parallel text files (`format: text`)", "Two files per split, one sentence a line, line N of "
            "`tgt` translating line N of `src`; `.gz` files are read as they are. Relative paths resolve "
            "against `root`, here `$ABLATE_DATA_DIR` when it is set and `data/` in the working directory "
            "otherwise.", """\
name: de-en-files
data:
  source: files
  src_lang: de
  tgt_lang: en
  files:
    format: text
    root: ${ABLATE_DATA_DIR:-data}
    train: {src: train.de, tgt: train.en}
    val: {src: valid.de, tgt: valid.en}
    test: {src: test.de.gz, tgt: test.en.gz}
  tokenizer: {kind: bpe, vocab_size: 8000, joint: true}
  max_len: 128
"""),
    Example("One TSV file per split (`format: tsv`)", "Each line is `source<TAB>target`. A first line "
            "that reads `src<TAB>tgt`, or the two language codes, is a header and skipped.", """\
name: de-en-tsv
data:
  source: files
  src_lang: de
  tgt_lang: en
  files:
    format: tsv
    train: {path: corpus/train.tsv}
    val: {path: corpus/valid.tsv}
    test: {path: corpus/test.tsv}
"""),
    Example("One JSONL file per split (`format: jsonl`)", "One JSON object a line, in any of three shapes: "
            '`{"src": .., "tgt": ..}`, `{"de": .., "en": ..}` (keys named by `src_lang` and `tgt_lang`) or '
            '`{"translation": {"de": .., "en": ..}}`, the Hugging Face translation layout.', """\
name: de-en-jsonl
data:
  source: files
  src_lang: de
  tgt_lang: en
  files:
    format: jsonl
    train: {path: corpus/train.jsonl}
    val: {path: corpus/valid.jsonl}
"""),
    Example("A Hugging Face Hub dataset (`source: hub`)", "Downloaded and cached by `datasets` under "
            "`data.cache_dir`. `field: translation` reads opus-style rows (a dict keyed by language code); "
            "`field: null` reads flat columns named by `src_lang` and `tgt_lang`, as Multi30k has.", """\
name: multi30k-hub
data:
  source: hub
  src_lang: de
  tgt_lang: en
  hub:
    name: bentrevett/multi30k
    train_split: train
    val_split: validation
    test_split: test
    field: null
  tokenizer: {kind: bpe, vocab_size: 8000}
"""),
    Example("Text for a language model (`source: text`)", "A decoder-only model (`model.arch: "
            "decoder_only`) reads one text file per split (`.gz` too). `document_lines` consecutive lines "
            "form one document; documents are packed into blocks of `max_len` tokens, and attention never "
            "crosses a document's end. `eval.lengths` adds perplexity at longer evaluation lengths.", """\
name: my-lm
data:
  source: text
  text:
    root: ${ABLATE_DATA_DIR:-data}
    train: train.txt
    val: valid.txt
    test: test.txt
  document_lines: 1
  max_len: 128
  tokenizer: {kind: bpe, vocab_size: 4000}
model:
  arch: decoder_only
  decoder_layers: 4
  positions: rope
  embeddings: tied
eval:
  lengths: [128, 256, 512]
"""),
    Example("A Hub text column for a language model", "The same model on a Hub dataset: `hub.field` "
            "names the column that holds the text.", """\
name: tinystories-lm
data:
  source: hub
  hub: {name: roneneldan/TinyStories, field: text, test_split: null}
  max_len: 256
model: {arch: decoder_only, positions: alibi}
"""),
)

DESIGN_EXAMPLES: tuple[Example, ...] = (
    Example("One at a time (`design: one_at_a_time`, the default)", "The rest of the spec is the "
            "baseline; each axis value runs alone against it. A value equal to the baseline's is the "
            "baseline, so three axes of two values give four variants. With several axes, this is not a "
            "factorial: say `design: full_factorial` for every combination.", """\
name: three-choices
train: {max_steps: 1000}
ablation:
  design: one_at_a_time
  axes:
    model.residual: [pre_norm, post_norm]
    model.positions: [sinusoidal, learned]
    model.norm: [builtin, rms]
  seeds: [0, 1, 2, 3]
"""),
    Example("Every combination (`design: full_factorial`)", "A 2 x 2 gives four variants; the report adds "
            "each axis' main effect (the other axis averaged within each seed) and their interaction.", """\
name: norm-2x2
train: {max_steps: 1000}
ablation:
  design: full_factorial
  axes:
    model.residual: [pre_norm, post_norm]
    model.norm: [builtin, rms]
  seeds: [0, 1, 2, 3]
"""),
    Example("A component and its settings as one axis (named levels)", "An axis may be given as named "
            "levels instead of a field's values: each level sets every field it needs, so components that "
            "take different settings cross in a factorial (a gated FFN fixes its own activation; a GELU MLP "
            "is `ffn: linear` with `activation: gelu`). The axis's name labels the variants (`ffn=swiglu`); "
            "a level equal to the baseline is the baseline. Where a level swaps a component, settings that "
            "only the old one takes go back to their defaults (an activation under a gated FFN, a GLU's "
            "width under a plain MLP) and are not reported as changed; nor are the new component's own "
            "settings at their defaults (a GLU's width under `ffn: swiglu`), only those the spec sets.", """\
name: ffn-norm-2x2
model: {ffn: linear, activation: gelu}
train: {max_steps: 1000}
ablation:
  design: full_factorial
  axes:
    ffn:
      gelu_mlp: {model.ffn: linear, model.activation: gelu}
      swiglu: {model.ffn: swiglu}
    model.norm: [builtin, rms]
  seeds: [0, 1, 2, 3]
"""),
    Example("Named variants (`design: variants`)", "Each variant is a set of overrides, dotted or nested, "
            "with an optional label: a paper's recipe or a tutorial's design, changing several fields at "
            "once.", """\
name: recipes
train: {max_steps: 1000}
ablation:
  design: variants
  variants:
    - {label: paper-2017, model.residual: post_norm, train.label_smoothing: 0.1}
    - label: tutorial-d
      model: {residual: post_norm, ffn: conv1d, mask: -1e10}
  seeds: [0, 1, 2]
"""),
    Example("Seeds that follow the evidence, and a published claim", "`seeds: {min, max}` runs `min` "
            "seeds, then adds seeds only to the comparisons whose verdict is still open, up to `max`; "
            "`min_effect` is the smallest effect worth knowing. Each `expect` line opens the report with "
            "reproduced, contradicted or not settled.", """\
name: warmup-claim
train: {max_steps: 1000}
ablation:
  axes:
    model.residual: [pre_norm, post_norm]
  seeds: {min: 3, max: 8}
  min_effect: 0.02            # in the metric's units: here val/exact_match
  expect:
    - variant: residual=post_norm
      effect: worse
      source: Xiong et al. 2020
"""),
    Example("Each variant at its own best, and the verdicts at a larger scale", "`tune` gives every "
            "variant the same search budget; the study then compares each at its own best settings too. "
            "`confirm` reruns the decided verdicts at a larger setting, paired by seed.", """\
name: norm-tuned
train: {max_steps: 1000}
ablation:
  axes:
    model.norm: [builtin, rms]
  seeds: {min: 3, max: 6}
  min_effect: 0.02
  tune:
    space:
      train.optimizer.lr: {low: 1.0e-4, high: 3.0e-3, log: true}
    trials: 8
    fidelity: {fraction: 0.5}
  confirm:
    overrides: {train.max_steps: 4000}
    seeds: 3
"""),
    Example("A search (`ablate tune`)", "Not a design but the other study: Optuna samples the space, the "
            "spec itself running as trial 0. Components are choices like any other field; `when` makes "
            "a parameter conditional.", """\
name: lr-search
train: {max_steps: 500, eval_every: 100}
search:
  trials: 20
  objectives: [{metric: val/loss, direction: minimize}]
  pruner: {name: median, startup_trials: 3, warmup_steps: 100}
  space:
    train.optimizer.lr: {low: 3.0e-4, high: 1.0e-2, log: true}
    train.schedule.name: {choice: [inverse_sqrt, constant]}
    train.schedule.warmup_steps:
      {low: 0, high: 300, step: 50, int: true, when: {train.schedule.name: inverse_sqrt}}
    model.residual: {choice: [pre_norm, post_norm]}
"""),
)
