"""YAML is read as data only (sim/safe_yaml.py), and the fast loader reads what ``yaml.safe_load`` reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.safe_yaml import safe_load

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ["sim/model/data/gpus.yaml", "sim/model/data/models.yaml", "sim/model/data/links.yaml",
           "calibration/data/stacks.yaml", "calibration/data/vidur/a100.yaml", "calibration/data/vidur/h100.yaml"]


@pytest.mark.parametrize("rel", BUNDLED)
def test_bundled_files_load_to_the_same_values_as_safe_load(rel: str) -> None:
    text = (ROOT / rel).read_text()
    assert safe_load(text) == yaml.safe_load(text)


def test_scalars_keep_safe_load_types() -> None:
    doc = "a: 1\nb: 1.5e-3\nc: yes\nd: null\ne: 2026-12-01\nf: '007'\ng: [1, two]\n"
    got = safe_load(doc)
    assert got == yaml.safe_load(doc)
    assert [type(got[k]).__name__ for k in "abcdf"] == ["int", "float", "bool", "NoneType", "str"]


def test_python_object_tags_are_refused() -> None:
    with pytest.raises(yaml.YAMLError):
        safe_load("!!python/object/apply:os.system ['true']")


def test_malformed_yaml_raises_yaml_error_with_its_line() -> None:
    with pytest.raises(yaml.YAMLError) as e:
        safe_load("a: 1\nb: [1, 2\nc: 3\n")
    assert "line" in str(e.value)
