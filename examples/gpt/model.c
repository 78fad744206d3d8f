/* The GPT model on the eager runtime (model.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_adam.h"
#include "model.h"


/* What a block keeps for its backward. */
typedef struct saved {
    cham_tensor_t *in, *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty;
    cham_tensor_t *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu;
} saved_t;

struct gpt_model {
    gpt_ops_t *ops;
    gpt_shape_t s;
    size_t n_weights;            /* 2 + 12 L + 2 */
    size_t *offset, *count;      /* per weight, in floats */
    size_t n_params;
    cham_tensor_t *params, *grads, *m, *v;   /* m, v: NULL with the host's optimizer */
    cham_tensor_t **pv, **gv;    /* views per weight */
    gpt_host_adam_t *host;       /* the optimizer on the host, or NULL */
    /* The last training forward, for the backward. */
    saved_t *layer;
    bool *skipped;
    cham_tensor_t *tok, *tgt, *res_final, *lnf, *lnf_mean, *lnf_rstd, *probs;
    bool have_forward;
    /* What each block does with what its forward keeps (ProTrain's
     * layout, or every block checkpointed), and how many blocks before
     * its backward a swapped block's tensors come back. */
    cham_protrain_config_t blocks;
};

double gpt_model_bytes(const gpt_shape_t *s)
{
    double L = s->layers, C = s->hidden, H = s->heads, T = s->seq, B = s->batch;
    double V = s->vocab, N = B * T;
    double params = V * C + T * C + 2 * C + L * (12 * C * C + 13 * C);
    /* Kept per block: its input, ln1, qkv, att (B H T T), atty, res2, ln2,
     * fc and its GELU (4 NC), and the four per-row norms; then the final
     * residual, layer norm and probabilities. */
    double acts = L * (16 * N * C + 4 * N + B * H * T * T) + 2 * N * C + 2 * N + N * V;
    return 4.0 * (4 * params + acts);
}

int gpt_shape_check(const gpt_shape_t *s, char *err, size_t err_size)
{
    const char *what = NULL;
    int value = 0;
    if (s->layers < 1)
        what = "layers", value = s->layers;
    else if (s->hidden < 1)
        what = "hidden", value = s->hidden;
    else if (s->heads < 1 || s->hidden % s->heads != 0)
        what = "heads", value = s->heads;
    else if (s->seq < 1)
        what = "seq", value = s->seq;
    else if (s->batch < 1)
        what = "batch", value = s->batch;
    else if (s->vocab < 2)
        what = "vocab", value = s->vocab;
    if (!what && (long long)s->batch * s->seq > INT_MAX) {
        snprintf(err, err_size, "batch x seq: %d x %d tokens is more than %d", s->batch, s->seq,
                 INT_MAX);
        return -1;
    }
    if (!what && gpt_model_bytes(s) > 0x1p50) {
        snprintf(err, err_size, "layers %d, hidden %d, heads %d, seq %d, batch %d: a training "
                 "step needs %.3g bytes, more than any host has", s->layers, s->hidden,
                 s->heads, s->seq, s->batch, gpt_model_bytes(s));
        return -1;
    }
    if (!what)
        return 0;
    snprintf(err, err_size, "%s: %d is not valid%s", what, value,
             strcmp(what, "heads") == 0 ? " (at least 1, and hidden must be a multiple of it)"
                                        : " (at least 1)");
    return -1;
}

static size_t lw(int layer, int k)
{
    return 2 + (size_t)layer * GPT_PER_LAYER + (size_t)k;
}

/* ---- ops with their costs --------------------------------------------------------*/

#define F4 4.0       /* bytes per float */

static cham_status_t op(gpt_model_t *m, gpt_args_t *a, cham_tensor_t *const *in, size_t n_in,
                        cham_tensor_t *const *out, size_t n_out, uint32_t rw, double flops)
{
    return gpt_op_tensors(m->ops, a, in, n_in, out, n_out, rw, flops);
}

cham_status_t gpt_model_act(gpt_model_t *m, size_t floats, const char *name, int layer,
                            cham_tensor_t **out)
{
    char label[48];             /* "l" + an int + "." + a name of up to 31 */
    if (layer >= 0)
        snprintf(label, sizeof label, "l%d.%s", layer, name);
    else
        snprintf(label, sizeof label, "%s", name);
    return gpt_tensor(m->ops, floats * sizeof(float), CHAM_DTYPE_F32, label, out);
}

static void release(gpt_model_t *m, cham_tensor_t **t)
{
    gpt_release(m->ops, t);
}

#define TRY(call)                     \
    do {                              \
        if ((st = (call)) != CHAM_OK) \
            return st;                \
    } while (0)

/* The outputs an op helper made, released when the op failed: the caller
 * gets them only with CHAM_OK. */
static cham_status_t made(gpt_model_t *m, cham_status_t st, cham_tensor_t **a,
                          cham_tensor_t **b, cham_tensor_t **c)
{
    if (st != CHAM_OK) {
        release(m, a);
        if (b)
            release(m, b);
        if (c)
            release(m, c);
    }
    return st;
}

/* out[N, OC] = inp[N, C] W^T (+ bias). */
static cham_status_t matmul(gpt_model_t *m, cham_tensor_t *inp, size_t w, bool bias, int C,
                            int OC, const char *name, int layer, cham_tensor_t **out)
{
    cham_status_t st;
    int N = m->s.batch * m->s.seq;
    TRY(gpt_model_act(m, (size_t)N * (size_t)OC, name, layer, out));
    gpt_args_t a = {.kind = GPT_MATMUL, .N = N, .C = C, .OC = OC, .null_f = bias ? 0 : 1u << 2};
    cham_tensor_t *in[3] = {inp, m->pv[w], bias ? m->pv[w + 1] : NULL};
    return made(m, op(m, &a, in, bias ? 3 : 2, out, 1, 0, 2.0 * N * C * OC), out, NULL, NULL);
}

/* dinp (new) and the weight's (and bias's) gradients. */
static cham_status_t matmul_backward(gpt_model_t *m, cham_tensor_t *dout, cham_tensor_t *inp,
                                     size_t w, bool bias, int C, int OC, const char *name,
                                     int layer, cham_tensor_t **dinp)
{
    cham_status_t st;
    int N = m->s.batch * m->s.seq;
    TRY(gpt_model_act(m, (size_t)N * (size_t)C, name, layer, dinp));
    gpt_args_t a = {.kind = GPT_MATMUL_BWD, .N = N, .C = C, .OC = OC,
                    .null_f = bias ? 0 : 1u << 5};
    cham_tensor_t *in[3] = {dout, inp, m->pv[w]};
    cham_tensor_t *out[3] = {*dinp, m->gv[w], bias ? m->gv[w + 1] : NULL};
    return made(m, op(m, &a, in, 3, out, bias ? 3 : 2, 0x6, 4.0 * N * C * OC), dinp, NULL,
                NULL);
}

static cham_status_t layernorm(gpt_model_t *m, cham_tensor_t *inp, size_t w, const char *name,
                               int layer, cham_tensor_t **out, cham_tensor_t **mean,
                               cham_tensor_t **rstd)
{
    cham_status_t st;
    int N = m->s.batch * m->s.seq, C = m->s.hidden;
    char nm[32];
    st = gpt_model_act(m, (size_t)N * (size_t)C, name, layer, out);
    snprintf(nm, sizeof nm, "%s_mean", name);
    if (st == CHAM_OK)
        st = gpt_model_act(m, (size_t)N, nm, layer, mean);
    snprintf(nm, sizeof nm, "%s_rstd", name);
    if (st == CHAM_OK)
        st = gpt_model_act(m, (size_t)N, nm, layer, rstd);
    gpt_args_t a = {.kind = GPT_LAYERNORM, .N = N, .C = C};
    cham_tensor_t *in[3] = {inp, m->pv[w], m->pv[w + 1]};
    cham_tensor_t *outs[3] = {*out, *mean, *rstd};
    if (st == CHAM_OK)
        st = op(m, &a, in, 3, outs, 3, 0, 8.0 * N * C);
    return made(m, st, out, mean, rstd);
}

static cham_status_t layernorm_backward(gpt_model_t *m, cham_tensor_t *dout, cham_tensor_t *inp,
                                        size_t w, cham_tensor_t *mean, cham_tensor_t *rstd,
                                        const char *name, int layer, cham_tensor_t **dinp)
{
    cham_status_t st;
    int N = m->s.batch * m->s.seq, C = m->s.hidden;
    TRY(gpt_model_act(m, (size_t)N * (size_t)C, name, layer, dinp));
    gpt_args_t a = {.kind = GPT_LAYERNORM_BWD, .N = N, .C = C};
    cham_tensor_t *in[5] = {dout, inp, m->pv[w], mean, rstd};
    cham_tensor_t *out[3] = {*dinp, m->gv[w], m->gv[w + 1]};
    return made(m, op(m, &a, in, 5, out, 3, 0x6, 16.0 * N * C), dinp, NULL, NULL);
}

/* dst += src. */
static cham_status_t accumulate(gpt_model_t *m, cham_tensor_t *dst, cham_tensor_t **src)
{
    gpt_args_t a = {.kind = GPT_ACCUMULATE, .n = cham_tensor_bytes(dst) / sizeof(float)};
    return op(m, &a, src, 1, &dst, 1, 0x1, (double)a.n);
}

/* ---- parameters -----------------------------------------------------------------*/

static void layout(gpt_model_t *m)
{
    size_t C = (size_t)m->s.hidden, V = (size_t)m->s.vocab, T = (size_t)m->s.seq;
    size_t per[GPT_PER_LAYER] = {C, C, 3 * C * C, 3 * C, C * C, C,
                                 C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    size_t i = 0, at = 0;
    m->count[i++] = V * C;
    m->count[i++] = T * C;
    for (int l = 0; l < m->s.layers; l++)
        for (int k = 0; k < GPT_PER_LAYER; k++)
            m->count[i++] = per[k];
    m->count[i++] = C;
    m->count[i++] = C;
    for (size_t w = 0; w < m->n_weights; w++) {
        m->offset[w] = at;
        at += m->count[w];
    }
    m->n_params = at;
}

/* Weights: uniform in +-0.02 (residual projections scaled by 1/sqrt(2L),
 * as GPT-2 does); layer-norm weights 1, biases 0. */
static void init_of(const gpt_model_t *m, size_t w, uint64_t seed, gpt_args_t *a)
{
    size_t k = w >= 2 && w < m->n_weights - 2 ? (w - 2) % GPT_PER_LAYER : SIZE_MAX;
    bool ln_weight = k == GPT_LN1W || k == GPT_LN2W || w == m->n_weights - 2;
    bool bias = k == GPT_QKVB || k == GPT_PROJB || k == GPT_LN1B || k == GPT_LN2B ||
                k == GPT_FCB || k == GPT_FCPROJB || w == m->n_weights - 1;
    a->kind = GPT_INIT_PARAMS;
    a->n = m->count[w];
    if (ln_weight || bias) {
        a->seed = 0;
        a->scale = ln_weight ? 1.0f : 0.0f;
    } else {
        a->seed = seed * 1000003u + w + 1;
        a->scale = 0.02f;
        if (k == GPT_PROJW || k == GPT_FCPROJW)
            a->scale = (float)(0.02 / sqrt(2.0 * m->s.layers));
    }
}

static cham_status_t make_flat(gpt_model_t *m, const char *name, cham_tensor_t **flat,
                               cham_tensor_t **views)
{
    cham_status_t st;
    TRY(gpt_tensor(m->ops, m->n_params * sizeof(float), CHAM_DTYPE_F32, name, flat));
    gpt_args_t z = {.kind = GPT_ZERO, .n = m->n_params};
    TRY(op(m, &z, NULL, 0, flat, 1, 0, (double)m->n_params));
    for (size_t w = 0; views && w < m->n_weights; w++) {
        char label[40];
        snprintf(label, sizeof label, "%s[%zu]", name, w);
        TRY(cham_tensor_view(*flat, m->offset[w] * sizeof(float), m->count[w] * sizeof(float),
                             CHAM_DTYPE_F32, label, &views[w]));
    }
    return CHAM_OK;
}

cham_status_t gpt_model_new(gpt_ops_t *ops, const gpt_shape_t *shape, uint64_t seed,
                            bool host_optimizer, gpt_model_t **out, char *err,
                            size_t err_size)
{
    *out = NULL;
    gpt_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, err_size, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    m->ops = ops;
    m->s = *shape;
    m->n_weights = 4 + (size_t)shape->layers * GPT_PER_LAYER;
    m->offset = calloc(m->n_weights, sizeof *m->offset);
    m->count = calloc(m->n_weights, sizeof *m->count);
    m->pv = calloc(m->n_weights, sizeof *m->pv);
    m->gv = calloc(m->n_weights, sizeof *m->gv);
    m->layer = calloc((size_t)shape->layers, sizeof *m->layer);
    m->skipped = calloc((size_t)shape->layers, sizeof *m->skipped);
    if (!m->offset || !m->count || !m->pv || !m->gv || !m->layer || !m->skipped) {
        gpt_model_free(m);
        snprintf(err, err_size, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    layout(m);
    cham_status_t st = make_flat(m, "params", &m->params, m->pv);
    if (st == CHAM_OK)
        st = make_flat(m, "grads", &m->grads, m->gv);
    if (st == CHAM_OK && !host_optimizer)
        st = make_flat(m, "adam_m", &m->m, NULL);
    if (st == CHAM_OK && !host_optimizer)
        st = make_flat(m, "adam_v", &m->v, NULL);
    for (size_t w = 0; st == CHAM_OK && w < m->n_weights; w++) {
        gpt_args_t a = {0};
        init_of(m, w, seed, &a);
        st = op(m, &a, NULL, 0, &m->pv[w], 1, 0, (double)m->count[w]);
    }
    if (st != CHAM_OK)
        snprintf(err, err_size, "%s", cham_context_last_error(ops->ctx));
    else if (host_optimizer)
        st = gpt_host_adam_new(ops, m->params, m->n_params, &m->host, err, err_size);
    if (st != CHAM_OK) {
        gpt_model_free(m);
        return st;
    }
    *out = m;
    return CHAM_OK;
}

static void drop_forward(gpt_model_t *m)
{
    for (int l = 0; l < m->s.layers; l++) {
        cham_tensor_t **t = (cham_tensor_t **)&m->layer[l];
        for (size_t k = 0; k < sizeof(saved_t) / sizeof(cham_tensor_t *); k++)
            release(m, &t[k]);
    }
    release(m, &m->tok);
    release(m, &m->tgt);
    release(m, &m->res_final);
    release(m, &m->lnf);
    release(m, &m->lnf_mean);
    release(m, &m->lnf_rstd);
    release(m, &m->probs);
    m->have_forward = false;
}

void gpt_model_free(gpt_model_t *m)
{
    if (!m)
        return;
    if (m->layer)
        drop_forward(m);
    for (size_t w = 0; w < m->n_weights; w++) {
        if (m->pv)
            release(m, &m->pv[w]);
        if (m->gv)
            release(m, &m->gv[w]);
    }
    release(m, &m->params);
    release(m, &m->grads);
    release(m, &m->m);
    release(m, &m->v);
    gpt_host_adam_free(m->host);
    free(m->offset);
    free(m->count);
    free(m->pv);
    free(m->gv);
    free(m->layer);
    free(m->skipped);
    free(m);
}

size_t gpt_param_count(const gpt_model_t *m)
{
    return m->n_params;
}

/* ---- forward ------------------------------------------------------------------*/

static cham_status_t load_tokens(gpt_model_t *m, const int32_t *host, const char *name,
                                 cham_tensor_t **out)
{
    cham_status_t st;
    size_t n = (size_t)m->s.batch * (size_t)m->s.seq;
    TRY(gpt_tensor(m->ops, n * sizeof(int32_t), CHAM_DTYPE_I32, name, out));
    /* A host-to-device copy in a framework; an op that writes them here. */
    gpt_args_t a = {.kind = GPT_LOAD_TOKENS, .host_tok = host, .n = n};
    return op(m, &a, NULL, 0, out, 1, 0, 0);
}

/* What a block's forward keeps in m->layer[l] for its backward. */
typedef enum keep {
    KEEP_NONE,                   /* evaluation */
    KEEP_INPUT,                  /* recomputation: the backward runs it again */
    KEEP_ALL,
} keep_t;

/* One block; *x is its input and becomes its output. */
static cham_status_t block_forward(gpt_model_t *m, int l, keep_t keep, cham_tensor_t **x)
{
    cham_status_t st;
    saved_t *sv = &m->layer[l];
    int N = m->s.batch * m->s.seq, C = m->s.hidden;
    size_t NC = (size_t)N * (size_t)C;
    sv->in = cham_tensor_retain(*x);
    TRY(layernorm(m, sv->in, lw(l, GPT_LN1W), "ln1", l, &sv->ln1, &sv->ln1_mean, &sv->ln1_rstd));
    TRY(matmul(m, sv->ln1, lw(l, GPT_QKVW), true, C, 3 * C, "qkv", l, &sv->qkv));
    TRY(gpt_model_act(m, NC, "atty", l, &sv->atty));
    size_t att = (size_t)m->s.batch * (size_t)m->s.heads * (size_t)m->s.seq * (size_t)m->s.seq;
    TRY(gpt_model_act(m, att, "att", l, &sv->att));
    gpt_args_t at = {.kind = GPT_ATTENTION, .B = m->s.batch, .T = m->s.seq, .C = C,
                     .NH = m->s.heads};
    cham_tensor_t *ao[2] = {sv->atty, sv->att};
    TRY(op(m, &at, &sv->qkv, 1, ao, 2, 0, 4.0 * m->s.batch * m->s.seq * m->s.seq * C));
    cham_tensor_t *attp = NULL;
    TRY(matmul(m, sv->atty, lw(l, GPT_PROJW), true, C, C, "attproj", l, &attp));
    st = gpt_model_act(m, NC, "res2", l, &sv->res2);
    if (st == CHAM_OK) {
        gpt_args_t add = {.kind = GPT_ADD, .n = NC};
        cham_tensor_t *ai[2] = {sv->in, attp};
        st = op(m, &add, ai, 2, &sv->res2, 1, 0, (double)NC);
    }
    release(m, &attp);
    if (st != CHAM_OK)
        return st;
    TRY(layernorm(m, sv->res2, lw(l, GPT_LN2W), "ln2", l, &sv->ln2, &sv->ln2_mean, &sv->ln2_rstd));
    TRY(matmul(m, sv->ln2, lw(l, GPT_FCW), true, C, 4 * C, "fc", l, &sv->fch));
    TRY(gpt_model_act(m, 4 * NC, "fc_gelu", l, &sv->fch_gelu));
    gpt_args_t ge = {.kind = GPT_GELU, .n = 4 * NC};
    TRY(op(m, &ge, &sv->fch, 1, &sv->fch_gelu, 1, 0, 8.0 * 4 * (double)NC));
    cham_tensor_t *fcp = NULL, *res3 = NULL;
    TRY(matmul(m, sv->fch_gelu, lw(l, GPT_FCPROJW), true, 4 * C, C, "fcproj", l, &fcp));
    st = gpt_model_act(m, NC, "res3", l, &res3);
    if (st == CHAM_OK) {
        gpt_args_t add2 = {.kind = GPT_ADD, .n = NC};
        cham_tensor_t *bi[2] = {sv->res2, fcp};
        st = op(m, &add2, bi, 2, &res3, 1, 0, (double)NC);
    }
    release(m, &fcp);
    if (st != CHAM_OK) {
        release(m, &res3);
        return st;
    }
    release(m, x);
    *x = res3;
    if (keep != KEEP_ALL) {
        cham_tensor_t **t = (cham_tensor_t **)sv;
        for (size_t k = 0; k < sizeof(saved_t) / sizeof(cham_tensor_t *); k++)
            if (keep == KEEP_NONE || &t[k] != &sv->in)
                release(m, &t[k]);
    }
    return CHAM_OK;
}

void gpt_model_set_recompute(gpt_model_t *m, bool on)
{
    m->blocks = (cham_protrain_config_t){.n_checkpoint = on ? (uint32_t)m->s.layers : 0};
}

void gpt_model_set_blocks(gpt_model_t *m, const cham_protrain_config_t *c)
{
    m->blocks = *c;
}

static cham_block_mode_t mode_of(const gpt_model_t *m, int l)
{
    return cham_protrain_block_mode(&m->blocks, (uint32_t)m->s.layers, (uint32_t)l);
}

/* Sends what block l keeps to the host, or brings it back. */
static cham_status_t swap_saved(gpt_model_t *m, int l, bool out)
{
    cham_status_t st;
    cham_tensor_t **t = (cham_tensor_t **)&m->layer[l];
    for (size_t k = 0; k < sizeof(saved_t) / sizeof(cham_tensor_t *); k++)
        if (t[k])
            TRY(out ? cham_tensor_swap_out(t[k], false) : cham_tensor_swap_in(t[k]));
    return CHAM_OK;
}

/* Swapped blocks come back swap_interval blocks before their backward. */
static uint32_t swap_ahead(const gpt_model_t *m)
{
    return cham_protrain_swap_ahead(&m->blocks);
}

cham_status_t gpt_forward(gpt_model_t *m, const int32_t *tokens, const int32_t *targets,
                          const bool *skip, bool training, double *loss)
{
    cham_status_t st;
    drop_forward(m);
    int N = m->s.batch * m->s.seq, C = m->s.hidden, V = m->s.vocab;
    size_t NC = (size_t)N * (size_t)C;
    cham_phase(m->ops->ctx, training ? CHAM_PHASE_FORWARD : CHAM_PHASE_EVAL);
    TRY(load_tokens(m, tokens, "tokens", &m->tok));
    TRY(load_tokens(m, targets, "targets", &m->tgt));
    cham_tensor_t *x = NULL;
    TRY(gpt_model_act(m, NC, "embedding", -1, &x));
    gpt_args_t em = {.kind = GPT_EMBED, .B = m->s.batch, .T = m->s.seq, .C = C};
    cham_tensor_t *ei[3] = {m->tok, m->pv[GPT_WTE], m->pv[GPT_WPE]};
    st = op(m, &em, ei, 3, &x, 1, 0, (double)NC);
    for (int l = 0; st == CHAM_OK && l < m->s.layers; l++) {
        m->skipped[l] = skip && skip[l];
        if (m->skipped[l])
            continue;
        cham_block_mode_t mode = mode_of(m, l);
        if ((st = cham_set_block(m->ops->ctx, l)) == CHAM_OK)
            st = block_forward(m, l, !training                        ? KEEP_NONE
                                     : mode == CHAM_BLOCK_CHECKPOINT ? KEEP_INPUT
                                                                     : KEEP_ALL,
                               &x);
        if (st == CHAM_OK && training && mode == CHAM_BLOCK_SWAP)
            st = swap_saved(m, l, true);
        if (st == CHAM_OK)
            st = cham_set_block(m->ops->ctx, -1);
    }
    /* The blocks swapped last come back before the backward starts. */
    for (int l = 0; st == CHAM_OK && training && l < m->s.layers; l++)
        if (!m->skipped[l] && (uint32_t)l + swap_ahead(m) >= (uint32_t)m->s.layers &&
            mode_of(m, l) == CHAM_BLOCK_SWAP)
            st = swap_saved(m, l, false);
    if (st != CHAM_OK) {
        release(m, &x);
        return st;
    }
    m->res_final = x;
    size_t lnf = m->n_weights - 2;
    TRY(layernorm(m, m->res_final, lnf, "lnf", -1, &m->lnf, &m->lnf_mean, &m->lnf_rstd));
    cham_tensor_t *logits = NULL, *losses = NULL;
    TRY(matmul(m, m->lnf, GPT_WTE, false, C, V, "logits", -1, &logits));
    st = gpt_model_act(m, (size_t)N, "losses", -1, &losses);
    if (st == CHAM_OK)
        st = gpt_model_act(m, (size_t)N * (size_t)V, "probs", -1, &m->probs);
    if (st == CHAM_OK) {
        gpt_args_t ce = {.kind = GPT_CROSSENTROPY, .N = N, .V = V};
        cham_tensor_t *ci[2] = {logits, m->tgt}, *co[2] = {losses, m->probs};
        st = op(m, &ce, ci, 2, co, 2, 0, 4.0 * N * V);
    }
    release(m, &logits);
    if (st == CHAM_OK) {
        gpt_args_t lm = {.kind = GPT_LOSS_MEAN, .n = (size_t)N, .out_value = loss};
        st = op(m, &lm, &losses, 1, NULL, 0, 0, (double)N);
    }
    release(m, &losses);
    if (st != CHAM_OK)
        return st;
    /* loss.item(): the host waits for the device. */
    TRY(cham_stream_synchronize(cham_context_compute_stream(m->ops->ctx)));
    m->have_forward = training;
    if (!training)
        drop_forward(m);
    return CHAM_OK;
}

/* ---- backward -----------------------------------------------------------------*/

/* The backward of block l; d holds the gradient of its output and, after,
 * that of its input. */
static cham_status_t block_backward(gpt_model_t *m, int l, cham_tensor_t *d)
{
    cham_status_t st;
    saved_t *sv = &m->layer[l];
    int N = m->s.batch * m->s.seq, C = m->s.hidden;
    size_t NC = (size_t)N * (size_t)C;
    cham_tensor_t *dfg = NULL, *dfc = NULL, *dln = NULL, *tmp = NULL;
    if (mode_of(m, l) == CHAM_BLOCK_CHECKPOINT) {   /* the forward again, from the kept input */
        cham_tensor_t *x = sv->in;
        sv->in = NULL;
        st = block_forward(m, l, KEEP_ALL, &x);
        release(m, &x);
        if (st != CHAM_OK)
            return st;
    }
    /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))) */
    TRY(matmul_backward(m, d, sv->fch_gelu, lw(l, GPT_FCPROJW), true, 4 * C, C, "d_fc_gelu", l,
                        &dfg));
    release(m, &sv->fch_gelu);
    st = gpt_model_act(m, 4 * NC, "d_fc", l, &dfc);
    if (st == CHAM_OK) {
        gpt_args_t g = {.kind = GPT_GELU_BWD, .n = 4 * NC};
        cham_tensor_t *gi[2] = {dfg, sv->fch};
        st = op(m, &g, gi, 2, &dfc, 1, 0, 16.0 * 4 * (double)NC);
    }
    release(m, &dfg);
    release(m, &sv->fch);
    if (st == CHAM_OK)
        st = matmul_backward(m, dfc, sv->ln2, lw(l, GPT_FCW), true, C, 4 * C, "d_ln2", l, &dln);
    release(m, &dfc);
    release(m, &sv->ln2);
    if (st == CHAM_OK)
        st = layernorm_backward(m, dln, sv->res2, lw(l, GPT_LN2W), sv->ln2_mean, sv->ln2_rstd,
                                "d_res2", l, &tmp);
    release(m, &dln);
    release(m, &sv->res2);
    release(m, &sv->ln2_mean);
    release(m, &sv->ln2_rstd);
    if (st == CHAM_OK)
        st = accumulate(m, d, &tmp);
    release(m, &tmp);
    if (st != CHAM_OK)
        return st;
    /* res2 = in + attproj(attention(qkv(ln1(in)))) */
    cham_tensor_t *datty = NULL, *dqkv = NULL;
    TRY(matmul_backward(m, d, sv->atty, lw(l, GPT_PROJW), true, C, C, "d_atty", l, &datty));
    release(m, &sv->atty);
    st = gpt_model_act(m, 3 * NC, "d_qkv", l, &dqkv);
    if (st == CHAM_OK) {
        gpt_args_t a = {.kind = GPT_ATTENTION_BWD, .B = m->s.batch, .T = m->s.seq, .C = C,
                        .NH = m->s.heads};
        cham_tensor_t *ai[3] = {datty, sv->qkv, sv->att};
        st = op(m, &a, ai, 3, &dqkv, 1, 0, 8.0 * m->s.batch * m->s.seq * m->s.seq * C);
    }
    release(m, &datty);
    release(m, &sv->qkv);
    release(m, &sv->att);
    if (st == CHAM_OK)
        st = matmul_backward(m, dqkv, sv->ln1, lw(l, GPT_QKVW), true, C, 3 * C, "d_ln1", l, &dln);
    release(m, &dqkv);
    release(m, &sv->ln1);
    if (st == CHAM_OK)
        st = layernorm_backward(m, dln, sv->in, lw(l, GPT_LN1W), sv->ln1_mean, sv->ln1_rstd,
                                "d_in", l, &tmp);
    release(m, &dln);
    release(m, &sv->in);
    release(m, &sv->ln1_mean);
    release(m, &sv->ln1_rstd);
    if (st == CHAM_OK)
        st = accumulate(m, d, &tmp);
    release(m, &tmp);
    return st;
}

static cham_status_t send_block(gpt_model_t *m, int l);

cham_status_t gpt_backward(gpt_model_t *m, float loss_scale)
{
    cham_status_t st;
    if (!m->have_forward)
        return CHAM_ERR_INVALID_ARG;
    m->have_forward = false;
    int N = m->s.batch * m->s.seq, C = m->s.hidden, V = m->s.vocab;
    cham_phase(m->ops->ctx, CHAM_PHASE_BACKWARD);
    cham_tensor_t *dlogits = NULL, *dlnf = NULL, *d = NULL;
    TRY(gpt_model_act(m, (size_t)N * (size_t)V, "d_logits", -1, &dlogits));
    gpt_args_t ce = {.kind = GPT_CROSSENTROPY_BWD, .N = N, .V = V, .scale = loss_scale};
    cham_tensor_t *ci[2] = {m->probs, m->tgt};
    st = op(m, &ce, ci, 2, &dlogits, 1, 0, 2.0 * N * V);
    release(m, &m->probs);
    if (st == CHAM_OK)
        st = matmul_backward(m, dlogits, m->lnf, GPT_WTE, false, C, V, "d_lnf", -1, &dlnf);
    release(m, &dlogits);
    release(m, &m->lnf);
    if (st == CHAM_OK)
        st = layernorm_backward(m, dlnf, m->res_final, m->n_weights - 2, m->lnf_mean,
                                m->lnf_rstd, "d_residual", -1, &d);
    release(m, &dlnf);
    release(m, &m->res_final);
    release(m, &m->lnf_mean);
    release(m, &m->lnf_rstd);
    for (int l = m->s.layers - 1; st == CHAM_OK && l >= 0; l--) {
        int ahead = l - (int)swap_ahead(m);
        if (ahead >= 0 && !m->skipped[ahead] && mode_of(m, ahead) == CHAM_BLOCK_SWAP)
            st = swap_saved(m, ahead, false);
        if (st != CHAM_OK || m->skipped[l])
            continue;
        if ((st = cham_set_block(m->ops->ctx, l)) == CHAM_OK)
            st = block_backward(m, l, d);
        if (st == CHAM_OK)
            st = cham_set_block(m->ops->ctx, -1);
        if (st == CHAM_OK && m->host)    /* the block's gradients are final */
            st = send_block(m, l);
    }
    if (st == CHAM_OK) {
        gpt_args_t eb = {.kind = GPT_EMBED_BWD, .B = m->s.batch, .T = m->s.seq, .C = C};
        cham_tensor_t *ei[2] = {d, m->tok}, *eo[2] = {m->gv[GPT_WTE], m->gv[GPT_WPE]};
        st = op(m, &eb, ei, 2, eo, 2, 0x3, (double)N * C);
    }
    release(m, &d);
    drop_forward(m);
    return st;
}

/* ---- optimizer --------------------------------------------------------------------*/

/* The host optimizer's share of the gradients: block l's, or (l < 0) the
 * embeddings' and the final norm's (the first two and the last two
 * weights), all final only once the whole backward is done. */
static cham_status_t send_block(gpt_model_t *m, int l)
{
    if (l >= 0) {
        size_t first = m->offset[lw(l, 0)], last = lw(l, GPT_PER_LAYER - 1);
        return gpt_host_adam_send(m->host, m->grads, first,
                                  m->offset[last] + m->count[last] - first);
    }
    size_t tail = m->offset[m->n_weights - 2];
    cham_status_t st = gpt_host_adam_send(m->host, m->grads, 0, m->offset[lw(0, 0)]);
    return st != CHAM_OK ? st : gpt_host_adam_send(m->host, m->grads, tail, m->n_params - tail);
}

/* AdamW's hyperparameters, the same for the device and the host. */
static gpt_args_t adamw_args(gpt_model_t *m, int t, float lr, float weight_decay)
{
    return (gpt_args_t){.kind = GPT_ADAMW, .n = m->n_params, .t = t, .lr = lr, .beta1 = 0.9f,
                        .beta2 = 0.95f, .eps = 1e-8f, .wd = weight_decay};
}

cham_status_t gpt_inject_overflow(gpt_model_t *m)
{
    gpt_args_t a = {.kind = GPT_INJECT_OVERFLOW};
    return op(m, &a, NULL, 0, &m->gv[GPT_WTE], 1, 0x1, 1);
}

cham_status_t gpt_check_grads(gpt_model_t *m, bool *overflow, double *sum_squares)
{
    cham_status_t st;
    cham_phase(m->ops->ctx, CHAM_PHASE_OPTIMIZER);
    if (m->host) {
        /* The backward sent the blocks it ran; the skipped blocks' (zero)
         * gradients go now: the host's are last step's. */
        for (int l = 0; l < m->s.layers; l++)
            if (m->skipped[l])
                TRY(send_block(m, l));
        TRY(send_block(m, -1));
        return gpt_host_adam_check(m->host, overflow, sum_squares);
    }
    gpt_args_t a = {.kind = GPT_CHECK_GRADS, .n = m->n_params, .out_flag = overflow,
                    .out_value = sum_squares};
    TRY(op(m, &a, &m->grads, 1, NULL, 0, 0, 2.0 * (double)m->n_params));
    /* found_inf.item(): the host waits for the device. */
    return cham_stream_synchronize(cham_context_compute_stream(m->ops->ctx));
}

cham_status_t gpt_zero_grads(gpt_model_t *m)
{
    cham_status_t st;
    if (m->host)            /* the copies to the host read them first */
        TRY(gpt_host_adam_fence(m->host));
    gpt_args_t z = {.kind = GPT_ZERO, .n = m->n_params};
    return op(m, &z, NULL, 0, &m->grads, 1, 0, (double)m->n_params);
}

cham_status_t gpt_optimizer_step(gpt_model_t *m, float factor, int t, float lr,
                                 float weight_decay)
{
    cham_status_t st;
    gpt_args_t ad = adamw_args(m, t, lr, weight_decay);
    if (m->host) {
        TRY(gpt_host_adam_step(m->host, m->params, factor, &ad));
        return gpt_zero_grads(m);
    }
    gpt_args_t sc = {.kind = GPT_SCALE, .n = m->n_params, .scale = factor};
    TRY(op(m, &sc, NULL, 0, &m->grads, 1, 0x1, (double)m->n_params));
    cham_tensor_t *out[3] = {m->params, m->m, m->v};
    TRY(op(m, &ad, &m->grads, 1, out, 3, 0x7, 12.0 * (double)m->n_params));
    return gpt_zero_grads(m);
}

cham_status_t gpt_read_master(gpt_model_t *m, float *host)
{
    return m->host ? gpt_host_adam_read_master(m->host, host) : CHAM_ERR_INVALID_ARG;
}

cham_status_t gpt_read_params(gpt_model_t *m, float *host)
{
    cham_status_t st;
    gpt_args_t a = {.kind = GPT_READ, .n = m->n_params, .host_dst = host};
    TRY(op(m, &a, &m->params, 1, NULL, 0, 0, 0));
    return cham_stream_synchronize(cham_context_compute_stream(m->ops->ctx));
}

cham_tensor_t *gpt_model_weight(const gpt_model_t *m, int layer, int k)
{
    if (layer >= 0)
        return m->pv[lw(layer, k)];
    return m->pv[k < 2 ? (size_t)k : m->n_weights - 4 + (size_t)k];
}

const gpt_shape_t *gpt_model_shape(const gpt_model_t *m)
{
    return &m->s;
}

gpt_ops_t *gpt_model_ops(const gpt_model_t *m)
{
    return m->ops;
}
