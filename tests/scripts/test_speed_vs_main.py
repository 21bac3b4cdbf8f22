"""scripts/speed_vs_main.py's reading of its rounds: here / reference of the medians, the bests and round by
round, and a sign test that says a difference only when more rounds agree than chance allows."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.scripts.script_loader import load_script


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("speed_vs_main")


def runs(script: ModuleType, rates: list[float], train_s: float = 10.0) -> list:
    return [script.Timing(train_s, rate, 20.0) for rate in rates]


def test_the_sign_test_is_the_exact_binomial_tail_on_both_sides(script: ModuleType) -> None:
    assert script.sign_test(6, 6) == pytest.approx(2 / 64)
    assert script.sign_test(0, 6) == pytest.approx(2 / 64)
    assert script.sign_test(5, 6) == pytest.approx(2 * 7 / 64)
    assert script.sign_test(3, 6) == 1.0
    assert script.sign_test(2, 2) == 0.5  # two rounds can never say a difference


def test_a_difference_in_every_round_shows_through_spells_that_swamp_the_medians(script: ModuleType) -> None:
    # the machine's speed moves by a third between rounds; here is 4% faster within every round
    machine = [40_000, 52_000, 39_000, 51_000, 41_000, 50_000]
    reference = runs(script, machine)
    here = runs(script, [rate * 1.04 for rate in machine])
    text = script.verdict("quickstart", reference, here)
    assert "here is faster (sign test p = 0.031)" in text
    assert "per round 1.040x (median of 6; here faster in 6)" in text
    assert "best 1.040x" in text
    assert "spread 1.33x" in text


def test_a_split_of_rounds_is_not_resolved_and_a_slower_side_is_called_slower(script: ModuleType) -> None:
    machine = [40_000, 52_000, 39_000, 51_000, 41_000, 50_000]
    mixed = runs(script, [r * f for r, f in zip(machine, [1.1, 0.9, 1.1, 0.9, 1.1, 1.2], strict=True)])
    assert "not resolved (sign test p = 0.69)" in script.verdict("q", runs(script, machine), mixed)
    slower = runs(script, [rate * 0.9 for rate in machine])
    assert "here is slower (sign test p = 0.031)" in script.verdict("q", runs(script, machine), slower)


def test_a_reference_without_a_token_count_reads_n_a_not_nan(script: ModuleType) -> None:
    text = script.verdict("q", runs(script, [1.0, 1.0], train_s=float("nan")), runs(script, [1.0, 1.0]))
    assert "reference n/a  here 10.0" in text
    assert "nan" not in text
