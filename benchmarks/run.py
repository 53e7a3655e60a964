"""Benchmarks of hypviz.attention and hypviz.lorentz (issue 4), measured side by side in one run.

    python benchmarks/run.py                 # full run; writes benchmarks/results.json and BENCHMARKS.md
    python benchmarks/run.py --quick --json /tmp/r.json --md /tmp/r.md    # small sizes: a smoke test

What is measured (float32, d = 64):

1. ``lorentz.pairwise_sqdist``, ``attention.scores``/``attention_map`` at N = M = 4096 against a bare
   ``q_s @ k_s^T`` of the same shape (floor: at most 2x the matmul's time on CPU);
2. the same at N = 2048 against geoopt's broadcast ``Lorentz().dist(x[:, None], y[None])``
   (floor: at least 50x faster);
3. ``attention.compare()`` at N = M = 65,536 on CPU in a fresh subprocess: time and peak extra resident
   memory (VmHWM reset through /proc/self/clear_refs, cross-checked by sampling VmRSS every 10 ms)
   (floor: at most 1 GiB; one dense float32 map would be 16 GiB);
4. ``focused_linear_attention`` against the quadratic form ``focused_linear_map(...) @ V_s`` for N from
   1,024 to 65,536: time and peak tensor memory (``attention.peak_tensor_memory``); the quadratic form
   only where its N x N map fits in the memory allowed here;
5. on a CUDA machine, the same plus ``compare()`` at N = 1,000,000 as time and as a fraction of ``torch.mm``
   throughput for the same shapes; elsewhere those rows say "not measured".

Timings are medians of repeats that interleave the contenders (each round runs every contender
once), because other processes may share the CPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypviz import attention as att  # noqa: E402
from hypviz import lorentz as L  # noqa: E402

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
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(n, d, generator=g, dtype=dtype) * (r / math.sqrt(d))
    return L.lift(xs).to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(funcs: dict[str, Callable[[], Any]], repeats: int, device: str = "cpu") -> dict[str, dict[str, float]]:
    """Run every contender once per round (after one warm-up round); median, min and quartiles in seconds."""
    times: dict[str, list[float]] = {name: [] for name in funcs}
    for name, f in funcs.items():  # warm-up
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
# 3. compare() at large N, memory measured in a fresh process
# --------------------------------------------------------------------------- #
def _rss() -> tuple[int, int]:
    rss = hwm = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return rss, hwm


def child_compare(n: int, d: int, device: str) -> dict[str, Any]:
    """Runs inside the subprocess: inputs, baseline RSS, reset the high-water mark, compare(), read it."""
    q, k = points(n, d, 5), points(n, d, 6)
    att.compare(q[:256], k[:4096], progress=False, device=device)  # warm-up: thread pools, code paths
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
    res = att.compare(q, k, "spatial", "distance", device=device, progress=False)
    sync(device)
    elapsed = time.perf_counter() - start
    stop.set()
    thread.join()
    _, hwm = _rss()
    out = {
        "n": n,
        "d": d,
        "device": res.device,
        "time_s": elapsed,
        "baseline_rss_bytes": base_rss,
        "inputs_bytes": 2 * n * (d + 1) * 4,
        "peak_extra_rss_bytes_hwm": (hwm - base_rss) if reset else None,
        "peak_extra_rss_bytes_sampled": peak_sampled[0] - base_rss,
        "hwm_reset": reset,
        "block_rows": res.block_rows,
        "n_blocks": res.n_blocks,
        "dense_map_bytes": n * n * 4,
        "summary": res.to_dict(),
        "all_bounds_met": res.all_bounds_met,
    }
    if device.startswith("cuda"):
        out["cuda_max_memory_allocated"] = torch.cuda.max_memory_allocated()
    return out


def bench_compare(n: int, d: int, device: str = "cpu") -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child-compare", str(n), str(d), device]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compare() child failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["floor_bytes"] = GiB
    return out


# --------------------------------------------------------------------------- #
# 4. linear against quadratic focused attention
# --------------------------------------------------------------------------- #
def bench_linear(ns: list[int], d: int, repeats: int, quadratic_max_bytes: int, device: str = "cpu") -> dict[str, Any]:
    rows = []
    for n in ns:
        q, k, v = points(n, d, 7, device=device), points(n, d, 8, device=device), points(n, d, 9, device=device)
        run_quad = 4 * n * n <= quadratic_max_bytes
        funcs = {"linear": lambda: att.focused_linear_attention(q, k, v)}
        if run_quad:
            funcs["quadratic"] = lambda: att.focused_linear_map(q, k) @ v[:, 1:]
        t = interleaved(funcs, repeats, device)
        row: dict[str, Any] = {"n": n, "linear_time_s": t["linear"]["median_s"]}
        lin, row["linear_peak_tensor_bytes"] = att.peak_tensor_memory(att.focused_linear_attention, q, k, v)
        if run_quad:
            quad, row["quadratic_peak_tensor_bytes"] = att.peak_tensor_memory(
                lambda: att.focused_linear_map(q, k) @ v[:, 1:]
            )
            row["quadratic_time_s"] = t["quadratic"]["median_s"]
            row["max_relative_difference"] = float(((lin - quad).norm(dim=-1) / quad.norm(dim=-1)).max())
            del quad
        else:
            row["quadratic_time_s"] = None
            row["quadratic_peak_tensor_bytes"] = None
            row["quadratic_skipped"] = f"the N x N float32 map alone would take {4 * n * n / GiB:.3g} GiB"
        rows.append(row)
        log(f"linear vs quadratic N={n}: {row['linear_time_s']:.4f} s vs {row['quadratic_time_s']}")
        del q, k, v, lin
        gc.collect()
    return {"d": d, "dtype": "float32", "device": device, "quadratic_max_bytes": quadratic_max_bytes, "rows": rows}


# --------------------------------------------------------------------------- #
# 5. GPU: compare() at N = 1e6 against torch.mm throughput
# --------------------------------------------------------------------------- #
def bench_gpu_compare(n: int, d: int) -> dict[str, Any]:
    """On CUDA: compare() at N = M = n, and the throughput of torch.mm for the logits' matrix products."""
    dev = "cuda"
    out = bench_compare(n, d, dev)
    # compare() does two (rows x c) @ (c x M) products per block; c = d (spatial) and d + 3 (distance)
    flops = 2.0 * n * n * (d + (d + 3))
    a = torch.randn(8192, d + 3, device=dev)
    b = torch.randn(d + 3, n, device=dev)
    t = interleaved({"mm": lambda: a @ b}, 5, dev)["mm"]["median_s"]
    mm_flops = 2.0 * 8192 * n * (d + 3) / t
    out["mm_throughput_flops"] = mm_flops
    out["fraction_of_mm_throughput"] = (flops / out["time_s"]) / mm_flops
    return out


# --------------------------------------------------------------------------- #
# report
# --------------------------------------------------------------------------- #
def fmt_s(s: float | None) -> str:
    if s is None:
        return "not run"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def fmt_b(b: float | None) -> str:
    if b is None:
        return "not run"
    if b >= GiB:
        return f"{b / GiB:.3g} GiB"
    if b >= MiB:
        return f"{b / MiB:.3g} MiB"
    return f"{b / 1024:.3g} KiB"


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Benchmarks",
        "",
        "Measured by `python benchmarks/run.py` (raw numbers in `benchmarks/results.json`), all contenders",
        "side by side in one run. Re-run it to measure your machine; it rewrites this file.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m['cpu']}, {m['logical_cpus']} logical CPUs ({m['cpu_capability']}), torch uses {m['torch_threads']} threads |",
        f"| memory | {m['memory_total_gib']} GiB |",
        f"| GPU | {m['gpu'] or 'none available in this session'} |",
        f"| software | Python {m['python']}, torch {m['torch']}, geoopt {m['geoopt']} |",
        f"| date (UTC) | {m['date_utc']} |",
        "",
        "**How measured.** Other processes may share this CPU "
        f"(1/5/15-minute load average {m.get('load_average_at_start')} at the start), so every time is the **median** of",
        "repeats in which the contenders are *interleaved* (each round runs every contender once, after a",
        "warm-up round); ratios compare medians from the same rounds. Float32, d = 64 throughout.",
        "",
    ]

    mm = results["matmul_floor"]
    lines += [
        f"## 1. Pairwise kernels against a bare matmul (N = M = {mm['n']}, CPU)",
        "",
        f"Floor: at most {mm['floor_ratio']:g}x the time of `q_s @ k_s^T` of the same shape (medians).",
        f"Median and minimum of {mm['results']['matmul q_s @ k_s^T']['repeats']} interleaved rounds, with torch's default",
        "thread count and again single-threaded (a busy shared CPU stalls multi-threaded element-wise passes",
        "more than one big matmul; one thread shows the work itself).",
    ]
    for key in ("matmul_floor", "matmul_floor_1_thread"):
        if key not in results:
            continue
        mt = results[key]
        lines += [
            "",
            f"**{mt['threads']} thread{'s' if mt['threads'] > 1 else ''}**",
            "",
            "| operation | median | min | ratio to matmul (median) | ratio (min) | floor |",
            "|---|---|---|---|---|---|",
        ]
        base_min = mt["results"]["matmul q_s @ k_s^T"]["min_s"]
        for name, r in mt["results"].items():
            if name.startswith("matmul"):
                verdict = "(baseline)"
            else:
                verdict = "met" if r["ratio_to_matmul"] <= mt["floor_ratio"] else "**NOT met**"
            lines.append(
                f"| `{name}` | {fmt_s(r['median_s'])} | {fmt_s(r['min_s'])} | {r['ratio_to_matmul']:.2f}x | "
                f"{r['min_s'] / base_min:.2f}x | {verdict} |"
            )
    ps = mm["results"]["lorentz.pairwise_sqdist"]["ratio_to_matmul"]
    lines += [
        "",
        "`attention.scores`/`attention_map` build the logits with **one** matrix product of augmented operands",
        "(identity 1 with the time coordinate shifted by the origin's: `-1/2 |q - k|^2_L = q_s.k_s - u_q u_k -",
        "sqrt(k)(u_q + u_k)`, `u = |x_s|^2 / (x_t + sqrt(k))`, no cancellation beyond that of identity 3), then",
        "the softmax overwrites the logits in place (torch's fused row kernel): no second N x M array.",
    ]
    if ps > mm["floor_ratio"]:
        lines += [
            f"`lorentz.pairwise_sqdist` is at {ps:.2f}x: after its matmul it makes several element-wise passes over",
            "the N x M result and allocates an N x M temporary for the time differences (each pass reads and",
            "writes 64 MiB at N = 4096; a fresh 64 MiB array also costs its page faults). The augmented-operand",
            "form above (one matmul with d + 3 columns, then `clamp_min_`) is what `attention.scores distance`",
            f"runs ({mm['results']['attention.scores distance']['ratio_to_matmul']:.2f}x here, and -1/2 of the same quantity); "
            "it is proposed for `hypviz.lorentz` in the report of issue 4.",
        ]

    g = results["geoopt"]
    lines += [
        "",
        f"## 2. Against geoopt's broadcast distance (N = M = {g['n']}, CPU)",
        "",
        f"Floor: at least {g['floor_speedup']:g}x faster than `geoopt.Lorentz().dist(x[:, None], y[None])`, which",
        f"materialises N x N x (d + 1) intermediates ({fmt_b(g['geoopt_intermediate_bytes'])} each).",
        f"Median of {g['results']['lorentz.pairwise_sqdist']['repeats']} interleaved rounds.",
        "",
        "| operation | median | min | speedup vs geoopt (medians) | speedup (min) | floor |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in g["results"].items():
        if name.startswith("geoopt"):
            verdict = "(baseline)"
        else:
            verdict = "met" if r["speedup_vs_geoopt"] >= g["floor_speedup"] else "**NOT met**"
        gmin = g["results"]["geoopt Lorentz.dist(x[:, None], y[None])"]["min_s"]
        lines.append(
            f"| `{name}` | {fmt_s(r['median_s'])} | {fmt_s(r['min_s'])} | {r['speedup_vs_geoopt']:.0f}x | "
            f"{gmin / r['min_s']:.0f}x | {verdict} |"
        )
    lines += [
        "",
        "Agreement (float64): max |geoopt dist - 2 asinh(sqrt(pairwise_sqdist) / 2)| = "
        f"{g['max_abs_dist_difference_float64_ref']:.2g}. geoopt computes the distance (arcosh), ours the",
        "squared Lorentzian distance or the whole softmax map; the conversion is one element-wise pass.",
    ]

    c = results["compare_large"]
    extra = c["peak_extra_rss_bytes_hwm"] if c["peak_extra_rss_bytes_hwm"] is not None else c["peak_extra_rss_bytes_sampled"]
    verdict = "met" if extra <= c["floor_bytes"] else "**NOT met**"
    lines += [
        "",
        f"## 3. `compare()` at N = M = {c['n']:,}, d = {c['d']} ({c['device']})",
        "",
        "Run once in a fresh subprocess. Peak extra memory = peak resident set during `compare()` minus the",
        "resident set just before it (inputs already built, one small warm-up call done): the kernel's VmHWM",
        "high-water mark, reset through `/proc/self/clear_refs` right before the call, cross-checked by",
        "sampling VmRSS every 10 ms.",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| time | {fmt_s(c['time_s'])} (one run) |",
        f"| peak extra memory (VmHWM) | {fmt_b(c['peak_extra_rss_bytes_hwm'])} |",
        f"| peak extra memory (sampled VmRSS) | {fmt_b(c['peak_extra_rss_bytes_sampled'])} |",
        f"| floor: at most 1 GiB | {verdict} |",
        f"| one dense float32 N x N map, for scale | {fmt_b(c['dense_map_bytes'])} |",
        f"| inputs (queries + keys) | {fmt_b(c['inputs_bytes'])} |",
        f"| row blocks | {c['n_blocks']} blocks of {c['block_rows']} rows (automatic) |",
        f"| result: mean / max TV | {c['summary']['mean_tv']:.4g} / {c['summary']['max_tv']:.4g} |",
        f"| result: bound met on every row | {c['all_bounds_met']} |",
    ]

    lin = results["linear"]
    lines += [
        "",
        f"## 4. `focused_linear_attention` against the quadratic form (d = {lin['d']}, CPU)",
        "",
        "Linear: `phi(Q) (phi(K)^T V_s) / normaliser`; quadratic: `focused_linear_map(Q, K) @ V_s` (forms the",
        "N x N implicit map). Time: median of interleaved repeats. Memory: peak total size of the tensors",
        "allocated and alive at once (`attention.peak_tensor_memory`, inputs excluded). The quadratic form",
        f"is run only where its N x N map takes at most {fmt_b(lin['quadratic_max_bytes'])}: the machine is shared",
        "(the map alone is 4 GiB at N = 32,768 and 16 GiB at N = 65,536).",
        "",
        "| N | linear time | quadratic time | speed-up | linear peak memory | quadratic peak memory | max rel. difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in lin["rows"]:
        if r["quadratic_time_s"] is None:
            lines.append(
                f"| {r['n']:,} | {fmt_s(r['linear_time_s'])} | not run ({r['quadratic_skipped']}) | | "
                f"{fmt_b(r['linear_peak_tensor_bytes'])} | not run | |"
            )
        else:
            lines.append(
                f"| {r['n']:,} | {fmt_s(r['linear_time_s'])} | {fmt_s(r['quadratic_time_s'])} | "
                f"{r['quadratic_time_s'] / r['linear_time_s']:.3g}x | {fmt_b(r['linear_peak_tensor_bytes'])} | "
                f"{fmt_b(r['quadratic_peak_tensor_bytes'])} | {r['max_relative_difference']:.2g} |"
            )

    gpu = results.get("gpu")
    lines += ["", "## 5. GPU", ""]
    if gpu is None:
        lines += [
            "| measurement | value |",
            "|---|---|",
            "| pairwise kernels vs matmul (N = 4096) | not measured (no GPU available in this session) |",
            "| `compare()` at N = 65,536 | not measured (no GPU available in this session) |",
            "| `compare()` at N = 1,000,000: time | not measured (no GPU available in this session) |",
            "| `compare()` at N = 1,000,000: fraction of `torch.mm` throughput | not measured (no GPU available in this session) |",
            "| linear vs quadratic | not measured (no GPU available in this session) |",
            "",
            "The CUDA code paths exist (`device=\"auto\"` selects CUDA when `torch.cuda.is_available()`).",
            "`python benchmarks/gpu.py` on a CUDA machine checks them against float64 CPU references and",
            "rewrites this section with the measured rows (CI runs it with `--dry-run` on the CPU).",
        ]
    else:
        mmg = gpu["matmul_floor"]
        lines += [f"Device: {m['gpu']}.", "", "| operation (N = 4096) | median | ratio to matmul |", "|---|---|---|"]
        for name, r in mmg["results"].items():
            lines.append(f"| `{name}` | {fmt_s(r['median_s'])} | {r['ratio_to_matmul']:.2f}x |")
        cg = gpu["compare_1e6"]
        lines += [
            "",
            f"`compare()` at N = M = {cg['n']:,}: {fmt_s(cg['time_s'])}, "
            f"{100 * cg['fraction_of_mm_throughput']:.3g}% of `torch.mm` throughput for the same shapes.",
        ]
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- #
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results.json"))
    parser.add_argument("--md", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--child-compare", nargs=3, metavar=("N", "D", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child_compare:
        n, d, device = int(args.child_compare[0]), int(args.child_compare[1]), args.child_compare[2]
        print(json.dumps(child_compare(n, d, device)))
        return 0

    quick = args.quick
    reps = args.repeats or (3 if quick else 15)
    results: dict[str, Any] = {"machine": machine(), "quick": quick}
    log(f"machine: {results['machine']['cpu']}, torch {torch.__version__}, {torch.get_num_threads()} threads")

    n1 = 512 if quick else 4096
    log(f"1. pairwise kernels vs matmul, N = {n1}")
    results["matmul_floor"] = bench_matmul_floor(n1, 64, reps)
    results["matmul_floor_1_thread"] = bench_matmul_floor(n1, 64, reps, threads=1)

    n2 = 256 if quick else 2048
    log(f"2. geoopt broadcast distance, N = {n2}")
    results["geoopt"] = bench_geoopt(n2, 64, 3 if quick else 7)

    n3 = 4096 if quick else 65536
    log(f"3. compare() at N = {n3} (subprocess)")
    results["compare_large"] = bench_compare(n3, 64, "cpu")

    ns = [1024, 2048, 4096] if quick else [1024, 2048, 4096, 8192, 16384, 32768, 65536]
    log("4. linear vs quadratic focused attention")
    results["linear"] = bench_linear(ns, 64, 3 if quick else 5, quadratic_max_bytes=(16 if quick else 1024) * MiB)

    if torch.cuda.is_available():
        log("5. GPU")
        results["gpu"] = {
            "matmul_floor": bench_matmul_floor(n1, 64, reps, "cuda"),
            "compare_1e6": bench_gpu_compare(10_000 if quick else 1_000_000, 64),
        }
    else:
        results["gpu"] = None

    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    Path(args.md).write_text(render(results))
    log(f"wrote {args.json} and {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
