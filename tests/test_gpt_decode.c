/* Decoding against the training forward (examples/gpt/decode.h): decoding
 * has no reference of its own (with and without the KV offload it runs
 * the same kernels), so its logits at every position are compared with
 * the training forward's over the same prefix, which the kernel tests
 * check against a double-precision reference.
 *
 * A small model's parameters (gpt_model_new, read back) run on the host
 * through kernels.h twice: as the training forward runs a whole sequence
 * (gpt_embed_forward, gpt_attention_forward over T positions) and as the
 * decoder runs one position at a time (gpt_embed_at, gpt_kv_write,
 * gpt_attention_decode over the cache), in decode.c's order. The
 * attention is causal, so the training forward's logits at position t are
 * those of the prefix 0..t; the decoder's must be the same floats. Then
 * gpt_decode itself, through the runtime with and without the KV offload,
 * chooses at each position the training forward's greedy token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decode.h"
#include "kernels.h"
#include "model.h"

enum { V = 64, T = 16, L = 2, C = 32, NH = 2, B = 2, P = 4, G = 9 };

/* The model's weights, pointers into its flat parameters (model.c's
 * layout: wte, wpe, per layer GPT_PER_LAYER weights, lnf weight, bias). */
typedef struct weights {
    const float *wte, *wpe, *layer[L][GPT_PER_LAYER], *lnfw, *lnfb;
} weights_t;

static weights_t weights_of(const float *flat, size_t n)
{
    const size_t per[GPT_PER_LAYER] = {C,         C, 3 * C * C, 3 * C, C * C,     C,
                                       C,         C, 4 * C * C, 4 * C, 4 * C * C, C};
    weights_t w;
    size_t at = 0;
    w.wte = flat + at, at += (size_t)V * C;
    w.wpe = flat + at, at += (size_t)T * C;
    for (int l = 0; l < L; l++)
        for (int k = 0; k < GPT_PER_LAYER; k++)
            w.layer[l][k] = flat + at, at += per[k];
    w.lnfw = flat + at, at += C;
    w.lnfb = flat + at, at += C;
    assert_int_equal(at, n);                     /* the layout is the model's */
    return w;
}

static float *floats(size_t n)
{
    float *x = calloc(n, sizeof *x);
    assert_non_null(x);
    return x;
}

/* ---- the two ways, on the host ---------------------------------------- */

/* One block on x ([N, C]) after its attention: out = res + fcproj(gelu(fc(ln2(res)))),
 * res = x + proj(atty), as model.c and decode.c compute it. */
static void block_rest(float *out, const float *x, const float *atty, const float *const *w,
                       int N)
{
    size_t NC = (size_t)N * C;
    float *proj = floats(NC), *res = floats(NC), *ln = floats(NC), *mean = floats((size_t)N),
          *rstd = floats((size_t)N), *fc = floats(4 * NC), *g = floats(4 * NC),
          *fcp = floats(NC);
    gpt_matmul_forward(proj, atty, w[GPT_PROJW], w[GPT_PROJB], N, C, C);
    gpt_add_forward(res, x, proj, NC);
    gpt_layernorm_forward(ln, mean, rstd, res, w[GPT_LN2W], w[GPT_LN2B], N, C);
    gpt_matmul_forward(fc, ln, w[GPT_FCW], w[GPT_FCB], N, C, 4 * C);
    gpt_gelu_forward(g, fc, 4 * NC);
    gpt_matmul_forward(fcp, g, w[GPT_FCPROJW], w[GPT_FCPROJB], N, 4 * C, C);
    gpt_add_forward(out, res, fcp, NC);
    free(proj), free(res), free(ln), free(mean), free(rstd), free(fc), free(g), free(fcp);
}

/* x ([N, C]) -> ln1 -> qkv ([N, 3C]). */
static void block_qkv(float *qkv, const float *x, const float *const *w, int N)
{
    float *ln = floats((size_t)N * C), *mean = floats((size_t)N), *rstd = floats((size_t)N);
    gpt_layernorm_forward(ln, mean, rstd, x, w[GPT_LN1W], w[GPT_LN1B], N, C);
    gpt_matmul_forward(qkv, ln, w[GPT_QKVW], w[GPT_QKVB], N, C, 3 * C);
    free(ln), free(mean), free(rstd);
}

/* The head on x ([N, C]): logits ([N, V]). */
static void head(float *logits, const float *x, const weights_t *w, int N)
{
    float *ln = floats((size_t)N * C), *mean = floats((size_t)N), *rstd = floats((size_t)N);
    gpt_layernorm_forward(ln, mean, rstd, x, w->lnfw, w->lnfb, N, C);
    gpt_matmul_forward(logits, ln, w->wte, NULL, N, C, V);
    free(ln), free(mean), free(rstd);
}

/* The training forward over tok ([B, T]): logits ([B, T, V]). */
static void forward_logits(float *logits, const int32_t *tok, const weights_t *w)
{
    int N = B * T;
    size_t NC = (size_t)N * C;
    float *x = floats(NC), *y = floats(NC), *qkv = floats(3 * NC), *atty = floats(NC),
          *att = floats((size_t)B * NH * T * T);
    gpt_embed_forward(x, tok, w->wte, w->wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        block_qkv(qkv, x, w->layer[l], N);
        gpt_attention_forward(atty, att, qkv, B, T, C, NH);
        block_rest(y, x, atty, w->layer[l], N);
        memcpy(x, y, NC * sizeof *x);
    }
    head(logits, x, w, N);
    free(x), free(y), free(qkv), free(atty), free(att);
}

/* The decoder over tok ([B, T]) one position at a time, each block's
 * cache [T, 2, B, C]: logits ([B, T, V], as the forward lays them out). */
static void decode_logits(float *logits, const int32_t *tok, const weights_t *w)
{
    size_t BC = (size_t)B * C;
    float *cache[L], *x = floats(BC), *y = floats(BC), *qkv = floats(3 * BC),
          *atty = floats(BC), *lg = floats((size_t)B * V);
    int32_t at[B];
    for (int l = 0; l < L; l++)
        cache[l] = floats((size_t)T * 2 * BC);
    for (int pos = 0; pos < T; pos++) {
        for (int b = 0; b < B; b++)
            at[b] = tok[b * T + pos];
        gpt_embed_at(x, at, w->wte, w->wpe, B, pos, C);
        for (int l = 0; l < L; l++) {
            block_qkv(qkv, x, w->layer[l], B);
            gpt_kv_write(cache[l], qkv, B, C, pos);
            gpt_attention_decode(atty, qkv, cache[l], B, C, NH, pos);
            block_rest(y, x, atty, w->layer[l], B);
            memcpy(x, y, BC * sizeof *x);
        }
        head(lg, x, w, B);
        for (int b = 0; b < B; b++)
            memcpy(logits + ((size_t)b * T + pos) * V, lg + (size_t)b * V, V * sizeof *lg);
    }
    for (int l = 0; l < L; l++)
        free(cache[l]);
    free(x), free(y), free(qkv), free(atty), free(lg);
}

/* ---- the model ---------------------------------------------------------- */

static void silent(const char *line, void *user)
{
    (void)line;
    (void)user;
}

typedef struct fixture {
    cham_context_t *ctx;
    gpt_ops_t ops;
    gpt_model_t *m;
    float *params;
    size_t n_params;
    weights_t w;
} fixture_t;

/* The model on a fresh 64 MiB data-mode sim context, after `steps`
 * training steps (so its weights are not only their initial +-0.02), and
 * its parameters read back. */
static void open_model(fixture_t *f, int steps)
{
    cham_config_t cfg = cham_config_default();
    cfg.device.data = true;
    cfg.device.capacity = 64u << 20;
    assert_int_equal(cham_strategy_apply(CHAM_STRATEGY_NATIVE, &cfg), CHAM_OK);
    assert_int_equal(cham_context_new(&cfg, &f->ctx), CHAM_OK);
    cham_context_set_log(f->ctx, silent, NULL);
    assert_int_equal(gpt_ops_init(&f->ops, f->ctx), CHAM_OK);
    gpt_shape_t shape = {.vocab = V, .seq = T, .layers = L, .hidden = C, .heads = NH,
                         .batch = B};
    char err[300];
    if (gpt_model_new(&f->ops, &shape, 7, false, &f->m, err, sizeof err) != CHAM_OK)
        fail_msg("%s", err);
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 5) % V, tgt[i] = (i * 5 + 5) % V;
    for (int s = 0; s < steps; s++) {
        double loss, sumsq;
        bool overflow;
        assert_int_equal(gpt_forward(f->m, tok, tgt, NULL, true, &loss), CHAM_OK);
        assert_int_equal(gpt_backward(f->m, 1.0f), CHAM_OK);
        assert_int_equal(gpt_check_grads(f->m, &overflow, &sumsq), CHAM_OK);
        assert_int_equal(gpt_optimizer_step(f->m, 1.0f, s + 1, 3e-2f, 0.0f), CHAM_OK);
        assert_int_equal(cham_step_end(f->ctx), CHAM_OK);
    }
    f->n_params = gpt_param_count(f->m);
    f->params = floats(f->n_params);
    assert_int_equal(gpt_read_params(f->m, f->params), CHAM_OK);
    f->w = weights_of(f->params, f->n_params);
}

static void close_model(fixture_t *f)
{
    assert_int_equal(cham_device_hazard_count(cham_context_device(f->ctx)), 0);
    free(f->params);
    gpt_model_free(f->m);
    cham_context_free(f->ctx);
}

/* Two sequences of T tokens, neither the training batch. */
static void some_tokens(int32_t *tok)
{
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)((i * 37 + 11) % V);
}

/* At every position the decoder's logits are the training forward's, to
 * the bit (the kernels compute a position in the same order). */
static void test_decode_logits_are_the_forward_s(void **state)
{
    (void)state;
    fixture_t f;
    open_model(&f, 20);
    int32_t tok[B * T];
    some_tokens(tok);
    size_t n = (size_t)B * T * V;
    float *want = floats(n), *got = floats(n);
    forward_logits(want, tok, &f.w);
    decode_logits(got, tok, &f.w);
    for (int b = 0; b < B; b++)
        for (int pos = 0; pos < T; pos++) {
            const float *x = got + ((size_t)b * T + pos) * V, *y = want + ((size_t)b * T + pos) * V;
            for (int v = 0; v < V; v++)
                if (x[v] != y[v])
                    fail_msg("sequence %d position %d logit %d: decode %.9g, forward %.9g", b,
                             pos, v, (double)x[v], (double)y[v]);
        }
    /* Not vacuous: the logits differ between positions. */
    assert_memory_not_equal(want, want + V, V * sizeof *want);
    free(want);
    free(got);
    close_model(&f);
}

/* gpt_decode through the runtime, caches on the device and offloaded:
 * each generated token is the training forward's greedy choice over the
 * prompt and the tokens generated before it. */
static void test_decode_chooses_the_forward_s_tokens(void **state)
{
    (void)state;
    for (int offload = 0; offload < 2; offload++) {
        fixture_t f;
        open_model(&f, 20);
        int32_t tok[B * T], prompt[B * P], out[B * G];
        some_tokens(tok);
        for (int b = 0; b < B; b++)
            for (int p = 0; p < P; p++)
                prompt[b * P + p] = tok[b * T + p];
        gpt_decode_config_t dc = {.prompt = P, .generate = G, .kv_offload = offload};
        char err[300];
        if (gpt_decode(f.m, &dc, prompt, out, err, sizeof err) != CHAM_OK)
            fail_msg("%s", err);
        /* The prefix the decoder saw: the prompt, then what it chose. */
        for (int b = 0; b < B; b++)
            for (int i = 0; i + 1 < G; i++)
                tok[b * T + P + i] = out[b * G + i];
        size_t n = (size_t)B * T * V;
        float *logits = floats(n);
        forward_logits(logits, tok, &f.w);
        int distinct = 0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < G; i++) {
                int32_t want;
                gpt_argmax(&want, logits + ((size_t)b * T + P - 1 + i) * V, 1, V);
                if (out[b * G + i] != want)
                    fail_msg("offload %d sequence %d token %d: decoded %d, forward %d", offload,
                             b, i, out[b * G + i], want);
                distinct += i > 0 && out[b * G + i] != out[b * G + i - 1];
            }
        assert_true(distinct > 0);               /* not one token repeated */
        free(logits);
        close_model(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_logits_are_the_forward_s),
        cmocka_unit_test(test_decode_chooses_the_forward_s_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
