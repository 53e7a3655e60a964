"""The GPU run, prepared as one script: correctness on the device, then the benchmark rows.

    python benchmarks/gpu.py                  # on a CUDA machine: checks, benchmarks, rewrites BENCHMARKS.md's GPU section
    python benchmarks/gpu.py --dry-run        # anywhere (CI): the same steps at tiny sizes on the CPU;
                                              # writes the section to a temporary file, never to BENCHMARKS.md

1. **Correctness on the device** (float32 and float64): every kind's ``attention_map`` against a
   float64 CPU reference of the same points (tolerance from the logits' size and the dtype's unit
   roundoff), and ``compare()`` streamed in small row blocks on the device against the statistics of
   the dense float64 maps.  Any failure stops the script with exit code 1 before anything is measured.
2. **Benchmarks** (float32, d = 64): ``torch.mm`` of the same shapes as the baseline (and its
   throughput in FLOP/s), ``lorentz.pairwise_sqdist`` and ``attention_map`` against it, ``compare()``
   of two kinds at N = M = 65,536 and at 1,000,000 (time, and the achieved fraction of the matmul
   throughput for the products it performs), and ``compare(rows=4096)`` at N = M = 1,000,000.
3. The GPU section (``## 5. GPU``) of the Markdown file is replaced by the measured rows, with the
   device named.  Sized to finish in well under 4 minutes on one modern GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypviz import attention, data, lorentz  # noqa: E402

FULL = {"check_n": 257, "kernel_n": 8192, "compare_n": 65536, "big_n": 1_000_000, "rows": 4096, "repeats": 5}
DRY = {"check_n": 33, "kernel_n": 256, "compare_n": 512, "big_n": 4096, "rows": 128, "repeats": 2}
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
    return lines


# --------------------------------------------------------------------------- #
# 2. benchmarks
# --------------------------------------------------------------------------- #
def bench(dev: torch.device, sizes: dict) -> dict:
    out: dict = {}
    n, reps = sizes["kernel_n"], sizes["repeats"]
    q = data.lifted_gaussian(n, D, 1.0, seed=1, dtype=torch.float32).to(dev)
    kk = data.lifted_gaussian(n, D, 1.0, seed=2, dtype=torch.float32).to(dev)
    qs, ks = q[:, 1:].contiguous(), kk[:, 1:].contiguous()
    t_mm = best_of(lambda: qs @ ks.T, reps, dev)
    out["mm"] = {"n": n, "time_s": t_mm, "flops": 2 * n * n * D / t_mm}
    out["kernels"] = {
        name: best_of(fn, reps, dev) / t_mm
        for name, fn in (
            ("lorentz.pairwise_sqdist", lambda: lorentz.pairwise_sqdist(q, kk)),
            ("attention.attention_map distance", lambda: attention.attention_map(q, kk, "distance")),
            ("attention.attention_map spatial", lambda: attention.attention_map(q, kk, "spatial")),
        )
    }
    flops_per_s = out["mm"]["flops"]
    for label, n_big, rows in (("compare", sizes["compare_n"], None), ("compare_big", sizes["big_n"], None),
                               ("compare_sampled", sizes["big_n"], sizes["rows"])):
        qb = data.lifted_gaussian(n_big, D, 1.0, seed=3, dtype=torch.float32).to(dev)
        kb = data.lifted_gaussian(n_big, D, 1.0, seed=4, dtype=torch.float32).to(dev)
        t = time.perf_counter()
        res = attention.compare(qb, kb, "spatial", "distance", device=dev, rows=rows, progress=False)
        sync(dev)
        el = time.perf_counter() - t
        n_rows = res.n_queries
        products = 2 * n_rows * n_big * (D + (D + 3))  # the two kinds' logit products
        out[label] = {"n": n_big, "rows": n_rows, "time_s": el, "fraction_of_mm": products / el / flops_per_s,
                      "mean_tv": res.mean_tv}
        del qb, kb, res
    return out


def section(device_name: str, checks: list[str], r: dict, dry: bool) -> str:
    def s(x: float) -> str:
        return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"

    lines = ["## 5. GPU", ""]
    if dry:
        lines += ["**Dry run** (`benchmarks/gpu.py --dry-run`): tiny sizes on the CPU, to show the script works;", ""]
    lines += [f"Device: {device_name}. Written by `python benchmarks/gpu.py`.", "", "Correctness on the device:", ""]
    lines += [f"* {c}" for c in checks]
    mm = r["mm"]
    lines += ["", f"`torch.mm` of (N x {D}) @ ({D} x N), N = {mm['n']:,}: {s(mm['time_s'])}, "
                  f"{mm['flops'] / 1e12:.3g} TFLOP/s (the baseline).", "",
              "| operation (same shape) | ratio to `torch.mm` |", "|---|---|"]
    lines += [f"| `{name}` | {ratio:.2f}x |" for name, ratio in r["kernels"].items()]
    lines += ["", "| `compare()` spatial vs distance | N = M | rows | time | fraction of `torch.mm` throughput |",
              "|---|---|---|---|---|"]
    for label, what in (("compare", "every row"), ("compare_big", "every row"), ("compare_sampled", "sampled (rows=)")):
        c = r[label]
        lines.append(f"| {what} | {c['n']:,} | {c['rows']:,} | {s(c['time_s'])} | {100 * c['fraction_of_mm']:.3g}% |")
    lines.append("")
    return "\n".join(lines)


def replace_section(md: Path, text: str) -> None:
    old = md.read_text(encoding="utf-8") if md.exists() else ""
    start = old.find("## 5. GPU")
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        nxt = old.find("\n## ", start + 1)
        new = old[:start] + text + ("" if nxt < 0 else old[nxt:])
    md.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU; write to --md (a temporary file by default)")
    parser.add_argument("--md", type=Path, default=None, help="Markdown file whose GPU section is rewritten (default BENCHMARKS.md)")
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
        name = f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    start = time.perf_counter()
    try:
        checks = check_correctness(dev, sizes["check_n"])
    except AssertionError as exc:
        print(f"gpu.py: correctness check failed: {exc}", file=sys.stderr)
        return 1
    results = bench(dev, sizes)
    replace_section(md, section(name, checks, results, args.dry_run))
    print(f"gpu.py: {len(checks)} checks passed, benchmarks written to {md} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
