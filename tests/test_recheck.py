"""What the report's re-check proves: every record's check redone from what the record holds.

The capture stores what its check compared (the layer's output, or what enters its concatenating map) and a SHA-256
of every field a verdict depends on; ``hypviz.capture.verification.recheck`` (run by
the report) calls a record verified only when that output is rebuilt again from the stored points and map and no
digest changed.  It detects accidental and partial edits; a record rewritten whole (output rebuilt, digests
recomputed) is consistent with itself and passes: the digests are not a signature.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from hypviz import capture
from hypviz.capture import verification
from hypviz.reports import model_report

from test_family_interfaces import Block


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    block = Block(8, 2).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    causal = torch.triu(torch.ones(5, 5), diagonal=1).bool()
    with capture.attention(block) as cap, torch.no_grad():
        block(x, causal)
    path = tmp_path_factory.mktemp("cap") / "att.pt"
    cap.save(path)
    return path


def _raw(path):
    return torch.load(path, weights_only=True)


def _reloaded(obj, tmp_path):
    p = tmp_path / "edited.pt"
    torch.save(obj, p)
    return capture.load(p)


def test_a_saved_capture_is_re_verified_when_the_report_is_built(saved):
    (rec,) = capture.load(saved)
    assert rec.checked_output is not None and set(rec.digests) == set(verification.DIGESTED)
    (res,) = model_report.analyse([rec], device="cpu", progress=False)
    assert res.verified and res.record.verify_note.endswith("re-checked from the record")
    assert res.record.verify_error <= math.sqrt(torch.finfo(torch.float64).eps)


@pytest.mark.parametrize("field,value", [("temperature", 0.9), ("mask", None), ("kind", "spatial")])
def test_an_edited_field_is_named_and_the_layer_gets_no_verdict(saved, tmp_path, field, value):
    obj = _raw(saved)
    obj["layers"][0][field] = value
    (rec,) = _reloaded(obj, tmp_path)
    (res,) = model_report.analyse([rec], device="cpu", progress=False)
    assert not res.verified and res.own is None
    assert res.record.verify_note == f"not verified: {field} changed since the capture (digest differs)"
    m = model_report.metrics([res], {})["layers"][0]
    assert m["verified"] is False and m["model_vs_distance"] is None and m["model_verdict"] == "not verified: no verdict"


def test_edited_points_with_digests_rewritten_fail_the_re_check(saved, tmp_path):
    obj = _raw(saved)
    d = obj["layers"][0]
    rec = capture.LayerRecord.from_dict(d)
    swapped = dataclasses.replace(rec, keys=rec.keys.flip(1), values=rec.values.flip(1))  # keys moved, not the output
    d.update(keys=swapped.keys, values=swapped.values, digests=verification.digests(swapped))
    (edited,) = _reloaded(obj, tmp_path)
    got = verification.recheck(edited)
    assert got.verify_note.startswith("not verified: the re-check from the record differs from the stored output")
    assert got.verify_error is None


def test_a_stored_verdict_without_what_it_checked_is_not_trusted(saved, tmp_path):
    obj = _raw(saved)
    d = obj["layers"][0]
    for f in ("checked_output", "self_term", "digests"):
        d.pop(f, None)
    d.update(verify_note="verified: trust me", verify_error=0.0)
    (rec,) = _reloaded(obj, tmp_path)
    got = verification.recheck(rec)
    assert got.verify_note == "not verified: the record holds no layer output to re-check (a stored verdict is not trusted)"
    (res,) = model_report.analyse([rec], device="cpu", progress=False)
    assert not res.verified
