"""A mutation pass over the verdict, the comparison, the random features and the capture verification.

Each mutant is a planted bug: one exact source replacement in one module.  For each, the script copies
the repository (without ``.venv``, ``.git`` and build outputs) to a temporary folder, applies the
replacement, runs the fast tests that guard that module there (``pytest -x -q``), and reports whether
a test failed (*killed*) or every test passed (*survived*).  A survivor is a bug the tests cannot see.

    python scripts/mutants.py                 # every mutant
    python scripts/mutants.py --list          # their names
    python scripts/mutants.py tie_set cv_guard  # some of them
    python scripts/mutants.py --module capture/verification.py

Exit status 0 when every mutant run was killed, 1 when one survived, 2 for a bad argument or a
replacement that no longer matches its source (the mutant must then be updated with the module).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

VERDICT = ["tests/test_verdict_properties.py", "tests/test_compare_measures.py", "tests/test_verdict.py"]
RF = ["tests/test_random_features.py", "tests/test_attention.py", "-k", "rf or random or linear_output or distance_rf"]
STUDIES = ["tests/test_studies.py"]
COMPARE = ["tests/test_verdict_properties.py", "tests/test_compare_measures.py", "tests/test_verdict.py"]
CAPTURE = ["tests/test_capture.py", "tests/test_readers.py"]
FUSED = ["tests/test_compare_fused.py"]
ROUNDING = [*COMPARE, "tests/test_identical_rounding.py"]
TOPK = ["tests/test_topk_tail.py", "tests/test_topk_bound.py", "tests/test_pins.py"]
SEARCH = ["tests/test_key_search.py", "tests/test_key_search_faults.py", "tests/test_pins.py"]


@dataclasses.dataclass(frozen=True)
class Mutant:
    """``name``: an identifier; ``path``: the module; ``old`` -> ``new``: the replacement (``old`` occurs once);
    ``tests``: pytest arguments."""

    name: str
    path: str
    old: str
    new: str
    what: str
    tests: tuple[str, ...]


def _m(name: str, path: str, old: str, new: str, what: str, tests: list[str]) -> Mutant:
    return Mutant(name, "hypviz/" + path, old, new, what, tuple(tests))


MUTANTS: tuple[Mutant, ...] = (
    # -- the verdict rule (attention/comparison/result.py)
    _m("close_baseline_max", "attention/comparison/result.py", "cut = CLOSE_RATIO * torch.minimum(ua, ub)",
       "cut = CLOSE_RATIO * torch.maximum(ua, ub)", "the close baseline taken as max instead of min", VERDICT),
    _m("uniform_tv_0.5", "attention/comparison/result.py", "UNIFORM_TV = 0.05", "UNIFORM_TV = 0.5", "UNIFORM_TV 0.05 -> 0.5",
       VERDICT),
    _m("uniform_peak_4", "attention/comparison/result.py", "UNIFORM_PEAK = 2.0", "UNIFORM_PEAK = 4.0", "UNIFORM_PEAK 2 -> 4",
       VERDICT),
    _m("top1_weight_0.5", "attention/comparison/result.py", "TOP1_WEIGHT = 0.9", "TOP1_WEIGHT = 0.5", "TOP1_WEIGHT 0.9 -> 0.5",
       VERDICT),
    _m("resolve_5", "attention/comparison/result.py", "RESOLVE = 0.5", "RESOLVE = 5.0",
       "RESOLVE 0.5 -> 5: identical at any rounding", VERDICT),
    _m("no_unresolved", "attention/comparison/result.py", "code = torch.where(~resolved & (tv <= cut + tol), 4, code)",
       "code = code", "the unresolved verdict removed", VERDICT),
    _m("identical_without_resolution", "attention/comparison/result.py",
       "code = torch.where(resolved & (tv <= tol), 0, code)", "code = torch.where(tv <= tol, 0, code)",
       "identical whenever TV <= tolerance (the old rule)", VERDICT),
    _m("near_uniform_one_map", "attention/comparison/result.py",
       "near = (ua < UNIFORM_TV) & (peak_a.double() < UNIFORM_PEAK) & (ub < UNIFORM_TV) & (peak_b.double() < UNIFORM_PEAK)",
       "near = (ua < UNIFORM_TV) & (peak_a.double() < UNIFORM_PEAK)", "uninformative when only one map is near uniform", VERDICT),
    _m("majority_0.5", "attention/comparison/result.py", "MAJORITY = 0.9", "MAJORITY = 0.5", "MAJORITY 0.9 -> 0.5", VERDICT),
    _m("close_with_uniform_is_mixed", "attention/comparison/result.py",
       "    if agree + f[\"uninformative\"] >= MAJORITY:\n        return \"close\"\n", "",
       "close and near-uniform rows together called mixed", VERDICT),
    # -- compare_maps (attention/comparison/given_maps.py)
    _m("maps_identical_x100", "attention/comparison/given_maps.py",
       "tol += store + (0.0 if ec == 0.0 else ec * (_logit_scale(p) if scale is None else scale))",
       "tol += 100.0 * (store + (0.0 if ec == 0.0 else ec * (_logit_scale(p) if scale is None else scale)))",
       "the identical threshold x100 (given maps)", VERDICT),
    _m("maps_tie_by_index", "attention/comparison/given_maps.py", "top = x >= mx * (1.0 - rel)",
       "top = torch.nn.functional.one_hot(x.argmax(dim=-1), m).bool()", "tie handling removed: the top set is one index",
       VERDICT),
    _m("maps_no_top_share", "attention/comparison/given_maps.py", "counted = (excess >= TOP_SHARE * ux) & (ux > 0)",
       "counted = ux > 0", "every top set counted, whatever mass it carries (M-dependence)", VERDICT),
    _m("maps_storage_fp64", "attention/comparison/given_maps.py", "fs = torch.finfo(t.dtype)", "fs = torch.finfo(torch.float64)",
       "the tolerance of float64 whatever the storage dtype", VERDICT),
    _m("maps_tolerance_float64_only", "attention/comparison/given_maps.py",
       "ec = (fs.eps if comp is None else torch.finfo(comp).eps) if stated else 0.0",
       "ec = 0.0", "the logits' rounding left out of the given maps' tolerance", VERDICT),
    _m("maps_one_direction", "attention/comparison/given_maps.py", "out[\"fav\"][sl] = torch.minimum(wa, wb)",
       "out[\"fav\"][sl] = wa",
       "top1_weight from one direction only (asymmetric)", VERDICT),
    # -- compare (streamed_compare.py, row_blocks.py, kernels.py)
    _m("compare_identical_x100", "attention/comparison/streamed_compare.py", "tv_tol = 0.5 * (rnd_a + rnd_b).to(dev)",
       "tv_tol = 50.0 * (rnd_a + rnd_b).to(dev)", "the identical threshold x100 (compare)", COMPARE),
    _m("compare_worst_case_tolerance", "attention/comparison/streamed_compare.py", "tv_tol = 0.5 * (rnd_a + rnd_b).to(dev)",
       "tv_tol = 0.5 * (logits.err[0] + logits.err[1]).to(dev)", "identical from the worst-case bound (the old rule)", COMPARE),
    _m("compare_tie_by_index", "attention/comparison/row_blocks.py", "    cut = va[:, :1] - ta\n", "    cut = va[:, :1]\n",
       "tie handling removed in compare's top sets", COMPARE),
    _m("compare_no_top_share", "attention/comparison/row_blocks.py",
       "fa = torch.where((excess_a >= TOP_SHARE * ua) & (ua > 0), ratio_a, one)",
       "fa = ratio_a", "compare counts every top set of map a", COMPARE),
    _m("rounding_factor_x10", "attention/maps/kernels.py", "(math.sqrt(c + 3) + 2.0) * torch.finfo(a.dtype).eps * size",
       "10.0 * (math.sqrt(c + 3) + 2.0) * torch.finfo(a.dtype).eps * size", "the realistic rounding level x10", COMPARE),
    _m("score_constant", "attention/maps/kernels.py", "return s.sub_(kind.constant * k)",
       "return s.sub_(kind.constant * k * 2.0)",
       "a score constant changed", ["tests/test_kinds.py", "-k", "registered_at_run_time or score"]),
    _m("feature_eps", "attention/maps/kernels.py", "FEATURE_EPS = 1e-6", "FEATURE_EPS = 1e-3",
       "Hypformer's feature offset changed",
       ["tests/test_attention.py", "-k", "focused"]),
    # -- the random features (attention/approx/random_features.py)
    _m("j_dropped", "attention/approx/random_features.py", "return torch.cat([-w, kappa[..., 1:]], dim=-1) / math.sqrt(tau)",
       "return torch.cat([w, kappa[..., 1:]], dim=-1) / math.sqrt(tau)", "J dropped from the key features", RF),
    _m("j_dropped_textbook", "attention/approx/random_features.py",
       "x = torch.cat([-q[..., :1], q[..., 1:]], dim=-1) / math.sqrt(tau)",
       "x = q / math.sqrt(tau)", "J dropped from performer_weights", RF),
    _m("qr_sign_fix_dropped", "attention/approx/random_features.py",
       "qm = torch.from_numpy(qm * np.sign(np.diagonal(rm, axis1=-2, axis2=-1))[..., None, :])", "qm = torch.from_numpy(qm)",
       "the QR sign fix dropped (directions no longer Haar)", RF),
    _m("cv_guard_widened", "attention/approx/random_features.py", "spread * a_norm * reach) <= 0.5",
       "spread * a_norm * reach) <= 8.0", "the control variate's positivity guard widened", RF),
    _m("cv_variance_ignored", "attention/approx/random_features.py",
       "use = ok & (y.var(dim=-1, keepdim=True) < x.var(dim=-1, keepdim=True))", "use = ok",
       "the control variate used whether or not it lowers the variance", RF),
    _m("one_key_shift", "attention/approx/random_features.py", "shift = lb.amax(dim=-2, keepdim=True)  # (H, 1, D)",
       "shift = lb.amax(dim=(-2, -1), keepdim=True)  # (H, 1, D)", "one stabiliser for all features (underflow in float32)", RF),
    _m("cache_unbounded", "attention/approx/random_features.py", "        while total > _CACHE_BYTES:", "        while False:",
       "the direction cache no longer bounded", RF),
    # -- the calibration table and the studies
    _m("calibration_f64_itself", "attention/comparison/calibration.py",
       "p32 = attention_map(q.float(), keys.float(), \"distance\", temperature=8.0)",
       "p32 = attention_map(q, keys, \"distance\", temperature=8.0)", "the float32 vs float64 case compares float64 with itself",
       VERDICT),
    _m("calibration_half_is_float32", "attention/comparison/calibration.py", "lambda: _half_precision(torch.float16)),",
       "lambda: _half_precision(torch.float32)),", "the float16 case stored in float32", VERDICT),
    _m("prediction_wrong_norm", "attention/comparison/accuracy.py", "predicted_gap_ratio(qn / kn, qn, k=k)",
       "predicted_gap_ratio(qn / kn, kn, k=k)",
       "the gap study's prediction from the key norm", STUDIES),
    _m("prediction_small_norms", "attention/comparison/accuracy.py",
       "out = 1.0 / np.sqrt(1.0 + 2.0 * (r**2 * k + qn**2) / (k + qn**2))",
       "out = 1.0 / np.sqrt(1.0 + 2.0 * r**2 * k / (k + qn**2))", "the first-order ratio for small keys only (the old formula)",
       STUDIES),
    # -- the capture verification (capture/verification.py: run only, owned elsewhere)
    _m("verify_tolerance_x1e6", "capture/verification.py", "{name: math.sqrt(torch.finfo(getattr(torch, name)).eps)",
       "{name: 1e6 * math.sqrt(torch.finfo(getattr(torch, name)).eps)", "the verification tolerance x1e6", CAPTURE),
    _m("verify_relative_floor", "capture/verification.py", "max(1.0, float(s.abs().max()))", "max(1e6, float(s.abs().max()))",
       "the relative error divided by 1e6", CAPTURE),
    _m("verify_error_ignored", "capture/verification.py", "return err, f\"output rebuilt by {rec.aggregation}\"",
       "return 0.0, f\"output rebuilt by {rec.aggregation}\"", "the rebuilt output's error ignored", CAPTURE),
    _m("verify_negative_scale_sign", "capture/records.py",
       "return distance_logits(queries, keys, k=self.k, temperature=-1.0) / tau",
       "return distance_logits(queries, keys, k=self.k, temperature=1.0) / tau", "a negative scale's sign ignored", CAPTURE),
    _m("verify_centroid_dropped", "capture/verification.py",
       "return lorentz_centroid(lorentz_centroid(w @ v, k=k).mean(dim=0), k=k)",
       "return lorentz_centroid((w @ v).mean(dim=0), k=k)", "the per-head centroid dropped before the head mean", CAPTURE),
    _m("verify_gyro_half", "capture/verification.py", "rk * torch.tanh(0.5 * torch.atanh(", "rk * torch.tanh(1.0 * torch.atanh(",
       "the gyromidpoint's 1/2 dropped", CAPTURE),
    _m("verify_fit_keeps_worse", "capture/verification.py", "    if errs[i] < best_err:", "    if errs[i] > best_err:",
       "the temperature fit keeps the worse of grid and refinement", CAPTURE),
    # -- the realistic rounding level behind *identical* (kernels.py, streamed_compare.py)
    _m("rounding_level_div10", "attention/maps/kernels.py", "(math.sqrt(c + 3) + 2.0) * torch.finfo(a.dtype).eps * size",
       "(math.sqrt(c + 3) + 2.0) * torch.finfo(a.dtype).eps * size / 10.0", "the realistic rounding level /10 (two products)",
       ROUNDING),
    _m("tv_tolerance_div10", "attention/comparison/streamed_compare.py", "tv_tol = 0.5 * (rnd_a + rnd_b).to(dev)",
       "tv_tol = 0.05 * (rnd_a + rnd_b).to(dev)", "tv_tolerance's rounding level /10", ROUNDING),
    _m("difference_rounding_div10", "attention/comparison/streamed_compare.py",
       "return abs(alpha) * sh.c.double().abs() * (dw + 5.0 * u * w_max) + u * size",
       "return (abs(alpha) * sh.c.double().abs() * (dw + 5.0 * u * w_max) + u * size) / 10.0",
       "the one product's rank-one rounding /10", ROUNDING),
    # -- the fused statistics kernel (attention/comparison/fused_stats.cpp: compiled per source hash, in the copy's own cache)
    _m("fused_remainder_topk_one_short", "attention/comparison/fused_stats.cpp",
       "for (int64_t j = n_chunks * chunk; j < m; j++)", "for (int64_t j = n_chunks * chunk; j < m - 1; j++)",
       "top k: the loop over the row's remainder (after the last whole chunk) stops one key short", FUSED),
    _m("fused_remainder_chunk_skipped", "attention/comparison/fused_stats.cpp",
       "h <= n_chunks && h * chunk < j1; h++", "h < n_chunks && h * chunk < j1; h++",
       "pass 1: the remainder's chunk maximum never taken (a row's largest logit there missed)", FUSED),
    _m("fused_topk_chunk_one_key_low", "attention/comparison/fused_stats.cpp",
       "j < (ci[t] + 1) * chunk; j++)", "j < (ci[t] + 1) * chunk - 1; j++)",
       "top k: each selected chunk scanned one key short", FUSED),
    _m("fused_topk_one_chunk_fewer", "attention/comparison/fused_stats.cpp",
       "for (int64_t t = 0; t < k; t++)\n        for (int64_t j = ci[t] * chunk;",
       "for (int64_t t = 0; t < k - 1; t++)\n        for (int64_t j = ci[t] * chunk;",
       "top k: one chunk fewer than k searched", FUSED),
    _m("fused_topk_ties_last", "attention/comparison/fused_stats.cpp", "if (*cnt == k && !(x > v[k - 1])) return;",
       "if (*cnt == k && !(x >= v[k - 1])) return;", "top k: a later tied key replaces the k-th (not the first index)", FUSED),
    _m("fused_narrow_x10", "attention/comparison/fused_stats.cpp", "constexpr double NARROW_X = 0.3;",
       "constexpr double NARROW_X = 3.0;",
       "the narrow-row gap 0.3 -> 3 (expm1 without range reduction on wide rows)", FUSED),
    _m("fused_tilt_sign", "attention/comparison/fused_stats.cpp", "const T sgn = (T)(jb->alpha_b - jb->alpha_a);",
       "const T sgn = (T)(jb->alpha_a - jb->alpha_b);", "the tilt's sign flipped", FUSED),
    _m("fused_tv_half_dropped", "attention/comparison/fused_stats.cpp", "jb->tv[i] = 0.5 * (dev / zb) / (1.0 + m1);",
       "jb->tv[i] = 1.0 * (dev / zb) / (1.0 + m1);", "the tilted TV's factor 1/2 dropped", FUSED),
    _m("fused_low_segment_2x", "attention/comparison/fused_stats.cpp", "const bool low_b = 1024.0 * f <= mean_b;",
       "const bool low_b = 0.5 * f <= mean_b;", "a segment taken as below the mean where its weights reach 2 x the mean", FUSED),
    _m("fused_peak_count", "attention/comparison/fused_stats.cpp", "jb->peak_b[i] = (double)m / zb;",
       "jb->peak_b[i] = (double)(m - 1) / zb;",
       "map b's peak from M - 1 keys", FUSED),
    _m("fused_uniform_tv_2x", "attention/comparison/fused_stats.cpp", "*tv_out = 0.5 * (sa / (double)m) / (1.0 + me);",
       "*tv_out = (sa / (double)m) / (1.0 + me);", "a near-uniform row's baseline twice its size", FUSED),
    # -- distance_topk (attention/approx/topk_tail.py)
    _m("topk_cut_one_key_low", "attention/approx/topk_tail.py", "t = v64[:, k - 1]\n", "t = v64[:, k - 2]\n",
       "the cut at the (k-1)-th logit, one key above the k-th", TOPK),
    _m("topk_exp_floor_8.7", "attention/approx/topk_tail.py", "return 0.5 * math.log(torch.finfo(dtype).tiny)",
       "return 0.1 * math.log(torch.finfo(dtype).tiny)", "exact rows' weights floored at e^-8.7, not e^-43.7", TOPK),
    _m("topk_range_curvature_div10", "attention/approx/topk_tail.py", "out = top + 0.125 * h * h *",
       "out = top + 0.0125 * h * h *",
       "_range_error's curvature term /10", TOPK),
    _m("topk_chord_twice", "attention/approx/topk_tail.py", "chord = out_n * e_k - (e_k - e_l) *",
       "chord = out_n * e_k - 2.0 * (e_k - e_l) *", "the chord of e^u subtracted twice (below sum e^u)", TOPK),
    _m("topk_chord_at_the_cut", "attention/approx/topk_tail.py", "w_rest = torch.minimum(out_n * e_k, chord.clamp_min(0.0))",
       "w_rest = chord.clamp_min(0.0) * 0.0", "sum e^u below rank K taken as 0", TOPK),
    _m("topk_rounding_div10", "attention/approx/topk_tail.py",
       "return 2.0 * torch.expm1((1.0 + g) * err) + 16.0 * torch.finfo(dt).eps",
       "return (2.0 * torch.expm1((1.0 + g) * err) + 16.0 * torch.finfo(dt).eps) / 10.0",
       "_rounding /10: the TV that logits moved by their rounding can add, a tenth of its bound", TOPK),
    _m("topk_base_low_unrounded", "attention/approx/topk_tail.py", "bound, base_lo = bound + rnd, (base_lo - rnd).clamp_min(0.0)",
       "bound, base_lo = bound + rnd, base_lo", "the lower bound on TV(P_hat, U) not reduced by the rounding", TOPK),
    _m("topk_met_10x", "attention/approx/topk_tail.py", "sure = bound <= tol * base_lo", "sure = bound <= 10 * tol * base_lo",
       "met at ten times the target", TOPK),
    _m("topk_margin_1e-2", "attention/approx/topk_tail.py", "MARGIN = 1e-3", "MARGIN = 1e-2", "MARGIN 1e-3 -> 1e-2", TOPK),
    _m("topk_margin_1e-9", "attention/approx/topk_tail.py", "MARGIN = 1e-3", "MARGIN = 1e-9", "MARGIN 1e-3 -> 1e-9", TOPK),
    _m("topk_tol_0.5", "attention/approx/topk_tail.py", "TOL = 0.05", "TOL = 0.5", "TOL 0.05 -> 0.5", TOPK),
    _m("topk_low_unslacked", "attention/approx/topk_tail.py", "return ms - a64.norm(dim=-1) * reach - 2.0 * err",
       "return ms - a64.norm(dim=-1) * reach", "the floor of the logits without the rounding's slack", TOPK),
    # -- the top-key search (attention/approx/key_search.py)
    _m("search_recall_tolerance_x100", "attention/approx/key_search.py",
       "return float((logits >= exact[:, -1:] - row * col.max()).double().mean())",
       "return float((logits >= exact[:, -1:] - 100.0 * row * col.max()).double().mean())",
       "the index's recall measured with 100 x the rounding as slack", SEARCH),
    _m("search_tie_tolerance_div100", "attention/approx/key_search.py", "* a.norm(dim=-1, keepdim=True), b.norm(dim=-1)",
       "* a.norm(dim=-1, keepdim=True) / 100.0, b.norm(dim=-1)", "ties of equal logits within 1/100 of the rounding", SEARCH),
    _m("search_no_ties", "attention/approx/key_search.py", "* a.norm(dim=-1, keepdim=True), b.norm(dim=-1)",
       "* a.norm(dim=-1, keepdim=True) * 0.0, b.norm(dim=-1)", "ties only for exactly equal logits", SEARCH),
    _m("search_budget_64", "attention/approx/key_search.py", "_BLOCK_BYTES = 32 * 2**20", "_BLOCK_BYTES = 64 * 2**20",
       "the candidates' memory budget 32 -> 64 MiB", SEARCH),
    _m("search_cap_m", "attention/approx/key_search.py", "if per_query > min(m // 4, fits):", "if per_query > min(m, fits):",
       "candidates per query capped at M, not M / 4", SEARCH),
    _m("search_cap_budget", "attention/approx/key_search.py", "if per_query > min(m // 4, fits):", "if per_query > m // 4:",
       "candidates per query not capped by the memory budget", SEARCH),
    _m("search_labels_whole_budget", "attention/approx/key_search.py",
       "rows = max(1, _BLOCK_BYTES // 2 // (per_query * _LABEL_BYTES))",
       "rows = max(1, 4 * _BLOCK_BYTES // (per_query * _LABEL_BYTES))", "a block's labels take 4 x the budget", SEARCH),
    _m("search_fingerprint_skipped", "attention/approx/key_search.py", "        if theirs != mine:\n", "        if False:\n",
       "the fingerprint check skipped", SEARCH),
    _m("search_fingerprint_values", "attention/approx/key_search.py",
       "return tuple(keys.shape), str(keys.dtype).removeprefix(\"torch.\"), float(k), digest",
       "return tuple(keys.shape), str(keys.dtype).removeprefix(\"torch.\"), float(k), \"\"",
       "the fingerprint without the keys' values", SEARCH),
    _m("search_min_keys_per_top_4", "attention/approx/key_search.py", "_MIN_KEYS_PER_TOP = 16", "_MIN_KEYS_PER_TOP = 4",
       "an index below 16 keys per top", SEARCH),
)

_IGNORE = shutil.ignore_patterns(".venv", ".git", "build", "__pycache__", "*.pyc", ".pytest_cache", "_build")


def run(mutant: Mutant, python: str, timeout: float) -> tuple[str, float, str]:
    """``(outcome, seconds, last line)``: ``"killed"``, ``"survived"``, ``"stale"`` (no match) or ``"timeout"``."""
    source = (ROOT / mutant.path).read_text()
    if source.count(mutant.old) != 1:
        return "stale", 0.0, f"{mutant.path}: the replacement matches {source.count(mutant.old)} times"
    with tempfile.TemporaryDirectory(prefix="hypviz-mutant-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=_IGNORE)
        (copy / mutant.path).write_text(source.replace(mutant.old, mutant.new))
        # the fused kernel is compiled per source hash into a private cache: a fresh one, so a mutated kernel is built
        env = {**os.environ, "PYTHONPATH": str(copy), "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "HYPVIZ_CACHE_DIR": str(Path(tmp) / "cache")}
        env.pop("HYPVIZ_FUSED", None)
        probe = subprocess.run([python, "-c", "import hypviz; print(hypviz.__file__)"], cwd=copy, env=env,
                               capture_output=True, text=True)
        if not probe.stdout.strip().startswith(str(copy)):
            raise SystemExit("mutants: the copy's hypviz is not the one imported "
                             f"({probe.stdout.strip() or probe.stderr.strip()})")
        start = time.perf_counter()
        try:
            res = subprocess.run([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not portability",
                                  *mutant.tests], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", time.perf_counter() - start, ""
        took = time.perf_counter() - start
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        last = lines[-1] if lines else res.stderr.strip().splitlines()[-1:]
        if res.returncode == 0:
            return "survived", took, str(last)
        if res.returncode in (1,):
            return "killed", took, str(last)
        return "error", took, str(last)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--module", help="only the mutants of this module (e.g. attention/comparison/result.py)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant (default 900)")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    chosen = [known[n] for n in args.names if n in known] if args.names else list(MUTANTS)
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"mutants: unknown mutant(s) {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    if args.module:
        chosen = [m for m in chosen if m.path == "hypviz/" + args.module.removeprefix("hypviz/")]
    if args.list:
        for m in chosen:
            print(f"{m.name:32s} {m.path:40s} {m.what}")
        return 0
    python = sys.executable
    outcome = {}
    for m in chosen:
        result, took, last = run(m, python, args.timeout)
        outcome[m.name] = result
        print(f"{result:9s} {m.name:32s} {took:6.1f}s  {m.what}" + ("" if result == "killed" else f"  [{last}]"), flush=True)
    survived = [n for n, r in outcome.items() if r != "killed"]
    print(f"{len(outcome) - len(survived)} of {len(outcome)} mutants killed"
          + (f"; not killed: {', '.join(survived)}" if survived else ""))
    if any(r == "stale" for r in outcome.values()):
        return 2
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
