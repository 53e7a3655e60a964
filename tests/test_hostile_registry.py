"""The kind registry and the kernel table refuse malformed entries at registration, in one line, and keep the
built-in kinds: a malformed kind never gets as far as a map, a comparison or the command."""

from __future__ import annotations

import math

import pytest

from hypviz.attention.maps import kernels
from hypviz.base import kinds

ENTRY = dict(name="probe_kind", family="softmax", kernel="bilinear", bias=0.0, formula="x", title="x", plain="x",
             html="x", description="x", rounding="x")


@pytest.mark.parametrize("bad, message", [
    (dict(options="power"), r"options must be a tuple of distinct option names \(words its kernel declares\), got 'power'"),
    (dict(options=("two words",)), r"options must be a tuple of distinct option names .*got \('two words',\)"),
    (dict(options=["power"]), r"options must be a tuple .*got \['power'\]"),
    (dict(options=("power", "power")), r"options must be a tuple of distinct option names"),
    (dict(bias="1"), r"bias must be a finite real number or None, got '1'"),
    (dict(bias=math.nan), r"bias must be a finite real number or None, got nan"),
    (dict(bias=math.inf), r"bias must be a finite real number or None, got inf"),
    (dict(bias=True), r"bias must be a finite real number or None, got True"),
    (dict(bias=1j), r"bias must be a finite real number or None, got 1j"),
    (dict(bias=10**400), r"bias must be a finite real number or None, got 1000000000"),
    (dict(constant=-(10**400)), r"constant must be a finite real number, got -1000000000"),
    (dict(constant="0"), r"constant must be a finite real number, got '0'"),
    (dict(name=3), r"Kind name must be a word of letters, digits and '_' .*got 3"),
    (dict(name="3d"), r"Kind name must be a word .*got '3d'"),
    (dict(name=""), r"Kind name must be a word .*got ''"),
    (dict(name="x" * 1000), r"Kind name must be a word .*at most 64 characters\), got 'xxx"),
    (dict(name="ünïcode"), r"Kind name must be a word"),
    (dict(family=["softmax"]), r"family must be one of softmax, features, gate, got \['softmax'\]"),
    (dict(kernel=None), r"kernel must be the name of a kernel .*got None"),
    (dict(title=None), r"title must be a non-empty one-line str, got None"),
    (dict(description="two\nlines"), r"description must be a non-empty one-line str"),
    (dict(formula=""), r"formula must be a non-empty one-line str, got ''"),
    (dict(temperature=1), r"temperature must be True or False, got 1"),
    (dict(temperature=False), r"a softmax kind divides its scores by the temperature"),
    (dict(comparable="yes"), r"comparable must be True or False, got 'yes'"),
    (dict(family="features", kernel="focused", bias=None, constant=2.0), r"only a 'bilinear' kind has a score constant"),
])
def test_every_field_of_a_kind_is_checked_when_it_is_made(bad, message):
    with pytest.raises(ValueError, match=message) as e:
        kinds.Kind(**{**ENTRY, **bad})
    assert "\n" not in str(e.value) and len(str(e.value)) < 300
    assert "probe_kind" not in kinds.names()


def test_a_real_bias_of_any_numeric_type_is_stored_as_a_float():
    import numpy as np

    kind = kinds.Kind(**{**ENTRY, "bias": np.float32(0.5), "constant": 1})
    assert type(kind.bias) is float and kind.bias == 0.5 and type(kind.constant) is float


def test_the_options_are_checked_by_the_kernel_that_declares_them():
    kind = kinds.Kind(**{**ENTRY, "family": "features", "kernel": "focused", "bias": None, "options": ("power", "norm_scale")})
    assert kernels.options(kind) == {"power": 2.0, "norm_scale": 1.0}  # the kernel's defaults
    with pytest.raises(ValueError, match=r"^power must be"):
        kernels.options(kind, {"power": -1.0})
    odd = kinds.Kind(**{**ENTRY, "family": "features", "kernel": "focused", "bias": None, "options": ("power", "seed")})
    with pytest.raises(ValueError, match=r"^kind 'probe_kind' reads 'seed', which its kernel 'focused' does not declare "
                                         r"\(it declares 'power', 'norm_scale'\)$"):
        kernels.options(odd)


@pytest.mark.parametrize("name", kinds.BUILT_IN)
def test_a_built_in_kind_cannot_be_unregistered(name):
    with pytest.raises(ValueError, match=rf"^name must be a kind registered at run time .*got '{name}'$"):
        kinds.unregister(name)
    assert name in kinds.names()


def test_the_built_in_kinds_still_compare_after_an_attempt_to_remove_one():
    from hypviz import attention, data

    with pytest.raises(ValueError):
        kinds.unregister("distance")
    q = data.lifted_gaussian((6,), 3, 1.0, seed=1)
    assert attention.compare(q, q, "spatial", "distance", device="cpu").tv.shape == (6,)


def test_a_kind_registered_at_run_time_can_be_unregistered_once():
    kinds.register(kinds.Kind(**ENTRY))
    try:
        assert "probe_kind" in kinds.names()
    finally:
        kinds.unregister("probe_kind")
    assert "probe_kind" not in kinds.names()
    with pytest.raises(ValueError, match=r"^kind must be one of .*got 'probe_kind'$"):
        kinds.unregister("probe_kind")


@pytest.mark.parametrize("name, kernel, exc, message", [
    ("probe", 5, TypeError, r"^kernel must be an instance of hypviz.attention.maps.kernels.Kernel, got 5$"),
    ("probe", None, TypeError, r"^kernel must be an instance of .*Kernel, got None$"),
    ("probe", kernels.Kernel, TypeError, r"^kernel must be an instance .*got the class Kernel \(pass an instance\)$"),
    (5, kernels.Kernel(), ValueError, r"^name must be a word of letters, digits and '_' \(a kernel's name\), got 5$"),
    ("two words", kernels.Kernel(), ValueError, r"^name must be a word .*got 'two words'$"),
    ("focused", kernels.Kernel(), ValueError, r"^a kernel named 'focused' is already registered$"),
])
def test_register_kernel_refuses_what_is_not_a_kernel(name, kernel, exc, message):
    before = dict(kernels.KERNELS)
    with pytest.raises(exc, match=message):
        kernels.register_kernel(name, kernel)
    assert kernels.KERNELS == before


@pytest.mark.parametrize("kernel, family, options, message", [
    ("focused", "features", (), r"options must include 'power', 'norm_scale' \(the kernel 'focused' reads them"),
    ("focused", "features", ("power",), r"options must include 'norm_scale'"),
    ("random_features", "features", ("seed",), r"options must include 'features'"),
    ("gate", "gate", (), r"options must include 'bias'"),
    ("gate", "features", ("bias",),
     r"family must be 'gate' \(the family of the kernel 'gate', as of the built-in kind 'sigmoid'\), got 'features'"),
    ("focused", "softmax", ("power", "norm_scale"), r"family must be 'features'"),
    ("geodesic", "features", (), r"family must be 'softmax'"),
])
def test_a_kind_on_a_built_in_kernel_has_its_family_and_reads_its_options(kernel, family, options, message):
    kind = kinds.Kind(**{**ENTRY, "kernel": kernel, "family": family, "bias": None, "options": options,
                         "comparable": family != "gate"})
    with pytest.raises(ValueError, match=rf"^Kind 'probe_kind': {message}"):
        kinds.register(kind)
    assert "probe_kind" not in kinds.names()


@pytest.mark.parametrize("kernel, family, options", [
    ("focused", "features", ("power", "norm_scale")), ("random_features", "features", ("features", "seed")),
    ("gate", "gate", ("bias",)), ("geodesic", "softmax", ()),
])
def test_a_kind_on_a_built_in_kernel_with_its_family_and_options_gives_a_map(kernel, family, options):
    from hypviz import attention, data

    kind = kinds.register(kinds.Kind(**{**ENTRY, "kernel": kernel, "family": family, "bias": None,
                                        "options": options, "comparable": False}))
    try:
        q = data.lifted_gaussian((4,), 2, 1.0, seed=1)
        m = attention.attention_map(q, q, kind.name, k=1.0)
        assert m.shape == (4, 4) and bool(m.isfinite().all())
    finally:
        kinds.unregister(kind.name)
