"""The GPU run, prepared as one script: correctness on the device, then the benchmark rows.

    .venv/bin/python benchmarks/gpu.py            # on a CUDA machine: checks, benchmarks, rewrites BENCHMARKS.md's GPU section
    .venv/bin/python benchmarks/gpu.py --dry-run  # anywhere (CI): the same steps at tiny sizes on the CPU;
                                                  # writes the section to a temporary file, never to BENCHMARKS.md

1. **Correctness on the device** (float32 and float64): every kind's ``attention_map`` against a
   float64 CPU reference of the same points (tolerance from the logits' size and the dtype's unit
   roundoff), ``compare()`` streamed in small row blocks on the device against the statistics of
   the dense float64 maps, and ``exact_top_keys``'s top logits against float64 ``torch.topk``.  Any failure stops the
   script with exit code 1 before anything is measured.
2. **Benchmarks** (float32, d = 64): ``torch.mm`` as the baseline (and its throughput in FLOP/s),
   ``lorentz.pairwise_sqdist`` and ``attention_map`` against it; ``compare()`` of two kinds against
   the two dense ``attention_map`` calls it replaces at N = M = 16,384; ``compare()`` at N = M = 65,536
   and 1,000,000 and ``compare(rows=4096)`` at 1,000,000, each with the achieved fraction of the
   throughput of ``torch.mm`` of the same shape (one product: what spatial vs distance needs; the
   two-product figure of the general path next to it); ``distance_linear_attention`` (linear-time
   distance attention, 64 features) at N = M = 1,000,000 and its map's error on sampled rows; issue 30's exact
   top-key search (``exact_top_keys``, top 16), the kind ``distance_topk_attention`` and the exact streamed map at
   N = M = 65,536 (r^2/tau = 1.25 and 125).
3. The GPU section of the Markdown file (the heading ``## N. GPU``, and its row of the verdict
   table) is replaced by the measured rows, with the device named; ``benchmarks/report.py`` writes
   it.  Sized to finish in well under 4 minutes on one modern GPU.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

import torch

from hypviz import attention, data, lorentz

import report  # benchmarks/report.py: the script's own directory is on sys.path

ROOT = Path(__file__).resolve().parent.parent
FULL = {"check_n": 257, "kernel_n": 8192, "maps_n": 16384, "compare_n": 65536, "big_n": 1_000_000, "rows": 4096,
        "repeats": 5, "mm_out_bytes": 4 * 2**30}
DRY = {"check_n": 33, "kernel_n": 256, "maps_n": 256, "compare_n": 512, "big_n": 4096, "rows": 128, "repeats": 2,
       "mm_out_bytes": 2**20}
D = 64


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def best_of(fn, repeats: int, dev: torch.device) -> float:
    fn()  # warm-up
    sync(dev)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t)
    return min(times)


# --------------------------------------------------------------------------- #
# 1. correctness
# --------------------------------------------------------------------------- #
def check_correctness(dev: torch.device, n: int) -> list[str]:
    """Maps and streamed statistics on ``dev`` against float64 CPU references; returns one line per check."""
    lines = []
    q64 = data.lifted_gaussian(n, 16, 2.0, seed=11)
    k64 = data.lifted_gaussian(n + 7, 16, 2.0, seed=12)
    for dtype in (torch.float32, torch.float64):
        eps = torch.finfo(dtype).eps
        q, kk = lorentz.lift(q64[:, 1:].to(dtype)).to(dev), lorentz.lift(k64[:, 1:].to(dtype)).to(dev)
        for kind in attention.KINDS:
            ref = attention.attention_map(q64, k64, kind, temperature=4.0)
            got = attention.attention_map(q, kk, kind, temperature=4.0).double().cpu()
            # a row's weights move by at most ~ (logit error) x weight; logits here are O(10)
            tol = 256 * eps * 10 * float(ref.max())
            err = float((got - ref).abs().max())
            if not err <= tol:
                raise AssertionError(f"attention_map {kind} {dtype} on {dev}: max error {err:.3g} > {tol:.3g}")
            lines.append(f"attention_map {kind:<8} {str(dtype)[6:]:<7} on {dev.type}: max |error| <= {tol:.1e} (checked)")
        for a, b in (("spatial", "distance"), ("focused", "distance")):
            res = attention.compare(q, kk, a, b, temperature=4.0, device=dev, block_rows=5)
            pa = attention.attention_map(q64, k64, a, temperature=4.0)
            pb = attention.attention_map(q64, k64, b, temperature=4.0)
            tv = 0.5 * (pa - pb).abs().sum(-1)
            tol = 1e3 * eps
            err = float((res.tv.double().cpu() - tv).abs().max())
            if not err <= tol:
                raise AssertionError(f"compare {a} vs {b} {dtype} on {dev}: TV error {err:.3g} > {tol:.3g}")
            lines.append(f"compare {a} vs {b} {str(dtype)[6:]:<7} streamed on {dev.type}: TV error <= {tol:.1e} (checked)")
        # linear-time distance attention: the same features on the device as in float64 on the CPU
        ref = attention.distance_linear_attention(q64, k64, k64, temperature=4.0, features=64)
        got = attention.distance_linear_attention(q, kk, kk, temperature=4.0, features=64).double().cpu()
        tol = 1e3 * eps * float(ref.abs().max())
        err = float((got[..., 1:] - ref[..., 1:]).abs().max())
        if not err <= tol:
            raise AssertionError(f"distance_linear_attention {dtype} on {dev}: output error {err:.3g} > {tol:.3g}")
        lines.append(f"distance_linear_attention {str(dtype)[6:]:<7} on {dev.type}: output error <= {tol:.1e} (checked)")
        # the exact top-key search (issue 30): the logits of the keys found on the device are the float64 top logits
        ref_v = torch.topk(-0.5 * lorentz.pairwise_sqdist(q64, k64), 8, dim=-1).values
        found = attention.exact_top_keys(q, kk, 8, block_rows=5)
        tol = 256 * eps * 10 * float(ref_v.abs().max() + 1)
        err = float((found.logits.double().cpu() - ref_v).abs().max())
        if not err <= tol:
            raise AssertionError(f"exact_top_keys {dtype} on {dev}: top logits error {err:.3g} > {tol:.3g}")
        lines.append(f"exact_top_keys {str(dtype)[6:]:<7} on {dev.type}: top-8 logits error <= {tol:.1e} (checked)")
    return lines


# --------------------------------------------------------------------------- #
# 2. benchmarks
# --------------------------------------------------------------------------- #
def mm_time(a: torch.Tensor, b: torch.Tensor, repeats: int, dev: torch.device, max_out_bytes: int) -> float:
    """Time of ``a @ b^T`` ((R x d) @ (d x M)) into a preallocated output, by row blocks that fit, scaled to all ``R``."""
    r, m = a.shape[0], b.shape[0]
    rows = max(1, min(r, max_out_bytes // (a.element_size() * m)))
    out = torch.empty(rows, m, dtype=a.dtype, device=dev)
    blk, bt = a[:rows].contiguous(), b.contiguous().T
    return best_of(lambda: torch.mm(blk, bt, out=out), repeats, dev) * r / rows


def _bench_kernels(dev: torch.device, n: int, reps: int) -> tuple[dict, dict]:
    q = data.lifted_gaussian(n, D, 1.0, seed=1, dtype=torch.float32).to(dev)
    kk = data.lifted_gaussian(n, D, 1.0, seed=2, dtype=torch.float32).to(dev)
    qs, ks = q[:, 1:].contiguous(), kk[:, 1:].contiguous()
    t_mm = best_of(lambda: qs @ ks.T, reps, dev)
    mm = {"n": n, "d": D, "time_s": t_mm, "flops": 2 * n * n * D / t_mm}
    kernels = {
        name: best_of(fn, reps, dev) / t_mm
        for name, fn in (
            ("lorentz.pairwise_sqdist", lambda: lorentz.pairwise_sqdist(q, kk)),
            ("attention.attention_map distance", lambda: attention.attention_map(q, kk, "distance")),
            ("attention.attention_map spatial", lambda: attention.attention_map(q, kk, "spatial")),
        )
    }
    return mm, kernels


def _bench_vs_maps(dev: torch.device, n: int, reps: int, mm_out_bytes: int) -> dict:
    """compare() against the two dense maps it replaces (section 3's floor, on the device)."""
    q = data.lifted_gaussian(n, D, 1.0, seed=5, dtype=torch.float32).to(dev)
    kk = data.lifted_gaussian(n, D, 1.0, seed=6, dtype=torch.float32).to(dev)
    t_c = best_of(lambda: attention.compare(q, kk, "spatial", "distance", device=dev, spearman=False, progress=False), reps, dev)
    t_m = best_of(lambda: (attention.attention_map(q, kk, "spatial"), attention.attention_map(q, kk, "distance")), reps, dev)
    t_1 = mm_time(q[:, 1:], kk[:, 1:], reps, dev, mm_out_bytes)
    return {"n": n, "compare_s": t_c, "maps_s": t_m, "mm_s": t_1, "ratio": t_c / t_m}


def _bench_compare(dev: torch.device, n: int, rows: int | None, reps: int, mm_out_bytes: int) -> dict:
    qb = data.lifted_gaussian(n, D, 1.0, seed=3, dtype=torch.float32).to(dev)
    kb = data.lifted_gaussian(n, D, 1.0, seed=4, dtype=torch.float32).to(dev)
    t = time.perf_counter()
    res = attention.compare(qb, kb, "spatial", "distance", device=dev, rows=rows, spearman=False, progress=False)
    sync(dev)
    el = time.perf_counter() - t
    qr = qb if res.row_index is None else qb.index_select(0, res.row_index.to(dev))
    t_mm = mm_time(qr[:, 1:], kb[:, 1:], reps, dev, mm_out_bytes)
    return {"n": n, "rows": res.n_queries, "time_s": el, "mm_time_s": t_mm, "fraction_of_mm": t_mm / el,
            "fraction_of_mm_2": 2 * t_mm / el, "mean_tv": res.mean_tv, "mean_tv_uniform_b": res.mean_tv_uniform_b}


def _bench_linear_distance(dev: torch.device, n: int, rows: int, reps: int) -> dict:
    """distance_linear_attention at N = M = n (features=64, mean norm 1, tau = 8), and its map's error on sampled rows."""
    q, kb, v = (data.lifted_gaussian(n, D, 1.0, seed=s, dtype=torch.float32).to(dev) for s in (12, 13, 14))
    t = best_of(lambda: attention.distance_linear_attention(q, kb, v, temperature=8.0, features=64), reps, dev)
    res = attention.compare(q, kb, "distance_rf", "distance", temperature=8.0, features=64, rows=rows, device=dev,
                            spearman=False, progress=False)
    return {"n": n, "features": 64, "time_s": t, "rows": res.n_queries, "mean_tv": res.mean_tv,
            "mean_tv_uniform_b": res.mean_tv_uniform_b, "ratio": res.mean_tv / res.mean_tv_uniform_b}


def _streamed_map(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, block: int) -> None:
    """The exact distance attention in blocks of ``block`` rows: product, softmax, values."""
    for i in range(0, a.shape[0], block):
        torch.softmax(a[i : i + block] @ b.T, dim=-1) @ v


def _bench_topk_tail(dev: torch.device, n: int, reps: int, rows: int) -> dict:
    """Issue 30 on the device at N = M = n (tau = 8, r^2/tau = 1.25 and 125): the exact top-16 search, the kind
    ``distance_topk_attention`` and the exact streamed distance attention (blocks of rows: product, softmax, values)."""
    out = []
    for sharp in (1.25, 125.0):
        r = (sharp * 8.0) ** 0.5
        q, kb, v = (data.lifted_gaussian(n, D, r, seed=s, dtype=torch.float32).to(dev) for s in (15, 16, 17))
        a, b = lorentz.distance_operands(q, kb, k=1.0, temperature=8.0)
        block = max(1, 2**31 // (4 * n))
        t_search = best_of(functools.partial(attention.exact_top_keys, q, kb, 16), reps, dev)
        t_exact = best_of(functools.partial(_streamed_map, a, b, v, block), reps, dev)
        t_kind = best_of(functools.partial(attention.distance_topk_attention, q, kb, v, temperature=8.0), 1, dev)
        res = attention.distance_topk_attention(q, kb, v, temperature=8.0)
        assert res.output is not None  # values were given
        out.append({"n": n, "sharpness": sharp, "search_s": t_search, "exact_map_s": t_exact, "kind_s": t_kind,
                    "search": res.search, "recall": res.recall, "rows_met": float(res.met.double().mean()),
                    "rows_estimated": float(res.estimated.double().mean()),
                    "finite": bool(torch.isfinite(res.output).all())})
    return {"rows": out}


def bench(dev: torch.device, sizes: dict) -> dict:
    reps, mm_out = sizes["repeats"], sizes["mm_out_bytes"]
    out: dict = {}
    out["mm"], out["kernels"] = _bench_kernels(dev, sizes["kernel_n"], reps)
    out["vs_maps"] = _bench_vs_maps(dev, sizes["maps_n"], reps, mm_out)
    for label, n_big, rows in (("compare", sizes["compare_n"], None), ("compare_big", sizes["big_n"], None),
                               ("compare_sampled", sizes["big_n"], sizes["rows"])):
        out[label] = _bench_compare(dev, n_big, rows, reps, mm_out)
    out["linear_distance"] = _bench_linear_distance(dev, sizes["big_n"], sizes["rows"], reps)
    out["topk_tail"] = _bench_topk_tail(dev, sizes["compare_n"], reps, sizes["rows"])
    return out


def device_name(dev: torch.device) -> str:
    return f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes on the CPU; write to --md (a temporary file by default)")
    parser.add_argument("--md", type=Path, default=None,
                        help="Markdown file whose GPU section is rewritten (default BENCHMARKS.md)")
    args = parser.parse_args(argv)
    if args.dry_run:
        dev, sizes = torch.device("cpu"), DRY
        md = args.md or Path(tempfile.mkdtemp(prefix="hypviz-gpu-dry-")) / "BENCHMARKS.md"
        name = f"CPU (dry run), torch {torch.__version__}"
    else:
        if not torch.cuda.is_available():
            print("gpu.py: no CUDA device here (torch.cuda.is_available() is False); use --dry-run", file=sys.stderr)
            return 2
        dev, sizes, md = torch.device("cuda"), FULL, args.md or ROOT / "BENCHMARKS.md"
        name = device_name(dev)
    start = time.perf_counter()
    try:
        checks = check_correctness(dev, sizes["check_n"])
    except AssertionError as exc:
        print(f"gpu.py: correctness check failed: {exc}", file=sys.stderr)
        return 1
    results = bench(dev, sizes)
    sec = report.gpu_section({"device_name": name, "checks": checks, "results": results, "dry": args.dry_run})
    old = md.read_text(encoding="utf-8") if md.exists() else ""
    md.write_text(report.replace_gpu_section(old, sec), encoding="utf-8")
    print(f"gpu.py: {len(checks)} checks passed, benchmarks written to {md} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
