"""$/GPU-hour: catalog defaults with their unverified flags, and the user YAML override."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.fleet.prices import load_prices


def test_catalog_flags_unverified_prices() -> None:
    p = load_prices()
    assert p["l4"].unverified and p["a100-40gb"].unverified
    assert not p["h100"].unverified and p["h100"].typical == pytest.approx(2.95)


def test_yaml_override_number_and_mapping(tmp_path: Path) -> None:
    f = tmp_path / "prices.yaml"
    f.write_text("h100: 2.10\nL4: {typical: 0.7, low: 0.5, high: 0.9, source: contract}\n")
    p = load_prices(f)
    assert (p["h100"].low, p["h100"].typical, p["h100"].high) == (2.10, 2.10, 2.10)
    assert p["l4"].at("low") == 0.5 and not p["l4"].unverified
    assert p["l4"].source == "user: prices.yaml, contract"
    assert p["a100-80gb"].typical == pytest.approx(1.90)   # untouched entries stay


@pytest.mark.parametrize("text, msg", [
    ("tpu-v9: 1.0\n", "unknown GPU 'tpu-v9'"),
    ("h100: -1\n", "expected a price > 0"),
    ("h100: {low: 1}\n", "needs a 'typical' price"),
    ("h100: {typical: 2, low: 3}\n", "low <= typical <= high"),
    ("- h100\n", "expected a mapping"),
])
def test_bad_price_files_are_one_line_errors(tmp_path: Path, text: str, msg: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=msg):
        load_prices(f)
