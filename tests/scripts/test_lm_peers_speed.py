"""scripts/lm_peers_speed.py's race: the models take turns in every repeat, and ablate's lead is read within
each repeat as well as from the medians."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.scripts.script_loader import load_script


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("lm_peers_speed")


def test_every_model_runs_its_warm_up_then_takes_its_turn_in_each_repeat(script: ModuleType) -> None:
    order: list[str] = []

    def step_of(name: str):  # noqa: ANN202 - a Step
        def step() -> int:
            order.append(name)
            return 100
        return step

    rates = script.race({"ablate": step_of("ablate"), "peer": step_of("peer")}, repeats=3,
                        per_repeat=2, warmup=1)
    assert order == ["ablate", "peer"] + ["ablate", "ablate", "peer", "peer"] * 3
    assert {name: len(r) for name, r in rates.items()} == {"ablate": 3, "peer": 3}
    assert all(rate > 0 for r in rates.values() for rate in r)


def test_the_lead_within_each_repeat_pairs_the_runs_of_one_repeat(script: ModuleType) -> None:
    # a slow spell in the second repeat halves both: the per-repeat lead stays 1.2x throughout
    rates = {"ablate": [1200.0, 600.0, 1200.0], "litgpt": [1000.0, 500.0, 1000.0]}
    assert script.per_repeat_ratios(rates, "ablate", "litgpt") == pytest.approx([1.2, 1.2, 1.2])
