/* The GPT trainer's kernels: every forward against a double-precision
 * reference written here from its definition (GELU against the exact erf
 * form, within the tanh approximation's known error), every backward
 * against central finite differences of L = sum(out * R) for a fixed
 * random R, the accumulating gradients accumulate, the cross-entropy and
 * AdamW against hand values, and two runs give the same bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* ---- helpers ----------------------------------------------------------------*/

static uint64_t rng_state = 12345;

static float uniform(float lo, float hi)
{
    rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
    double u = (double)(rng_state >> 11) / 9007199254740992.0;
    return lo + (float)u * (hi - lo);
}

static float *randn(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = uniform(-scale, scale);
    return x;
}

static float *zeros(size_t n)
{
    float *x = calloc(n, sizeof *x);
    assert_non_null(x);
    return x;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* A forward: writes its output given the current inputs. */
typedef void (*forward_fn)(void *ctx, float *out);

/* Checks analytic[i] = dL/dx[i] for every i by central differences of
 * L = out . R with x perturbed by +-eps. */
static void check_grad(const char *what, float *x, size_t n, const float *analytic,
                       forward_fn fwd, void *ctx, float *out, const float *R, size_t n_out,
                       float eps)
{
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + eps;
        fwd(ctx, out);
        double lp = dot(out, R, n_out);
        x[i] = keep - eps;
        fwd(ctx, out);
        double lm = dot(out, R, n_out);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * eps);
        double a = analytic[i];
        /* The worst difference seen with these step sizes is 1e-4 (GELU's
         * eps of 1e-3), 3e-5 elsewhere: 2e-3 leaves a margin of 20 and still
         * fails a gradient off by 1%. */
        double tol = 2e-3 * fmax(1.0, fmax(fabs(a), fabs(num)));
        if (fabs(a - num) > tol)
            fail_msg("%s[%zu]: analytic %.6f, numeric %.6f", what, i, a, num);
    }
}

/* got[i] against want[i] (double), within rel * (1 + |want|). */
static void check_close(const char *what, const float *got, const double *want, size_t n,
                        double rel)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= rel * (1.0 + fabs(want[i]))))
            fail_msg("%s[%zu]: %.9g, reference %.9g", what, i, (double)got[i], want[i]);
}

/* ---- matmul -----------------------------------------------------------------*/

enum { N = 6, C = 8, OC = 5, B = 2, T = 3, NH = 2, V = 7 };

/* out[n][o] = bias[o] + sum_c inp[n][c] w[o][c] (w is OC x C, row-major). */
static void test_matmul_forward_reference(void **state)
{
    (void)state;
    float *inp = randn(N * C, 1), *w = randn(OC * C, 1), *b = randn(OC, 1);
    float *out = zeros(N * OC), *out_nb = zeros(N * OC);
    double want[N * OC], want_nb[N * OC];
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int c = 0; c < C; c++)
                s += (double)inp[n * C + c] * w[o * C + c];
            want[n * OC + o] = s + b[o];
            want_nb[n * OC + o] = s;
        }
    gpt_matmul_forward(out, inp, w, b, N, C, OC);
    gpt_matmul_forward(out_nb, inp, w, NULL, N, C, OC);
    check_close("matmul", out, want, N * OC, 1e-5);
    check_close("matmul without bias", out_nb, want_nb, N * OC, 1e-5);
    free(inp), free(w), free(b), free(out), free(out_nb);
}

typedef struct mm {
    float *inp, *w, *b;
} mm_t;

static void mm_fwd(void *p, float *out)
{
    mm_t *m = p;
    gpt_matmul_forward(out, m->inp, m->w, m->b, N, C, OC);
}

static void test_matmul(void **state)
{
    (void)state;
    mm_t m = {randn(N * C, 1), randn(OC * C, 1), randn(OC, 1)};
    float *out = zeros(N * OC), *R = randn(N * OC, 1);
    float *dinp = zeros(N * C), *dw = zeros(OC * C), *db = zeros(OC);
    gpt_matmul_backward(dinp, dw, db, R, m.inp, m.w, N, C, OC);
    check_grad("matmul dinp", m.inp, N * C, dinp, mm_fwd, &m, out, R, N * OC, 1e-2f);
    check_grad("matmul dweight", m.w, OC * C, dw, mm_fwd, &m, out, R, N * OC, 1e-2f);
    check_grad("matmul dbias", m.b, OC, db, mm_fwd, &m, out, R, N * OC, 1e-2f);
    /* Parameter gradients accumulate: a second call doubles them. */
    float *dw2 = zeros(OC * C);
    memcpy(dw2, dw, OC * C * sizeof *dw2);
    gpt_matmul_backward(NULL, dw2, NULL, R, m.inp, m.w, N, C, OC);
    for (size_t i = 0; i < OC * C; i++)
        assert_float_equal(dw2[i], 2 * dw[i], 1e-5 * (1 + fabs(dw[i])));
    free(m.inp), free(m.w), free(m.b), free(out), free(R), free(dinp), free(dw), free(db);
    free(dw2);
}

/* ---- layer norm -------------------------------------------------------------*/

typedef struct ln {
    float *inp, *w, *b, *mean, *rstd;
} ln_t;

static void ln_fwd(void *p, float *out)
{
    ln_t *l = p;
    gpt_layernorm_forward(out, l->mean, l->rstd, l->inp, l->w, l->b, N, C);
}

/* Per row: mean, biased variance, rstd = 1 / sqrt(var + 1e-5), then
 * y = (x - mean) rstd w + b. */
static void test_layernorm_forward_reference(void **state)
{
    (void)state;
    ln_t l = {randn(N * C, 2), randn(C, 1), randn(C, 1), zeros(N), zeros(N)};
    float *out = zeros(N * C);
    double want[N * C], want_mean[N], want_rstd[N];
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += l.inp[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (l.inp[n * C + c] - m) * (l.inp[n * C + c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        want_mean[n] = m;
        want_rstd[n] = r;
        for (int c = 0; c < C; c++)
            want[n * C + c] = (l.inp[n * C + c] - m) * r * l.w[c] + l.b[c];
    }
    ln_fwd(&l, out);
    check_close("layernorm", out, want, N * C, 1e-5);
    check_close("layernorm mean", l.mean, want_mean, N, 1e-6);
    check_close("layernorm rstd", l.rstd, want_rstd, N, 1e-6);
    free(l.inp), free(l.w), free(l.b), free(l.mean), free(l.rstd), free(out);
}

static void test_layernorm(void **state)
{
    (void)state;
    ln_t l = {randn(N * C, 2), randn(C, 1), randn(C, 1), zeros(N), zeros(N)};
    float *out = zeros(N * C), *R = randn(N * C, 1);
    float *dinp = zeros(N * C), *dw = zeros(C), *db = zeros(C);
    ln_fwd(&l, out);
    gpt_layernorm_backward(dinp, dw, db, R, l.inp, l.w, l.mean, l.rstd, N, C);
    check_grad("layernorm dinp", l.inp, N * C, dinp, ln_fwd, &l, out, R, N * C, 1e-2f);
    check_grad("layernorm dweight", l.w, C, dw, ln_fwd, &l, out, R, N * C, 1e-2f);
    check_grad("layernorm dbias", l.b, C, db, ln_fwd, &l, out, R, N * C, 1e-2f);
    free(l.inp), free(l.w), free(l.b), free(l.mean), free(l.rstd), free(out), free(R);
    free(dinp), free(dw), free(db);
}

/* ---- attention ----------------------------------------------------------------*/

typedef struct at {
    float *qkv, *att;
} at_t;

static void at_fwd(void *p, float *out)
{
    at_t *a = p;
    gpt_attention_forward(out, a->att, a->qkv, B, T, C, NH);
}

/* qkv rows are (q | k | v) of C each, head h owning columns h*hs ..
 * (h+1)*hs - 1 of each; att[b][h][t][t2] = softmax over t2 <= t of
 * q_t . k_t2 / sqrt(hs), 0 for t2 > t; out_t = sum_t2 att v_t2. */
static void test_attention_forward_reference(void **state)
{
    (void)state;
    enum { HS = C / NH };
    at_t a = {randn(B * T * 3 * C, 1), zeros(B * NH * T * T)};
    float *out = zeros(B * T * C);
    double want[B * T * C], want_att[B * NH * T * T];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = a.qkv + (b * T + t) * 3 * C + h * HS;
                double *row = want_att + ((b * NH + h) * T + t) * T, sum = 0;
                for (int t2 = 0; t2 < T; t2++) {
                    row[t2] = 0;
                    if (t2 > t)
                        continue;
                    const float *k = a.qkv + (b * T + t2) * 3 * C + C + h * HS;
                    double dot = 0;
                    for (int i = 0; i < HS; i++)
                        dot += (double)q[i] * k[i];
                    row[t2] = exp(dot / sqrt((double)HS));
                    sum += row[t2];
                }
                for (int t2 = 0; t2 <= t; t2++)
                    row[t2] /= sum;
                for (int i = 0; i < HS; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        o += row[t2] * a.qkv[(b * T + t2) * 3 * C + 2 * C + h * HS + i];
                    want[(b * T + t) * C + h * HS + i] = o;
                }
            }
    at_fwd(&a, out);
    check_close("attention", out, want, B * T * C, 1e-5);
    check_close("attention weights", a.att, want_att, B * NH * T * T, 1e-5);
    free(a.qkv), free(a.att), free(out);
}

static void test_attention(void **state)
{
    (void)state;
    at_t a = {randn(B * T * 3 * C, 1), zeros(B * NH * T * T)};
    float *out = zeros(B * T * C), *R = randn(B * T * C, 1), *dqkv = zeros(B * T * 3 * C);
    at_fwd(&a, out);
    /* Causal: a query never attends to a later key; rows sum to 1. */
    for (int r = 0; r < B * NH * T; r++) {
        int t = r % T;
        double sum = 0;
        for (int t2 = 0; t2 < T; t2++) {
            if (t2 > t)
                assert_true(a.att[r * T + t2] == 0.0f);
            sum += a.att[r * T + t2];
        }
        assert_float_equal(sum, 1.0, 1e-5);
    }
    gpt_attention_backward(dqkv, R, a.qkv, a.att, B, T, C, NH);
    check_grad("attention dqkv", a.qkv, B * T * 3 * C, dqkv, at_fwd, &a, out, R, B * T * C,
               1e-2f);
    free(a.qkv), free(a.att), free(out), free(R), free(dqkv);
}

/* ---- elementwise --------------------------------------------------------------*/

typedef struct ew {
    float *x;
    size_t n;
} ew_t;

static void gelu_fwd(void *p, float *out)
{
    ew_t *e = p;
    gpt_gelu_forward(out, e->x, e->n);
}

static void test_gelu(void **state)
{
    (void)state;
    ew_t e = {randn(40, 3), 40};
    float *out = zeros(40), *R = randn(40, 1), *dx = zeros(40);
    gpt_gelu_backward(dx, e.x, R, 40);
    check_grad("gelu", e.x, 40, dx, gelu_fwd, &e, out, R, 40, 1e-3f);
    float z = 0, o;
    gpt_gelu_forward(&o, &z, 1);
    assert_true(o == 0.0f);
    free(e.x), free(out), free(R), free(dx);
}

/* The tanh approximation of GELU (as in GPT-2) stays within 4.8e-4 of
 * the exact x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 everywhere (its worst
 * point is near x = -2.7); and at x = 1 it is 0.84119199 (the exact
 * value is 0.84134475). */
static void test_gelu_forward_reference(void **state)
{
    (void)state;
    enum { NG = 81 };
    float x[NG], out[NG];
    for (int i = 0; i < NG; i++)
        x[i] = -5.0f + 0.125f * (float)i;     /* -5 .. 5, exact in binary */
    gpt_gelu_forward(out, x, NG);
    for (int i = 0; i < NG; i++) {
        double exact = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
        if (!(fabs(out[i] - exact) <= 4.8e-4))
            fail_msg("gelu(%g) = %.9g, exact %.9g", (double)x[i], (double)out[i], exact);
    }
    float one = 1.0f, g;
    gpt_gelu_forward(&g, &one, 1);
    assert_float_equal(g, 0.84119199, 1e-6);
}

static void test_add_and_accumulate(void **state)
{
    (void)state;
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, out[3];
    gpt_add_forward(out, a, b, 3);
    assert_true(out[0] == 11 && out[1] == 22 && out[2] == 33);
    gpt_accumulate(out, a, 3);
    assert_true(out[0] == 12 && out[1] == 24 && out[2] == 36);
}

/* ---- embedding ----------------------------------------------------------------*/

typedef struct em {
    int32_t tok[B * T];
    float *wte, *wpe;
} em_t;

static void em_fwd(void *p, float *out)
{
    em_t *e = p;
    gpt_embed_forward(out, e->tok, e->wte, e->wpe, B, T, C);
}

/* out[b][t] = wte[tok[b][t]] + wpe[t]. */
static void test_embedding_forward_reference(void **state)
{
    (void)state;
    em_t e = {.tok = {1, 4, 1, 0, 6, 4}, .wte = randn(V * C, 1), .wpe = randn(T * C, 1)};
    float *out = zeros(B * T * C);
    double want[B * T * C];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                want[(b * T + t) * C + c] =
                    (double)e.wte[e.tok[b * T + t] * C + c] + e.wpe[t * C + c];
    em_fwd(&e, out);
    check_close("embedding", out, want, B * T * C, 1e-6);
    free(e.wte), free(e.wpe), free(out);
}

static void test_embedding(void **state)
{
    (void)state;
    em_t e = {.tok = {1, 4, 1, 0, 6, 4}, .wte = randn(V * C, 1), .wpe = randn(T * C, 1)};
    float *out = zeros(B * T * C), *R = randn(B * T * C, 1);
    float *dwte = zeros(V * C), *dwpe = zeros(T * C);
    gpt_embed_backward(dwte, dwpe, R, e.tok, B, T, C);
    check_grad("embedding dwte", e.wte, V * C, dwte, em_fwd, &e, out, R, B * T * C, 1e-2f);
    check_grad("embedding dwpe", e.wpe, T * C, dwpe, em_fwd, &e, out, R, B * T * C, 1e-2f);
    free(e.wte), free(e.wpe), free(out), free(R), free(dwte), free(dwpe);
}

/* ---- cross-entropy --------------------------------------------------------------*/

typedef struct ce {
    float *logits, *probs;
    int32_t tgt[N];
} ce_t;

/* L = mean loss (R is all ones over one "output": the mean). */
static void ce_fwd(void *p, float *out)
{
    ce_t *c = p;
    float losses[N];
    gpt_crossentropy_forward(losses, c->probs, c->logits, c->tgt, N, V);
    double s = 0;
    for (int n = 0; n < N; n++)
        s += losses[n];
    out[0] = (float)(s / N);
}

static void test_cross_entropy(void **state)
{
    (void)state;
    /* By hand: logits (0, ln 3) -> probs (1/4, 3/4); target 1 -> -ln 0.75. */
    float z[2] = {0.0f, logf(3.0f)}, p[2], loss;
    int32_t t1 = 1;
    gpt_crossentropy_forward(&loss, p, z, &t1, 1, 2);
    assert_float_equal(p[0], 0.25, 1e-6);
    assert_float_equal(loss, -log(0.75), 1e-6);

    ce_t c = {.logits = randn(N * V, 2), .probs = zeros(N * V), .tgt = {0, 3, 6, 2, 2, 5}};
    float out, one = 1.0f, *d = zeros(N * V);
    ce_fwd(&c, &out);
    gpt_crossentropy_backward(d, c.probs, c.tgt, N, V, 1.0f);
    check_grad("cross-entropy", c.logits, N * V, d, ce_fwd, &c, &out, &one, 1, 1e-2f);
    /* The scale multiplies the gradient (loss scaling). */
    ce_fwd(&c, &out);                  /* the probabilities of the unperturbed logits */
    gpt_crossentropy_backward(d, c.probs, c.tgt, N, V, 1.0f);
    float *d8 = zeros(N * V);
    gpt_crossentropy_backward(d8, c.probs, c.tgt, N, V, 8.0f);
    for (int i = 0; i < N * V; i++)
        assert_float_equal(d8[i], 8 * d[i], 1e-6);
    free(c.logits), free(c.probs), free(d), free(d8);
}

/* ---- optimizer and checks ---------------------------------------------------------*/

static void test_adamw_and_checks(void **state)
{
    (void)state;
    /* Step 1: m = 0.1 g, v = 0.05 g^2 (b1 0.9, b2 0.95); bias-corrected
     * m_hat = g, v_hat = g^2, so p -= lr (sign(g) ~ g / (|g| + eps) + wd p). */
    float p = 1.0f, m = 0, v = 0, g = 0.5f;
    gpt_adamw(&p, &m, &v, &g, 1, 1, 0.1f, 0.9f, 0.95f, 1e-8f, 0.01f);
    assert_float_equal(m, 0.05, 1e-7);
    assert_float_equal(v, 0.0125, 1e-7);
    assert_float_equal(p, 1.0 - 0.1 * (1.0 + 0.01), 1e-6);

    float x[4] = {1, -2, 3, 0};
    assert_float_equal(gpt_sum_squares(x, 4), 14.0, 0);
    assert_false(gpt_has_nonfinite(x, 4));
    x[2] = INFINITY;
    assert_true(gpt_has_nonfinite(x, 4));
    x[2] = NAN;
    assert_true(gpt_has_nonfinite(x, 4));
    float y[2] = {2, -4};
    gpt_scale(y, 2, 0.5f);
    assert_true(y[0] == 1 && y[1] == -2);
}

/* Two runs of a forward and backward give the same bytes. */
static void test_deterministic(void **state)
{
    (void)state;
    float *qkv = randn(B * T * 3 * C, 1), *R = randn(B * T * C, 1);
    float *o1 = zeros(B * T * C), *o2 = zeros(B * T * C);
    float *a1 = zeros(B * NH * T * T), *a2 = zeros(B * NH * T * T);
    float *d1 = zeros(B * T * 3 * C), *d2 = zeros(B * T * 3 * C);
    gpt_attention_forward(o1, a1, qkv, B, T, C, NH);
    gpt_attention_backward(d1, R, qkv, a1, B, T, C, NH);
    gpt_attention_forward(o2, a2, qkv, B, T, C, NH);
    gpt_attention_backward(d2, R, qkv, a2, B, T, C, NH);
    assert_memory_equal(o1, o2, B * T * C * sizeof *o1);
    assert_memory_equal(d1, d2, B * T * 3 * C * sizeof *d1);
    free(qkv), free(R), free(o1), free(o2), free(a1), free(a2), free(d1), free(d2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_forward_reference),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_layernorm_forward_reference),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_attention_forward_reference),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_gelu_forward_reference),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_add_and_accumulate),
        cmocka_unit_test(test_embedding_forward_reference),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_adamw_and_checks),
        cmocka_unit_test(test_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
