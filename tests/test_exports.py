"""Exports other dashboards ingest, checked against each format's published description:
Bencher Metric Format against Bencher's own JSON Schema (with the ``jsonschema`` validator), the
samples JSON against the record PerfKitBenchmarker's sample and JSON publisher define."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest
from builders import RunBuilder

from hvbench.analysis import analyse
from hvbench.report import render
from hvbench.store import Store

BMF_SCHEMA = {
    # Bencher's published schema of BMF JSON (its reference page, "BMF JSON Schema")
    "$id": "https://bencher.dev/bmf.json",
    "$schema": "http://json-schema.org/draft-07/schema",
    "type": "object",
    "patternProperties": {
        ".+": {
            "type": "object",
            "patternProperties": {
                ".+": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "number"},
                        "lower_value": {"type": "number"},
                        "upper_value": {"type": "number"},
                    },
                    "required": ["value"],
                }
            },
        }
    },
}
BENCHMARK_NAME_MAX, MEASURE_NAME_MAX = 1024, 64
"""Bencher's limits on the names that identify a benchmark and a measure."""

PKB_FIELDS = {
    # perfkitbenchmarker/sample.py: Sample's fields
    "metric": str,
    "value": float,
    "unit": str,
    "metadata": dict,
    "timestamp": float,
    # publisher.SampleCollector.AddSamples adds these to every sample
    "test": str,
    "product_name": str,
    "official": bool,
    "owner": (str, type(None)),
    "run_uri": str,
    "sample_uri": str,
}


def test_bmf_is_valid_against_bencher_schema(four_platforms):
    doc = json.loads(render(analyse(four_platforms, "latest"), "bmf"))
    jsonschema.validate(doc, BMF_SCHEMA)
    assert all(len(name) <= BENCHMARK_NAME_MAX for name in doc)
    assert all(len(m) <= MEASURE_NAME_MAX for measures in doc.values() for m in measures)

    e1000 = doc["hand-made/disk/e1000/1 instance"]
    mean = e1000["disk.bonnie.block_kbps"]
    assert mean["value"] == pytest.approx(58000 * 0.7)
    assert mean["lower_value"] < mean["value"] < mean["upper_value"]
    pct = e1000["disk.bonnie.block_kbps % of native"]
    assert pct["value"] == pytest.approx(70)
    assert pct["lower_value"] < 70 < pct["upper_value"]
    # the baseline is tracked by its own figures, never as a % of itself
    assert set(doc["hand-made/disk/native/1 instance"]) == {"disk.bonnie.block_kbps"}
    # kernbench's time: % of native reads "how much is kept", lower-is-better inverted
    assert doc["hand-made/kernbench/tcg/1 instance"]["kernbench.elapsed_s % of native"][
        "value"
    ] == pytest.approx(41)


def test_bmf_leaves_out_what_is_not_a_number(four_platforms):
    """One repetition: no interval, so no bounds; the schema still holds (no NaN, no null)."""
    s = Store(four_platforms.url.replace("results.db", "one.db"))
    b = RunBuilder(s)
    for platform, v in (("native", 10.0), ("kvm", 9.0)):
        b.sample(b.cell(platform, "disk"), 0, {"disk.x_mbps": [v]}, "MB/s")
    text = render(analyse(s, "latest"), "bmf")
    assert "NaN" not in text and "null" not in text
    doc = json.loads(text)
    jsonschema.validate(doc, BMF_SCHEMA)
    kvm = next(v for k, v in doc.items() if "/kvm/" in k)
    assert kvm["disk.x_mbps"] == {"value": 9.0}
    assert kvm["disk.x_mbps % of native"] == {"value": pytest.approx(90.0)}


def test_samples_json_has_perfkitbenchmarker_record_shape(four_platforms):
    lines = [json.loads(x) for x in render(analyse(four_platforms, "latest"), "json").splitlines()]
    samples = [x for x in lines if x["metric"] != "verdict"]  # the matrix's cells besides
    assert len(samples) == 4 * 3 * 4  # platforms × repetitions × metrics
    for line in lines:
        assert set(line) == set(PKB_FIELDS), set(line) ^ set(PKB_FIELDS)
        for field, kind in PKB_FIELDS.items():
            assert isinstance(line[field], kind), (field, line[field])
        assert math.isfinite(line["value"]) and line["timestamp"] > 1.7e9
    assert len({x["sample_uri"] for x in lines}) == len(lines)
    # the same run exports the same file
    assert render(analyse(four_platforms, "latest"), "json") == render(
        analyse(four_platforms, "latest"), "json"
    )
