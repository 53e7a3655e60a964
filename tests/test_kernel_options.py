"""A kernel's own option reaches every route: ``attention_map``, ``compare``, ``plan_compare``, the command and its
``metrics.json``, by one path that the built-in options (``power``, ``features``, ...) take too.

The kernel here is sigmoid attention (Ramapuram et al. 2024), its rows normalised so that it can be compared:
:math:`A_{ij} \\propto \\sigma(q_{s,i} \\cdot \\kappa_{s,j} / \\tau + b)`, ``b`` its option ``offset``
(``-log M`` in the paper), declared as ``options = {"offset": Option(check, default)}`` and registered at run time
with a kind of the registry.  An option no registered kernel declares is refused in one line naming those that
exist; so is a setting that the call does not read (``compare_maps`` has no kernels).
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import torch

from hypviz import attention as att
from hypviz import data
from hypviz.attention.maps import kernels
from hypviz.base import kinds, validate
from hypviz.cli import main as cli_main

K, TAU, D = 1.0, 2.0, 4
NAME = "sigmoid_attention"


class SigmoidAttention(att.Kernel):
    """``A ∝ sigmoid(q_s . kappa_s / tau + offset)``, rows normalised: a dense map only (compared by its rows)."""

    options = {"offset": att.Option(lambda v, name: validate.number(v, name, hint=" (the sigmoid's bias b)"), 0.0)}

    def dense(self, kind, q, keys, *, k, temperature, opts):
        w = torch.sigmoid(q[..., 1:] @ keys[..., 1:].transpose(-1, -2) / temperature + opts["offset"])
        return w / w.sum(dim=-1, keepdim=True)


def reference(q, keys, offset, temperature=TAU):
    w = torch.sigmoid(q[:, 1:] @ keys[:, 1:].T / temperature + offset)
    return w / w.sum(-1, keepdim=True)


def tv(p, r):
    return 0.5 * (p - r).abs().sum(-1)


@pytest.fixture
def sigmoid_attention():
    att.register_kernel(NAME, SigmoidAttention())
    kind = kinds.register(kinds.Kind(
        name=NAME, family="softmax", kernel=NAME, options=("offset",),
        formula=r"\sigma(q_s \cdot \kappa_{s,j} / \tau + b) / \sum_l \sigma(q_s \cdot \kappa_{s,l} / \tau + b)",
        title=r"sigmoid attention: $\sigma(q_s\cdot\kappa_s/\tau + b)$", plain="sigmoid attention",
        html="sigmoid attention", description="sigmoid attention, rows normalised (a test kernel with the option offset)",
        rounding="measured on the weights (dense rows)",
    ))
    yield kind
    kinds.unregister(NAME)
    att.unregister_kernel(NAME)
    assert NAME not in kernels.KERNELS and "offset" not in kernels.option_names()


@pytest.fixture(scope="module")
def qk():
    return (data.lifted_gaussian(20, D, 1.5, k=K, seed=1, dtype=torch.float64),
            data.lifted_gaussian(30, D, 1.5, k=K, seed=2, dtype=torch.float64))


def test_attention_map_takes_the_kernels_option(sigmoid_attention, qk):
    q, keys = qk
    for offset in (-3.0, 0.0, 2.5):
        got = att.attention_map(q, keys, NAME, k=K, temperature=TAU, offset=offset)
        torch.testing.assert_close(got, reference(q, keys, offset), rtol=1e-12, atol=1e-15)
    default = att.attention_map(q, keys, NAME, k=K, temperature=TAU)
    torch.testing.assert_close(default, reference(q, keys, 0.0), rtol=1e-12, atol=1e-15)  # the Option's default
    assert float(tv(att.attention_map(q, keys, NAME, temperature=TAU, offset=-3.0), default).max()) > 1e-3
    # an option of another kernel is ignored here, as power is by "distance"
    torch.testing.assert_close(att.attention_map(q, keys, NAME, temperature=TAU, power=3.0), default, rtol=0, atol=0)
    torch.testing.assert_close(att.attention_map(q, keys, "distance", temperature=TAU, offset=1.0),
                               att.attention_map(q, keys, "distance", temperature=TAU), rtol=0, atol=0)


def test_the_kernels_check_and_unknown_options_are_one_line(sigmoid_attention, qk):
    q, keys = qk
    with pytest.raises(ValueError, match=r"^offset must be a finite number \(the sigmoid's bias b\), got the string '1'$"):
        att.attention_map(q, keys, NAME, offset="1")
    with pytest.raises(ValueError, match=r"^offset must be a finite number \(the sigmoid's bias b\), got inf$"):
        att.compare(q, keys, NAME, "distance", offset=float("inf"))
    for call in (lambda **kw: att.attention_map(q, keys, NAME, **kw), lambda **kw: att.compare(q, keys, NAME, "distance", **kw),
                 lambda **kw: att.plan_compare(q, keys, NAME, "distance", **kw)):
        with pytest.raises(TypeError) as exc:
            call(ofset=1.0)
        line = str(exc.value)
        assert "\n" not in line and "unknown option 'ofset'" in line, line
        assert "offset" in line and "power" in line and "features" in line, line  # the options that exist


def test_compare_takes_the_option_and_its_plan_records_it(sigmoid_attention, qk):
    q, keys = qk
    pb = att.attention_map(q, keys, "distance", k=K, temperature=TAU)
    results = {}
    for offset in (-3.0, 1.5):
        res = att.compare(q, keys, NAME, "distance", k=K, temperature=TAU, offset=offset, block_rows=7)
        torch.testing.assert_close(res.tv, tv(reference(q, keys, offset), pb), rtol=1e-9, atol=1e-12)
        assert res.plan.path == "dense_rows" and res.plan.options == {"offset": offset}
        results[offset] = res
    assert not torch.allclose(results[-3.0].tv, results[1.5].tv)  # the option reached the kernel
    # the same through the options record, through the plan, and with a kind that does not read it
    opts = att.CompareOptions(k=K, temperature=TAU, block_rows=7, kernel_options={"offset": -3.0})
    assert torch.equal(att.compare(q, keys, NAME, "distance", options=opts).tv, results[-3.0].tv)
    plan = att.plan_compare(q, keys, NAME, "distance", options=opts)
    assert plan.options == {"offset": -3.0} and plan.plan.options == {"offset": -3.0}
    assert plan.with_path("dense_rows").plan.options == {"offset": -3.0}
    assert att.compare(q, keys, "spatial", "distance", options=opts).plan.options == {}
    # a keyword overrides the record's field, and the record itself is not changed
    assert torch.equal(att.compare(q, keys, NAME, "distance", options=opts, offset=1.5).tv, results[1.5].tv)
    assert opts.kernel_options == {"offset": -3.0}
    # compare_maps compares the kernel's maps as given
    given = att.compare_maps(reference(q, keys, 1.5), pb)
    torch.testing.assert_close(given.tv, results[1.5].tv, rtol=1e-9, atol=1e-12)
    assert given.plan.options == {}


def test_the_built_in_options_take_the_same_route(qk):
    q, keys = qk
    res = att.compare(q, keys, "focused", "distance_rf", temperature=TAU, power=3.0, features=64, rf_seed=4)
    assert res.plan.options == {"power": 3.0, "norm_scale": 1.0, "features": 64, "seed": 4}
    same = att.compare(q, keys, "focused", "distance_rf", temperature=TAU,
                       options=att.CompareOptions(rf_seed=4, kernel_options={"power": 3, "features": 64}))
    assert torch.equal(res.tv, same.tv) and same.plan.options == res.plan.options
    other = att.compare(q, keys, "focused", "distance_rf", temperature=TAU, power=3.0, features=64, rf_seed=5)
    assert not torch.equal(res.tv, other.tv)
    assert att.compare(q, keys, "focused", "distance", temperature=TAU, features=64).plan.options == {
        "power": 2.0, "norm_scale": 1.0}  # features: read by no kind compared, ignored


def test_the_options_record_is_frozen_checked_once_and_refuses_what_a_call_does_not_read(qk):
    q, keys = qk
    opts = att.CompareOptions(temperature=2, topk=np.int64(3), rows=np.int32(8), kernel_options={"power": 2.5})
    assert (opts.temperature, opts.topk, opts.rows) == (2.0, 3, 8) and type(opts.topk) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.topk = 4
    for field, value, message in (("topk", 0, r"^topk must be an integer from 1 to 2147483647, got 0$"),
                                  ("rows", 1, r"^rows must be an integer >= 2 or None \(query rows to sample; None: all\)"),
                                  ("spearman", 1, r"^spearman must be True, False or None \(automatic\), got 1$"),
                                  ("temperature", "2", r"^temperature must be a positive finite number .*got the string '2'$"),
                                  ("precision", "float8", r"^precision must be one of float16, bfloat16, float32, float64")):
        with pytest.raises(ValueError, match=message):
            att.CompareOptions(**{field: value})
    with pytest.raises(TypeError, match=r"^kernel_options: 'nope' is no option of a registered kernel \(their options: power"):
        att.CompareOptions(kernel_options={"nope": 1})
    with pytest.raises(TypeError, match=r"^options must be a hypviz.attention.CompareOptions \(or None\), got dict$"):
        att.compare(q, keys, options={"topk": 3})
    p = att.attention_map(q, keys, "distance", temperature=TAU)
    with pytest.raises(TypeError, match=r"^compare_maps takes no option 'rows' \(it takes: topk, spearman, atol, tolerance, "
                                        r"precision, logit_scale\)$"):
        att.compare_maps(p, p, rows=3)
    with pytest.raises(TypeError, match=r"^compare_maps got an unknown option 'power' \(its options: topk, spearman, atol"):
        att.compare_maps(p, p, power=2.0)  # the maps are given: no kernel reads an option
    with pytest.raises(TypeError, match=r"^compare takes no option 'atol' \(it takes: k, temperature, topk, "):
        att.compare(q, keys, atol=1e-3)
    # one record serves both: compare_maps reads its own fields and leaves compare's
    shared = att.CompareOptions(temperature=TAU, topk=2, rows=8, atol=1e-6)
    assert att.compare_maps(p, p, options=shared).topk == 2 and att.compare(q, keys, options=shared).n_queries == 8


def _write(tmp_path, q, keys):
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", keys.numpy())
    return [str(tmp_path / "q.npy"), str(tmp_path / "k.npy")]


def _run(tmp_path, files, out, *extra):
    return cli_main(["compare", *files, "--k", str(K), "--temperature", str(TAU), "--kinds", NAME, "--out",
                     str(tmp_path / out), "--device", "cpu", "--no-progress", *extra])


def test_the_command_takes_the_option_and_metrics_json_records_it(sigmoid_attention, qk, tmp_path, capsys):
    q, keys = qk
    files = _write(tmp_path, q, keys)
    means = {}
    for offset in ("-3", "1.5"):
        assert _run(tmp_path, files, f"r{offset}", "--option", f"offset={offset}") == 0, capsys.readouterr().err
        meta = json.loads((tmp_path / f"r{offset}" / "metrics.json").read_text())
        assert meta["setup"]["options"] == {"offset": float(offset)}
        summary = meta["comparisons"][0]["summary"]
        assert (summary["a"], summary["plan"]["options"]) == (NAME, {"offset": float(offset)})
        means[offset] = summary["mean_tv"]
        expected = float(tv(reference(q, keys, float(offset)), att.attention_map(q, keys, "distance", temperature=TAU)).mean())
        assert summary["mean_tv"] == pytest.approx(expected, rel=1e-9)
    assert means["-3"] != means["1.5"]
    # the option given twice, or as --power would be: the last one counts, as argparse does; a built-in one too
    assert _run(tmp_path, files, "both", "--option", "offset=9", "--option", "offset=-3", "--kinds", f"{NAME},focused",
                "--option", "power=3") == 0, capsys.readouterr().err
    meta = json.loads((tmp_path / "both" / "metrics.json").read_text())
    assert meta["setup"]["options"] == {"offset": -3.0, "power": 3.0, "norm_scale": 1.0}
    assert [c["summary"]["plan"]["options"] for c in meta["comparisons"]] == [{"offset": -3.0},
                                                                               {"power": 3.0, "norm_scale": 1.0}]


READ = r"no compared kind reads it \(the compared kinds read: offset; compared: distance, sigmoid_attention\)$"


@pytest.mark.parametrize("option, message", [
    ("nope=1", r"--option nope: " + READ),
    ("power=2", r"--option power: " + READ),
    ("offset=abc", r"--option offset: offset must be a finite number \(the sigmoid's bias b\), got the string 'abc'"),
    ("offset", r"--option: expected NAME=VALUE \(an option of a kernel, e.g. power=3\), got 'offset'"),
])
def test_a_bad_option_on_the_command_line_is_one_line_exit_2(sigmoid_attention, qk, tmp_path, capsys, option, message):
    files = _write(tmp_path, *qk)
    capsys.readouterr()
    assert _run(tmp_path, files, "bad", "--option", option) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err.rstrip("\n")), err
    assert not (tmp_path / "bad").exists()
