"""`hvbench study schema`: the JSON Schema an editor checks a study with takes every study hvbench
ships and refuses what hvbench refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from hvbench.cli import app
from hvbench.errors import StudyError
from hvbench.study import parse_study

ROOT = Path(__file__).parent.parent
SHIPPED = [*sorted(ROOT.glob("examples/*.yaml")), ROOT / "src/hvbench/default_study.yaml"]


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    res = CliRunner().invoke(app, ["study", "schema"])
    assert res.exit_code == 0, res.output
    schema = json.loads(res.output)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_schema_takes_every_shipped_study(validator: Draft202012Validator, path: Path) -> None:
    study = yaml.safe_load(path.read_text())
    assert [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(study)] == []


VALID = """\
name: demo
baseline: native
platforms:
  native: {driver: native}
  vm: {driver: qemu, accel: auto, memory: 1G, disk: {size: 3G}}
workloads:
  - {name: cpu}
  - {name: disk, tool: fio, size: 1G}
expect:
  - {platform: vm, workload: cpu, metric: cpu.composite.score, at_least: 50%}
repetitions: 3
"""

MALFORMED = {
    "an unknown top-level key": ("repetitions: 3", "repetition: 3"),
    "no repetition": ("repetitions: 3", "repetitions: 0"),
    "an unknown driver": ("driver: native}", "driver: bare-metal}"),
    "an unknown accelerator": ("accel: auto", "accel: hax"),
    "a setting of another driver": ("accel: auto,", "accel: auto, mode: pv,"),
    "a size that is no size": ("memory: 1G", "memory: [1G]"),
    "an unknown workload": ("{name: cpu}", "{name: gpu}"),
    "an unknown tool": ("tool: fio", "tool: iozone"),
    "a platform name with a capital": ("  vm:", "  VM:"),
    "a claim with an unknown key": ("at_least: 50%", "at_least: 50%, within: 3"),
}


def test_the_valid_study_is_valid(validator: Draft202012Validator) -> None:
    parse_study(VALID, "demo.yaml")
    assert list(validator.iter_errors(yaml.safe_load(VALID))) == []


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_the_schema_refuses_a_malformed_study_as_hvbench_does(
    validator: Draft202012Validator, what: str
) -> None:
    old, new = MALFORMED[what]
    assert old in VALID
    text = VALID.replace(old, new, 1)
    with pytest.raises(StudyError):
        parse_study(text, "demo.yaml")
    assert list(validator.iter_errors(yaml.safe_load(text))) != []
