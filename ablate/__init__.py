"""ablate: controlled ablation studies of Transformer design choices."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "build_model", "load_spec"]

if TYPE_CHECKING:
    from ablate.engine.dispatch import build_any as build_model
    from ablate.spec.load import load_spec


def __getattr__(name: str) -> Any:
    # Lazy so that `ablate --help` does not pay for importing torch.
    if name == "load_spec":
        from ablate.spec.load import load_spec

        return load_spec
    if name == "build_model":  # the model a spec's model section names, either architecture (model.arch)
        from ablate.engine.dispatch import build_any

        return build_any
    raise AttributeError(name)
