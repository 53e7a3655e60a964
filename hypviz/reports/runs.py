"""The reports of the ``hypviz`` command, one entry per sub-command: read, check, analyse, write, publish.

Each entry does the whole job of one sub-command after its arguments are parsed, and returns the lines the
command prints (:class:`Published`):

* :func:`compare_report` (``hypviz compare QUERIES KEYS``): reads the two files
  (:mod:`~hypviz.reports.input_files`), checks the points (:func:`~hypviz.reports.inputs.prepare`), compares
  every kind with the reference (:func:`~hypviz.reports.point_report.analyse`) and writes ``report.html``,
  ``metrics.json``, ``rows.npz`` and the PNG figures (:func:`~hypviz.reports.writing.write_point_report`);
* :func:`capture_report` (``hypviz compare CAPTURE.pt``): reads the layer records of a capture file within
  the input limits, analyses every layer (:func:`~hypviz.reports.model_report.analyse`) and writes
  ``report.html``, ``metrics.json``, ``rows.npz`` and ``layers.png``
  (:func:`~hypviz.reports.writing.write_model_report`);
* :func:`demo_report` (``hypviz demo``): the report of :func:`compare_report` on the built-in inputs
  (:func:`~hypviz.reports.inputs.demo_inputs`), plus ``inputs.npz`` holding them.

Every entry writes its folder through :func:`~hypviz.reports.publishing.produce`: into a temporary folder
beside ``out``, put in place in one step, so ``out`` holds the complete old report or the complete new one.
Bad input (an unreadable file, points off the hyperboloid, a refused ``out``, a temperature at which the
logits overflow) is a one-line :class:`~hypviz.base.messages.UsageError` raised before anything is written.
This module imports torch only when an entry runs.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypviz.base.messages import UsageError, one_line, show
from hypviz.reports.input_files import (
    MAX_LAYERS_ENV,
    MAX_NAME_ENV,
    Unreadable,
    check_file,
    load_torch_file,
    max_input_bytes,
    max_layers,
    max_name_chars,
    read_input,
    resolve_k,
)
from hypviz.reports.inputs import Inputs, Settings, demo_inputs, prepare
from hypviz.reports.publishing import check_out, produce

__all__ = ["Published", "compare_report", "capture_report", "demo_report", "DEMO_KINDS", "DEMO_REFERENCE"]

#: The kinds ``hypviz demo`` compares, and its reference kind.
DEMO_KINDS = ("spatial", "focused", "lorentz")
DEMO_REFERENCE = "distance"

_OVERFLOW = re.compile(r"^temperature \S+ makes the logits overflow")


@dataclass
class Published:
    """A report put in place: where it is, its files, and what the command prints about it.

    Attributes
    ----------
    out : pathlib.Path
        The report's folder.
    files : list of str
        The sorted names of the files in it.
    lines : list of str
        The lines the command prints on stdout: notes on what was read (a curvature stored in an input
        file), then the report's one-screen summary.
    """

    out: Path
    files: list[str]
    lines: list[str]


def _device(device: str) -> str:
    """``device`` resolved (``"auto"``: CUDA when available, else the CPU); refused in one line naming ``--device``."""
    from hypviz.attention import resolve_device

    try:
        return str(resolve_device(device))
    except ValueError as exc:
        raise UsageError(f"--device: {one_line(exc)}") from None


def _is_capture_file(path: Path) -> bool:
    """Whether ``path`` is a ``.pt``/``.pth`` file written by :mod:`hypviz.capture` (read within the input limit)."""
    if path.suffix.lower() not in (".pt", ".pth"):
        return False
    try:
        obj = load_torch_file(path, "QUERIES", max_input_bytes())
    except Exception:  # unreadable in any way: not a capture file
        return False
    return isinstance(obj, dict) and obj.get("format") == "hypviz.capture"


def compare_report(
    queries: str | Path,
    keys: str | Path,
    out: str | Path,
    settings: Settings,
    *,
    force: bool = False,
    k: float | None = None,
    spatial: bool = False,
    model: str = "lorentz",
    heads_axis: int | None = None,
    dtype: str = "auto",
    queries_key: str | None = None,
    keys_key: str | None = None,
) -> Published:
    """The report of ``hypviz compare QUERIES KEYS``: every kind of ``settings`` against its reference, written to ``out``.

    Reads ``queries`` and ``keys`` (``.pt``/``.pth``/``.npy``/``.npz``; a multi-array file by ``queries_key`` /
    ``keys_key``), takes ``k`` (else the curvature stored in the files, else 1), checks the points
    (``spatial``, ``model``, ``heads_axis``, ``dtype`` as :func:`hypviz.reports.inputs.prepare` takes them) and
    compares them as ``settings`` says (its ``device`` may be ``"auto"``, resolved here).  Writes into ``out``
    (replacing a report there only with ``force``): ``report.html``, ``metrics.json`` (the input-reading options
    stored with the set-up), ``rows.npz`` and the PNG figures.

    Raises
    ------
    hypviz.base.messages.UsageError
        One line, nothing written: a file that cannot be read (a capture file passed as QUERIES or KEYS is
        named as such), points that are not what the options say, a kernel's option its kernel refuses, an ``out``
        that may not be written, an unavailable device, or a temperature at which the logits overflow.
    """
    qpath, kpath = check_file(str(queries), "QUERIES"), check_file(str(keys), "KEYS")
    target = check_out(Path(out), force, (qpath, kpath))
    _check_kernel_options(settings)
    try:
        q, qname, qmade = read_input(qpath, "QUERIES", queries_key, "--queries-key")
        kv, kname, kmade = read_input(kpath, "KEYS", keys_key, "--keys-key")
    except UsageError:
        for role, pth in (("QUERIES", qpath), ("KEYS", kpath)):
            if _is_capture_file(pth):
                raise UsageError(
                    f"{role}: {show(pth)} is a capture file (written by hypviz.capture's Capture.save); "
                    f"pass the capture file alone: hypviz compare {show(pth)}"
                ) from None
        raise
    described = {  # names as they may be shown: undecodable bytes and control characters escaped
        "queries": {"path": show(qpath), "array": show(qname) if qname is not None else None,
                    "shape": list(q.shape), "dtype": qmade},
        "keys": {"path": show(kpath), "array": show(kname) if kname is not None else None,
                 "shape": list(kv.shape), "dtype": kmade},
    }
    curvature, note = resolve_k(k, (qpath, kpath))
    inputs = prepare(q, kv, k=curvature, spatial=spatial, heads_axis=heads_axis, dtype=dtype, described=described,
                     model=model, made_in=(qmade, kmade))
    settings = dataclasses.replace(settings, device=_device(settings.device))
    inputs.title = f"{show(qpath.name)} vs {show(kpath.name)}" if qpath != kpath else show(qpath.name)
    notes = [f"hypviz compare: {note}"] if note else []
    options = {"heads_axis": heads_axis, "dtype": dtype, "model": model}
    return _point_report(inputs, settings, target, force, notes=notes, options=options)


def _check_kernel_options(settings: Settings) -> None:
    """Each of the settings' kernel options checked by the kernel of every compared kind that reads it, before any
    file is read: a value its kernel refuses is one line naming ``--option NAME``."""
    from hypviz.attention.maps.kernels import options as kernel_options
    from hypviz.base import kinds

    for name, value in settings.options.items():
        for kind in (kinds.get(n) for n in [settings.reference, *settings.kinds]):
            if name in kind.options:
                try:
                    kernel_options(kind, {name: value})
                except ValueError as exc:
                    raise UsageError(f"--option {name}: {one_line(exc)}") from None


def demo_report(
    out: str | Path,
    *,
    force: bool = False,
    device: str = "auto",
    sample_rows: int = 64,
    rows: int | None = None,
    seed: int = 0,
    progress: bool | None = None,
) -> Published:
    """The report of ``hypviz demo``: :func:`compare_report`'s report of the built-in inputs, written to ``out``.

    The inputs are :func:`hypviz.reports.inputs.demo_inputs` (four heads, from nearly uniform maps to sharp
    ones); the kinds :data:`DEMO_KINDS` are compared with :data:`DEMO_REFERENCE` at the default temperature.
    ``out`` gets the files of :func:`compare_report` and ``inputs.npz`` (the queries and keys, for
    ``hypviz compare``).  ``device``, ``sample_rows``, ``rows``, ``seed`` and ``progress`` are those of
    :class:`hypviz.reports.inputs.Settings`.

    Raises
    ------
    hypviz.base.messages.UsageError
        One line, nothing written: an ``out`` that may not be written, or an unavailable device.
    """
    target = check_out(Path(out), force)
    inputs = demo_inputs()
    settings = Settings(kinds=list(DEMO_KINDS), reference=DEMO_REFERENCE, temperature=None, device=_device(device),
                        sample_rows=sample_rows, rows=rows, seed=seed, progress=progress, command="demo")
    return _point_report(inputs, settings, target, force, save_inputs=True)


def _point_report(inputs: Inputs, settings: Settings, out: Path, force: bool, *, notes: list[str] | None = None,
                  save_inputs: bool = False, options: dict[str, Any] | None = None) -> Published:
    """Analyse ``inputs`` as ``settings`` says, write the report (and ``inputs.npz`` with ``save_inputs``) and
    publish it at ``out``."""
    from hypviz.reports import point_report, writing

    try:
        result = point_report.analyse(inputs, settings)
    except ValueError as exc:
        if not _OVERFLOW.search(str(exc)):
            raise
        raise UsageError(f"--temperature: {one_line(exc)}") from None

    def write(tmp: Path) -> list[str]:
        if save_inputs:
            import numpy as np

            np.savez(
                tmp / "inputs.npz",
                queries=inputs.queries.detach().cpu().numpy(),
                keys=inputs.keys.detach().cpu().numpy(),
            )
        return writing.write_point_report(result, tmp, options=options or {})

    files = produce(out, force, write)
    text = point_report.summary(result, Path(show(out)), files, show_inputs=save_inputs)
    return Published(out, files, [*(notes or []), text])


def capture_report(
    capture: str | Path,
    out: str | Path,
    *,
    force: bool = False,
    temperature: float | None = None,
    device: str = "auto",
    progress: bool | None = None,
) -> Published:
    """The report of ``hypviz compare CAPTURE.pt``: every attention layer recorded by :mod:`hypviz.capture`, written to ``out``.

    Reads the layer records of ``capture`` within the input limits (``HYPVIZ_MAX_INPUT_BYTES``,
    ``HYPVIZ_MAX_LAYERS``, ``HYPVIZ_MAX_NAME_CHARS``, each checked before a record is built), analyses each
    layer (:func:`hypviz.reports.model_report.analyse`: ``temperature`` only for layers that record none) and
    writes into ``out``: ``report.html``, ``metrics.json``, ``rows.npz`` and ``layers.png``.

    Raises
    ------
    hypviz.base.messages.UsageError
        One line, nothing written: a file that is not a readable capture file, a record beyond a limit or
        holding what cannot be analysed (the layer named), a ``temperature`` that no layer would use, an
        ``out`` that may not be written, or an unavailable device.
    """
    from hypviz.reports import model_report, writing

    path = check_file(str(capture), "CAPTURE")
    if path.suffix.lower() not in (".pt", ".pth"):
        raise UsageError(
            f"KEYS is missing: pass a KEYS file, or a capture file (.pt written by hypviz.capture's Capture.save) "
            f"as the only argument; {show(path.name)} is not one"
        )
    target = check_out(Path(out), force, (path,))
    records = _read_capture(path)
    if temperature is not None and all(rec.temperature is not None for rec in records):
        raise UsageError(
            f"--temperature: every layer of {show(path.name)} records its own temperature (it applies only to layers "
            "without one, such as focused layers, as their distance reference's temperature); drop it"
        )
    resolved = _device(device)
    results = []
    for rec in records:  # one layer at a time, so that a refusal names the layer
        try:
            results += model_report.analyse([rec], temperature=temperature, device=resolved, progress=progress)
        except ValueError as exc:  # what the record holds cannot be analysed: said naming the layer
            if not _OVERFLOW.search(str(exc)):
                raise UsageError(f"CAPTURE: layer {rec.name} (call {rec.call}): {show(one_line(exc))}") from None
            where = "--temperature" if rec.temperature is None else f"the temperature {rec.temperature:g} it stores"
            raise UsageError(f"CAPTURE: layer {rec.name} (call {rec.call}), {where}: {one_line(exc)}") from None
    meta = {"path": show(path), "layers": len(records)}
    files = produce(target, force, lambda tmp: writing.write_model_report(results, tmp, meta))
    return Published(target, files, [model_report.summary(results, Path(show(target)), files)])


def _read_capture(path: Path) -> list[Any]:
    """The records of a capture file, within the limits: its tensors' bytes (``HYPVIZ_MAX_INPUT_BYTES``), its
    number of layers (``HYPVIZ_MAX_LAYERS``), its names' lengths (``HYPVIZ_MAX_NAME_CHARS``), all checked before a
    record is built; names escaped for display; half-precision points (checked in their own dtype) in float32."""
    from hypviz.capture import records as records_mod

    try:
        obj = load_torch_file(path, "CAPTURE", max_input_bytes())
    except Unreadable as exc:  # torch.load(weights_only=True) refused it (its error is the context): no QUERIES file either
        raise UsageError(
            f"CAPTURE: {show(path)} is not a readable capture file: {records_mod.unreadable(path, exc.__context__ or exc)}; "
            "expected a hypviz.capture file written by Capture.save (or QUERIES and KEYS files)"
        ) from None
    layers = obj.get("layers") if isinstance(obj, dict) else None
    if isinstance(layers, list):
        limit = max_layers()
        if len(layers) > limit:
            raise UsageError(
                f"CAPTURE: {show(path)} holds {len(layers)} layer records, above the limit of {limit}; "
                f"set {MAX_LAYERS_ENV} to a larger number to analyse them all (the report draws 3.4 inches a layer)"
            )
        chars = max_name_chars()
        for i, d in enumerate(layers):
            for key in ("name", "kind", "mode"):
                value = d.get(key) if isinstance(d, dict) else None
                if isinstance(value, str) and len(value) > chars:
                    raise UsageError(
                        f"CAPTURE: {show(path)} record {i}: its {key} is {len(value)} characters long, above the limit "
                        f"of {chars}; set {MAX_NAME_ENV} to a larger number to read it"
                    )
    try:
        records = records_mod.parse(obj, show(path))
    except Exception as exc:  # the reader checks only what the file holds: whatever it raises, the file is the cause
        capture = isinstance(obj, dict) and obj.get("format") == records_mod.FORMAT
        if capture and isinstance(exc, (TypeError, ValueError)):  # what is wrong in a capture file
            raise UsageError(f"CAPTURE: {one_line(exc)}") from None
        if capture:  # a value the record's checks did not expect (a tensor where a number belongs, ...)
            raise UsageError(
                f"CAPTURE: {show(path)}: a layer record holds a value that cannot be read "
                f"({type(exc).__name__}: {show(one_line(exc)[:300])})"
            ) from None
        raise UsageError(
            f"KEYS is missing and {show(path)} is not a readable capture file ({one_line(exc)}); pass a KEYS file"
        ) from None
    return [_for_display(rec) for rec in records]


def _for_display(rec: Any) -> Any:
    """A record as the report uses it: its name escaped (control characters, lone surrogates), float16/bfloat16
    points re-lifted in float32 (they were checked in their own dtype by the record's check)."""
    import torch

    from hypviz.lorentz import lift

    rec.name = show(rec.name)
    if rec.queries.dtype in (torch.float16, torch.bfloat16):
        for role in ("queries", "keys", "values"):
            t = getattr(rec, role)
            if t is not None:
                setattr(rec, role, lift(t[..., 1:].float(), k=rec.k))
    return rec
