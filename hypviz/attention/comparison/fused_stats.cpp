/* The statistics of one row block of compare()'s one-product path, fused: hypviz/attention/comparison/fused_stats.py.
 *
 * Per row i of a block S (rows x M, contiguous) with c_i, w_j and the two kinds' alpha_a, alpha_b:
 *   l_a,ij = S_ij - alpha_a c_i w_j,   l_b,ij = S_ij - alpha_b c_i w_j.
 * Three passes over a row (OpenMP threads take rows one at a time), each a vectorised loop:
 *   1. segment by segment (seg keys, a few hundred KiB that stay in the L2 from one loop to the next): the maxima
 *      of l_a and l_b by chunks (the chunk maxima locate the top k), then e_b = exp(l_b - max_q l_b) (kept) relative
 *      to the segment's maximum, its sum and sum_j e_b,j w_j; the segments' sums rescaled by f_q = exp(max_q l_b -
 *      max l_b) in double give Z_b and E_Pb w (s and w read from memory once, not twice);
 *   2. with x_j = (alpha_b - alpha_a) c_i (w_j - E_Pb w) (log P_a - log P_b up to a constant, centred under
 *      P_b): expm1(x_j), sum_j e_b,j x_j, sum_j e_b,j (expm1(x_j) - x_j) (KL's size, positive terms without
 *      cancellation) and Z_a = K sum_j e_b,j e^{x_j}, since e_a,j = exp(l_a,j - max l_a) = K e_b,j e^{x_j} with
 *      K = exp((alpha_b - alpha_a) c_i E_Pb w + max l_b - max l_a); on a narrow row (logit gap <= NARROW_X)
 *      expm1 is a polynomial without range reduction, recomputed in pass 3 where a row's w, e_b and expm1(x) do
 *      not fit the cache (fewer bytes moved than kept), else kept;
 *   3. sum_j |e_a,j - Z_a / M|, sum_j |e_b,j - Z_b / M| (the uniform baselines) and sum_j e_b,j |expm1(x_j) - m1|
 *      (the tilted TV), per segment with the centres divided by the segment's factor (a segment whose largest
 *      weight is below mean / 1024 adds len mean - its sum, no pass).
 * Two exponentials per logit (three on narrow rows that recompute).  Rows whose logit gap is wider than max_gap take
 * e_a directly instead.  Sums in T over blocks of 512 terms, added in double (in double inputs the signed moments
 * in double).  Rows the kernel leaves to the caller are flagged:
 *   bit 0: the logit gap exceeds max_gap (KL and TV from log-softmax by the caller; NaN here);
 *   bit 1 / bit 2: map a's / b's baseline on a near-uniform row whose centred logits span more than max_gap.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

/* x clamped to [-87, 88] = n ln 2 + r, |r| <= ln(2) / 2 (Cody-Waite reduction, n rounded by the 1.5 * 2^23 shift);
 * returns r, *scale = 2^n */
inline float reduce_f(float x, float *scale) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float t = xc * 1.44269504088896341f + 12582912.0f;
    int32_t ti;
    memcpy(&ti, &t, 4);
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    int32_t bits = (ti - 0x4B400000 + 127) << 23;
    memcpy(scale, &bits, 4);
    return r;
}

/* p(r) with expm1(r) = r + r^2 p(r): the Taylor series of e^r - 1 to r^8 (relative error below 2e-8 for |r| <= ln(2) / 2) */
inline float expm1_poly_f(float r) {
    float p = 2.48015873e-5f;
    p = p * r + 1.98412698e-4f;
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    return p * r + 0.5f;
}

/* e^x in float, about 1 ulp on [-87, 88], 0 below -87 (Cephes' polynomial on the reduced r); branch-free */
inline float exp_f(float x) {
    float scale;
    const float r = reduce_f(x, &scale);
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    float y = p * scale;
    return x < -87.0f ? 0.0f : y;
}

/* e^x - 1 in float without cancellation, for |x| <= 87: 2^n expm1(r) + (2^n - 1), exact for n = 0 */
inline float expm1_f(float x) {
    float scale;
    const float r = reduce_f(x, &scale);
    const float p = expm1_poly_f(r) * r * r + r;
    return scale * p + (scale - 1.0f);
}

/* e^x - 1 (as expm1_f) and e^x - 1 - x without cancellation: r^2 p(r) where n = 0 (r = x), else from e^x - 1 */
inline float expm1_less_x_f(float x, float *e_out) {
    float scale;
    const float r = reduce_f(x, &scale);
    const float q = expm1_poly_f(r) * r * r;
    const float e = scale * (q + r) + (scale - 1.0f);
    *e_out = e;
    return scale == 1.0f ? q : e - x;
}

inline float exp_t(float x) { return exp_f(x); }
inline double exp_t(double x) { return exp(x); }
inline float expm1_t(float x) { return expm1_f(x); }
inline double expm1_t(double x) { return expm1(x); }

template <class T>
void chunk_max(const T *__restrict s, const T *__restrict w, T cwa, T cwb, int64_t n, T *xa_out, T *xb_out) {
    T xa = -INFINITY, xb = -INFINITY;
#pragma omp simd reduction(max : xa, xb)
    for (int64_t j = 0; j < n; j++) {
        T a = s[j] - cwa * w[j], b = s[j] - cwb * w[j];
        xa = a > xa ? a : xa;
        xb = b > xb ? b : xb;
    }
    *xa_out = xa;
    *xb_out = xb;
}

/* Positive sums: T accumulators over blocks of BLOCK terms (16 to 32 terms per vector lane), the blocks added in
 * double (relative error at most about 32 eps of T, typically a few); the signed tilted moments in double. */
constexpr int64_t BLOCK = 512;

template <class T>
double exps(const T *__restrict s, const T *__restrict w, T cw, T mx, int64_t m, T *__restrict e) {
    double z = 0.0;
    for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t j1 = j0 + BLOCK < m ? j0 + BLOCK : m;
        T zp = 0;
#pragma omp simd reduction(+ : zp)
        for (int64_t j = j0; j < j1; j++) {
            T v = exp_t((s[j] - cw * w[j]) - mx);
            e[j] = v;
            zp += v;
        }
        z += (double)zp;
    }
    return z;
}

/* e_j = exp(s_j - cw w_j - mx) kept; returns sum_j e_j and sum_j e_j w_j */
template <class T>
void exps_w(const T *__restrict s, const T *__restrict w, T cw, T mx, int64_t m, T *__restrict e, double *z_out,
            double *zw_out) {
    double z = 0.0, zw = 0.0;
    for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t j1 = j0 + BLOCK < m ? j0 + BLOCK : m;
        T zp = 0, zwp = 0;
#pragma omp simd reduction(+ : zp, zwp)
        for (int64_t j = j0; j < j1; j++) {
            T v = exp_t((s[j] - cw * w[j]) - mx);
            e[j] = v;
            zp += v;
            zwp += v * w[j];
        }
        z += (double)zp;
        zw += (double)zwp;
    }
    *z_out = z;
    *zw_out = zw;
}

template <class T>
double abs_dev(const T *__restrict e, T mean, int64_t m) {
    double z = 0.0;
    for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t j1 = j0 + BLOCK < m ? j0 + BLOCK : m;
        T zp = 0;
#pragma omp simd reduction(+ : zp)
        for (int64_t j = j0; j < j1; j++) {
            T d = e[j] - mean;
            zp += d < 0 ? -d : d;
        }
        z += (double)zp;
    }
    return z;
}

/* x_j = scw (w_j - wb), expm1(x_j) kept; sum_j e_b,j x_j, sum_j e_b,j (expm1(x_j) - x_j) and sum_j e_b,j e^{x_j}.
 * The first is zero up to rounding (x is centred under P_b) and enters KL = log(1 + m_1) - E x only times m_1; the
 * second, KL's size, is a sum of positive terms, each e^x - 1 - x without cancellation in float (expm1_less_x_f):
 * all three in T over blocks of BLOCK terms.  In double, the signed moments in double and their difference. */
template <class T>
void tilt(const T *__restrict w, const T *__restrict eb, T wb, T scw, int64_t m, T *__restrict ex, double *s1_out,
          double *q_out, double *za_out) {
    double s1 = 0.0, q = 0.0, za = 0.0;
    for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t j1 = j0 + BLOCK < m ? j0 + BLOCK : m;
        T sp = 0, qp = 0, zp = 0;
#pragma omp simd reduction(+ : sp, qp, zp)
        for (int64_t j = j0; j < j1; j++) {
            T x = scw * (w[j] - wb), e;
            T d = expm1_less_x_f(x, &e);
            ex[j] = e;
            sp += eb[j] * x;
            qp += eb[j] * d;
            zp += eb[j] + eb[j] * e;
        }
        s1 += (double)sp;
        q += (double)qp;
        za += (double)zp;
    }
    *s1_out = s1;
    *q_out = q;
    *za_out = za;
}

/* tilt on a row whose |x| <= NARROW_X (x is centred, so |x| <= the logit gap): e^x - 1 - x = x^2 p(x) by the
 * polynomial of expm1_f with no range reduction (relative error below 1e-8 for |x| <= 1/2); expm1(x) kept in ex
 * unless ex is null */
constexpr double NARROW_X = 0.3;

template <class T>
inline T narrow_expm1_less_x(T x, T *e_out) {
    T p = (T)2.48015873e-5;
    p = p * x + (T)1.98412698e-4;
    p = p * x + (T)1.38888889e-3;
    p = p * x + (T)8.33333333e-3;
    p = p * x + (T)4.16666667e-2;
    p = p * x + (T)1.66666667e-1;
    p = p * x + (T)0.5;
    const T d = p * x * x;
    *e_out = d + x;
    return d;
}

template <class T>
void tilt_narrow(const T *__restrict w, const T *__restrict eb, T wb, T scw, int64_t m, T *__restrict ex,
                 double *s1_out, double *q_out, double *za_out) {
    double s1 = 0.0, q = 0.0, za = 0.0;
    for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t j1 = j0 + BLOCK < m ? j0 + BLOCK : m;
        T sp = 0, qp = 0, zp = 0;
        if (ex) {
#pragma omp simd reduction(+ : sp, qp, zp)
            for (int64_t j = j0; j < j1; j++) {
                T x = scw * (w[j] - wb), e;
                T d = narrow_expm1_less_x(x, &e);
                ex[j] = e;
                sp += eb[j] * x;
                qp += eb[j] * d;
                zp += eb[j] + eb[j] * e;
            }
        } else {
#pragma omp simd reduction(+ : sp, qp, zp)
            for (int64_t j = j0; j < j1; j++) {
                T x = scw * (w[j] - wb), e;
                T d = narrow_expm1_less_x(x, &e);
                sp += eb[j] * x;
                qp += eb[j] * d;
                zp += eb[j] + eb[j] * e;
            }
        }
        s1 += (double)sp;
        q += (double)qp;
        za += (double)zp;
    }
    *s1_out = s1;
    *q_out = q;
    *za_out = za;
}

template <>
void tilt<double>(const double *__restrict w, const double *__restrict eb, double wb, double scw, int64_t m,
                  double *__restrict ex, double *s1_out, double *q_out, double *za_out) {
    double s1 = 0.0, m1 = 0.0, za = 0.0;
#pragma omp simd reduction(+ : s1, m1, za)
    for (int64_t j = 0; j < m; j++) {
        double x = scw * (w[j] - wb), e = expm1(x);
        ex[j] = e;
        s1 += eb[j] * x;
        m1 += eb[j] * e;
        za += eb[j] + eb[j] * e;
    }
    *s1_out = s1;
    *q_out = m1 - s1;
    *za_out = za;
}

/* with e_a,j = kk e_b,j e^{x_j}: sum_j |e_a,j - mean_a|, sum_j |e_b,j - mean_b| and sum_j e_b,j |expm1(x_j) - m1| */
template <class T>
void deviations(const T *__restrict eb, const T *__restrict ex, T kk, T mean_a, T mean_b, T m1, int64_t m, bool with_a,
                double *da_out, double *db_out, double *dev_out) {
    double da = 0.0, db = 0.0, dev = 0.0;
    for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t j1 = j0 + BLOCK < m ? j0 + BLOCK : m;
        T dap = 0, dbp = 0, devp = 0;
#pragma omp simd reduction(+ : dap, dbp, devp)
        for (int64_t j = j0; j < j1; j++) {
            T b = eb[j], e = ex[j];
            T a = kk * (b + b * e) - mean_a;
            T d = b - mean_b, t = e - m1;
            dap += a < 0 ? -a : a;
            dbp += d < 0 ? -d : d;
            devp += b * (t < 0 ? -t : t);
        }
        da += (double)dap;
        db += (double)dbp;
        dev += (double)devp;
    }
    *da_out = with_a ? da : 0.0;
    *db_out = db;
    *dev_out = dev;
}

/* deviations with expm1(x_j) recomputed from w_j (a narrow row's tilt keeps none) */
template <class T>
void deviations_narrow(const T *__restrict eb, const T *__restrict w, T wb, T scw, T mean_a, T mean_b, T m1, int64_t m,
                       bool with_a, double *da_out, double *db_out, double *dev_out) {
    double da = 0.0, db = 0.0, dev = 0.0;
    for (int64_t j0 = 0; j0 < m; j0 += BLOCK) {
        const int64_t j1 = j0 + BLOCK < m ? j0 + BLOCK : m;
        T dap = 0, dbp = 0, devp = 0;
#pragma omp simd reduction(+ : dap, dbp, devp)
        for (int64_t j = j0; j < j1; j++) {
            T b = eb[j], e;
            narrow_expm1_less_x(scw * (w[j] - wb), &e);
            T a = (b + b * e) - mean_a;
            T d = b - mean_b, t = e - m1;
            dap += a < 0 ? -a : a;
            dbp += d < 0 ? -d : d;
            devp += b * (t < 0 ? -t : t);
        }
        da += (double)dap;
        db += (double)dbp;
        dev += (double)devp;
    }
    *da_out = with_a ? da : 0.0;
    *db_out = db;
    *dev_out = dev;
}

/* keep the k largest (v, i) in descending order; among ties the first pushed */
inline void push_top(double *v, int64_t *idx, int64_t *cnt, int64_t k, double x, int64_t i) {
    if (*cnt == k && !(x > v[k - 1])) return;
    int64_t p = *cnt < k ? (*cnt)++ : k - 1;
    while (p > 0 && x > v[p - 1]) {
        v[p] = v[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    v[p] = x;
    idx[p] = i;
}

/* the top k of l_j = s_j - cw w_j: only the k chunks with the largest maxima (and the tail) hold them */
template <class T>
void top_k(const T *s, const T *w, T cw, int64_t m, int64_t k, int64_t chunk, const T *cmax, int64_t n_chunks,
           double *v, int64_t *idx, double *cv, int64_t *ci) {
    int64_t cnt = 0;
    if (n_chunks < 4 * k) {
        for (int64_t j = 0; j < m; j++) push_top(v, idx, &cnt, k, (double)(s[j] - cw * w[j]), j);
        return;
    }
    int64_t cc = 0;
    for (int64_t q = 0; q < n_chunks; q++) push_top(cv, ci, &cc, k, (double)cmax[q], q);
    for (int64_t t = 0; t < k; t++)
        for (int64_t j = ci[t] * chunk; j < (ci[t] + 1) * chunk; j++) push_top(v, idx, &cnt, k, (double)(s[j] - cw * w[j]), j);
    for (int64_t j = n_chunks * chunk; j < m; j++) push_top(v, idx, &cnt, k, (double)(s[j] - cw * w[j]), j);
    for (int64_t t = 1; t < k; t++) /* ties across chunks: the earliest index first, as a scan of the row gives */
        for (int64_t p = t; p > 0 && v[p] == v[p - 1] && idx[p] < idx[p - 1]; p--) {
            double tv = v[p];
            v[p] = v[p - 1];
            v[p - 1] = tv;
            int64_t ti = idx[p];
            idx[p] = idx[p - 1];
            idx[p - 1] = ti;
        }
}

/* TV(softmax(l), U) and M max P of a near-uniform row without cancellation: u = l - mean l (tv_uniform); 1 if too wide */
template <class T>
int uniform_row(const T *s, const T *w, T cw, int64_t m, double max_gap, double *tv_out, double *peak_out) {
    double sum = 0.0;
    for (int64_t j = 0; j < m; j++) sum += (double)(s[j] - cw * w[j]);
    T mean = (T)(sum / (double)m);
    T umax = -INFINITY, umin = INFINITY;
    double se = 0.0;
    for (int64_t j = 0; j < m; j++) {
        T u = (s[j] - cw * w[j]) - mean;
        umax = u > umax ? u : umax;
        umin = u < umin ? u : umin;
        se += (double)expm1_t(u);
    }
    if ((double)umax - (double)umin > max_gap) return 1;
    double me = se / (double)m, sa = 0.0;
    for (int64_t j = 0; j < m; j++) sa += fabs((double)expm1_t((T)((s[j] - cw * w[j]) - mean)) - me);
    *peak_out = exp((double)umax) / (1.0 + me);
    *tv_out = 0.5 * (sa / (double)m) / (1.0 + me);
    return 0;
}

}  // namespace

extern "C" {

typedef struct {
    const void *s, *c, *w, *tol_a, *tol_b, *gap;
    double alpha_a, alpha_b, small, max_gap;
    int64_t rows, m, k, chunk, seg, cache;
    double *va, *vb, *a_at_ib, *b_at_ia, *ua, *ub, *peak_a, *peak_b, *kl, *tv;
    int64_t *ia, *ib;
    int32_t *flags;
    int status;
} job_t;

}

namespace {

/* the tilt of a row: narrow (|x| <= NARROW_X) or not; expm1(x) kept in ex unless `again` (recomputed later) */
template <class T>
void tilt_row(bool narrow, bool again, const T *w, const T *eb, T wb, T scw, int64_t m, T *ex, double *s1, double *q,
              double *za) {
    if (narrow)
        tilt_narrow(w, eb, wb, scw, m, again ? nullptr : ex, s1, q, za);
    else
        tilt(w, eb, wb, scw, m, ex, s1, q, za);
}

template <>
void tilt_row<double>(bool, bool, const double *w, const double *eb, double wb, double scw, int64_t m, double *ex,
                      double *s1, double *q, double *za) {
    tilt(w, eb, wb, scw, m, ex, s1, q, za);
}

template <class T>
void rows(job_t *jb) {
    const int64_t m = jb->m, k = jb->k, chunk = jb->chunk, n_chunks = m / chunk;
    const int64_t seg = jb->seg > chunk ? (jb->seg + chunk - 1) / chunk * chunk : chunk, n_seg = (m + seg - 1) / seg;
    const size_t bytes = ((m * sizeof(T) + 63) / 64) * 64;
    T *ea = (T *)aligned_alloc(64, bytes), *eb = (T *)aligned_alloc(64, bytes);
    T *cma = (T *)malloc((n_chunks + 1) * sizeof(T)), *cmb = (T *)malloc((n_chunks + 1) * sizeof(T));
    T *sma = (T *)malloc(n_seg * sizeof(T)), *smb = (T *)malloc(n_seg * sizeof(T));
    double *zq = (double *)malloc(4 * n_seg * sizeof(double));
    double *cv = (double *)malloc(k * sizeof(double));
    int64_t *ci = (int64_t *)malloc(k * sizeof(int64_t));
    const bool ok = ea && eb && cma && cmb && sma && smb && zq && cv && ci;
    double *zwq = zq + n_seg, *fq = zq + 2 * n_seg, *zaq = zq + 3 * n_seg;
    {  /* every thread of the team meets the loop; one without its scratch takes no rows' work, says so */
        const T *w = (const T *)jb->w;
        const T sgn = (T)(jb->alpha_b - jb->alpha_a);
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t i = 0; i < jb->rows; i++) {
            if (!ok) {
                jb->status = 1;
                continue;
            }
            const T *s = (const T *)jb->s + i * m;
            const T c = ((const T *)jb->c)[i];
            const T cwa = (T)jb->alpha_a * c, cwb = (T)jb->alpha_b * c;
            const bool small_a = (double)((const T *)jb->tol_a)[i] < jb->small;
            const bool small_b = (double)((const T *)jb->tol_b)[i] < jb->small;
            const bool wide = (double)((const T *)jb->gap)[i] > jb->max_gap;
            int32_t flags = wide ? 1 : 0;
            /* pass 1, segment by segment while the segment is in cache: its chunk maxima, then map b's exponentials
             * relative to the segment's maximum (e_b,j = f_q eb_j, f_q = exp(max_q l_b - max l_b)) and their sums */
            T ma = -INFINITY, mb = -INFINITY;
            cma[n_chunks] = cmb[n_chunks] = -INFINITY;
            for (int64_t q = 0; q < n_seg; q++) {
                const int64_t j0 = q * seg, j1 = j0 + seg < m ? j0 + seg : m;
                T sa = -INFINITY, sb = -INFINITY;
                for (int64_t h = j0 / chunk; h <= n_chunks && h * chunk < j1; h++) {
                    const int64_t h0 = h * chunk, h1 = h < n_chunks ? h0 + chunk : m;
                    chunk_max(s + h0, w + h0, cwa, cwb, h1 - h0, cma + h, cmb + h);
                    sa = cma[h] > sa ? cma[h] : sa;
                    sb = cmb[h] > sb ? cmb[h] : sb;
                }
                sma[q] = sa;
                smb[q] = sb;
                ma = sa > ma ? sa : ma;
                mb = sb > mb ? sb : mb;
                exps_w(s + j0, w + j0, cwb, sb, j1 - j0, eb + j0, zq + q, zwq + q);
            }
            double zb = 0.0, zw = 0.0;
            for (int64_t q = 0; q < n_seg; q++) {
                fq[q] = exp((double)smb[q] - (double)mb);
                zb += fq[q] * zq[q];
                zw += fq[q] * zwq[q];
            }
            double *va = jb->va + i * k, *vb = jb->vb + i * k;
            int64_t *ia = jb->ia + i * k, *ib = jb->ib + i * k;
            top_k(s, w, cwa, m, k, chunk, cma, n_chunks, va, ia, cv, ci);
            top_k(s, w, cwb, m, k, chunk, cmb, n_chunks, vb, ib, cv, ci);
            for (int64_t t = 0; t < k; t++) {
                jb->a_at_ib[i * k + t] = (double)(s[ib[t]] - cwa * w[ib[t]]);
                jb->b_at_ia[i * k + t] = (double)(s[ia[t]] - cwb * w[ia[t]]);
            }
            const double mean_b = zb / (double)m;
            if (small_b) {
                if (uniform_row(s, w, cwb, m, jb->max_gap, jb->ub + i, jb->peak_b + i)) flags |= 4;
            } else {
                jb->peak_b[i] = (double)m / zb;
            }
            if (small_a && uniform_row(s, w, cwa, m, jb->max_gap, jb->ua + i, jb->peak_a + i)) flags |= 2;
            /* a baseline's segment: sum_j |f eb_j - mean| = f sum_j |eb_j - mean / f|, or, where the segment's largest
             * weight f is below mean / 1024 (every term positive, mean / f possibly beyond T), len mean - f sum_j eb_j */
            if (!wide) {
                /* e_a,j = e_b,j e^{x_j} kk: la - lb = sgn c w = x + sgn c wb, so kk = exp(sgn c wb + mb - ma) */
                const double wb = zw / zb;
                /* a narrow row's expm1(x) is a short polynomial: recomputed by the deviations where the row's w, e_b and
                 * expm1(x) would not stay in the cache between the passes, else kept */
                const bool narrow = sizeof(T) == sizeof(float) && fabs((double)((const T *)jb->gap)[i]) <= NARROW_X;
                const bool again = narrow && 3 * m * (int64_t)sizeof(T) > jb->cache;
                double s1 = 0.0, dq = 0.0, za = 0.0;
                for (int64_t q = 0; q < n_seg; q++) {
                    const int64_t j0 = q * seg, j1 = j0 + seg < m ? j0 + seg : m;
                    double s1q, dqq;
                    tilt_row(narrow, again, w + j0, eb + j0, (T)wb, sgn * c, j1 - j0, ea + j0, &s1q, &dqq, zaq + q);
                    s1 += fq[q] * s1q;
                    dq += fq[q] * dqq;
                    za += fq[q] * zaq[q];
                }
                const double kk = exp((double)sgn * (double)c * (double)(T)wb + (double)mb - (double)ma);
                za *= kk;
                s1 /= zb;
                const double m1 = s1 + dq / zb;  /* E_Pb[e^x - 1] */
                const double mean_a = za / (double)m;
                double da = 0.0, db = 0.0, dev = 0.0;
                for (int64_t q = 0; q < n_seg; q++) {
                    const int64_t j0 = q * seg, j1 = j0 + seg < m ? j0 + seg : m;
                    const double f = fq[q], fa = kk * f, len = (double)(j1 - j0);
                    /* map a's weights in the segment are at most exp(max_q l_a - max l_a) */
                    const bool low_a = 1024.0 * exp((double)sma[q] - (double)ma) <= mean_a || !(fa > 0.0);
                    const bool low_b = 1024.0 * f <= mean_b;
                    double daq, dbq, devq;
                    const T ca = low_a ? (T)0 : (T)(mean_a / fa), cb = low_b ? (T)0 : (T)(mean_b / f);
                    if (again)
                        deviations_narrow(eb + j0, w + j0, (T)wb, sgn * c, ca, cb, (T)m1, j1 - j0, !small_a && !low_a,
                                          &daq, &dbq, &devq);
                    else
                        deviations(eb + j0, ea + j0, (T)1, ca, cb, (T)m1, j1 - j0, !small_a && !low_a, &daq, &dbq, &devq);
                    da += low_a ? len * mean_a - fa * zaq[q] : fa * daq;
                    db += low_b ? len * mean_b - f * zq[q] : f * dbq;
                    dev += f * devq;
                }
                const double kl = log1p(m1) - s1;  /* log(1 + s1 + dq) - s1: an error in s1 enters times m1 / (1 + m1) */
                jb->kl[i] = kl > 0.0 ? kl : 0.0;
                jb->tv[i] = 0.5 * (dev / zb) / (1.0 + m1);
                if (!small_b) jb->ub[i] = 0.5 * db / zb;
                if (!small_a) {
                    jb->ua[i] = 0.5 * da / za;
                    jb->peak_a[i] = (double)m / za;
                }
            } else {
                jb->kl[i] = NAN;
                jb->tv[i] = NAN;
                if (!small_b) {
                    double db = 0.0;
                    for (int64_t q = 0; q < n_seg; q++) {
                        const int64_t j0 = q * seg, j1 = j0 + seg < m ? j0 + seg : m;
                        const double f = fq[q];
                        db += 1024.0 * f <= mean_b ? (double)(j1 - j0) * mean_b - f * zq[q]
                                                   : f * abs_dev(eb + j0, (T)(mean_b / f), j1 - j0);
                    }
                    jb->ub[i] = 0.5 * db / zb;
                }
                if (!small_a) {
                    const double za = exps(s, w, cwa, ma, m, ea);
                    jb->ua[i] = 0.5 * abs_dev(ea, (T)(za / (double)m), m) / za;
                    jb->peak_a[i] = (double)m / za;
                }
            }
            jb->flags[i] = flags;
        }
    }
    free(ea);
    free(eb);
    free(cma);
    free(cmb);
    free(sma);
    free(smb);
    free(zq);
    free(cv);
    free(ci);
}

}  // namespace

/* The block's rows shared by `threads` OpenMP threads (torch's own runtime where it is loaded), taken one at a
 * time (no thread idles at the end while another finishes a share); 0 on success. */
extern "C" int hypviz_shared_rows(int is_double, int threads, const job_t *proto) {
    if (threads < 1) threads = 1;
    int status = 0;
#pragma omp parallel num_threads(threads) reduction(| : status)
    {
        job_t job = *proto;
        job.status = 0;
        if (is_double)
            rows<double>(&job);
        else
            rows<float>(&job);
        status |= job.status;
    }
    return status;
}
