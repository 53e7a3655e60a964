"""Benchmarks of hypviz.attention and hypviz.lorentz (issues 4, 14, 15): measurement only.

    .venv/bin/python benchmarks/run.py         # full run: writes benchmarks/results.json, then BENCHMARKS.md
    .venv/bin/python benchmarks/run.py --quick --json /tmp/r.json --md /tmp/r.md     # small sizes: a smoke test

This script measures and writes the raw numbers to ``results.json``; ``benchmarks/report.py`` turns
them into Markdown (``python benchmarks/report.py results.json BENCHMARKS.md`` re-renders without
measuring).  What is measured (float32, d = 64; the floors are checked by the report):

1. ``lorentz.pairwise_sqdist``, ``attention.scores``/``attention_map`` at N = M = 4096 against a bare
   ``q_s @ k_s^T`` of the same shape (floor: at most 2x the matmul's time);
2. the same at N = 2048 against geoopt's broadcast ``Lorentz().dist(x[:, None], y[None])``
   (floor: at least 50x faster);
3. ``attention.compare()`` of two kinds (spatial, distance) at N = M = 16,384 against the two dense
   ``attention_map`` calls it replaces and one ``torch.mm`` of (N x d) @ (d x M), interleaved
   (floor: at most 1.0x the two calls; the fraction of matmul throughput = mm time / compare time);
4. ``compare()`` at N = M = 65,536 in a fresh subprocess: time, peak extra resident memory (VmHWM
   reset through /proc/self/clear_refs, cross-checked by sampling VmRSS every 10 ms) and the
   same-shape ``torch.mm`` timed in that process by row blocks (floors: at most 2.5x that matmul's time,
   at most 25 s, at most 1 GiB);
5. ``compare(q, k, rows=4096, seed=0)`` at N = M = 1,000,000 in a fresh subprocess that makes its own
   inputs: time, peak extra memory and its same-shape matmul (floors: at most 2.5x the matmul, under 60 s,
   under 1 GiB).  ``--only compare`` runs sections 3, 4 and 5 alone, in one run, and merges them into an
   existing results file (each with the machine and load it ran under);
6. ``focused_linear_attention`` against the quadratic form ``focused_linear_map(...) @ V_s`` for N from
   1,024 to 65,536: time and peak tensor memory; the quadratic form only where its N x N map fits;
7. on a CUDA machine, ``benchmarks/gpu.py``'s checks and rows; elsewhere that section says "not measured";
8. ``attention.distance_linear_attention`` (distance attention in linear time, ``features=64``, mean norm 1,
   tau = 8, so r^2/tau = 0.125) at N = M = 10^4, 10^5 and 10^6, each in a fresh subprocess: time and peak
   extra memory, then its map's error against the exact distance map on 64 sampled query rows by
   ``compare(q, k, "distance_rf", "distance", rows=64)`` (floor: mean row TV at most 0.25x the exact
   map's TV from uniform, the suite's bar).  ``--only linear_distance`` runs this section alone and
   merges it into an existing results file;
9. issue 30, ``attention.distance_topk_attention`` (each row's exact top keys plus a fitted positive tail, tau = 8)
   at N = M = 10^4, 10^5 and 10^6 and r^2/tau = 1.25, 12.5 and 125, each in a fresh subprocess: its time and peak
   extra memory, the top-key search it used and that search's recall; ``attention.search_top_keys`` alone (the faiss
   index picked by measured recall, or exact search with the reason); the exact streamed map's time in the same
   process (timed on 2,048 rows, scaled to N); the error on 64 sampled rows against exact rows (mean row TV over the
   exact map's TV from uniform, top-1 agreement, whether the per-row estimate covers the true error).
   ``--only topk_tail [--sizes 10000,100000]`` runs this section alone and merges it into an existing results file.

Timings are medians (and minima) of repeats that interleave the contenders (each round runs every
contender once), because other processes may share the CPU.  ``--quick`` uses sizes of a few
thousand (section 5: 1,024 rows at N = 20,000) and, unless ``--json``/``--md`` are given, writes to a temporary
directory, never over the full run's files.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import torch

from hypviz import attention as att
from hypviz import data
from hypviz import lorentz as L

import report  # benchmarks/report.py: the script's own directory is on sys.path

ROOT = Path(__file__).resolve().parent.parent

GiB = 2**30
MiB = 2**20


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #
def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_total = int(line.split()[1]) * 1024
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "memory_total_gib": None if mem_total is None else round(mem_total / GiB, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }
    try:
        import geoopt

        info["geoopt"] = geoopt.__version__
    except ImportError:
        info["geoopt"] = None
    try:
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def points(n: int, d: int, seed: int, r: float = 1.0, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """Lifted Gaussian spatial parts of mean norm ``r`` (:func:`hypviz.data.lifted_gaussian`), re-lifted in ``dtype``."""
    xs = data.lifted_gaussian(n, d, r, seed=seed)[:, 1:].to(dtype)
    return L.lift(xs).to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(funcs: Mapping[str, Callable[[], Any]], repeats: int, device: str = "cpu") -> dict[str, dict[str, float]]:
    """Run every contender once per round (after one warm-up round); median, min and quartiles in seconds."""
    times: dict[str, list[float]] = {name: [] for name in funcs}
    for f in funcs.values():  # warm-up
        f()
        sync(device)
    for _ in range(repeats):
        for name, f in funcs.items():
            gc.collect()
            sync(device)
            start = time.perf_counter()
            f()
            sync(device)
            times[name].append(time.perf_counter() - start)
    out = {}
    for name, ts in times.items():
        qs = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [ts[0]] * 3
        out[name] = {"median_s": statistics.median(ts), "min_s": min(ts), "q1_s": qs[0], "q3_s": qs[2], "repeats": len(ts)}
    return out


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- #
# 1. pairwise kernels against a bare matmul
# --------------------------------------------------------------------------- #
def bench_matmul_floor(n: int, d: int, repeats: int, device: str = "cpu", threads: int | None = None) -> dict[str, Any]:
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _bench_matmul_floor(n, d, repeats, device)
    finally:
        torch.set_num_threads(saved)


def _bench_matmul_floor(n: int, d: int, repeats: int, device: str = "cpu") -> dict[str, Any]:
    x, y = points(n, d, 1, device=device), points(n, d, 2, device=device)
    xs, ys = x[:, 1:].contiguous(), y[:, 1:].contiguous()
    funcs = {
        "matmul q_s @ k_s^T": lambda: xs @ ys.T,
        "lorentz.pairwise_sqdist": lambda: L.pairwise_sqdist(x, y),
        "attention.scores distance": lambda: att.scores(x, y, "distance"),
        "attention.attention_map distance": lambda: att.attention_map(x, y, "distance"),
        "attention.attention_map spatial": lambda: att.attention_map(x, y, "spatial"),
    }
    res = interleaved(funcs, repeats, device)
    base = res["matmul q_s @ k_s^T"]["median_s"]
    for r in res.values():
        r["ratio_to_matmul"] = r["median_s"] / base
    return {
        "n": n,
        "d": d,
        "dtype": "float32",
        "device": device,
        "threads": torch.get_num_threads(),
        "results": res,
        "floor_ratio": 2.0,
    }


# --------------------------------------------------------------------------- #
# 2. against geoopt's broadcast distance
# --------------------------------------------------------------------------- #
def bench_geoopt(n: int, d: int, repeats: int) -> dict[str, Any]:
    import geoopt

    x, y = points(n, d, 3), points(n, d, 4)
    manifold = geoopt.Lorentz(k=1.0)
    funcs = {
        "geoopt Lorentz.dist(x[:, None], y[None])": lambda: manifold.dist(x[:, None, :], y[None, :, :]),
        "lorentz.pairwise_sqdist": lambda: L.pairwise_sqdist(x, y),
        "attention.scores distance (= -1/2 pairwise_sqdist)": lambda: att.scores(x, y, "distance"),
        "attention.attention_map distance": lambda: att.attention_map(x, y, "distance"),
    }
    res = interleaved(funcs, repeats)
    base = res["geoopt Lorentz.dist(x[:, None], y[None])"]["median_s"]
    for r in res.values():
        r["speedup_vs_geoopt"] = base / r["median_s"]
    ours = 2.0 * torch.asinh(torch.sqrt(L.pairwise_sqdist(x, y).double()) / 2.0)
    theirs = manifold.dist(x[:, None, :].double(), y[None, :, :].double())
    return {
        "n": n,
        "d": d,
        "dtype": "float32",
        "results": res,
        "floor_speedup": 50.0,
        "max_abs_dist_difference_float64_ref": float((ours - theirs).abs().max()),
        "geoopt_intermediate_bytes": n * n * (d + 1) * 4,
    }


# --------------------------------------------------------------------------- #
# 3. compare() against the two dense maps it replaces
# --------------------------------------------------------------------------- #
COMPARE = 'compare(q, κ, "spatial", "distance")'
MAPS = 'attention_map(q, κ, "spatial") + attention_map(q, κ, "distance")'
MM = "torch.mm (N x d) @ (d x M)"


def bench_compare_vs_maps(n: int, d: int, repeats: int) -> dict[str, Any]:
    """compare() of two softmax kinds, the two dense maps, and the one matmul compare needs, interleaved."""
    q, kk = points(n, d, 10), points(n, d, 11)
    qs, ks = q[:, 1:].contiguous(), kk[:, 1:].contiguous()
    out: torch.Tensor | None = torch.empty(n, n)  # the matmul writes into a preallocated output: its page faults are not timed

    def run_compare() -> Any:
        return att.compare(q, kk, "spatial", "distance", device="cpu", spearman=False, progress=False)

    funcs = {
        COMPARE: run_compare,
        MAPS: lambda: (att.attention_map(q, kk, "spatial"), att.attention_map(q, kk, "distance")),
        MM: lambda: torch.mm(qs, ks.T, out=out),
    }
    res = interleaved(funcs, repeats)
    out = None  # free the matmul's output before the dense maps below
    gc.collect()
    # agreement, outside the timing: the per-row TV of compare() against the dense maps'
    cmp = run_compare()
    ps = att.attention_map(q, kk, "spatial")
    pd = att.attention_map(q, kk, "distance")
    tv = 0.5 * ps.sub_(pd).abs_().sum(dim=-1)
    del ps, pd
    t_c, t_m, t_mm = (res[x]["median_s"] for x in (COMPARE, MAPS, MM))
    return {
        "n": n,
        "m": n,
        "d": d,
        "dtype": "float32",
        "threads": torch.get_num_threads(),
        "names": {"compare": COMPARE, "maps": MAPS, "mm": MM},
        "results": res,
        "ratio_median": t_c / t_m,
        "ratio_min": res[COMPARE]["min_s"] / res[MAPS]["min_s"],
        "fraction_of_mm": t_mm / t_c,
        "fraction_of_mm_2": 2 * t_mm / t_c,
        "mm_flops": 2.0 * n * n * d / t_mm,
        "floor_ratio": 1.0,
        "max_abs_tv_difference": float((cmp.tv - tv).abs().max()),
        "summary": cmp.to_dict(),
    }


# --------------------------------------------------------------------------- #
# 4, 5. compare() at large N (all rows, or sampled rows), memory measured in a fresh process
# --------------------------------------------------------------------------- #
def _rss() -> tuple[int, int]:
    rss = hwm = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return rss, hwm


def mm_same_shape(a: torch.Tensor, b: torch.Tensor, repeats: int, max_out_bytes: int = 2 * GiB) -> dict[str, Any]:
    """Time of ``a @ b^T`` ((R x d) @ (d x M)): the full product, or a block of rows scaled to all ``R``.

    The block has a power-of-two number of rows whose float32 output fits in ``max_out_bytes``
    (8,192 rows at M = 65,536), written into a preallocated output; median of ``repeats`` after a warm-up.
    """
    r, m = a.shape[0], b.shape[0]
    fit = max(1, max_out_bytes // (4 * m))
    rows = r if r <= fit else 2 ** int(math.log2(fit))
    out = torch.empty(rows, m, dtype=a.dtype, device=a.device)
    blk, bt = a[:rows].contiguous(), b.contiguous().T
    t = interleaved({"mm": lambda: torch.mm(blk, bt, out=out)}, repeats)["mm"]
    return {
        "block_rows": rows,
        "scale": r / rows,
        "repeats": repeats,
        "block_median_s": t["median_s"],
        "time_s": t["median_s"] * r / rows,
        "full_output_bytes": 4 * r * m,
    }


def _measured(fn: Any) -> tuple[Any, float, int, int, list[int], bool]:
    """``fn()`` timed, with the process's RSS before it, its high-water mark after (reset first where the kernel
    allows: ``reset``) and its peak sampled every 10 ms: ``(result, seconds, base_rss, hwm, [peak], reset)``."""
    gc.collect()
    base_rss, _ = _rss()
    reset = True
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        reset = False
    peak_sampled = [base_rss]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            peak_sampled[0] = max(peak_sampled[0], _rss()[0])
            stop.wait(0.01)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    stop.set()
    thread.join()
    _, hwm = _rss()
    return result, elapsed, base_rss, hwm, peak_sampled, reset


def child_compare(n: int, d: int, device: str, rows: int | None) -> dict[str, Any]:
    """Runs inside the subprocess: inputs, baseline RSS, reset the high-water mark, compare(), read it; then the mm."""
    q, k = points(n, d, 5), points(n, d, 6)
    att.compare(q[:256], k[:4096], progress=False, device=device)  # warm-up: thread pools, code paths
    # 2^24 logits: the fused kernel compiled (first use) and loaded
    att.compare(q[:4096], k[:4096], spearman=False, progress=False, device=device)
    if rows is not None:
        att.compare(q[:4096], k[:4096], rows=64, seed=0, progress=False, device=device)

    def run() -> Any:
        res = att.compare(q, k, "spatial", "distance", device=device, spearman=False, progress=False, rows=rows, seed=0)
        sync(device)
        return res

    res, elapsed, base_rss, hwm, peak_sampled, reset = _measured(run)
    out = {
        "n": n,
        "m": n,
        "d": d,
        "rows": res.n_queries,
        "device": res.device,
        "threads": torch.get_num_threads(),
        "time_s": elapsed,
        "baseline_rss_bytes": base_rss,
        "inputs_bytes": 2 * n * (d + 1) * 4,
        "peak_extra_rss_bytes_hwm": (hwm - base_rss) if reset else None,
        "peak_extra_rss_bytes_sampled": peak_sampled[0] - base_rss,
        "hwm_reset": reset,
        "block_rows": res.block_rows,
        "n_blocks": res.n_blocks,
        "dense_map_bytes": res.n_queries * n * 4,
        "summary": res.to_dict(),
        "all_bounds_met": res.all_bounds_met,
    }
    if device.startswith("cuda"):
        out["cuda_max_memory_allocated"] = torch.cuda.max_memory_allocated()
    # the same-shape matmul, after the memory measurement: (rows x d) @ (d x M) of the rows compare() used
    qr = q if res.row_index is None else q.index_select(0, res.row_index)
    del res
    gc.collect()
    out["mm"] = mm_same_shape(qr[:, 1:], k[:, 1:], repeats=3)
    out["fraction_of_mm"] = out["mm"]["time_s"] / elapsed
    out["fraction_of_mm_2"] = 2 * out["mm"]["time_s"] / elapsed
    return out


COMPARE_MM_FLOOR = 2.5  # sections 4 and 5: compare() at most this many times the same-shape matmul


def bench_compare(n: int, d: int, device: str = "cpu", rows: int | None = None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child-compare", str(n), str(d), device, str(rows or 0)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compare() child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_compare_sections(results: dict[str, Any], quick: bool) -> None:
    """Sections 3, 4 and 5 into ``results``: ``compare()`` against the two dense maps, at N = M = 65,536 and sampled at 10^6.

    Their floors on the matmul: at most 1.0x the two ``attention_map`` calls (section 3), and at most 2.5x the
    same-shape ``torch.mm`` for the whole N = M = 65,536 (section 4) and for the sampled rows at N = M = 10^6 (section 5).
    """
    n3 = 2048 if quick else 16384
    log(f"3. compare() vs the two dense attention_map calls, N = {n3}")
    results["compare_vs_maps"] = bench_compare_vs_maps(n3, 64, 3 if quick else 7)
    log(f"   ratio {results['compare_vs_maps']['ratio_median']:.3f}")

    n4 = 4096 if quick else 65536
    log(f"4. compare() at N = {n4} (subprocess)")
    results["compare_large"] = bench_compare(n4, 64, "cpu")
    results["compare_large"].update(floor_time_s=25.0, floor_bytes=report.GiB, floor_ratio_mm=COMPARE_MM_FLOOR)
    log(f"   {results['compare_large']['time_s']:.2f} s, {1 / results['compare_large']['fraction_of_mm']:.2f}x the matmul")

    n5, rows5 = (20_000, 1024) if quick else (1_000_000, 4096)
    log(f"5. sampled compare(rows={rows5}) at N = {n5} (subprocess)")
    results["compare_sampled"] = bench_compare(n5, 64, "cpu", rows=rows5)
    results["compare_sampled"].update(floor_time_s=60.0, floor_bytes=report.GiB, floor_ratio_mm=COMPARE_MM_FLOOR)
    log(f"   {results['compare_sampled']['time_s']:.2f} s, {1 / results['compare_sampled']['fraction_of_mm']:.2f}x the matmul")


# --------------------------------------------------------------------------- #
# 6. linear against quadratic focused attention
# --------------------------------------------------------------------------- #
def _focused_quadratic(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Focused attention through its N x M map: the map, then the values' spatial parts."""
    return att.focused_linear_map(q, k) @ v[:, 1:]


def bench_linear(ns: list[int], d: int, repeats: int, quadratic_max_bytes: int, device: str = "cpu") -> dict[str, Any]:
    rows = []
    for n in ns:
        q, k, v = points(n, d, 7, device=device), points(n, d, 8, device=device), points(n, d, 9, device=device)
        run_quad = 4 * n * n <= quadratic_max_bytes
        funcs = {"linear": functools.partial(att.focused_linear_attention, q, k, v)}
        if run_quad:
            funcs["quadratic"] = functools.partial(_focused_quadratic, q, k, v)
        t = interleaved(funcs, repeats, device)
        row: dict[str, Any] = {"n": n, "linear_time_s": t["linear"]["median_s"]}
        lin, row["linear_peak_tensor_bytes"] = att.peak_tensor_memory(att.focused_linear_attention, q, k, v)
        if run_quad:
            quad, row["quadratic_peak_tensor_bytes"] = att.peak_tensor_memory(_focused_quadratic, q, k, v)
            row["quadratic_time_s"] = t["quadratic"]["median_s"]
            row["max_relative_difference"] = float(((lin - quad).norm(dim=-1) / quad.norm(dim=-1)).max())
            del quad
        else:
            row["quadratic_time_s"] = None
            row["quadratic_peak_tensor_bytes"] = None
            row["quadratic_skipped"] = f"the N x N float32 map alone would take {4 * n * n / GiB:.3g} GiB"
        rows.append(row)
        log(f"linear vs quadratic N={n}: {row['linear_time_s']:.4f} s vs {row['quadratic_time_s']}")
        del q, k, v, lin  # free them before the next size
        gc.collect()
    return {"d": d, "dtype": "float32", "device": device, "quadratic_max_bytes": quadratic_max_bytes, "rows": rows}


# --------------------------------------------------------------------------- #
# 8. linear-time distance attention at large N, memory in a fresh process, error on sampled rows
# --------------------------------------------------------------------------- #
LINEAR_DISTANCE: dict[str, Any] = {"d": 64, "temperature": 8.0, "mean_norm": 1.0, "features": 64}


def child_linear_distance(n: int, rows: int) -> dict[str, Any]:
    """Runs inside the subprocess: ``distance_linear_attention`` timed with its peak extra RSS, then ``compare(rows=)``."""
    cfg = LINEAR_DISTANCE
    d, tau, feats = cfg["d"], cfg["temperature"], cfg["features"]
    q, k, v = (points(n, d, seed, r=cfg["mean_norm"]) for seed in (12, 13, 14))
    att.distance_linear_attention(q[:512], k[:512], v[:512], temperature=tau, features=feats)  # warm-up
    out, elapsed, base_rss, hwm, peak_sampled, reset = _measured(
        lambda: att.distance_linear_attention(q, k, v, temperature=tau, features=feats)
    )
    finite = bool(torch.isfinite(out).all())
    del out
    gc.collect()
    start = time.perf_counter()
    res = att.compare(q, k, "distance_rf", "distance", temperature=tau, features=feats, rows=rows, seed=0,
                      spearman=False, progress=False, device="cpu")
    err_s = time.perf_counter() - start
    return {
        "n": n, "m": n, "d": d, "temperature": tau, "mean_norm": cfg["mean_norm"], "features": feats, "dtype": "float32",
        "threads": torch.get_num_threads(), "time_s": elapsed, "baseline_rss_bytes": base_rss,
        "inputs_bytes": 3 * n * (d + 1) * 4, "peak_extra_rss_bytes_hwm": (hwm - base_rss) if reset else None,
        "peak_extra_rss_bytes_sampled": peak_sampled[0] - base_rss, "hwm_reset": reset, "output_finite": finite,
        "dense_map_bytes": 4 * n * n, "rows": res.n_queries, "error_time_s": err_s,
        "mean_tv": res.mean_tv, "mean_tv_uniform_b": res.mean_tv_uniform_b, "ratio": res.mean_tv / res.mean_tv_uniform_b,
        "top1_agreement": res.top1_agreement, "summary": res.to_dict(),
    }


def bench_linear_distance(ns: list[int], rows: int) -> dict[str, Any]:
    out = []
    for n in ns:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-linear-distance", str(n), str(rows)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"distance_linear_attention child failed:\n{proc.stderr[-3000:]}")
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        log(f"   N = {n:,}: {out[-1]['time_s']:.2f} s, TV / baseline {out[-1]['ratio']:.3g}")
    return {**LINEAR_DISTANCE, "rows_sampled": rows, "floor_ratio": 0.25, "rows": out}


# --------------------------------------------------------------------------- #
# 9. top keys plus a fitted tail (issue 30): the search, the kind, the exact streamed map, in one process
# --------------------------------------------------------------------------- #
TOPK_TAIL: dict[str, Any] = {"d": 64, "temperature": 8.0, "sharpness": (1.25, 12.5, 125.0), "top": 16, "recall": 0.9,
                             "sample": 256, "exact_rows": 2048, "kind_rows_sharp": 512, "search_alone_max_n": 100_000}


def exact_streamed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tau: float, rows: int) -> torch.Tensor:
    """The exact distance attention output of the first ``rows`` queries, streamed by blocks of query rows: per block
    the logits from the stable operands (one product), the weights e^{s - max s} raised to at least e^{-43.7} (no
    subnormal weight: on this CPU torch.softmax's subnormals made 83 rows at N = 10^5, r^2/tau = 125 about 10x slower,
    with the same error against float64, 6.0e-5), the values' product, normalised; no N x M array kept."""
    a, b = L.distance_operands(q[:rows], k, k=1.0, temperature=tau)
    b_t = b.T.contiguous()
    block = max(1, (32 * MiB) // (4 * k.shape[0]))
    floor = 0.5 * math.log(torch.finfo(q.dtype).tiny)
    out = torch.empty(rows, v.shape[-1], dtype=v.dtype)
    for i in range(0, rows, block):
        s = a[i : i + block] @ b_t
        w = s.sub_(s.amax(-1, keepdim=True)).clamp_min_(floor).exp_()
        out[i : i + block] = (w @ v) / w.sum(-1, keepdim=True)
    return out


def _tail_rows(res: Any, a: torch.Tensor, b: torch.Tensor, picked: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The map of ``distance_topk_attention``'s result on its rows ``picked``, all keys, from the result: each row's top
    keys (``indices``, ``offsets``, ``top_counts``) weighted :math:`e^{s - m}`, every other key :math:`e^{t - m} p(s - t)`
    (``cut``), normalised; and the largest difference between those top keys' weights and the returned ``weights``."""
    s = a[picked].double() @ b.double().T  # (rows, M) the exact logits / tau
    cut = res.cut[picked].double()
    t, beta, gamma = cut[:, :1], cut[:, 1:2], cut[:, 2:3]
    m = torch.maximum(s.amax(-1, keepdim=True), t)
    u = s - t
    # every key not listed weighted by the tail (a key an index missed included), a row with every key exact (it lists
    # none) by its exact weights
    w = torch.where(res.top_counts[picked].unsqueeze(-1) >= s.shape[-1], torch.exp(s - m),
                    (1.0 + u * (beta + gamma * u)) * torch.exp(t - m))
    listed = torch.diff(res.offsets, append=torch.tensor([res.weights.numel()]))
    tops = []
    for r, i in enumerate(picked.tolist()):
        lo, kt = int(res.offsets[i]), int(listed[i])
        idx = res.indices[lo : lo + kt]
        w[r, idx] = torch.exp(s[r, idx] - m[r])
        tops.append((r, idx, res.weights[lo : lo + kt].double()))
    w = w / w.sum(-1, keepdim=True)
    gap = max([float((w[r, idx] - wt).abs().max()) for r, idx, wt in tops if idx.numel()], default=0.0)
    return w, gap


def child_topk_tail(n: int, rows: int, sharpness: float) -> dict[str, Any]:
    """Runs inside the subprocess: the search alone, the kind, the exact streamed map (on ``exact_rows`` rows, scaled),
    then the kind's error and the search's recall on ``rows`` sampled rows against exact rows.

    Every query row of the kind is independent of the others (its plan, its search, its output), so where the
    map is sharp (r^2/tau > 1.25) and N > 10^4 the kind runs on ``kind_rows_sharp`` sampled query rows against all
    keys and its time is scaled to N, as the exact map's is; the result says so (``kind.rows_timed``)."""
    cfg = TOPK_TAIL
    d, tau, top = cfg["d"], cfg["temperature"], cfg["top"]
    r = math.sqrt(sharpness * tau)  # mean norm r with r^2 / tau = sharpness
    q, k, v = (points(n, d, seed, r=r) for seed in (15, 16, 17))
    out: dict[str, Any] = {"n": n, "m": n, "d": d, "temperature": tau, "sharpness": sharpness, "mean_norm": r,
                           "dtype": "float32", "threads": torch.get_num_threads(), "rows": rows}
    # the search alone (faiss, optional): the index picked by measured recall, or exact search, visibly
    found = None
    if n > cfg["search_alone_max_n"]:
        out["search"] = {"skipped": f"not measured at N = {n:,} (the index's build is minutes here)"}
    else:
        try:
            found, t_s, base, hwm, peak, reset = _measured(
                lambda: att.search_top_keys(q, k, top, recall=cfg["recall"], sample=cfg["sample"], seed=0))
            out["search"] = {"time_s": t_s, "peak_extra_rss_bytes_sampled": peak[0] - base,
                             "peak_extra_rss_bytes_hwm": (hwm - base) if reset else None, "method": found.method,
                             "recall_sampled": found.recall, "recall_asked": found.recall_asked, "sample": found.sample,
                             "reason": found.reason, "trials": [list(t) for t in found.trials]}
        except ImportError as exc:
            out["search"] = {"skipped": str(exc)}
    g = torch.Generator().manual_seed(0)
    kr = n if (sharpness <= 1.25 or n <= 10_000) else min(n, cfg["kind_rows_sharp"])
    kind_rows = torch.arange(n) if kr == n else torch.randperm(n, generator=g)[:kr].sort().values
    qk = q[kind_rows]
    res, t_k, base, hwm, peak, reset = _measured(lambda: att.distance_topk_attention(qk, k, v, temperature=tau, search="exact"))
    time_s = t_k
    if kr < n:  # at N: the fixed part (the key sums, O(M c^2 d_v), once per call) + the per-row time x N, the per-row
        few = kr // 4  # time from the call on a quarter of the rows against the call on all of them
        t0 = time.perf_counter()
        att.distance_topk_attention(qk[:few], k, v, temperature=tau, search="exact")
        t_few = time.perf_counter() - t0
        row_s = max(0.0, t_k - t_few) / (kr - few)
        time_s = max(0.0, t_few - row_s * few) + row_s * n
    out["kind"] = {"search": res.search, "recall": res.recall, "rows_timed": kr, "time_s": time_s, "block_time_s": t_k,
                   "peak_extra_rss_bytes_sampled": peak[0] - base,
                   "peak_extra_rss_bytes_hwm": (hwm - base) if reset else None,
                   "output_finite": bool(torch.isfinite(res.output).all()),
                   "min_weight": float(res.weights.min()) if res.weights.numel() else None,
                   "rows_met": float(res.met.double().mean()), "rows_estimated": float(res.estimated.double().mean()),
                   "mean_top_count": float(res.top_counts.double().mean()),
                   "tail_only_rows": float((res.top_counts == 0).double().mean()),
                   "exact_rows": float((res.top_counts >= n).double().mean()),
                   "top_counts": {str(int(c)): int(x) for c, x in zip(*torch.unique(res.top_counts, return_counts=True))}}
    # the exact streamed map, timed on its first exact_rows rows and scaled to all N
    er = min(n, cfg["exact_rows"])
    _, t_e, base, hwm, peak, reset = _measured(lambda: exact_streamed(q, k, v, tau, er))
    out["exact"] = {"rows_timed": er, "time_s": t_e * n / er, "block_time_s": t_e,
                    "peak_extra_rss_bytes_sampled": peak[0] - base, "dense_map_bytes": 4 * n * n}
    # error on sampled rows (of the kind's rows) against exact rows
    picked = torch.randperm(kr, generator=g)[:rows].sort().values
    a, b = L.distance_operands(qk, k, k=1.0, temperature=tau)
    exact_p = torch.softmax(a[picked].double() @ b.double().T, dim=-1)
    approx_p, gap = _tail_rows(res, a, b, picked)
    tv = 0.5 * (approx_p - exact_p).abs().sum(-1)
    tv_u = 0.5 * (exact_p - 1.0 / n).abs().sum(-1)
    top1 = (approx_p.argmax(-1) == exact_p.argmax(-1)).double()
    est = res.row_error[picked].double()
    out["error"] = {"mean_tv": float(tv.mean()), "mean_tv_uniform": float(tv_u.mean()),
                    "ratio": float(tv.mean() / tv_u.mean()), "top1_agreement": float(top1.mean()),
                    "rows_met": float(res.met[picked].double().mean()),
                    "rows_estimated": float(res.estimated[picked].double().mean()), "weights_gap": gap,
                    "estimate_covers": float((tv <= 2 * est + 1e-12).double().mean()),
                    "estimate_over_true_median": float((est / tv.clamp_min(1e-300)).median()),
                    "log_corr": float(torch.corrcoef(torch.stack([tv.clamp_min(1e-300).log(),
                                                                  est.clamp_min(1e-300).log()]))[0, 1])}
    over = tv > 0.25 * tv_u  # rows off the suite's bar: each should say so (met false)
    out["error"]["rows_over_bar"] = int(over.sum())
    out["error"]["rows_over_bar_flagged"] = int((over & ~res.met[picked].cpu()).sum())
    if found is not None:  # the search's recall on the same sampled rows against exact top keys
        ex = att.exact_top_keys(qk[picked], k, top)
        got = found.logits[kind_rows[picked]]
        out["search"]["recall_rows"] = float((got >= ex.logits[:, -1:] - 1e-5 * (1 + ex.logits[:, -1:].abs())).double().mean())
    return out


def bench_topk_tail(ns: list[int], rows: int, sharpness: tuple[float, ...]) -> dict[str, Any]:
    out = []
    for n in ns:
        for sharp in sharpness:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child-topk-tail", str(n), str(rows), str(sharp)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"distance_topk_attention child failed:\n{proc.stderr[-3000:]}")
            out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            o = out[-1]
            log(f"   N = {n:,}, r^2/tau = {sharp:g}: kind {o['kind']['time_s']:.2f} s (on {o['kind']['rows_timed']:,} rows, "
                f"{o['kind']['search']}), exact {o['exact']['time_s']:.2f} s, TV / baseline {o['error']['ratio']:.3g}")
    return {**{k: v for k, v in TOPK_TAIL.items() if k != "sharpness"}, "sharpness": list(sharpness),
            "rows_sampled": rows, "floor_ratio_smooth": 0.02, "floor_ratio_sharp": 0.1, "floor_time_fraction": 0.1,
            "rows": out}


# --------------------------------------------------------------------------- #
# 10. the kind with the index search (issue 30) at N = M = 16,384: Gaussian, clustered and tree keys
# --------------------------------------------------------------------------- #
TOPK_INDEX: dict[str, Any] = {"n": 16_384, "d": 64, "temperature": 8.0, "recall": 0.9, "rows": 512, "clusters": 32,
                              "cluster_spread": 0.3,
                              "sets": [("gaussian", s) for s in (0.00125, 0.0125, 0.125, 1.25, 12.5, 125.0)]
                              + [("clusters", s) for s in (1.25, 12.5, 125.0)] + [("tree", e) for e in (0.4, 1.0)]}


def _cluster_points(n: int, d: int, r: float, seed: int, clusters: int, spread: float) -> torch.Tensor:
    """``n`` points of one mixture of ``clusters`` Gaussian clusters (centres standard normal, each cluster's spread
    ``spread`` times that scale), the spatial parts rescaled to mean norm ``r`` by one factor, lifted."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, d, generator=g, dtype=torch.float64)
    pts = centres[torch.randint(clusters, (n,), generator=g)] + spread * torch.randn(n, d, generator=g, dtype=torch.float64)
    return L.lift(pts * (r / pts.norm(dim=-1).mean())).float()


def _tree_points(depth: int, d: int, edge: float, seed: int) -> torch.Tensor:
    """Every node of a balanced binary tree of ``depth`` levels grown in H^d from the origin: each child one geodesic
    step of length ``edge`` from its parent along a random unit direction (at the origin), carried to the parent by
    the Lorentz boost that takes the origin to it; ``2^(depth + 1) - 1`` nodes, float64 then float32."""
    g = torch.Generator().manual_seed(seed)
    level = L.origin(d, dtype=torch.float64).unsqueeze(0)
    out = [level]
    for i in range(depth):
        u = torch.nn.functional.normalize(torch.randn(2 ** (i + 1), d, generator=g, dtype=torch.float64), dim=-1)
        p = level.repeat_interleave(2, 0)
        x = torch.cat([torch.full_like(u[:, :1], math.cosh(edge)), math.sinh(edge) * u], -1)  # the step at the origin
        pt, ps, xt, xs = p[:, :1], p[:, 1:], x[:, :1], x[:, 1:]
        dot = (ps * xs).sum(-1, keepdim=True)
        level = L.lift(xs + ps * (xt + dot / (1 + pt)))  # the boost's spatial part, re-lifted
        out.append(level)
    return torch.cat(out).float()


def topk_index_sets(name: str, scale: float, n: int, d: int, tau: float) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Queries and keys (``n`` each; the tree: ``n`` keys and the other ``n - 1`` nodes of a tree of ``2n - 1`` nodes as
    queries) of one key set of section 10, and how it is scaled."""
    if name == "gaussian":
        r = math.sqrt(scale * tau)
        return points(n, d, 21, r=r), points(n, d, 22, r=r), f"lifted Gaussian, mean norm {r:.3g} (r^2/tau = {scale:g})"
    if name == "clusters":
        r = math.sqrt(scale * tau)
        x = _cluster_points(2 * n, d, r, 23, TOPK_INDEX["clusters"], TOPK_INDEX["cluster_spread"])
        return x[:n], x[n:], f"{TOPK_INDEX['clusters']} clusters, mean norm {r:.3g} (r^2/tau = {scale:g})"
    x = _tree_points(int(math.log2(2 * n)) - 1, d, scale, 24)
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(25))
    keys, queries = x[perm[:n]], x[perm[n : 2 * n]]
    norm = float(x[:, 1:].norm(dim=-1).mean())
    return queries, keys, f"binary tree in H^{d}, edge {scale:g} (mean norm {norm:.3g})"


def child_topk_index(name: str, scale: float, n: int, rows: int) -> dict[str, Any]:
    """Runs inside the subprocess: the kind with ``search="index"`` on every query row (the index built once, inside the
    call), the exact streamed map on every row, then the error and the index's recall on ``rows`` sampled rows."""
    cfg = TOPK_INDEX
    d, tau = cfg["d"], cfg["temperature"]
    q, k, how = topk_index_sets(name, scale, n, d, tau)
    nq = q.shape[0]
    v = points(n, d, 26, r=1.0)
    out: dict[str, Any] = {"set": name, "scale": scale, "how": how, "n": nq, "m": n, "d": d, "temperature": tau,
                           "dtype": "float32", "threads": torch.get_num_threads(), "rows": rows}
    res, t_k, base, hwm, peak, reset = _measured(
        lambda: att.distance_topk_attention(q, k, v, temperature=tau, search="index", recall=cfg["recall"]))
    out["kind"] = {"search": res.search, "recall": res.recall, "time_s": t_k, "peak_extra_rss_bytes_sampled": peak[0] - base,
                   "output_finite": bool(torch.isfinite(res.output).all()),
                   "min_weight": float(res.weights.min()) if res.weights.numel() else None,
                   "rows_met": float(res.met.double().mean()), "rows_estimated": float(res.estimated.double().mean()),
                   "mean_top_count": float(res.top_counts.double().mean()),
                   "tail_only_rows": float((res.top_counts == 0).double().mean()),
                   "exact_rows": float((res.top_counts >= n).double().mean())}
    _, t_e, base, hwm, peak, reset = _measured(lambda: exact_streamed(q, k, v, tau, nq))
    out["exact"] = {"rows_timed": nq, "time_s": t_e}
    g = torch.Generator().manual_seed(0)
    picked = torch.randperm(nq, generator=g)[:rows].sort().values
    a, b = L.distance_operands(q, k, k=1.0, temperature=tau)
    s = a[picked].double() @ b.double().T
    exact_p = torch.softmax(s, dim=-1)
    approx_p, gap = _tail_rows(res, a, b, picked)
    tv = 0.5 * (approx_p - exact_p).abs().sum(-1)
    tv_u = 0.5 * (exact_p - 1.0 / n).abs().sum(-1)
    # tie-aware top-1: the kind's favourite key has the exact map's largest weight (to 1e-9 relative)
    best = exact_p.gather(-1, approx_p.argmax(-1, keepdim=True)).squeeze(-1)
    top1 = (best >= exact_p.amax(-1) * (1 - 1e-9)).double()
    # the index's recall on these rows: the share of each row's listed top keys whose exact logit reaches the row's
    # exact k_i-th logit (rows with 0 < k_i < M)
    listed = torch.diff(res.offsets, append=torch.tensor([res.weights.numel()]))
    hits, total = 0, 0
    for r_, i in enumerate(picked.tolist()):
        kt = int(listed[i])
        if kt == 0:
            continue
        idx = res.indices[int(res.offsets[i]) : int(res.offsets[i]) + kt]
        thr = torch.topk(s[r_], kt).values[-1]
        hits += int((s[r_, idx] >= thr - 1e-9 * (1 + thr.abs())).sum())
        total += kt
    out["error"] = {"mean_tv": float(tv.mean()), "mean_tv_uniform": float(tv_u.mean()),
                    "ratio": float(tv.mean() / tv_u.mean()), "top1_agreement": float(top1.mean()),
                    "rows_met": float(res.met[picked].double().mean()),
                    "rows_estimated": float(res.estimated[picked].double().mean()), "weights_gap": gap,
                    "recall_rows": hits / total if total else None, "rows_with_top_keys": int((listed[picked] > 0).sum())}
    return out


# rows: timed as rows/4 and rows
TOPK_INDEX_LARGE: dict[str, Any] = {"sharpness": 125.0, "rows": 1024, "fit_keys": 16_384, "fit_queries": 256, "top": 256,
                                    "exact_rows": 1024}


def child_topk_index_large(n: int) -> dict[str, Any]:
    """Runs inside the subprocess: Gaussian keys at r^2/tau = 125, N = M = n. The index's configuration fitted on a key
    subsample (``fit_keys`` keys, ``fit_queries`` queries, at the kind's first read, top 256), the index built once over
    every key with it (its recall measured on sampled queries), the kind with that index on ``rows`` sampled query rows
    (at N: its fixed part plus its per-row time, from the call on a quarter of the rows against all, times N), the exact
    streamed map on ``exact_rows`` rows (scaled), the error and the recall on the kind's rows."""
    cfg, tau, d = TOPK_INDEX_LARGE, TOPK_INDEX["temperature"], TOPK_INDEX["d"]
    r = math.sqrt(cfg["sharpness"] * tau)
    q, k, v = (points(n, d, seed, r=r) for seed in (31, 32, 33))
    g = torch.Generator().manual_seed(0)
    sub_k = torch.randperm(n, generator=g)[: min(n, cfg["fit_keys"])].sort().values
    sub_q = torch.randperm(n, generator=g)[: cfg["fit_queries"]].sort().values
    clock = lambda: (time.perf_counter(), time.process_time())  # noqa: E731  wall, and this process's CPU (user + sys)
    spent = lambda c0: (time.perf_counter() - c0[0], time.process_time() - c0[1])  # noqa: E731
    c0 = clock()
    small = att.fit_key_index(q[sub_q], k[sub_k], cfg["top"], recall=TOPK_INDEX["recall"])
    fit_s = spent(c0)
    # on every key: the subsample's configuration first, then the later ones of TRIES (each new number of shells a build;
    # HNSW searches with ef at least top, so at top 256 only more shells or ef above 256 can raise the recall)
    from hypviz.attention.approx.key_search import TRIES
    first = (len(small.shells), small.ef) if small.shells is not None else TRIES[-1]
    tries = TRIES[TRIES.index(first):] if first in TRIES else (first,)
    c0 = clock()
    index = att.fit_key_index(q, k, cfg["top"], recall=TOPK_INDEX["recall"], tries=tries)
    build_s = spent(c0)
    rows = min(cfg["rows"], max(64, 2**27 // n))  # the checked rows' float64 (rows x M) arrays: at most 1 GiB each
    picked = torch.randperm(n, generator=g)[:rows].sort().values
    qk = q[picked]
    # warm-up, untimed
    att.distance_topk_attention(qk, k, v, temperature=tau, search=index)  # type: ignore[arg-type]  # search= takes a KeyIndex; its annotation in hypviz.attention says str
    few = rows // 4  # the call on rows/4 and on all rows, twice each (the smaller time kept): the per-row cost from
    few_s = rows_s = (math.inf, math.inf)  # the difference, the fixed part (the key sums, O(M c^2 d_v)) from the rest
    for _ in range(2):
        c0 = clock()
        att.distance_topk_attention(qk[:few], k, v, temperature=tau, search=index)  # type: ignore[arg-type]  # search= takes a KeyIndex; its annotation in hypviz.attention says str
        few_s = min(few_s, spent(c0))
        c0 = clock()
        res = att.distance_topk_attention(qk, k, v, temperature=tau, search=index)  # type: ignore[arg-type]  # search= takes a KeyIndex; its annotation in hypviz.attention says str
        rows_s = min(rows_s, spent(c0))
    er = min(n, cfg["exact_rows"])
    c0 = clock()
    exact_streamed(q, k, v, tau, er)
    exact_s = tuple(x * n / er for x in spent(c0))
    a, b = L.distance_operands(qk, k, k=1.0, temperature=tau)
    every = torch.arange(len(picked))
    s = a.double() @ b.double().T
    exact_p = torch.softmax(s, dim=-1)
    approx_p, _ = _tail_rows(res, a, b, every)
    tv = 0.5 * (approx_p - exact_p).abs().sum(-1)
    tv_u = 0.5 * (exact_p - 1.0 / n).abs().sum(-1)
    best = exact_p.gather(-1, approx_p.argmax(-1, keepdim=True)).squeeze(-1)
    listed = torch.diff(res.offsets, append=torch.tensor([res.weights.numel()]))
    hits = total = 0
    for i in range(len(picked)):
        kt = int(listed[i])
        if kt:
            idx = res.indices[int(res.offsets[i]) : int(res.offsets[i]) + kt]
            thr = torch.topk(s[i], kt).values[-1]
            hits, total = hits + int((s[i, idx] >= thr - 1e-9 * (1 + thr.abs())).sum()), total + kt
    row_s = tuple(max(0.0, x - f) / (len(picked) - few) for x, f in zip(rows_s, few_s))
    fixed_s = tuple(max(0.0, f - r * few) for f, r in zip(few_s, row_s))
    kind_s = tuple(fi + bu + fx + ro * n for fi, bu, fx, ro in zip(fit_s, build_s, fixed_s, row_s))
    # times as [wall, cpu] pairs
    return {"n": n, "m": n, "d": d, "temperature": tau, "sharpness": cfg["sharpness"], "rows": len(picked),
            "threads": torch.get_num_threads(), "fit_s": fit_s, "fit_keys": len(sub_k), "method": index.method,
            "fit_method": small.method, "reason": index.reason, "build_s": build_s, "fixed_s": fixed_s, "rows_s": rows_s,
            "row_s": row_s, "kind_s": kind_s, "exact_s": exact_s, "exact_rows": er, "search": res.search,
            "recall_sampled": index.recall, "recall_rows": hits / total if total else float("nan"),
            "ratio": float(tv.mean() / tv_u.mean()), "top1": float((best >= exact_p.amax(-1) * (1 - 1e-9)).double().mean()),
            "rows_met": float(res.met.double().mean()), "rows_estimated": float(res.estimated.double().mean()),
            "exact_rows_share": float((res.top_counts >= n).double().mean()),
            "mean_top_count": float(res.top_counts.double().mean()), "load": os.getloadavg()[0]}


def bench_topk_index(n: int, rows: int, sets: list[tuple[str, float]]) -> dict[str, Any]:
    out = []
    for name, scale in sets:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-topk-index", name, str(scale), str(n), str(rows)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"topk index child failed:\n{proc.stderr[-3000:]}")
        o = json.loads(proc.stdout.strip().splitlines()[-1])
        o["load_average"] = list(os.getloadavg())
        out.append(o)
        log(f"   {o['how']}: kind {o['kind']['time_s']:.2f} s ({o['kind']['search']}), exact {o['exact']['time_s']:.2f} s, "
            f"TV / baseline {o['error']['ratio']:.3g}, top-1 {o['error']['top1_agreement']:.3g}")
    return {**{k: v for k, v in TOPK_INDEX.items() if k not in ("sets", "n", "rows")}, "n": n, "rows_sampled": rows,
            "sets": [list(s) for s in sets], "floor_ratio": 0.25, "floor_top1": 0.9, "rows": out}


# --------------------------------------------------------------------------- #
# 7. GPU: benchmarks/gpu.py's checks and rows
# --------------------------------------------------------------------------- #
def bench_gpu(quick: bool) -> dict[str, Any]:
    import gpu  # benchmarks/gpu.py

    dev = torch.device("cuda")
    sizes = gpu.DRY if quick else gpu.FULL
    return {
        "device_name": gpu.device_name(dev),
        "checks": gpu.check_correctness(dev, sizes["check_n"]),
        "results": gpu.bench(dev, sizes),
        "dry": False,
    }


# --------------------------------------------------------------------------- #
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (a smoke test); default output in a temporary directory")
    parser.add_argument("--json", default=None, help="results file (default benchmarks/results.json)")
    parser.add_argument("--md", default=None, help="Markdown file (default BENCHMARKS.md)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", choices=("linear_distance", "compare", "topk_tail", "topk_index", "topk_index_large"),
                        default=None,
                        help="run only this section (compare: sections 3, 4 and 5) and merge it into the existing results "
                             "file (then re-render)")
    parser.add_argument("--child-compare", nargs=4, metavar=("N", "D", "DEVICE", "ROWS"), help=argparse.SUPPRESS)
    parser.add_argument("--child-linear-distance", nargs=2, metavar=("N", "ROWS"), help=argparse.SUPPRESS)
    parser.add_argument("--child-topk-tail", nargs=3, metavar=("N", "ROWS", "SHARPNESS"), help=argparse.SUPPRESS)
    parser.add_argument("--child-topk-index-large", nargs=1, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--child-topk-index", nargs=4, metavar=("SET", "SCALE", "N", "ROWS"), help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=None,
                        help="with --only topk_tail: the sizes N = M, comma-separated (default 10000,100000,1000000); "
                             "with --only topk_index_large (default 100000)")
    args = parser.parse_args(argv)

    if args.child_compare:
        n, d, device, rows = args.child_compare
        print(json.dumps(child_compare(int(n), int(d), device, int(rows) or None)))
        return 0
    if args.child_linear_distance:
        n, rows = args.child_linear_distance
        print(json.dumps(child_linear_distance(int(n), int(rows))))
        return 0
    if args.child_topk_index_large:
        print(json.dumps(child_topk_index_large(int(args.child_topk_index_large[0]))))
        return 0
    if args.child_topk_index:
        name, scale, n, rows = args.child_topk_index
        print(json.dumps(child_topk_index(name, float(scale), int(n), int(rows))))
        return 0
    if args.child_topk_tail:
        n, rows, sharp = args.child_topk_tail
        print(json.dumps(child_topk_tail(int(n), int(rows), float(sharp))))
        return 0

    quick = args.quick
    if quick and (args.json is None or args.md is None):
        tmp = Path(tempfile.mkdtemp(prefix="hypviz-bench-quick-"))
        args.json = args.json or str(tmp / "results.json")
        args.md = args.md or str(tmp / "BENCHMARKS.md")
    json_path = Path(args.json or ROOT / "benchmarks" / "results.json")
    md_path = Path(args.md or ROOT / "BENCHMARKS.md")

    ns8, rows8 = ([2_000, 5_000], 32) if quick else ([10_000, 100_000, 1_000_000], 64)
    ns9, rows9, sharp9 = ([1_000], 32, (1.25, 125.0)) if quick else (args.sizes or [10_000, 100_000, 1_000_000], 64,
                                                                    TOPK_TAIL["sharpness"])
    n10, rows10, sets10 = ((1_024, 32, [("gaussian", 1.25), ("clusters", 125.0), ("tree", 1.0)]) if quick else
                           (TOPK_INDEX["n"], TOPK_INDEX["rows"], TOPK_INDEX["sets"]))
    if args.only == "compare":
        results: dict[str, Any] = (json.loads(json_path.read_text(encoding="utf-8")) if json_path.exists()
                                   else {"machine": machine(), "quick": quick})
        log(f"3, 4, 5. compare(), merged into {json_path}; machine: {machine()['cpu']}, load "
            f"{machine().get('load_average_at_start')}")
        run_compare_sections(results, quick)
        for key in ("compare_vs_maps", "compare_large", "compare_sampled"):
            results[key]["machine"] = machine()
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        md_path.write_text(report.render(results), encoding="utf-8")
        log(f"wrote {json_path} and {md_path}")
        return 0
    if args.only is not None:
        results = json.loads(json_path.read_text(encoding="utf-8"))
        if args.only == "linear_distance":
            log(f"8. linear distance attention, N = {ns8} (subprocesses), merged into {json_path}")
            results["linear_distance"] = bench_linear_distance(ns8, rows8)
            results["linear_distance"]["machine"] = machine()
        elif args.only == "topk_index_large":  # added to section 10's results: the index at N = 10^5 (10^6)
            sizes = args.sizes or [100_000]
            log(f"10. the index at larger N, N = {sizes} (subprocesses), merged into {json_path}")
            large = []
            for n in sizes:
                proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child-topk-index-large", str(n)],
                                      capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise RuntimeError(f"topk index child failed:\n{proc.stderr[-3000:]}")
                large.append(json.loads(proc.stdout.strip().splitlines()[-1]))
                o = large[-1]
                log(f"   N = {n:,}: fit {o['fit_s'][0]:.1f} s, build {o['build_s'][0]:.1f} s, "
                    f"{o['row_s'][0] * 1e3:.3g} ms a row, "
                    f"kind {o['kind_s'][0]:.1f} s, exact {o['exact_s'][0]:.1f} s (wall); TV / baseline {o['ratio']:.3g}")
            results["topk_index"]["large"] = [r for r in results["topk_index"].get("large", []) if r["n"] not in sizes] + large
        elif args.only == "topk_index":
            log(f"10. top keys plus a fitted tail with the index, N = M = {TOPK_INDEX['n']:,} (subprocesses), merged "
                f"into {json_path}")
            results["topk_index"] = bench_topk_index(n10, rows10, sets10)
            results["topk_index"]["machine"] = machine()
        else:
            log(f"9. top keys plus a fitted tail, N = {ns9} (subprocesses), merged into {json_path}")
            results["topk_tail"] = bench_topk_tail(ns9, rows9, sharp9)
            results["topk_tail"]["machine"] = machine()
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        md_path.write_text(report.render(results), encoding="utf-8")
        log(f"wrote {json_path} and {md_path}")
        return 0

    reps = args.repeats or (3 if quick else 15)
    results = {"machine": machine(), "quick": quick}
    log(f"machine: {results['machine']['cpu']}, torch {torch.__version__}, {torch.get_num_threads()} threads")

    n1 = 512 if quick else 4096
    log(f"1. pairwise kernels vs matmul, N = {n1}")
    results["matmul_floor"] = bench_matmul_floor(n1, 64, reps)
    results["matmul_floor_1_thread"] = bench_matmul_floor(n1, 64, reps, threads=1)

    n2 = 256 if quick else 2048
    log(f"2. geoopt broadcast distance, N = {n2}")
    try:
        results["geoopt"] = bench_geoopt(n2, 64, 3 if quick else 7)
    except ImportError:
        log("   geoopt is not installed: not measured")
        results["geoopt"] = None

    run_compare_sections(results, quick)

    ns = [1024, 2048, 4096] if quick else [1024, 2048, 4096, 8192, 16384, 32768, 65536]
    log("6. linear vs quadratic focused attention")
    results["linear"] = bench_linear(ns, 64, 3 if quick else 5, quadratic_max_bytes=(16 if quick else 1024) * MiB)

    log(f"8. linear distance attention, N = {ns8} (subprocesses)")
    results["linear_distance"] = bench_linear_distance(ns8, rows8)

    log(f"9. top keys plus a fitted tail, N = {ns9} (subprocesses)")
    results["topk_tail"] = bench_topk_tail(ns9, rows9, sharp9)

    log(f"10. top keys plus a fitted tail with the index, N = M = {TOPK_INDEX['n']:,} (subprocesses)")
    results["topk_index"] = bench_topk_index(n10, rows10, sets10)

    if torch.cuda.is_available():
        log("7. GPU (benchmarks/gpu.py)")
        results["gpu"] = bench_gpu(quick)
    else:
        results["gpu"] = None

    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(report.render(results), encoding="utf-8")
    log(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
