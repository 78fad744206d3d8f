/* The scripted training workload (train_script.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/train_script.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

typedef enum op_kind { EMBED, LINEAR, GELU, PROBE, LOSS, GELU_BWD, LINEAR_BWD, SGD, SUM,
                       N_KINDS } op_kind_t;

static const char *const op_names[N_KINDS] = {"embed", "linear", "gelu", "probe", "loss",
                                              "gelu_bwd", "linear_bwd", "sgd", "sum"};

struct ts_model {
    cham_context_t *ctx;
    ts_config_t c;
    cham_op_token_t tok[N_KINDS];
    cham_tensor_t **w, **gw;
    uint64_t sum;                /* folded by LOSS and SUM kernels */
};

ts_config_t ts_config_default(void)
{
    return (ts_config_t){.layers = 8, .act_bytes = 2 * MiB, .weight_bytes = 64 * KiB,
                         .layer_flops = 5e10, .extra_op_step = -1, .forward_only_step = -1,
                         .reorder_step = -1};
}

uint64_t ts_peak_bytes(const ts_config_t *c)
{
    /* At the loss: x[0..L], h[0..L-1] and the loss gradient; the weights
     * and their gradients throughout; the scratch tensor at its largest. */
    uint64_t acts = 2 * (uint64_t)c->layers + 2;
    uint64_t scratch = c->shift_addresses ? 3 * c->act_bytes / 2 : 0;
    return acts * c->act_bytes + 2 * (uint64_t)c->layers * c->weight_bytes + scratch;
}

/* ---- kernels ----------------------------------------------------------------*/

typedef struct kargs {
    op_kind_t kind;
    uint32_t *in[3], *out[2];
    size_t words, wwords;
    uint64_t seed;
    uint64_t *sum;
} kargs_t;

static uint64_t fold(uint64_t h, uint32_t v)
{
    return (h ^ v) * 0x100000001b3u;
}

static void run_kernel(void *p)
{
    kargs_t *a = p;
    size_t n = a->words, nw = a->wwords;
    switch (a->kind) {
    case EMBED:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = (uint32_t)(a->seed * 2654435761u) ^ (uint32_t)(i * 40503u);
        break;
    case LINEAR:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = a->in[0][i] * 3u + a->in[1][i % nw];
        break;
    case GELU:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = a->in[0][i] ^ (a->in[0][i] >> 7);
        break;
    case PROBE:
        for (size_t j = 0; j < nw; j++)
            a->out[0][j] = a->in[0][j] + 1u;
        break;
    case LOSS:
        for (size_t i = 0; i < n; i++) {
            *a->sum = fold(*a->sum, a->in[0][i]);
            a->out[0][i] = a->in[0][i] * 5u + 1u;
        }
        break;
    case GELU_BWD:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = a->in[0][i] + a->in[1][i];
        break;
    case LINEAR_BWD:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = (a->in[0][i] ^ a->in[1][i]) + a->in[2][i % nw];
        for (size_t j = 0; j < nw; j++)
            a->out[1][j] += a->in[0][j] * a->in[1][j];
        break;
    case SGD:
        for (size_t j = 0; j < nw; j++) {
            a->out[0][j] -= a->in[0][j] >> 3;
            a->out[1][j] = 0;
        }
        break;
    case SUM:
        for (size_t j = 0; j < nw; j++)
            *a->sum = fold(*a->sum, a->in[0][j]);
        break;
    case N_KINDS:
        break;
    }
}

/* One op: begin, its kernel on the compute stream, end. */
static cham_status_t op(ts_model_t *m, op_kind_t kind, cham_tensor_t **in, size_t n_in,
                        cham_tensor_t **out, size_t n_out, double flops, uint64_t seed)
{
    cham_context_t *ctx = m->ctx;
    cham_status_t st = cham_op_begin(ctx, m->tok[kind], in, n_in, out, n_out);
    if (st != CHAM_OK)
        return st;
    kargs_t a = {.kind = kind, .words = m->c.act_bytes / 4, .wwords = m->c.weight_bytes / 4,
                 .seed = seed, .sum = &m->sum};
    cham_access_t acc[5];
    size_t n = 0;
    double bytes = 0;
    for (size_t i = 0; i < n_in; i++) {
        a.in[i] = cham_tensor_data(in[i]);
        acc[n++] = (cham_access_t){a.in[i], cham_tensor_bytes(in[i]), CHAM_ACCESS_READ};
        bytes += (double)cham_tensor_bytes(in[i]);
    }
    for (size_t i = 0; i < n_out; i++) {
        a.out[i] = cham_tensor_data(out[i]);
        /* Gradients accumulate and SGD updates in place: read and written. */
        acc[n++] = (cham_access_t){a.out[i], cham_tensor_bytes(out[i]), CHAM_ACCESS_READ_WRITE};
        bytes += (double)cham_tensor_bytes(out[i]);
    }
    if (kind == EMBED)              /* fills whatever it is given */
        a.words = cham_tensor_bytes(out[0]) / 4;
    cham_kernel_t k = {.label = op_names[kind], .flops = flops, .bytes = bytes,
                       .accesses = acc, .n_accesses = n, .cpu_fn = run_kernel, .arg = &a};
    st = cham_kernel_launch(cham_context_compute_stream(ctx), &k);
    if (st != CHAM_OK)
        return st;
    return cham_op_end(ctx);
}

static cham_status_t act(ts_model_t *m, const char *name, int i, cham_tensor_t **out)
{
    char label[32];
    snprintf(label, sizeof label, i >= 0 ? "%s%d" : "%s", name, i);
    return cham_tensor_new(m->ctx, m->c.act_bytes, CHAM_DTYPE_F32, label, out);
}

/* ---- the model --------------------------------------------------------------*/

ts_model_t *ts_model_new(cham_context_t *ctx, const ts_config_t *c)
{
    ts_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->ctx = ctx;
    m->c = *c;
    m->w = calloc((size_t)c->layers, sizeof *m->w);
    m->gw = calloc((size_t)c->layers, sizeof *m->gw);
    bool ok = m->w && m->gw;
    for (int k = 0; ok && k < N_KINDS; k++)
        ok = cham_op_token(ctx, op_names[k], &m->tok[k]) == CHAM_OK;
    for (int i = 0; ok && i < c->layers; i++) {
        char label[32];
        snprintf(label, sizeof label, "w%d", i);
        ok = cham_tensor_new(ctx, c->weight_bytes, CHAM_DTYPE_F32, label, &m->w[i]) == CHAM_OK;
        snprintf(label, sizeof label, "gw%d", i);
        ok = ok &&
             cham_tensor_new(ctx, c->weight_bytes, CHAM_DTYPE_F32, label, &m->gw[i]) == CHAM_OK;
        /* Initialised by ops, as a framework would: EMBED fills, SGD zeroes. */
        ok = ok && op(m, EMBED, NULL, 0, &m->w[i], 1, 0, 1000 + (uint64_t)i) == CHAM_OK;
        ok = ok && op(m, EMBED, NULL, 0, &m->gw[i], 1, 0, 0) == CHAM_OK;
    }
    if (!ok) {
        ts_model_free(m);
        return NULL;
    }
    return m;
}

void ts_model_free(ts_model_t *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->c.layers; i++) {
        if (m->w)
            cham_tensor_release(m->w[i]);
        if (m->gw)
            cham_tensor_release(m->gw[i]);
    }
    free(m->w);
    free(m->gw);
    free(m);
}

#define TRY(call)                   \
    do {                            \
        if ((st = (call)) != CHAM_OK) \
            goto out;               \
    } while (0)

cham_status_t ts_step(ts_model_t *m, int64_t step, uint64_t *checksum)
{
    const ts_config_t *c = &m->c;
    int L = c->layers;
    double f = c->layer_flops;
    bool fwd_only = step == c->forward_only_step ||
                    (c->validate_every && (step + 1) % c->validate_every == 0);
    cham_status_t st = CHAM_OK;
    cham_tensor_t **x = calloc((size_t)L + 1, sizeof *x), **h = calloc((size_t)L, sizeof *h);
    cham_tensor_t *g = NULL, *gh = NULL, *gx = NULL, *scratch = NULL, *probe = NULL;
    if (!x || !h) {
        free(x), free(h);
        return CHAM_ERR_HOST_OOM;
    }
    m->sum = 0xcbf29ce484222325u;

    cham_phase(m->ctx, CHAM_PHASE_FORWARD);
    cham_tensor_t *first[2];
    size_t n_first = 1;
    TRY(act(m, "x", 0, &x[0]));
    first[0] = x[0];
    if (c->shift_addresses) {
        size_t bytes = c->act_bytes / 2 * (size_t)(1 + step % 3);
        TRY(cham_tensor_new(m->ctx, bytes, CHAM_DTYPE_F32, "scratch", &scratch));
        first[n_first++] = scratch;
    }
    TRY(op(m, EMBED, NULL, 0, first, n_first, f / 4, (uint64_t)step));
    for (int i = 0; i < L; i++) {
        cham_tensor_t *in[2] = {x[i], m->w[i]};
        TRY(act(m, "h", i, &h[i]));
        TRY(op(m, LINEAR, in, 2, &h[i], 1, f, 0));
        TRY(act(m, "x", i + 1, &x[i + 1]));
        TRY(op(m, GELU, &h[i], 1, &x[i + 1], 1, f / 4, 0));
        if (step == c->extra_op_step && i == L / 2) {
            TRY(cham_tensor_new(m->ctx, c->weight_bytes, CHAM_DTYPE_F32, "probe", &probe));
            TRY(op(m, PROBE, &x[i + 1], 1, &probe, 1, f / 8, 0));
            cham_tensor_release(probe), probe = NULL;
        }
        if (fwd_only) {          /* nothing is saved for a backward */
            cham_tensor_release(x[i]), x[i] = NULL;
            cham_tensor_release(h[i]), h[i] = NULL;
        }
    }
    TRY(act(m, "g", -1, &g));
    TRY(op(m, LOSS, &x[L], 1, &g, 1, f / 4, 0));
    cham_tensor_release(x[L]), x[L] = NULL;
    cham_tensor_release(scratch), scratch = NULL;

    if (!fwd_only) {
        cham_phase(m->ctx, CHAM_PHASE_BACKWARD);
        bool reorder = step == c->reorder_step;
        for (int k = 0; k < L; k++) {
            int i = reorder ? k : L - 1 - k;
            cham_tensor_t *in1[2] = {g, h[i]};
            TRY(act(m, "gh", -1, &gh));
            TRY(op(m, GELU_BWD, in1, 2, &gh, 1, f / 2, 0));
            cham_tensor_release(g), g = NULL;
            cham_tensor_release(h[i]), h[i] = NULL;
            cham_tensor_t *in2[3] = {gh, x[i], m->w[i]};
            cham_tensor_t *out2[2] = {NULL, m->gw[i]};
            TRY(act(m, "gx", -1, &gx));
            out2[0] = gx;
            TRY(op(m, LINEAR_BWD, in2, 3, out2, 2, 2 * f, 0));
            cham_tensor_release(gh), gh = NULL;
            cham_tensor_release(x[i]), x[i] = NULL;
            g = gx, gx = NULL;
        }
        cham_phase(m->ctx, CHAM_PHASE_OPTIMIZER);
        for (int i = 0; i < L; i++) {
            cham_tensor_t *out[2] = {m->w[i], m->gw[i]};
            TRY(op(m, SGD, &m->gw[i], 1, out, 2, f / 16, 0));
        }
    }
    for (int i = 0; i < L; i++)
        TRY(op(m, SUM, &m->w[i], 1, NULL, 0, f / 16, 0));
    cham_tensor_release(g), g = NULL;
    TRY(cham_step_end(m->ctx));
    *checksum = m->sum;
out:
    for (int i = 0; i <= L; i++)
        cham_tensor_release(x[i]);
    for (int i = 0; i < L; i++)
        cham_tensor_release(h[i]);
    cham_tensor_release(g);
    cham_tensor_release(gh);
    cham_tensor_release(gx);
    cham_tensor_release(scratch);
    cham_tensor_release(probe);
    free(x), free(h);
    return st;
}
