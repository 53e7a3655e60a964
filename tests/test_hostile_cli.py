"""The command's ranges and the options it would ignore.

* ``--features`` takes 1 to 2**22, the API's maximum (``10**30`` and ``10**8`` are one line naming it and its range, before any
  work); ``--seed`` and ``--rf-seed`` take 0 to 2**64 - 1, as :func:`hypviz.base.validate.seed` does.
* A kind's option (``--power``, ``--norm-scale``, ``--features``, ``--rf-seed``) given while no compared kind
  reads it is said to be ignored, in one line on stderr; given to a capture file it is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from hypviz import cli, data
from hypviz.base import validate
from hypviz.reports import input_files

FAST = ("--sample-rows", "4", "--device", "cpu", "--no-progress")


def run(capsys, *args) -> tuple[int, str, str]:
    input_files.STORED_K.clear()
    code = cli.main([os.fspath(a) if isinstance(a, Path) else str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def files(tmp_path):
    q = data.lifted_gaussian((12,), 3, 1.0, seed=1, dtype=torch.float64)
    k = data.lifted_gaussian((10,), 3, 1.0, seed=2, dtype=torch.float64)
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    return tmp_path / "q.npy", tmp_path / "k.npy", tmp_path / "r"


@pytest.mark.parametrize("option, value", [
    ("--features", str(10**30)), ("--features", str(10**8)), ("--features", str(2**22 + 1)), ("--features", "0"),
    ("--features", "-3"), ("--features", "1e3"), ("--features", "9" * 5000),
])
def test_features_out_of_range_is_one_line_naming_it_and_its_range(option, value, files, capsys):
    qp, kp, out = files
    code, stdout, err = run(capsys, "compare", qp, kp, "--kinds", "distance_rf", *FAST, option, value, "--out", out)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 300, err
    assert "argument --features: expected an integer from 1 to 2**22 = 4194304" in lines[0]
    assert "frame" not in err and "Overflow" not in err and not out.exists()


@pytest.mark.parametrize("option", ["--seed", "--rf-seed"])
@pytest.mark.parametrize("value", [str(2**64), "-1", str(10**30)])
def test_seeds_out_of_range_are_one_line_naming_them_and_their_range(option, value, files, capsys):
    qp, kp, out = files
    code, stdout, err = run(capsys, "compare", qp, kp, "--kinds", "distance_rf", *FAST, "--rows", "4", option, value,
                            "--out", out)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"argument {option}: expected an integer from 0 to 2**64 - 1 = {validate.SEED_MAX}" in err


def test_the_extremes_of_the_ranges_are_accepted(files, capsys):
    qp, kp, out = files
    code, stdout, err = run(capsys, "compare", qp, kp, "--kinds", "distance_rf", *FAST, "--features", "1",
                            "--rf-seed", str(2**64 - 1), "--out", out)
    assert code == 0 and err == "", err
    summary = json.loads((out / "metrics.json").read_text())
    assert "distance_rf" in json.dumps(summary)


@pytest.mark.parametrize("value, ok", [(0, True), (2**64 - 1, True), (2**64, False), (-1, False), (True, False),
                                       (1.0, False), ("3", False), (None, False)])
def test_the_api_seed_check_names_the_argument_and_the_range(value, ok):
    if ok:
        assert validate.seed(value) == value
    else:
        with pytest.raises(ValueError, match=r"^rf_seed must be an integer from 0 to 18446744073709551615 = 2\*\*64 - 1, got "):
            validate.seed(value, "rf_seed")


@pytest.mark.parametrize("given, kinds, ignored", [
    (("--features", "64"), "spatial", "--features"),
    (("--rf-seed", "3"), "spatial,focused", "--rf-seed"),
    (("--features", "64", "--rf-seed", "3", "--power", "3"), "spatial", "--power, --features, --rf-seed"),
    (("--norm-scale", "2"), "spatial,distance_rf", "--norm-scale"),
])
def test_a_kinds_option_that_no_compared_kind_reads_is_said_to_be_ignored(given, kinds, ignored, files, capsys):
    qp, kp, out = files
    code, stdout, err = run(capsys, "compare", qp, kp, "--kinds", kinds, *FAST, *given, "--out", out)
    lines = err.strip().splitlines()
    assert code == 0 and len(lines) == 1, err
    assert lines[0].startswith(f"hypviz compare: warning: {ignored} ignored: no compared kind reads")
    for flag in ("--power", "--norm-scale", "--features", "--rf-seed"):
        assert (flag in lines[0]) == (flag in ignored)


@pytest.mark.parametrize("given, kinds", [
    (("--features", "64", "--rf-seed", "3"), "distance_rf"),
    (("--power", "3", "--norm-scale", "2"), "focused"),
    (("--features", "64"), "spatial"),  # read by the reference
])
def test_an_option_a_compared_kind_reads_gives_no_warning(given, kinds, files, capsys):
    qp, kp, out = files
    ref = ("--reference", "distance_rf") if kinds == "spatial" else ()
    code, stdout, err = run(capsys, "compare", qp, kp, "--kinds", kinds, *ref, *FAST, *given, "--out", out)
    assert code == 0 and err == "", err


def test_the_option_is_used_when_read(files, capsys):
    qp, kp, out = files
    runs = {}
    for seed in ("0", "1"):
        code, stdout, err = run(capsys, "compare", qp, kp, "--kinds", "distance_rf", *FAST, "--features", "8",
                                "--rf-seed", seed, "--out", out, "--force")
        assert code == 0, err
        runs[seed] = np.load(out / "rows.npz")
        runs[seed] = {key: runs[seed][key] for key in runs[seed].files}
    tv = [key for key in runs["0"] if key.endswith("_tv")]
    assert tv and any(not np.array_equal(runs["0"][key], runs["1"][key]) for key in tv)


@pytest.mark.parametrize("given", [("--features", "256"), ("--rf-seed", "0"), ("--power", "2"), ("--norm-scale", "1")])
def test_a_kinds_option_given_to_a_capture_file_is_refused_even_at_its_default(given, tmp_path, capsys):
    from hypviz.capture import records

    q = data.lifted_gaussian((1, 8), 3, 1.0, seed=1)
    rec = records.LayerRecord(name="l0", queries=q, keys=q, values=None, k=1.0, mode="full", kind="distance",
                              temperature=1.0)
    records.save([rec], tmp_path / "cap.pt")
    code, stdout, err = run(capsys, "compare", tmp_path / "cap.pt", *given, "--out", tmp_path / "r")
    assert code == 2 and f"{given[0]}: not for a capture file" in err and len(err.strip().splitlines()) == 1
