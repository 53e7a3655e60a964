"""Extensions that reach other processes: a kind and a capture reader of another package, found through a real entry
point (a throwaway distribution, ``hypviz_test_plug-0.1.dist-info`` beside its package, on the ``PYTHONPATH`` of a
fresh interpreter), captured with, saved, then read by ``python -m hypviz.cli compare att.pt`` in another fresh
interpreter; without the plugin the command names the module to load; ``--plugin MODULE`` loads it by hand; a
broken plugin is one line (exit code 2); a user reader takes precedence over a built-in one when asked
(``register(reader, first=True)``); ``Reader.emit`` takes the families' mask (``masked=``) or an explicit
``attended=``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from hypviz.base import kinds, plugins
from hypviz.capture import READERS, LayerRecord, Reader, attended_keys, hooks, register
from hypviz.capture.family_readers import PoincareReader, reader_for
from hypviz.lorentz import lift

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "hypviz_test_plug"
MODULE = f"{PACKAGE}.readers"
FAMILY, KIND = "hypviz_test_plug_family", "hypviz_test_plug_lorentz"

#: The plugin: a kind (the Lorentz softmax under another name), a reader registered first, and the layer it reads,
#: shaped so that the built-in Poincare reader matches it too (query/key/value, num_attention_heads, a manifold with
#: weighted_midpoint_bmm): only first=True makes it the plugin's.
PLUGIN = textwrap.dedent(f'''
    """A throwaway hypviz plugin: a kind, a capture reader and the layer it reads."""
    import torch
    from torch import nn

    from hypviz.base import kinds
    from hypviz.capture import Reader, register

    kinds.register(kinds.Kind(
        name={KIND!r}, family="softmax", kernel="bilinear", bias=0.0, constant=1.0,
        formula=r"\\mathrm{{softmax}}_j(\\langle q, \\kappa_j\\rangle_L / \\tau)", title="the plugin's Lorentz softmax",
        plain="the plugin's Lorentz softmax", html="the plugin's Lorentz softmax",
        description="the plugin's Lorentz softmax <q, kappa>_L / T", rounding="as the Lorentz kind's"))


    class Ball:
        c = 1.0

        def weighted_midpoint_bmm(self, *args, **kwargs):
            raise NotImplementedError


    class PlugAttention(nn.Module):
        """softmax(<q, kappa>_L / tau) over the unpadded keys, then the centroid of each head (heads kept apart)."""

        def __init__(self, d=4, heads=2):
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(d, heads * 3) for _ in range(3))
            self.num_attention_heads = heads
            self.tau = nn.Parameter(torch.tensor(0.7))
            self.manifold = Ball()

        def forward(self, x, key_padding=None):
            b, n, _ = x.shape
            h = self.num_attention_heads
            lift = lambda s: torch.cat([((s * s).sum(-1, keepdim=True) + 1).sqrt(), s], -1)
            q, k, v = (lift(m(x).view(b, n, h, 3)).transpose(1, 2) for m in (self.query, self.key, self.value))
            inner = q[..., 1:] @ k[..., 1:].transpose(-1, -2) - q[..., :1] @ k[..., :1].transpose(-1, -2)
            logits = inner / self.tau
            if key_padding is not None:
                logits = logits.masked_fill(key_padding[:, None, None, :], -1e18)
            a = torch.softmax(logits, -1) @ v
            a = a / (a[..., :1] ** 2 - (a[..., 1:] ** 2).sum(-1, keepdim=True)).sqrt()
            return a.transpose(1, 2)


    class PlugReader(Reader):
        family = {FAMILY!r}
        structure = "query, key, value and tau, as the plugin's PlugAttention"
        queries, keys, values = "query", "key", "value"
        heads, spatial = "num_attention_heads", True
        kind = {KIND!r}
        aggregation = "centroid_heads"
        mask_argument = "key_padding"

        @classmethod
        def matches(cls, m):
            return super().matches(m) and hasattr(m, "tau")

        def temperature(self, layer):
            return layer.tau.detach()


    register(PlugReader, first=True)
''')

CAPTURE = textwrap.dedent(f'''
    import sys
    import torch
    from hypviz import capture
    from hypviz.base import plugins
    from hypviz.capture.family_readers import reader_for
    from {MODULE} import PlugAttention   # the model only: its reader and kind come from the entry point

    torch.manual_seed(0)
    layer = PlugAttention().eval()
    x = torch.randn(2, 5, 4)
    pad = torch.tensor([[False] * 5, [False] * 2 + [True] * 3])
    with capture.attention(layer) as cap:
        with torch.no_grad():
            layer(x, key_padding=pad)
    cap.save(sys.argv[1])
    print(plugins.loaded()[{MODULE!r}])
    print(reader_for(layer).__name__, [r.mode for r in cap.layers], [r.verify_note[:8] for r in cap.layers])
''')


def _distribution(folder: Path, name: str, entry_points: str) -> Path:
    """A distribution ``name`` 0.1 installed by hand: its ``.dist-info`` (METADATA, entry_points.txt) in ``folder``."""
    info = folder / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return folder


def _package(folder: Path) -> Path:
    (folder / PACKAGE).mkdir(parents=True)
    (folder / PACKAGE / "__init__.py").write_text("")
    (folder / PACKAGE / "readers.py").write_text(PLUGIN)
    return folder


def _run(args: list[str], path: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    """A fresh interpreter with ``path`` (and the checkout) on its ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYPVIZ_DEBUG", "PYTHONPATH")}
    env.update(MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(map(str, [*path, ROOT])))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> dict[str, Any]:
    """The plugin installed (package + dist-info), the package alone, and a capture made through the entry point."""
    base = tmp_path_factory.mktemp("plugin")
    installed = _distribution(_package(base / "installed"), PACKAGE, f"[hypviz.readers]\nplug = {MODULE}\n")
    bare = _package(base / "bare")  # importable, but no entry point: --plugin only
    att = base / "att.pt"
    proc = _run(["-c", CAPTURE, str(att)], [installed], base)
    assert proc.returncode == 0, proc.stderr
    return {"installed": installed, "bare": bare, "att": att, "printed": proc.stdout}


def test_a_reader_and_kind_of_an_entry_point_capture_in_a_fresh_process(plugin):
    where, chosen = plugin["printed"].splitlines()
    assert where == f"entry point 'plug' in group hypviz.readers of {PACKAGE} 0.1"
    assert chosen == f"PlugReader ['{FAMILY}', '{FAMILY}'] ['verified', 'verified']"  # first=True: not the Poincare reader
    obj = torch.load(plugin["att"], weights_only=True)
    for d in obj["layers"]:  # the file names the reader that made each record and the module that provides it
        assert d["reader"] == f"{MODULE}.PlugReader" and d["plugins"] == [MODULE] and d["kind"] == KIND


def test_the_command_reads_the_capture_through_the_entry_point(plugin, tmp_path):
    proc = _run(["-m", "hypviz.cli", "compare", str(plugin["att"]), "--out", str(tmp_path / "out")], [plugin["installed"]],
                tmp_path)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert KIND in json.dumps(metrics) and FAMILY in json.dumps(metrics)


def test_without_the_plugin_the_command_names_the_module_to_load(plugin, tmp_path):
    proc = _run(["-m", "hypviz.cli", "compare", str(plugin["att"]), "--out", str(tmp_path / "out")], [], tmp_path)
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    line = proc.stderr.strip()
    assert "\n" not in line and f"--plugin {MODULE}" in line and f"{MODULE}.PlugReader" in line, line
    assert "mode must be one of" not in line and "entry point" in line


def test_the_plugin_option_loads_a_module_without_entry_point(plugin, tmp_path):
    out = tmp_path / "out"
    proc = _run(["-m", "hypviz.cli", "compare", str(plugin["att"]), "--plugin", MODULE, "--out", str(out)],
                [plugin["bare"]], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (out / "report.html").is_file()
    # the same module named twice, before the sub-command too: imported once
    code = ("import sys; from hypviz.cli import command; from hypviz.base import plugins; "
            f"command._load_plugins(['{MODULE}', '{MODULE}']); from {MODULE} import PlugReader; "
            "from hypviz.capture import READERS; print(READERS.count(PlugReader), plugins.loaded())")
    proc = _run(["-c", code], [plugin["bare"]], tmp_path)
    assert proc.stdout.strip() == f"1 {{'{MODULE}': '--plugin'}}", proc.stderr


def test_a_kind_lookup_loads_the_entry_points_once(plugin, tmp_path):
    code = ("from hypviz.base import kinds, plugins; "
            f"print(kinds.get('{KIND}').family, kinds.provider('{KIND}'), plugins.load_entry_points(), "
            "plugins.load_entry_points())")
    proc = _run(["-c", code], [plugin["installed"]], tmp_path)
    assert proc.stdout.strip() == f"softmax {MODULE} ('{MODULE}',) ('{MODULE}',)", proc.stderr


@pytest.mark.parametrize("how", ["entry point", "--plugin"])
def test_a_broken_plugin_is_one_line_and_exit_2(plugin, tmp_path, how):
    if how == "entry point":
        folder = _distribution(tmp_path / "broken", "hypviz_test_broken",
                               "[hypviz.kinds]\nbroken = hypviz_test_broken_module_never_installed\n")
        args, path = [], [folder]
        want = ("hypviz: error: plugin 'hypviz_test_broken_module_never_installed' (entry point 'broken' in group "
                "hypviz.kinds of hypviz_test_broken 0.1) failed to load: ModuleNotFoundError: No module named "
                "'hypviz_test_broken_module_never_installed'")
    else:
        args, path = ["--plugin", "hypviz_test_broken_module_never_installed"], []
        want = ("hypviz: error: plugin 'hypviz_test_broken_module_never_installed' (--plugin) failed to load: "
                "ModuleNotFoundError: No module named 'hypviz_test_broken_module_never_installed'")
    proc = _run(["-m", "hypviz.cli", *args, "compare", str(plugin["att"]), "--out", str(tmp_path / "out")], path, tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, want)
    assert not (tmp_path / "out").exists()


def test_a_plugin_option_that_is_no_module_name_is_refused(tmp_path):
    proc = _run(["-m", "hypviz.cli", "demo", "--plugin=my_readers.py/x", "--out", str(tmp_path / "o")], [], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "plugin 'my_readers.py/x' (--plugin) is not a module name" in proc.stderr


# --------------------------------------------------------------------------- #
# in this process: precedence, the mask conventions, the record's messages
# --------------------------------------------------------------------------- #
@pytest.fixture
def plug(plugin):
    """The plugin's module imported here (from the folder without entry point), removed again afterwards."""
    sys.path.insert(0, str(plugin["bare"]))
    try:
        module = importlib.import_module(MODULE)
        yield module
    finally:
        sys.path.remove(str(plugin["bare"]))
        for name in (MODULE, PACKAGE):
            sys.modules.pop(name, None)
        for r in list(READERS):
            if r.__module__ == MODULE:
                READERS.remove(r)
        if KIND in kinds.names():
            kinds.unregister(KIND)


def _capture(layer, key_padding=None):
    from hypviz import capture

    torch.manual_seed(1)
    x = torch.randn(2, 5, 4)
    pad = torch.tensor([[False] * 5, [False] * 2 + [True] * 3]) if key_padding is None else key_padding
    with capture.attention(layer) as cap:
        with torch.no_grad():
            layer(x, key_padding=pad)
    return cap.layers


def test_a_user_reader_takes_precedence_when_asked(plug):
    layer = plug.PlugAttention().eval()
    assert PoincareReader.matches(layer) and plug.PlugReader.matches(layer)
    assert READERS[0] is plug.PlugReader and reader_for(layer) is plug.PlugReader  # registered with first=True
    READERS.remove(plug.PlugReader)
    register(plug.PlugReader)  # an ordinary reader: after the built-in ones, which match first
    assert READERS[-1] is plug.PlugReader and reader_for(layer) is PoincareReader
    assert hooks._reader_of(layer) is PoincareReader
    register(plug.PlugReader, first=True)
    assert READERS[0] is plug.PlugReader and READERS.count(plug.PlugReader) == 1
    recs = _capture(layer)
    assert [r.mode for r in recs] == [FAMILY, FAMILY] and all(r.verify_note.startswith("verified") for r in recs)
    assert recs[0].reader == f"{MODULE}.PlugReader" and recs[0].plugins == [MODULE]
    assert not recs[1].mask[..., 2:].any() and recs[1].mask[..., :2].all()  # key_padding True = masked


def test_first_also_goes_before_the_hypformer_reader():
    from _standin import StandInAttention

    class Grab(Reader):
        family = "hypviz_test_grab_family"

        @classmethod
        def matches(cls, m):
            return isinstance(m, StandInAttention)

    layer = StandInAttention(3, 2, 2)
    register(Grab)
    try:
        assert hooks._reader_of(layer) == "hypformer"  # registered plainly: the Hypformer reader first
        register(Grab, first=True)
        assert hooks._reader_of(layer) is Grab
    finally:
        READERS.remove(Grab)
    with pytest.raises(TypeError, match="first must be True or False, got 1"):
        register(Grab, first=1)


def test_emit_takes_the_mask_as_masked_or_as_attended(plug):
    class KeepAttention(plug.PlugAttention):  # a family whose mask argument is True = attended
        def forward(self, x, key_padding=None):
            return super().forward(x, None if key_padding is None else ~key_padding)

    class AttendedReader(plug.PlugReader):
        family = "hypviz_test_plug_attended"
        mask_true_masks = False

        @classmethod
        def matches(cls, m):
            return isinstance(m, KeepAttention)

    torch.manual_seed(0)
    masking = plug.PlugAttention().eval()
    keeping = KeepAttention().eval()
    keeping.load_state_dict(masking.state_dict())
    keep = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])
    first = _capture(masking, key_padding=~keep)
    register(AttendedReader, first=True)
    try:
        recs = _capture(keeping, key_padding=keep)
    finally:
        READERS.remove(AttendedReader)
    assert [r.mode for r in first] == [FAMILY] * 2 and [r.mode for r in recs] == ["hypviz_test_plug_attended"] * 2
    assert all(r.verify_note.startswith("verified") for r in [*first, *recs])
    assert torch.equal(recs[1].mask, first[1].mask) and not recs[1].mask[..., 2:].any()  # the same keys kept
    q = lift(torch.randn(1, 2, 3, 2), k=1.0)
    with pytest.raises(ValueError, match="emit takes the mask once: masked= .* or attended= .*, got both"):
        plug.PlugReader(None, "x", masking).emit(q, q, None, None, dtype="float32", masked=keep, attended=keep)
    assert torch.equal(attended_keys(~keep, 2, 5, 5), attended_keys(keep, 2, 5, 5, true_masks=False))


def test_a_record_of_an_unknown_mode_or_kind_says_which_module_to_load():
    q = lift(torch.zeros(1, 2, 2), k=1.0)

    def record(**kw):
        fields = dict(name="enc.0", queries=q, keys=q, values=None, k=1.0, mode="generic", kind="distance",
                      temperature=1.0)
        return LayerRecord(**{**fields, **kw})

    with pytest.raises(ValueError) as err:
        record(mode="hypviz_test_never_registered", reader="my_pkg.readers.R", plugins=["my_pkg.readers"])
    assert str(err.value) == (
        "LayerRecord 'enc.0': mode 'hypviz_test_never_registered' (made by the reader my_pkg.readers.R) is not "
        "registered in this process: load the plugin module that provides it, hypviz --plugin my_pkg.readers (in "
        "Python: import my_pkg.readers), or install the distribution whose entry point (group hypviz.readers or "
        "hypviz.kinds) names it")
    with pytest.raises(ValueError,
                       match=r"kind 'hypviz_test_never_a_kind' .* --plugin a.b --plugin c \(in Python: import a.b, c\)"):
        record(kind="hypviz_test_never_a_kind", plugins=["a.b", "c"])
    with pytest.raises(ValueError, match=r"registered by a script \(__main__\), which another process cannot load"):
        record(mode="hypviz_test_never_registered", reader="__main__.R", plugins=["__main__"])
    with pytest.raises(ValueError,
                       match=r"mode must be one of .*, got 'hypviz_test_never_registered' \(a mode registered at run time"):
        record(mode="hypviz_test_never_registered")
    with pytest.raises(ValueError, match=r"plugins must be a list of 1 to 16 module names .*, got \['a/b'\]"):
        record(plugins=["a/b"])
    with pytest.raises(ValueError, match=r"reader must be the reader's 'module.Class'"):
        record(reader="x\n")
    assert record(plugins=("a.b",)).plugins == ["a.b"] and record().reader is None


def test_load_module_is_idempotent_and_its_errors_are_one_line():
    assert plugins.load_module("json") is sys.modules["json"] and plugins.loaded()["json"] == "--plugin"
    with pytest.raises(plugins.PluginError, match=r"^plugin 'hypviz.base.bounds' \(--plugin\) is a module of hypviz itself"):
        plugins.load_module("hypviz.base.bounds")
    with pytest.raises(plugins.PluginError, match=r"^plugin '' \(--plugin\) is not a module name"):
        plugins.load_module("")
    with pytest.raises(plugins.PluginError) as err:
        plugins.load_module("hypviz_test_no_such_module.here")
    assert str(err.value) == ("plugin 'hypviz_test_no_such_module.here' (--plugin) failed to load: ModuleNotFoundError: "
                              "No module named 'hypviz_test_no_such_module'")
    assert plugins.loading() is None
