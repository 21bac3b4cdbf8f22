"""The spec's ``model`` section, built from the registry's axis declarations.

The section has the model's sizes (``d_model``, ``heads``, ...) as plain fields, and one field per
declared axis (``residual``, ``positions``, ..., plugins' axes included) followed by the options its
variants declare (``rope_base`` after ``positions``). Nothing here names an axis or a variant: adding one
is a declaration in registry/, and this module, the JSON Schema (ablate/spec/schema.py) and ``ablate
list`` read it.

Validation (every failing check at once, each located at its field):

* an axis value must be a registered variant (``mask`` also takes any negative number, spelled as the
  axis's ``canonical`` says), with a did-you-mean;
* a sub-axis (``activation``) may leave its default only under a parent variant that takes it;
* a variant's own options are accepted only when that variant is chosen; then they are type-checked
  (strict, as every spec field) and their defaults filled in. Options that were plain fields before they
  belonged to a variant (``always``) keep their default everywhere, so old specs and records still load;
* a chosen variant's ``check`` of the section (``sinusoidal`` needs an even ``d_model``).

A run's identity (:func:`identity_of`) leaves out options that do not apply and axes declared
``added_later`` at their default: the hash of a spec written before an axis existed does not change. A
chosen variant whose implementation version is above 1 adds ``<axis>_version`` to it
(:func:`component_versions`): fixing a variant makes its own runs stale and no other run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, create_model, model_validator

import registry
from ablate.spec.axis_fields import (
    axis_fields,
    check_axis,
    identity_options,
    option_names,
    option_owner,
    options_of,
    section_option_values,
)
from ablate.spec.base import Bool, Checks, Float, Int, Strict
from registry import MODEL
from registry.masking import format_mask_fill, parse_mask_fill

__all__ = ["ModelSpec", "component_versions", "drop_unset_options", "format_mask_fill", "identity_of",
           "option_owner", "options_of", "parse_mask_fill", "section_option_values", "stale_components"]


class ModelSpecBase(Strict):
    """The fields of the model section that are not axes; :data:`ModelSpec` adds the axes and options."""

    d_model: Annotated[Int, Field(gt=0, le=65536)] = 128
    """the model (embedding) width"""
    heads: Annotated[Int, Field(gt=0, le=1024)] = 4
    """attention heads; d_model must be divisible by it"""
    encoder_layers: Annotated[Int, Field(gt=0, le=256)] = 2
    """encoder layers (encoder_decoder only)"""
    decoder_layers: Annotated[Int, Field(gt=0, le=256)] = 2
    """decoder layers (a decoder-only model's depth)"""
    d_ff: Annotated[Int, Field(gt=0, le=1_000_000)] = 512
    """the feed-forward inner width (the gated FFNs use 2/3 of it unless glu_hidden says otherwise)"""
    dropout: Annotated[Float, Field(ge=0.0, lt=1.0)] = 0.1
    """dropout on each sub-layer's output and on the embeddings"""
    attention_dropout: Annotated[Float, Field(ge=0.0, lt=1.0)] = 0.0
    """dropout on the attention weights"""
    kv_heads: Annotated[Int, Field(gt=0, le=1024)] | None = None
    """key/value heads of every attention layer: heads (or left out) is multi-head attention, 1 multi-query
    (Shazeer 2019), anything between that divides heads grouped-query attention (Ainslie et al. 2023); the
    KV cache of decoding holds kv_heads / heads of multi-head attention's"""
    window: Annotated[Int, Field(gt=0, le=1_000_000)] | None = None
    """decoder-only: sliding-window attention, each query sees itself and the window - 1 tokens before it
    (Beltagy et al. 2020, Longformer; Jiang et al. 2023, Mistral 7B); left out: the whole causal prefix"""

    @model_validator(mode="before")
    @classmethod
    def _canonical_axis_values(cls, data: Any) -> Any:
        """Axis values as registry names: ``mask: -1e9`` (a YAML string or number) -> ``'-1e9'``."""
        if not isinstance(data, dict):
            return data
        checks = Checks()
        out = dict(data)
        for axis in registry.model_axes():
            if axis.canonical is None or axis.kind not in out:
                continue
            try:
                out[axis.kind] = axis.canonical(out[axis.kind])
            except ValueError as exc:
                checks.fail(axis.kind, str(exc))
        checks.raise_any()
        return out

    @model_validator(mode="after")
    def _axes_and_options(self) -> ModelSpecBase:
        checks = Checks()
        if self.d_model % self.heads:
            checks.fail("heads", f"d_model {self.d_model} is not divisible by heads {self.heads}", "d_model")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            divisors = [n for n in range(1, self.heads + 1) if self.heads % n == 0]
            checks.fail("kv_heads", f"kv_heads {self.kv_heads} does not divide heads {self.heads}: each "
                        f"key/value head serves heads / kv_heads query heads; try {_any_of(divisors)}",
                        "heads")
        values = self.model_dump()
        for axis in registry.model_axes():
            check_axis(self, axis, values, checks, involves=("d_model", "heads"))
        checks.raise_any()
        return self

    @property
    def mask_fill(self) -> float:
        return parse_mask_fill(getattr(self, "mask"))  # noqa: B009  # a dynamic axis field

    def option_values(self, axis: str, variant: str | None = None) -> dict[str, Any]:
        """Constructor keywords of the chosen (or given) variant of ``axis``: axis-wide and own options."""
        return section_option_values(self, axis, getattr(self, axis) if variant is None else variant)


def _any_of(values: list[int]) -> str:
    return ", ".join(str(v) for v in values[:-1]) + f" or {values[-1]}" if len(values) > 1 else str(values[0])


# Fields after the axes; `arch` is left out of a run's identity at its default (identity_of).
_TAIL: dict[str, Any] = {
    "arch": (Literal["encoder_decoder", "decoder_only"], Field(
        default="encoder_decoder", description="encoder_decoder: translation (Vaswani et al. 2017); "
        "decoder_only: a causal language model (data.source: text, hub with a text field, or an LM task)")),
    "position_dropout": (Bool, Field(
        default=True, description="dropout on the sum of token embeddings and positions")),
    "max_positions": (Annotated[Int, Field(gt=0, le=1_000_000)], Field(
        default=512, description="rows of the position table (learned) or buffer (sinusoidal): the "
        "longest sequence the model can read; at least data.max_len and every eval.lengths")),
    "embed_scale": (Bool, Field(default=True, description="multiply token embeddings by sqrt(d_model)")),
    "init": (Literal["xavier", "xavier_embed_normal", "default"], Field(
        default="xavier", description="xavier: Xavier-uniform weights of every Linear, Conv1d and "
        "Embedding the builder owns; xavier_embed_normal: the same, but token embeddings from "
        "N(0, d_model^-1/2) (tensor2tensor, fairseq); default: torch's own initialisation")),
}

if TYPE_CHECKING:
    class ModelSpec(ModelSpecBase):
        """Static view for type checkers: axis and option fields are dynamic."""

        residual: str
        positions: str
        ffn: str
        norm: str
        mask: str
        attention: str
        embeddings: str
        parametrisation: str
        logits: str
        norm_eps: float
        norm_affine: str
        shared_layer_norm: bool
        position_dropout: bool
        max_positions: int
        embed_scale: bool
        init: str
        arch: str

        def __getattr__(self, name: str) -> Any: ...
else:
    ModelSpec = create_model(
        "ModelSpec", __base__=ModelSpecBase, __module__=__name__, **axis_fields(MODEL), **_TAIL,
        __doc__="The model: its sizes, and one field per design axis naming a registered variant (`ablate "
        "list` prints each with its paper and options), each followed by the options its variants take.",
    )


# Plain fields added after the first record format: left out of the dumped spec (and so of a run's
# identity) while unset, so every spec that does not set them keeps its hash.
LATER_FIELDS = ("kv_heads", "window")


def identity_of(model: dict[str, Any]) -> dict[str, Any]:
    """The resolved model section as a run's identity: options that do not apply (None) left out, and axes
    and options declared ``added_later`` left out at their default."""
    out = identity_options(MODEL, {k: v for k, v in model.items()
                                   if not (k in LATER_FIELDS and v is None)})
    if out.get("kv_heads") is not None and out.get("kv_heads") == out.get("heads"):
        out.pop("kv_heads")  # kv_heads = heads is multi-head attention itself: the same run
    if out.get("arch") == "encoder_decoder":  # came after the first record format: old hashes stay
        out.pop("arch")
    out.update({f"{kind}_version": version for kind, version in component_versions(model).items()})
    return out


def stale_components(model: Mapping[str, Any], recorded: Mapping[str, int]) -> list[str]:
    """What changed in the variants a run chose since it ran: ``'attention=qk_norm v1, now v2'`` for each
    chosen variant whose version differs from ``recorded`` (the run's :func:`component_versions`; a variant
    it does not name ran at version 1). ``model``: the run's axis values (``{'attention': 'qk_norm'}``)."""
    stale = []
    for axis in registry.axes():  # the recipe's axes too, where ``model`` names them ({'optimizer': 'lion'})
        name = model.get(axis.kind)
        if isinstance(name, str) and name in registry.names(axis.kind):
            now, then = registry.REGISTRY.entry(axis.kind, name).version, int(recorded.get(axis.kind, 1))
            if now != then:
                stale.append(f"{axis.kind}={name} v{then}, now v{now}")
    return stale


def component_versions(model: Mapping[str, Any]) -> dict[str, int]:
    """{axis: implementation version} of the variants a model section chooses whose version is above 1.

    Version 1 is left out, so a run recorded before versions existed keeps its identity until its own
    variant is fixed. Open values that are not registered (a mask fill of -3e4) have no version.
    """
    versions: dict[str, int] = {}
    for axis in registry.axes():  # the recipe's axes too, where ``model`` names them ({'optimizer': 'lion'})
        name = model.get(axis.kind)
        if isinstance(name, str) and name in registry.names(axis.kind):
            version = registry.REGISTRY.entry(axis.kind, name).version
            if version > 1:
                versions[axis.kind] = version
    return versions


def drop_unset_options(model: dict[str, Any]) -> dict[str, Any]:
    """The resolved model section without the options of variants that are not chosen (None) and the later
    plain fields while unset."""
    names = option_names(MODEL)
    return {k: v for k, v in model.items()
            if not (v is None and (k in names or k in LATER_FIELDS))}
