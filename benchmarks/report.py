"""BENCHMARKS.md from the results of ``benchmarks/run.py``: pure functions, no measuring.

    python benchmarks/report.py benchmarks/results.json BENCHMARKS.md    # re-render without measuring

:func:`render` turns the results dict that ``run.py`` writes to ``benchmarks/results.json`` into the
whole document; :func:`gpu_section` and :func:`replace_gpu_section` rewrite only its GPU section
(what ``benchmarks/gpu.py`` does).  Every section opens with its verdict line -- ``met``,
``NOT met``, ``not measured`` (its results are missing) or ``no floor`` -- giving the ratio or the
measured figure first and then the floor; the same lines head the document as one table.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

GiB = 2**30
MiB = 2**20

MET, NOT_MET, NOT_MEASURED, NO_FLOOR = "met", "NOT met", "not measured", "no floor"
GPU_NUMBER = 7
GPU_HEADING = re.compile(r"^## (?:\d+\. )?GPU\b.*$", re.MULTILINE)
GPU_ROW = re.compile(r"^\| \d+\. GPU \|.*$", re.MULTILINE)


# --------------------------------------------------------------------------- #
# formatting
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


def fmt_pct(f: float | None) -> str:
    return "not run" if f is None else f"{100 * f:.3g}%"


def word(ok: bool | None) -> str:
    """``met`` / ``NOT met`` / ``not measured`` (``None``)."""
    return NOT_MEASURED if ok is None else (MET if ok else NOT_MET)


def _all(*oks: bool | None) -> bool | None:
    return None if any(o is None for o in oks) else all(oks)


@dataclass
class Section:
    """One section: its verdict (first), the measured figure it rests on, the floor, then the details."""

    number: int
    title: str
    short: str  # its name in the verdict table
    verdict: str  # MET, NOT_MET, NOT_MEASURED or NO_FLOOR
    result: str  # the ratio or the measured figure, first
    floor: str
    body: list[str] = field(default_factory=list)

    def verdict_line(self) -> str:
        return f"**{self.verdict}**: {self.result}. Floor: {self.floor}."

    def row(self) -> str:
        return f"| {self.number}. {self.short} | {self.result} | {self.floor} | **{self.verdict}** |"

    def lines(self) -> list[str]:
        return [f"## {self.number}. {self.title}", "", self.verdict_line(), ""] + self.body


def _missing(number: int, title: str, short: str, floor: str, why: str) -> Section:
    return Section(number, title, short, NOT_MEASURED, why, floor, [])


# --------------------------------------------------------------------------- #
# the sections
# --------------------------------------------------------------------------- #
def _kernel_table(mt: dict[str, Any]) -> list[str]:
    lines = [
        f"**{mt['threads']} thread{'s' if mt['threads'] > 1 else ''}**",
        "",
        "| operation | median | min | ratio to matmul (median) | ratio (min) | floor |",
        "|---|---|---|---|---|---|",
    ]
    base_min = mt["results"]["matmul q_s @ k_s^T"]["min_s"]
    for name, r in mt["results"].items():
        v = "(baseline)" if name.startswith("matmul") else word(r["ratio_to_matmul"] <= mt["floor_ratio"])
        lines.append(
            f"| `{name}` | {fmt_s(r['median_s'])} | {fmt_s(r['min_s'])} | {r['ratio_to_matmul']:.2f}x | "
            f"{r['min_s'] / base_min:.2f}x | {v} |"
        )
    return lines + [""]


def _kernel_worst(mt: dict[str, Any]) -> tuple[str, float, float, bool]:
    base_min = mt["results"]["matmul q_s @ k_s^T"]["min_s"]
    worst = max((n for n in mt["results"] if not n.startswith("matmul")), key=lambda n: mt["results"][n]["ratio_to_matmul"])
    r = mt["results"][worst]
    ok = all(v["ratio_to_matmul"] <= mt["floor_ratio"] for n, v in mt["results"].items() if not n.startswith("matmul"))
    return worst, r["ratio_to_matmul"], r["min_s"] / base_min, ok


def section_kernels(results: dict[str, Any]) -> Section:
    title, short, floor = "Pairwise kernels against a bare matmul (CPU)", "pairwise kernels vs matmul", "at most 2x the matmul"
    mm = results.get("matmul_floor")
    if mm is None:
        return _missing(1, title, short, floor, "not in these results")
    worst, ratio, ratio_min, ok = _kernel_worst(mm)
    result = f"largest ratio {ratio:.2f}x (`{worst}`, medians; {ratio_min:.2f}x by minima)"
    one = results.get("matmul_floor_1_thread")
    if one is not None:
        w1, r1, _, ok1 = _kernel_worst(one)
        result += f"; single-threaded {r1:.2f}x ({word(ok1)})"
    body = [
        f"N = M = {mm['n']:,}. Floor: every operation at most {mm['floor_ratio']:g}x the time of `q_s @ k_s^T` of the same",
        f"shape, by medians of {mm['results']['matmul q_s @ k_s^T']['repeats']} interleaved rounds, with torch's default",
        "thread count (the verdict) and again single-threaded (a busy shared CPU stalls multi-threaded element-wise",
        "passes more than one big matmul; one thread shows the work itself).",
        "",
    ]
    body += _kernel_table(mm)
    if one is not None:
        body += _kernel_table(one)
    body += [
        "`attention.scores`/`attention_map` build the logits with **one** matrix product of augmented operands",
        "(identity 1 with the time coordinate shifted by the origin's: `-1/2 |q - κ|^2_L = q_s.κ_s - u_q u_κ -",
        "sqrt(k)(u_q + u_κ)`, `u = |x_s|^2 / (x_t + sqrt(k))`, no cancellation beyond that of identity 3), then",
        "the softmax overwrites the logits in place (torch's fused row kernel): no second N x M array.",
        "",
    ]
    return Section(1, title.replace("(CPU)", f"(N = M = {mm['n']:,}, CPU)"), short, word(ok), result, floor, body)


def section_geoopt(results: dict[str, Any]) -> Section:
    title, short, floor = "Against geoopt's broadcast distance (CPU)", "vs geoopt's broadcast distance", "at least 50x faster"
    g = results.get("geoopt")
    if g is None:
        return _missing(2, title, short, floor, "geoopt not installed or not run")
    base_name = "geoopt Lorentz.dist(x[:, None], y[None])"
    gmin = g["results"][base_name]["min_s"]
    ours = {n: r for n, r in g["results"].items() if n != base_name}
    slowest = min(ours, key=lambda n: ours[n]["speedup_vs_geoopt"])
    ok = all(r["speedup_vs_geoopt"] >= g["floor_speedup"] for r in ours.values())
    result = (
        f"smallest speed-up {ours[slowest]['speedup_vs_geoopt']:.0f}x (`{slowest}`, medians; "
        f"{gmin / ours[slowest]['min_s']:.0f}x by minima)"
    )
    body = [
        f"N = M = {g['n']:,}. Floor: at least {g['floor_speedup']:g}x faster than `geoopt.Lorentz().dist(x[:, None], y[None])`,",
        f"which materialises N x N x (d + 1) intermediates ({fmt_b(g['geoopt_intermediate_bytes'])} each), by medians of",
        f"{g['results'][base_name]['repeats']} interleaved rounds.",
        "",
        "| operation | median | min | speed-up vs geoopt (medians) | speed-up (min) | floor |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in g["results"].items():
        v = "(baseline)" if name == base_name else word(r["speedup_vs_geoopt"] >= g["floor_speedup"])
        body.append(
            f"| `{name}` | {fmt_s(r['median_s'])} | {fmt_s(r['min_s'])} | {r['speedup_vs_geoopt']:.0f}x | "
            f"{gmin / r['min_s']:.0f}x | {v} |"
        )
    body += [
        "",
        "Agreement (float64): max |geoopt dist - 2 asinh(sqrt(pairwise_sqdist) / 2)| = "
        f"{g['max_abs_dist_difference_float64_ref']:.2g}. geoopt computes the distance (arcosh), ours the",
        "squared Lorentzian distance or the whole softmax map; the conversion is one element-wise pass.",
        "",
    ]
    return Section(2, title.replace("(CPU)", f"(N = M = {g['n']:,}, CPU)"), short, word(ok), result, floor, body)


def _result_rows(summary: dict[str, Any]) -> list[str]:
    """The comparison's own result next to its baseline (the TV of the reference map from the uniform row)."""
    rows = [
        f"| result: mean TV(spatial, distance) / baseline mean TV(distance, uniform) | "
        f"{summary['mean_tv']:.3g} / {summary['mean_tv_uniform_b']:.3g} (verdict: {summary['verdict']}) |",
    ]
    ci = summary.get("ci95")
    if ci:
        lo, hi = ci["tv"]
        rows.append(f"| result: 95% confidence interval of the mean TV over all rows | [{lo:.3g}, {hi:.3g}] |")
    return rows


def section_vs_maps(results: dict[str, Any]) -> Section:
    title = "`compare()` of two kinds against the two dense `attention_map` calls it replaces (CPU)"
    short, floor = "`compare()` vs two dense maps", "at most 1.0x the two `attention_map` calls"
    c = results.get("compare_vs_maps")
    if c is None:
        return _missing(3, title, short, floor, "not in these results")
    ok = c["ratio_median"] <= c["floor_ratio"]
    result = (
        f"`compare()` takes {c['ratio_median']:.2f}x the time of the two calls (medians; {c['ratio_min']:.2f}x by minima); "
        f"{fmt_pct(c['fraction_of_mm'])} of the matmul throughput ({fmt_pct(c['fraction_of_mm_2'])} counting two products)"
    )
    r = c["results"]
    names = c["names"]
    body = [
        *_measured_on(c),
        f"N = M = {c['n']:,}, d = {c['d']}, float32, {c['threads']} threads. `compare(q, κ, \"spatial\", "
        "\"distance\")` (one matrix",
        "product per row block; the distance map is a rank-one update of the spatial one, statistics fused) against",
        "`attention_map(q, κ, \"spatial\")` and `attention_map(q, κ, \"distance\")` (the two dense maps a comparison",
        "would otherwise build, both held), and one `torch.mm` of (N x d) @ (d x M) into a preallocated output",
        f"(the one product `compare()` needs). Median and minimum of {r[names['compare']]['repeats']} interleaved rounds",
        "(each round runs every contender once, after a warm-up round). `compare()` runs with `spearman=False`,",
        f"its default for M > 4096{' (set explicitly: at this M the default would sort every row)' if c['m'] <= 4096 else ''}.",
        "",
        "| contender | median | min | ratio to `compare()` (median) | ratio (min) |",
        "|---|---|---|---|---|",
    ]
    cm, cmin = r[names["compare"]]["median_s"], r[names["compare"]]["min_s"]
    for name, t in r.items():
        body.append(
            f"| `{name}` | {fmt_s(t['median_s'])} | {fmt_s(t['min_s'])} | {t['median_s'] / cm:.2f}x | {t['min_s'] / cmin:.2f}x |"
        )
    body += [
        "",
        "| quantity | value |",
        "|---|---|",
        f"| ratio `compare()` / two `attention_map` calls (medians; minima) | {c['ratio_median']:.2f}x; {c['ratio_min']:.2f}x |",
        f"| fraction of matmul throughput: time of one `torch.mm` / time of `compare()` | {fmt_pct(c['fraction_of_mm'])} |",
        f"| the same counting two products (the general path, e.g. focused vs distance) | {fmt_pct(c['fraction_of_mm_2'])} |",
        f"| `torch.mm` throughput at this shape | {c['mm_flops'] / 1e9:.3g} GFLOP/s |",
        f"| agreement: max abs difference of the per-row TV, `compare()` vs the dense maps | {c['max_abs_tv_difference']:.2g} |",
    ]
    body += _result_rows(c["summary"]) + [""]
    return Section(3, title.replace("(CPU)", f"(N = M = {c['n']:,}, CPU)"), short, word(ok), result, floor, body)


def _memory_rows(c: dict[str, Any]) -> list[str]:
    return [
        f"| peak extra memory (VmHWM) | {fmt_b(c['peak_extra_rss_bytes_hwm'])} |",
        f"| peak extra memory (sampled VmRSS) | {fmt_b(c['peak_extra_rss_bytes_sampled'])} |",
        f"| inputs (queries + keys) | {fmt_b(c['inputs_bytes'])} |",
        f"| row blocks | {c['n_blocks']} blocks of {c['block_rows']} rows (automatic) |",
    ]


def _mm_rows(c: dict[str, Any]) -> list[str]:
    mm = c.get("mm")
    if mm is None:
        return ["| fraction of matmul throughput | not measured in this run |"]
    how = (
        f"the full (N x d) @ (d x M) product, median of {mm['repeats']}"
        if mm["scale"] == 1
        else f"({mm['block_rows']:,} x d) @ (d x {c['m']:,}) timed (median of {mm['repeats']}) and scaled by "
        f"{mm['scale']:g}: the full product's output would take {fmt_b(mm['full_output_bytes'])}"
    )
    return [
        f"| `torch.mm` of the same shape, in the same process | {fmt_s(mm['time_s'])} ({how}) |",
        f"| fraction of matmul throughput: time of one `torch.mm` / time of `compare()` | {fmt_pct(c['fraction_of_mm'])} |",
        f"| the same counting two products (the general path) | {fmt_pct(c['fraction_of_mm_2'])} |",
    ]


def _measured_on(c: dict[str, Any]) -> list[str]:
    """A section measured in its own run (``run.py --only compare``): where, when and under what load."""
    m = c.get("machine")
    if m is None:
        return []
    return [
        f"Measured separately (`python benchmarks/run.py --only compare`: sections 3, 4 and 5 in one run) on "
        f"**{machine_name(m)}**, torch {m.get('torch')} with {m.get('torch_threads')} threads ({m.get('cpu_capability')}), "
        f"{m.get('date_utc')} UTC, 1/5/15-minute load average {m.get('load_average_at_start')} at its start.",
        "",
    ]


def _ratio_rows(c: dict[str, Any], ratio: float | None, ok: bool | None) -> list[str]:
    if c.get("floor_ratio_mm") is None:
        return []
    value = "not measured" if ratio is None else f"{ratio:.2f}x: {word(ok)}"
    return ["| ratio: time of `compare()` / time of the same-shape `torch.mm` (floor at most "
            f"{c['floor_ratio_mm']:g}x) | {value} |"]


def _throughput(c: dict[str, Any]) -> str:
    if c.get("fraction_of_mm") is None:
        return ""
    return f"; {fmt_pct(c['fraction_of_mm'])} of the matmul throughput ({fmt_pct(c['fraction_of_mm_2'])} counting two products)"


def _mm_ratio(c: dict[str, Any]) -> tuple[float | None, bool | None, str, str]:
    """``compare()``'s time over the same-shape matmul's, its verdict, the result's leading words and the floor's (empty
    without a floor)."""
    cap = c.get("floor_ratio_mm")
    if cap is None:
        return None, None, "", ""
    if c.get("mm") is None:
        return None, None, "ratio to the same-shape matmul not measured; ", f"at most {cap:g}x the same-shape `torch.mm`, "
    ratio = c["time_s"] / c["mm"]["time_s"]
    ok = ratio <= cap
    return ratio, ok, f"{ratio:.2f}x the same-shape matmul ({word(ok)}); ", f"at most {cap:g}x the same-shape `torch.mm`, "


def _peak(c: dict[str, Any]) -> float:
    return c["peak_extra_rss_bytes_hwm"] if c["peak_extra_rss_bytes_hwm"] is not None else c["peak_extra_rss_bytes_sampled"]


_MEMORY_HOW = [
    "Run once in a fresh subprocess. Peak extra memory = peak resident set during `compare()` minus the",
    "resident set just before it (inputs already built, one small warm-up call done): the kernel's VmHWM",
    "high-water mark, reset through `/proc/self/clear_refs` right before the call, cross-checked by",
    "sampling VmRSS every 10 ms. The same-shape `torch.mm` is timed afterwards in the same process.",
]


def section_large(results: dict[str, Any]) -> Section:
    title, short = "`compare()` at large N: time, memory, matmul throughput", "`compare()` at large N"
    floor = "at most 25 s on 2 cores and at most 1 GiB extra memory"
    c = results.get("compare_large")
    if c is None:
        return _missing(4, title, short, floor, "not in these results")
    c = {"floor_time_s": 25.0, "floor_bytes": GiB, "fraction_of_mm": None, "fraction_of_mm_2": None, **c}
    floor = f"at most {c['floor_time_s']:g} s on 2 cores and at most {fmt_b(c['floor_bytes'])} extra memory"
    ok_t, ok_m = c["time_s"] <= c["floor_time_s"], _peak(c) <= c["floor_bytes"]
    ratio, ok_r, lead, floor_r = _mm_ratio(c)
    floor = floor_r + floor
    result = lead + f"{fmt_s(c['time_s'])} ({word(ok_t)}), peak extra memory {fmt_b(_peak(c))} ({word(ok_m)})" + _throughput(c)
    body = [
        *_measured_on(c),
        f"N = M = {c['n']:,}, d = {c['d']}, `compare(q, κ, \"spatial\", \"distance\")` on {c['device']} with "
        f"{c.get('threads', '?')} threads.",
        *_MEMORY_HOW,
        "",
        "| quantity | value |",
        "|---|---|",
        f"| time | {fmt_s(c['time_s'])} (one run): {word(ok_t)} (floor {c['floor_time_s']:g} s) |",
        *_mm_rows(c),
        *_ratio_rows(c, ratio, ok_r),
        *_memory_rows(c),
        f"| memory floor: at most {fmt_b(c['floor_bytes'])} | {word(ok_m)} |",
        f"| one dense float32 N x N map, for scale | {fmt_b(c['dense_map_bytes'])} |",
        *_result_rows(c["summary"]),
        f"| result: bound met on every row | {c['all_bounds_met']} |",
        "",
    ]
    oks = (ok_t, ok_m) if c.get("floor_ratio_mm") is None else (ok_t, ok_m, ok_r)
    return Section(4, f"`compare()` at N = M = {c['n']:,}: time, memory, matmul throughput ({c['device']})", short,
                   word(_all(*oks)), result, floor, body)


def section_sampled(results: dict[str, Any]) -> Section:
    title, short = "Sampled `compare(rows=...)` at very large N", "sampled `compare()`"
    floor = "under 60 s and under 1 GiB extra memory"
    c = results.get("compare_sampled")
    if c is None:
        return _missing(5, title, short, floor, "not in these results")
    floor = f"under {c['floor_time_s']:g} s and under {fmt_b(c['floor_bytes'])} extra memory"
    ok_t, ok_m = c["time_s"] < c["floor_time_s"], _peak(c) < c["floor_bytes"]
    ratio, ok_r, lead, floor_r = _mm_ratio(c)
    floor = floor_r + floor
    result = lead + f"{fmt_s(c['time_s'])} ({word(ok_t)}), peak extra memory {fmt_b(_peak(c))} ({word(ok_m)})" + _throughput(c)
    body = [
        *_measured_on(c),
        f"N = M = {c['n']:,}, d = {c['d']}, float32: `compare(q, κ, rows={c['rows']}, seed=0)` (spatial vs distance,",
        f"exact statistics on {c['rows']:,} query rows drawn uniformly, against all {c['m']:,} keys) on {c['device']} with "
        f"{c.get('threads', '?')} threads.",
        f"The inputs ({fmt_b(c['inputs_bytes'])}) are made inside the subprocess.",
        *_MEMORY_HOW,
        "",
        "| quantity | value |",
        "|---|---|",
        f"| time | {fmt_s(c['time_s'])} (one run): {word(ok_t)} (floor under {c['floor_time_s']:g} s) |",
        *_mm_rows(c),
        *_ratio_rows(c, ratio, ok_r),
        *_memory_rows(c),
        f"| memory floor: under {fmt_b(c['floor_bytes'])} | {word(ok_m)} |",
        *_result_rows(c["summary"]),
        "",
    ]
    oks = (ok_t, ok_m) if c.get("floor_ratio_mm") is None else (ok_t, ok_m, ok_r)
    return Section(5, f"Sampled `compare(rows={c['rows']})` at N = M = {c['n']:,} ({c['device']})", short,
                   word(_all(*oks)), result, floor, body)


def section_linear(results: dict[str, Any]) -> Section:
    title = "`focused_linear_attention` against the quadratic form (CPU)"
    short, floor = "linear vs quadratic focused attention", "none set, a measurement"
    lin = results.get("linear")
    if lin is None:
        return _missing(6, title, short, floor, "not in these results")
    both = [r for r in lin["rows"] if r["quadratic_time_s"] is not None]
    if both:
        r = both[-1]
        worst = max(x["max_relative_difference"] for x in both)
        result = (
            f"speed-up of the linear form over the quadratic one {r['quadratic_time_s'] / r['linear_time_s']:.3g}x at "
            f"N = {r['n']:,} (the largest N where both ran), max relative difference {worst:.2g}"
        )
    else:
        result = "the quadratic form ran at no N"
    body = [
        f"d = {lin['d']}. Linear: `phi(Q) (phi(K)^T V_s) / normaliser`; quadratic: `focused_linear_map(Q, K) @ V_s` (forms",
        "the N x N implicit map). Time: median of interleaved repeats. Memory: peak total size of the tensors",
        "allocated and alive at once (`attention.peak_tensor_memory`, inputs excluded). The quadratic form",
        f"is run only where its N x N map takes at most {fmt_b(lin['quadratic_max_bytes'])}: the machine is shared",
        "(the map alone is 4 GiB at N = 32,768 and 16 GiB at N = 65,536).",
        "",
        "| N | linear time | quadratic time | speed-up | linear peak memory | quadratic peak memory | max rel. difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in lin["rows"]:
        if r["quadratic_time_s"] is None:
            body.append(
                f"| {r['n']:,} | {fmt_s(r['linear_time_s'])} | not run ({r['quadratic_skipped']}) | | "
                f"{fmt_b(r['linear_peak_tensor_bytes'])} | not run | |"
            )
        else:
            body.append(
                f"| {r['n']:,} | {fmt_s(r['linear_time_s'])} | {fmt_s(r['quadratic_time_s'])} | "
                f"{r['quadratic_time_s'] / r['linear_time_s']:.3g}x | {fmt_b(r['linear_peak_tensor_bytes'])} | "
                f"{fmt_b(r['quadratic_peak_tensor_bytes'])} | {r['max_relative_difference']:.2g} |"
            )
    body.append("")
    return Section(6, title, short, NO_FLOOR, result, floor, body)


# --------------------------------------------------------------------------- #
# 8. linear-time distance attention
# --------------------------------------------------------------------------- #
LINEAR_DISTANCE_NUMBER = 8
LINEAR_DISTANCE_FLOOR = ("mean row TV to the exact distance map at most 0.25x the exact map's TV from uniform (sampled rows), "
                         "at every N")


def section_linear_distance(results: dict[str, Any]) -> Section:
    title = "Linear-time distance attention at large N: time, memory, error against the exact map"
    short = "linear distance attention"
    ld = results.get("linear_distance")
    if not ld:
        return _missing(LINEAR_DISTANCE_NUMBER, title, short, LINEAR_DISTANCE_FLOOR,
                        "no results (run `benchmarks/run.py --only linear_distance`)")
    rows = ld["rows"]
    ok = all(r["ratio"] <= ld["floor_ratio"] for r in rows)
    big = rows[-1]
    result = (
        f"at N = M = {big['n']:,}: {fmt_s(big['time_s'])}, peak extra memory {fmt_b(_peak(big))}, "
        f"TV / baseline {big['ratio']:.3g} on {big['rows']} sampled rows; worst TV / baseline over N "
        f"{max(r['ratio'] for r in rows):.3g}"
    )
    body = [
        f"`attention.distance_linear_attention(q, k, v, temperature={ld['temperature']:g}, features={ld['features']})`: "
        f"positive random features of `Jq/sqrt(tau)` and `kappa/sqrt(tau)` (orthogonal, with the first-order control "
        f"variate), float32, d = {ld['d']}, lifted Gaussian points of mean norm {ld['mean_norm']:g} "
        f"(r^2/tau = {ld['mean_norm'] ** 2 / ld['temperature']:.3g}), N = M, each size in a fresh subprocess. "
        "Peak extra memory: VmHWM reset before the call (cross-checked by sampling VmRSS every 10 ms), inputs excluded, "
        "the output included (N x (d + 1) float32: "
        f"{fmt_b(4 * big['n'] * (ld['d'] + 1))} at N = {big['n']:,}; the rest is blocks of features). "
        f"Error: `compare(q, k, \"distance_rf\", \"distance\", rows={ld['rows_sampled']}, seed=0)`, the same features "
        "against the exact distance map on sampled query rows, all keys, after the timed call.",
        "",
        "| N = M | time | peak extra memory | the dense N x N float32 map would take | mean row TV (sampled rows) | TV(exact, U) "
        "| TV / baseline | top-1 agreement | error measured in |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        body.append(
            f"| {r['n']:,} | {fmt_s(r['time_s'])} | {fmt_b(_peak(r))} | {fmt_b(r['dense_map_bytes'])} | {r['mean_tv']:.3g} | "
            f"{r['mean_tv_uniform_b']:.3g} | {r['ratio']:.3g} ({word(r['ratio'] <= ld['floor_ratio'])}) | "
            f"{r['top1_agreement']:.3g} | {fmt_s(r['error_time_s'])} |"
        )
    body += [
        "",
        "GPU: not measured (no GPU available in this session); `benchmarks/gpu.py` runs this attention on the device too.",
        "Notebook 10 measures where the bar holds along r^2/tau (near-uniform maps) and where it does not (sharp maps).",
        "",
    ]
    return Section(LINEAR_DISTANCE_NUMBER, title, short, word(ok), result, LINEAR_DISTANCE_FLOOR, body)


TOPK_TAIL_NUMBER = 9
TOPK_TAIL_FLOOR = ("at the largest N: r^2/tau <= 1.25, mean row TV at most 0.02x the exact map's TV from uniform in at most "
                   "0.1x the exact streamed map's time; r^2/tau = 125, at most 0.1x with the search's recall stated; "
                   "r^2/tau = 12.5, at most 0.1x or every sampled row off the 0.25x bar flagged by the result")


def _topk_ok(r: dict[str, Any], tt: dict[str, Any]) -> bool:
    e, sharp = r["error"], r["sharpness"]
    if sharp <= 1.25:
        return e["ratio"] <= tt["floor_ratio_smooth"] and r["kind"]["time_s"] <= tt["floor_time_fraction"] * r["exact"]["time_s"]
    if sharp >= 125:
        return e["ratio"] <= tt["floor_ratio_sharp"]
    return e["ratio"] <= tt["floor_ratio_sharp"] or e["rows_over_bar_flagged"] == e["rows_over_bar"]


def _search_cell(sr: dict[str, Any]) -> str:
    if "skipped" in sr:
        return "not run (faiss not installed)" if "faiss" in sr["skipped"] else f"not run: {sr['skipped']}"
    if sr.get("reason"):
        return f"exact (fallback: {sr['reason']}), {fmt_s(sr['time_s'])}"
    return (f"`{sr['method']}`, {fmt_s(sr['time_s'])}, recall {sr['recall_sampled']:.3g} on {sr['sample']} sampled queries "
            f"({sr['recall_rows']:.3g} on the error's rows)")


def _sampled(kd: dict[str, Any], n: int) -> str:
    rows = kd.get("rows_timed", n)
    return "" if rows >= n else f"; {rows:,} sampled query rows, at N"


def section_topk_tail(results: dict[str, Any]) -> Section:
    title = "Exact top keys plus a fitted tail at large N: search, time, memory, recall, error, next to the exact map"
    short = "top keys + fitted tail"
    tt = results.get("topk_tail")
    if not tt:
        return _missing(TOPK_TAIL_NUMBER, title, short, TOPK_TAIL_FLOOR, "no results (run `benchmarks/run.py --only topk_tail`)")
    rows = tt["rows"]
    n_big = max(r["n"] for r in rows)
    big = [r for r in rows if r["n"] == n_big]
    ok = all(_topk_ok(r, tt) for r in big)
    result = f"at N = M = {n_big:,}: " + "; ".join(
        f"r^2/tau = {r['sharpness']:g}: TV / baseline {r['error']['ratio']:.3g}, {fmt_s(r['kind']['time_s'])} "
        f"({r['kind']['time_s'] / r['exact']['time_s']:.2g}x the exact map's {fmt_s(r['exact']['time_s'])}), "
        f"search {r['kind']['search']} (recall {r['kind']['recall']:.3g})" for r in big)
    body = [
        f"`attention.distance_topk_attention(q, k, v, temperature={tt['temperature']:g})` (the kind `distance_topk`: "
        "each row's exact top keys, k per row from its error estimate, k = 0 (the tail alone, no search) tried first, "
        "and a fitted positive quadratic tail), float32, "
        f"d = {tt['d']}, lifted Gaussian points with mean norm r set by r^2/tau, N = M, each size and r^2/tau in a fresh "
        "subprocess. Its rows are independent of each other: where the map is sharp (r^2/tau > 1.25) above N = 10^4 "
        "it runs on the sampled query rows the table names (against all keys) and its time at N is its fixed part (the "
        "key sums, once per call) plus its per-row time times N, both from the call on a quarter of those rows against "
        "the call on all of them. "
        "Its top-key search is the one named in the table (its recall is the result's own). Next to it, "
        f"`attention.search_top_keys(q, k, {tt['top']}, recall={tt['recall']:g}, sample={tt['sample']})` alone: the "
        "faiss index picked by recall measured against exact search on sampled queries, or exact search with the reason. "
        f"The exact streamed map: the exact distance attention output by blocks of query rows (one product, softmax, "
        f"values), timed on the first {tt['exact_rows']:,} rows and scaled to all N. Peak extra memory: sampled VmRSS "
        f"over the call, inputs excluded. Error: on {tt['rows_sampled']} sampled rows, the result's map (its top "
        "weights and its tail polynomial) against the exact rows over all keys, in float64; the row's estimate "
        "covers the true TV where TV <= 2x `row_error`.",
        "",
        "| N = M | r^2/tau | kind: time | peak extra memory | exact streamed map: time | time ratio | mean row TV | "
        "TV(exact, U) | TV / baseline | top-1 agreement | rows met (sampled) | estimate covers | mean k | "
        "search alone |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        e, kd, ex = r["error"], r["kind"], r["exact"]
        body.append(
            f"| {r['n']:,}{' (' + r['machine_note'] + ')' if 'machine_note' in r else ''} | {r['sharpness']:g} | "
            f"{fmt_s(kd['time_s'])} ({kd['search']}{_sampled(kd, r['n'])}) | "
            f"{fmt_b(kd['peak_extra_rss_bytes_sampled'])} | {fmt_s(ex['time_s'])} | {kd['time_s'] / ex['time_s']:.2g}x | "
            f"{e['mean_tv']:.3g} | {e['mean_tv_uniform']:.3g} | {e['ratio']:.3g} ({word(_topk_ok(r, tt))}) | "
            f"{e['top1_agreement']:.3g} | {_met_cell(e)} | {e['estimate_covers']:.3g} | {kd['mean_top_count']:.3g} | "
            f"{_search_cell(r['search'])} |"
        )
    body += [
        "",
        "GPU: `benchmarks/gpu.py` times the exact top-key search and the kind on the device.",
        "",
    ]
    return Section(TOPK_TAIL_NUMBER, title, short, word(ok), result, TOPK_TAIL_FLOOR, body)


TOPK_INDEX_NUMBER = 10
TOPK_INDEX_FLOOR = ("on every key set (Gaussian at r^2/tau from 0.00125 to 125, 32 clusters, trees), with the index search: "
                    "mean row TV at most 0.25x the exact map's TV from uniform and top-1 agreement at least 0.9")


def _index_ok(r: dict[str, Any], ti: dict[str, Any]) -> bool:
    return r["error"]["ratio"] <= ti["floor_ratio"] and r["error"]["top1_agreement"] >= ti["floor_top1"]


def _met_cell(r: dict) -> str:
    """The share of rows ``met`` (proven by the row's bound) and ``estimated``; results measured before ``met`` was
    proven (no ``rows_estimated``) counted rows met by the estimate, and say so."""
    if "rows_estimated" in r:
        return f"{r['rows_met']:.3g} proven, {r['rows_estimated']:.3g} estimated"
    return f"{r['rows_met']:.3g} (by the estimate: measured before met was proven)"


def _index_cell(search: str) -> str:
    """The kind's search summary, shortened: each index's method and recall, or exact search and why."""
    parts = []
    for part in search.split("; "):
        if part.startswith("exact search (fallback)"):
            parts.append("exact (" + part.split(": ", 1)[-1].split(":")[0] + ")")
        elif part == "exact":
            parts.append("none needed (no row searched)")
        else:
            parts.append(part.replace(" sampled queries", ""))
    return "; ".join(parts)


def section_topk_index(results: dict[str, Any]) -> Section:
    title = "Exact top keys plus a fitted tail with the index search: Gaussian, clustered and tree keys"
    short = "top keys + tail, index"
    ti = results.get("topk_index")
    if not ti:
        return _missing(TOPK_INDEX_NUMBER, title, short, TOPK_INDEX_FLOOR,
                        "no results (run `benchmarks/run.py --only topk_index`)")
    rows = ti["rows"]
    ok = all(_index_ok(r, ti) for r in rows)
    worst = max(rows, key=lambda r: r["error"]["ratio"])
    result = (f"at N = M = {ti['n']:,}, {len(rows)} key sets: worst TV / baseline {worst['error']['ratio']:.3g} "
              f"({worst['how']}), "
              f"lowest top-1 agreement {min(r['error']['top1_agreement'] for r in rows):.3g}")
    body = [
        f"`attention.distance_topk_attention(q, k, v, temperature={ti['temperature']:g}, search=\"index\", "
        f"recall={ti['recall']:g})` on every query row (nothing scaled: the index is fitted and built once per key set "
        "inside the call, its time included), float32, d = "
        f"{ti['d']}, each key set in a fresh subprocess. Key sets: lifted Gaussian queries and keys of mean norm r "
        "(r^2/tau as given); a mixture of "
        f"{ti['clusters']} Gaussian clusters (centres standard normal, each cluster's spread {ti['cluster_spread']:g} of "
        "that scale) rescaled to mean norm r, queries and keys drawn from it; every node of a balanced binary tree grown "
        "in H^64 from the origin (each child one geodesic step of the edge length along a random direction), split at "
        "random into keys and queries (N = M - 1 queries). The exact streamed map: the exact output by blocks of query "
        f"rows, every row, in the same process. Error: on {ti['rows_sampled']} sampled query rows, the result's map (its "
        "listed top weights, rows with every key exact, its tail polynomial) against the exact rows over all keys in "
        "float64; top-1 tie-aware (the kind's favourite key has the exact largest weight to 1e-9). Recall: the index's own, "
        "measured against exact search on sampled queries when it was picked, and on the checked rows the share of "
        "their listed top keys whose exact logit reaches the row's exact k-th logit. Times are wall clock on a shared "
        "machine (the load average is given per row).",
        "",
        "| key set | N | kind: time | exact streamed map | ratio | TV / baseline | top-1 | search (index picked: recall "
        "on sampled queries) | recall, checked rows | rows met | exact rows | tail-only rows | mean k | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        e, kd, ex = r["error"], r["kind"], r["exact"]
        rec = "no row searched" if e["recall_rows"] is None else f"{e['recall_rows']:.3g}"
        body.append(
            f"| {r['how']} | {r['n']:,} | {fmt_s(kd['time_s'])} | {fmt_s(ex['time_s'])} | "
            f"{kd['time_s'] / ex['time_s']:.2g}x | {e['ratio']:.3g} ({word(_index_ok(r, ti))}) | "
            f"{e['top1_agreement']:.3g} | {_index_cell(kd['search'])} | {rec} | {_met_cell(kd)} | "
            f"{kd['exact_rows']:.3g} | {kd['tail_only_rows']:.3g} | {kd['mean_top_count']:.3g} | "
            f"{r.get('load_average', ['?'])[0]:.3g} |"
        )
    body += [
        "",
        "Rows with every key exact (`exact rows`) are those no entry of `top` serves; `exact (...)` in the search column is "
        "exact search where an index was not worth it or reached no recall asked, with the reason. A row whose index "
        "search missed its true top keys cannot see it in its own error estimate (the missed keys are weighted by the "
        "tail, outside the exactly ranked strata): the recall on the checked rows is the column that shows it.",
        "",
    ]
    if ti.get("large"):
        body += _index_large_lines(ti["large"])
    return Section(TOPK_INDEX_NUMBER, title, short, word(ok), result, TOPK_INDEX_FLOOR, body)


def _index_large_lines(large: list[dict[str, Any]]) -> list[str]:
    """The index at larger N (``--only topk_index_large``); times ``[wall, cpu]``, shown as wall (CPU)."""
    two = lambda x: f"{fmt_s(x[0])} ({fmt_s(x[1])} CPU)"  # noqa: E731
    lines = [
        "**The index at larger N** (Gaussian keys, r^2/tau = 125, float32, d = 64): the index's configuration fitted on a "
        "key subsample (`fit_key_index` on the keys named, 256 sampled queries, top 256), the index built once over every "
        "key with that configuration (its recall measured on 256 sampled queries), then "
        "`distance_topk_attention(q_rows, k, v, search=index)` on sampled query rows (the rows named; timed on a quarter "
        "of them and on all: the per-row time from the difference, the call's fixed part, the key sums, from the rest). "
        "The kind at N: fit + build + fixed part + per-row time x N; the exact streamed map timed on 1,024 rows, scaled "
        "to N. Wall clock and, in brackets, this process's CPU time (user + sys, 2 threads); `search` is the index used "
        "(or exact search, with the reason, where the built index missed the recall asked).",
        "",
        "| N = M | rows | fit (subsample) | build (every key) | search | per row | fixed part | kind at N | exact map at N | "
        "ratio (wall; CPU) | recall: sampled / checked rows | TV / baseline | top-1 | mean k | exact rows | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in large:
        lines.append(
            f"| {r['n']:,} | {r['rows']:,} | {two(r['fit_s'])}, {r['fit_keys']:,} keys: `{r['fit_method']}` | "
            f"{two(r['build_s'])} | {_index_cell(r['search'])} | "
            f"{r['row_s'][0] * 1e3:.3g} ms ({r['row_s'][1] * 1e3:.3g} ms CPU) | {two(r['fixed_s'])} | {two(r['kind_s'])} | "
            f"{two(r['exact_s'])} | {r['kind_s'][0] / r['exact_s'][0]:.2g}x; {r['kind_s'][1] / r['exact_s'][1]:.2g}x | "
            f"{r['recall_sampled']:.3g} / {r['recall_rows']:.3g} | {r['ratio']:.3g} | {r['top1']:.3g} | "
            f"{r['mean_top_count']:.3g} | {r['exact_rows_share']:.3g} | {r['load']:.3g} |")
    return lines + [""]


# --------------------------------------------------------------------------- #
# the GPU section (run.py on a CUDA machine, or benchmarks/gpu.py)
# --------------------------------------------------------------------------- #
GPU_FLOOR = ("sections 1, 3 and 5's floors on the device: kernels at most 2x `torch.mm`, `compare()` at most 1.0x the two maps, "
             "sampled under 60 s")


def gpu_section(gpu: dict[str, Any] | None) -> Section:
    """The GPU section from ``{"device_name", "checks", "results", "dry"}`` (``benchmarks/gpu.py``), or not measured."""
    title, short = "GPU", "GPU"
    if gpu is None:
        body = [
            "| measurement | value |",
            "|---|---|",
            *(
                f"| {what} | not measured (no GPU available in this session) |"
                for what in (
                    "pairwise kernels vs `torch.mm`",
                    "`compare()` vs the two dense maps",
                    "`compare()` at N = 65,536 and 1,000,000: time, fraction of `torch.mm` throughput",
                    "sampled `compare(rows=4096)` at N = 1,000,000",
                    "`distance_linear_attention` at N = 1,000,000: time and its map's error on sampled rows",
                )
            ),
            "",
            'The CUDA code paths exist (`device="auto"` selects CUDA when `torch.cuda.is_available()`).',
            "`python benchmarks/gpu.py` on a CUDA machine checks them against float64 CPU references and",
            "rewrites this section with the measured rows (CI runs it with `--dry-run` on the CPU).",
            "",
        ]
        return Section(GPU_NUMBER, title, short, NOT_MEASURED, "no GPU available in this session", GPU_FLOOR, body)

    r, dry = gpu["results"], gpu.get("dry", False)
    mm, vm, samp = r["mm"], r["vs_maps"], r["compare_sampled"]
    worst = max(r["kernels"], key=r["kernels"].get)
    ok_k = all(x <= 2.0 for x in r["kernels"].values())
    ok_v = vm["ratio"] <= 1.0
    ok_s = samp["time_s"] < 60.0
    result = (
        f"`compare()` {vm['ratio']:.2f}x the two maps at N = {vm['n']:,} ({word(ok_v)}); largest kernel ratio "
        f"{r['kernels'][worst]:.2f}x `torch.mm` ({word(ok_k)}); sampled at N = {samp['n']:,} in "
        f"{fmt_s(samp['time_s'])} ({word(ok_s)})"
    )
    body = []
    if dry:
        body += ["**Dry run** (`benchmarks/gpu.py --dry-run`): tiny sizes on the CPU, to show the script works; its",
                 "verdicts say nothing about the floors.", ""]
    body += [f"Device: {gpu['device_name']}. Written by `python benchmarks/gpu.py`.", "", "Correctness on the device:", ""]
    body += [f"* {c}" for c in gpu["checks"]]
    body += [
        "",
        f"`torch.mm` of (N x d) @ (d x N), N = {mm['n']:,}, d = {mm['d']}: {fmt_s(mm['time_s'])}, "
        f"{mm['flops'] / 1e12:.3g} TFLOP/s (the baseline of the kernels; minima of repeats).",
        "",
        "| operation (same shape) | ratio to `torch.mm` | floor at most 2x |",
        "|---|---|---|",
    ]
    body += [f"| `{name}` | {ratio:.2f}x | {word(ratio <= 2.0)} |" for name, ratio in r["kernels"].items()]
    body += [
        "",
        f"`compare()` spatial vs distance against `attention_map` spatial + distance at N = M = {vm['n']:,}: "
        f"{fmt_s(vm['compare_s'])} against {fmt_s(vm['maps_s'])} (minima of repeats), ratio {vm['ratio']:.2f}x ({word(ok_v)}, "
        "floor at most 1.0x); "
        f"one `torch.mm` of that shape {fmt_s(vm['mm_s'])}.",
        "",
        "| `compare()` spatial vs distance | N = M | rows | time | fraction of `torch.mm` throughput (one product) | "
        "counting two products |",
        "|---|---|---|---|---|---|",
    ]
    for label, what in (("compare", "every row"), ("compare_big", "every row"), ("compare_sampled", "sampled (rows=)")):
        c = r[label]
        body.append(
            f"| {what} | {c['n']:,} | {c['rows']:,} | {fmt_s(c['time_s'])} | {fmt_pct(c['fraction_of_mm'])} | "
            f"{fmt_pct(c['fraction_of_mm_2'])} |"
        )
    body += [
        "",
        "Fraction of `torch.mm` throughput: the time of `torch.mm` of the same shape (rows x d) @ (d x M), timed by",
        "row blocks into a preallocated output and scaled to all rows, divided by the time of `compare()`.",
        "",
    ]
    ld = r.get("linear_distance")
    if ld is not None:
        body += [
            f"`distance_linear_attention` (features={ld['features']}, mean norm 1, tau = 8) at N = M = {ld['n']:,}: "
            f"{fmt_s(ld['time_s'])}; its map against the exact distance map on {ld['rows']} sampled rows: mean row TV "
            f"{ld['mean_tv']:.3g}, {ld['ratio']:.3g}x the exact map's TV from uniform.",
            "",
        ]
    tt = r.get("topk_tail")
    if tt is not None:
        body += [
            "Issue 30 (tau = 8): the exact top-16 key search `exact_top_keys`, the kind `distance_topk_attention` and "
            "the exact streamed distance attention (blocks of rows: product, softmax, values).",
            "",
            "| N = M | r^2/tau | exact top-16 search | `distance_topk_attention` | its search (recall) | rows met | "
            "exact streamed map |",
            "|---|---|---|---|---|---|---|",
            *(f"| {t['n']:,} | {t['sharpness']:g} | {fmt_s(t['search_s'])} | {fmt_s(t['kind_s'])} | {t['search']} "
              f"({t['recall']:.3g}) | {_met_cell(t)} | {fmt_s(t['exact_map_s'])} |" for t in tt["rows"]),
            "",
        ]
    ok = _all(ok_k, ok_v, ok_s)
    return Section(GPU_NUMBER, title, short, word(ok), result, GPU_FLOOR, body)


def replace_gpu_section(text: str, sec: Section) -> str:
    """``text`` with its GPU section's body (and its row of the verdict table) replaced by ``sec``.

    The heading line is kept as it is (whatever its number); without a GPU heading the section is appended.
    """
    head = GPU_HEADING.search(text)
    if head is not None:
        number = re.match(r"## (\d+)\. ", head.group(0))
        if number is not None:
            sec = replace(sec, number=int(number.group(1)))
    if head is None:
        return text.rstrip("\n") + "\n\n" + "\n".join(sec.lines())
    nxt = text.find("\n## ", head.end())
    body = "\n".join(sec.lines()[1:])  # from the blank line under the heading
    new = text[: head.end()] + "\n" + body.rstrip("\n") + "\n" + ("" if nxt < 0 else text[nxt:])
    row = GPU_ROW.search(new)
    if row is not None:
        new = new[: row.start()] + sec.row() + new[row.end():]
    return new


# --------------------------------------------------------------------------- #
# the document
# --------------------------------------------------------------------------- #
def machine_name(m: dict[str, Any]) -> str:
    return f"{m['cpu']}, {m['logical_cpus']} logical CPUs"


def sections(results: dict[str, Any]) -> list[Section]:
    return [
        section_kernels(results),
        section_geoopt(results),
        section_vs_maps(results),
        section_large(results),
        section_sampled(results),
        section_linear(results),
        gpu_section(results.get("gpu")),
        section_linear_distance(results),
        section_topk_tail(results),
        section_topk_index(results),
    ]


def render(results: dict[str, Any]) -> str:
    """The whole BENCHMARKS.md from a results dict (any section whose results are missing: "not measured")."""
    m = results["machine"]
    secs = sections(results)
    lines = [
        "# Benchmarks",
        "",
        f"Measured on **{machine_name(m)}** ({m.get('date_utc', 'date unknown')} UTC) by `python benchmarks/run.py`,",
        "re-measured with all contenders side by side in one run, ratios first (raw numbers in",
        "`benchmarks/results.json`). Re-run it to measure your machine; it rewrites this file.",
        "",
    ]
    if results.get("quick"):
        lines += [
            "> **Quick run** (`--quick`): smoke-test sizes, much smaller than the sizes the floors are set for;",
            "> its verdicts say nothing about the floors. Run without `--quick` for the real figures.",
            "",
        ]
    lines += [
        "## Verdicts",
        "",
        "| section | ratio / measured, first | floor | verdict |",
        "|---|---|---|---|",
        *(s.row() for s in secs),
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m['cpu']}, {m['logical_cpus']} logical CPUs ({m.get('cpu_capability')}), torch uses "
        f"{m.get('torch_threads')} threads |",
        f"| memory | {m.get('memory_total_gib')} GiB |",
        f"| GPU | {m.get('gpu') or 'none available in this session'} |",
        f"| software | Python {m.get('python')}, torch {m.get('torch')}, geoopt {m.get('geoopt')} |",
        f"| date (UTC) | {m.get('date_utc')} |",
        "",
        "**How measured.** Other processes may share this CPU "
        f"(1/5/15-minute load average {m.get('load_average_at_start')} at the start), so every time is the **median** of",
        "repeats in which the contenders are *interleaved* (each round runs every contender once, after a",
        "warm-up round), with the minimum next to it; ratios compare medians (and minima) from the same rounds.",
        "Float32, d = 64 throughout.",
        "",
    ]
    for s in secs:
        lines += s.lines()
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python benchmarks/report.py RESULTS.json OUT.md", file=sys.stderr)
        return 2
    results = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    Path(args[1]).write_text(render(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
