/* Allocation traces: the builder that every trace goes through (dense slot
 * numbering and summary statistics), the LLM-like training trace generator,
 * and the recorded-trace text format (load and save). See trace.h for the
 * format and docs/bench.md for what the generated trace models. */
#include "lib/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

/* ---- builder ---------------------------------------------------------------
 * Appends operations to a trace, hands out slots (the most recently freed
 * first, else a new one) and keeps the summary statistics.
 * Invariants: slot_bytes[s] > 0 iff slot s is live; free_slots holds exactly
 * the slots < n_slots that are not live; live_bytes is the sum of
 * slot_bytes. */
typedef struct builder {
    bench_trace_t *t;
    uint32_t *free_slots;
    size_t n_free, cap_free;
    uint64_t *slot_bytes;
    size_t cap_slots;
    uint64_t live_bytes, live_blocks;
    bool failed;             /* the host ran out of memory */
} builder_t;

static void builder_init(builder_t *b, bench_trace_t *t)
{
    memset(t, 0, sizeof *t);
    memset(b, 0, sizeof *b);
    b->t = t;
    t->n_streams = 1;
    t->min_bytes = UINT64_MAX;
}

static void builder_done(builder_t *b)
{
    b->t->live_at_end = b->live_blocks;
    if (b->t->n_allocs == 0)
        b->t->min_bytes = 0;
    free(b->free_slots);
    free(b->slot_bytes);
    b->free_slots = NULL;
    b->slot_bytes = NULL;
}

/* Room for need elements of size elem in the array p of *cap elements:
 * returns the array (moved or not), or NULL with p untouched. */
static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n *= 2;
    void *q = realloc(p, n * elem);
    if (q)
        *cap = n;
    return q;
}

static bool push_op(builder_t *b, const bench_op_t *op)
{
    bench_trace_t *t = b->t;
    bench_op_t *ops = grow(t->ops, &t->cap_ops, t->n_ops + 1, sizeof *ops);
    if (!ops) {
        b->failed = true;
        return false;
    }
    t->ops = ops;
    t->ops[t->n_ops++] = *op;
    return true;
}

/* Returns the slot, or UINT32_MAX after a host allocation failure. */
static uint32_t builder_alloc(builder_t *b, uint64_t bytes, int stream)
{
    bench_trace_t *t = b->t;
    if (b->failed)
        return UINT32_MAX;
    uint32_t slot;
    if (b->n_free > 0) {
        slot = b->free_slots[--b->n_free];
    } else {
        if (t->n_slots == UINT32_MAX - 1u) {
            b->failed = true;
            return UINT32_MAX;
        }
        slot = t->n_slots;
        uint64_t *sb = grow(b->slot_bytes, &b->cap_slots, (size_t)slot + 1, sizeof *sb);
        if (!sb) {
            b->failed = true;
            return UINT32_MAX;
        }
        b->slot_bytes = sb;
        t->n_slots++;
    }
    bench_op_t op = {.bytes = bytes, .slot = slot, .kind = BENCH_OP_ALLOC,
                     .stream = (uint8_t)stream};
    if (!push_op(b, &op))
        return UINT32_MAX;
    b->slot_bytes[slot] = bytes;
    b->live_bytes += bytes;
    b->live_blocks++;
    t->n_allocs++;
    if (b->live_bytes > t->peak_live_bytes)
        t->peak_live_bytes = b->live_bytes;
    if (b->live_blocks > t->peak_live_blocks)
        t->peak_live_blocks = b->live_blocks;
    if (bytes < t->min_bytes)
        t->min_bytes = bytes;
    if (bytes > t->max_bytes)
        t->max_bytes = bytes;
    if (bytes <= ((uint64_t)1 << 20))
        t->allocs_small++;
    else if (bytes < ((uint64_t)10 << 20))
        t->allocs_mid++;
    else
        t->allocs_large++;
    if (stream != 0)
        t->allocs_stream1++;
    if (stream + 1 > t->n_streams)
        t->n_streams = stream + 1;
    return slot;
}

static void builder_free(builder_t *b, uint32_t slot)
{
    bench_trace_t *t = b->t;
    if (b->failed || slot >= t->n_slots || b->slot_bytes[slot] == 0)
        return;
    uint32_t *fs = grow(b->free_slots, &b->cap_free, b->n_free + 1, sizeof *fs);
    if (!fs) {
        b->failed = true;
        return;
    }
    b->free_slots = fs;
    bench_op_t op = {.bytes = 0, .slot = slot, .kind = BENCH_OP_FREE, .stream = 0};
    if (!push_op(b, &op))
        return;
    b->live_bytes -= b->slot_bytes[slot];
    b->live_blocks--;
    b->slot_bytes[slot] = 0;
    b->free_slots[b->n_free++] = slot;
    t->n_frees++;
}

void bench_trace_release(bench_trace_t *trace)
{
    if (!trace)
        return;
    free(trace->ops);
    free(trace->step_ends);
    memset(trace, 0, sizeof *trace);
}

/* ---- generator -------------------------------------------------------------*/

void bench_trace_config_default(bench_trace_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 1;
    c->min_ops = 1000000;
    c->layers = 16;          /* a ~1B-parameter Llama-style model */
    c->hidden = 2048;
    c->heads = 16;
    c->kv_heads = 4;
    c->ffn = 5632;
    c->vocab = 32000;
    c->batch = 4;
    c->seq = 2048;
    c->moe_every = 4;        /* layers 3, 7, 11, 15: Mixtral-style MoE FFN */
    c->experts = 8;
    c->top_k = 2;
    c->expert_ffn = 1408;
    c->bucket_bytes = (uint64_t)25 << 20;   /* DDP's default bucket */
}

#define MAX_EXPERTS 64
#define NONE UINT32_MAX

/* A parameter tensor and its gradient (allocated in backward, freed by
 * zero_grad, as with set_to_none=True). */
typedef struct param {
    uint64_t elems;
    uint32_t slot, master, m, v;  /* fp16 weights, fp32 master, Adam m and v */
    uint32_t grad;                /* NONE when the step produced no gradient */
} param_t;

/* Indices into the parameter table of one layer's weights. */
typedef struct layer_params {
    int attn_norm, wq, wk, wv, wo, ffn_norm;
    int w_gate, w_up, w_down;                   /* dense layers */
    int router;                                 /* MoE layers */
    int e_gate[MAX_EXPERTS], e_up[MAX_EXPERTS], e_down[MAX_EXPERTS];
    bool moe;
} layer_params_t;

/* Activations a layer saves in forward for its backward. */
typedef struct layer_saved {
    uint32_t x_in, h1, rstd1, v, q_r, k_r, o, lse, x_mid, h2, rstd2;
    uint32_t g, u, p;                           /* dense FFN */
    uint32_t router_logits, topk_w, topk_i;     /* MoE */
    uint32_t xe[MAX_EXPERTS], ge[MAX_EXPERTS], ue[MAX_EXPERTS], pe[MAX_EXPERTS];
    uint64_t tokens[MAX_EXPERTS];               /* tokens routed to each expert */
} layer_saved_t;

typedef struct gen {
    const bench_trace_config_t *c;
    builder_t b;
    uint64_t rng;
    param_t *params;
    int n_params, cap_params;
    layer_params_t *lp;
    layer_saved_t *ls;
    int emb, final_norm, lm_head;
    uint32_t rope_cos, rope_sin;
    /* Gradient all-reduce bucket on stream 1. */
    uint64_t bucket_fill;
    uint32_t bucket;
    /* This step's shape. */
    uint64_t T, N;           /* sequence length, tokens */
} gen_t;

/* splitmix64: small, fast, and the same on every platform. */
static uint64_t rnd(gen_t *g)
{
    uint64_t z = (g->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rnd_below(gen_t *g, uint64_t n)
{
    return n ? rnd(g) % n : 0;
}

static uint32_t A(gen_t *g, uint64_t bytes)
{
    return builder_alloc(&g->b, bytes, 0);
}

static void F(gen_t *g, uint32_t *slot)
{
    if (*slot != NONE)
        builder_free(&g->b, *slot);
    *slot = NONE;
}

/* A temporary: allocated and freed right away (an intermediate consumed by
 * the next kernel, such as an output added into an accumulator). */
static void temp(gen_t *g, uint64_t bytes)
{
    uint32_t s = A(g, bytes);
    F(g, &s);
}

/* A library workspace (GEMM split-K, attention scratch) of varying size,
 * for one kernel in four. */
static void workspace(gen_t *g)
{
    if (rnd_below(g, 4) != 0)
        return;
    uint64_t kib = 256 + rnd_below(g, 32 * 1024 - 256);
    temp(g, kib * 1024);
}

static int add_param(gen_t *g, uint64_t elems)
{
    if (g->n_params == g->cap_params) {
        int n = g->cap_params ? 2 * g->cap_params : 256;
        param_t *p = realloc(g->params, (size_t)n * sizeof *p);
        if (!p) {
            g->b.failed = true;
            return 0;
        }
        g->params = p;
        g->cap_params = n;
    }
    param_t *p = &g->params[g->n_params];
    p->elems = elems;
    p->slot = p->master = p->m = p->v = p->grad = NONE;
    return g->n_params++;
}

/* The gradient of parameter i; every bucket_bytes of gradients, the filled
 * bucket is handed to the communication stream (stream 1) and the previous
 * bucket, whose all-reduce is done by now, is freed. */
static void grad(gen_t *g, int i)
{
    param_t *p = &g->params[i];
    if (g->b.failed)
        return;
    p->grad = A(g, p->elems * 2);
    g->bucket_fill += p->elems * 2;
    if (g->c->bucket_bytes && g->bucket_fill >= g->c->bucket_bytes) {
        F(g, &g->bucket);
        g->bucket = builder_alloc(&g->b, g->bucket_fill, 1);
        g->bucket_fill = 0;
    }
}

static void build_model(gen_t *g)
{
    const bench_trace_config_t *c = g->c;
    uint64_t H = (uint64_t)c->hidden, F_ = (uint64_t)c->ffn, V = (uint64_t)c->vocab;
    uint64_t kvd = H / (uint64_t)c->heads * (uint64_t)c->kv_heads;
    uint64_t Fe = (uint64_t)c->expert_ffn;
    g->emb = add_param(g, V * H);
    for (int l = 0; l < c->layers; l++) {
        layer_params_t *lp = &g->lp[l];
        lp->moe = c->moe_every > 0 && (l % c->moe_every) == c->moe_every - 1;
        lp->attn_norm = add_param(g, H);
        lp->wq = add_param(g, H * H);
        lp->wk = add_param(g, H * kvd);
        lp->wv = add_param(g, H * kvd);
        lp->wo = add_param(g, H * H);
        lp->ffn_norm = add_param(g, H);
        if (lp->moe) {
            lp->router = add_param(g, H * (uint64_t)c->experts);
            for (int e = 0; e < c->experts; e++) {
                lp->e_gate[e] = add_param(g, H * Fe);
                lp->e_up[e] = add_param(g, H * Fe);
                lp->e_down[e] = add_param(g, Fe * H);
            }
        } else {
            lp->w_gate = add_param(g, H * F_);
            lp->w_up = add_param(g, H * F_);
            lp->w_down = add_param(g, F_ * H);
        }
    }
    g->final_norm = add_param(g, H);
    g->lm_head = add_param(g, V * H);
    /* Allocated once: fp16 weights, then the optimizer's fp32 master copy
     * and Adam moments; the RoPE tables for the longest sequence. */
    for (int i = 0; i < g->n_params; i++)
        g->params[i].slot = A(g, g->params[i].elems * 2);
    for (int i = 0; i < g->n_params; i++) {
        param_t *p = &g->params[i];
        p->master = A(g, p->elems * 4);
        p->m = A(g, p->elems * 4);
        p->v = A(g, p->elems * 4);
    }
    uint64_t hd = H / (uint64_t)c->heads;
    g->rope_cos = A(g, (uint64_t)c->seq * hd * 4);
    g->rope_sin = A(g, (uint64_t)c->seq * hd * 4);
}

/* Splits N * top_k token assignments over the experts, unevenly: each
 * expert gets a random share, and now and then one gets none. */
static void route(gen_t *g, uint64_t *tokens)
{
    const bench_trace_config_t *c = g->c;
    uint64_t w[MAX_EXPERTS], sum = 0;
    for (int e = 0; e < c->experts; e++) {
        w[e] = rnd_below(g, 16) == 0 ? 0 : 256 + rnd_below(g, 1024);
        sum += w[e];
    }
    uint64_t total = g->N * (uint64_t)c->top_k, given = 0;
    for (int e = 0; e < c->experts; e++) {
        tokens[e] = sum ? total * w[e] / sum : 0;
        given += tokens[e];
    }
    int e0 = 0;
    while (e0 < c->experts - 1 && tokens[e0] == 0)
        e0++;
    tokens[e0] += total - given;
}

/* Forward of layer l with input x (saved); returns the output. */
static uint32_t layer_forward(gen_t *g, int l, uint32_t x)
{
    const bench_trace_config_t *c = g->c;
    const layer_params_t *lp = &g->lp[l];
    layer_saved_t *s = &g->ls[l];
    uint64_t N = g->N, H = (uint64_t)c->hidden;
    uint64_t kvd = H / (uint64_t)c->heads * (uint64_t)c->kv_heads;
    uint64_t NH2 = N * H * 2, NKV2 = N * kvd * 2;

    s->x_in = x;
    s->h1 = A(g, NH2);                   /* RMSNorm */
    s->rstd1 = A(g, N * 4);
    uint32_t q = A(g, NH2);              /* projections */
    workspace(g);
    uint32_t k = A(g, NKV2);
    s->v = A(g, NKV2);
    s->q_r = A(g, NH2);                  /* RoPE */
    F(g, &q);
    s->k_r = A(g, NKV2);
    F(g, &k);
    s->o = A(g, NH2);                    /* flash attention */
    s->lse = A(g, (uint64_t)c->batch * (uint64_t)c->heads * g->T * 4);
    workspace(g);
    uint32_t a = A(g, NH2);              /* output projection + residual */
    workspace(g);
    s->x_mid = A(g, NH2);
    F(g, &a);
    s->h2 = A(g, NH2);                   /* RMSNorm */
    s->rstd2 = A(g, N * 4);

    uint32_t d;
    if (!lp->moe) {                      /* SwiGLU FFN */
        uint64_t NF2 = N * (uint64_t)c->ffn * 2;
        s->g = A(g, NF2);
        workspace(g);
        s->u = A(g, NF2);
        workspace(g);
        uint32_t act = A(g, NF2);
        s->p = A(g, NF2);
        F(g, &act);
        d = A(g, NH2);
        workspace(g);
    } else {                             /* router, experts, combine */
        uint64_t E = (uint64_t)c->experts, K = (uint64_t)c->top_k;
        uint64_t Fe = (uint64_t)c->expert_ffn;
        s->router_logits = A(g, N * E * 4);
        uint32_t probs = A(g, N * E * 4);
        s->topk_w = A(g, N * K * 4);
        s->topk_i = A(g, N * K * 8);
        F(g, &probs);
        route(g, s->tokens);
        d = A(g, NH2);
        for (int e = 0; e < c->experts; e++) {
            uint64_t n = s->tokens[e];
            s->xe[e] = s->ge[e] = s->ue[e] = s->pe[e] = NONE;
            if (n == 0)
                continue;
            s->xe[e] = A(g, n * H * 2);  /* gathered tokens */
            s->ge[e] = A(g, n * Fe * 2);
            s->ue[e] = A(g, n * Fe * 2);
            uint32_t act = A(g, n * Fe * 2);
            s->pe[e] = A(g, n * Fe * 2);
            F(g, &act);
            temp(g, n * H * 2);          /* expert output, scattered into d */
        }
    }
    uint32_t out = A(g, NH2);            /* residual */
    F(g, &d);
    return out;
}

/* Backward of layer l: dx is the gradient of its output (freed here);
 * returns the gradient of its input. */
static uint32_t layer_backward(gen_t *g, int l, uint32_t dx)
{
    const bench_trace_config_t *c = g->c;
    const layer_params_t *lp = &g->lp[l];
    layer_saved_t *s = &g->ls[l];
    uint64_t N = g->N, H = (uint64_t)c->hidden;
    uint64_t kvd = H / (uint64_t)c->heads * (uint64_t)c->kv_heads;
    uint64_t NH2 = N * H * 2, NKV2 = N * kvd * 2;

    uint32_t dh2;
    if (!lp->moe) {
        uint64_t NF2 = N * (uint64_t)c->ffn * 2;
        uint32_t dp = A(g, NF2);
        workspace(g);
        grad(g, lp->w_down);
        F(g, &s->p);
        uint32_t dg = A(g, NF2), du = A(g, NF2);
        F(g, &dp);
        F(g, &s->g);
        F(g, &s->u);
        dh2 = A(g, NH2);
        workspace(g);
        grad(g, lp->w_gate);
        temp(g, NH2);                    /* the up branch, added into dh2 */
        grad(g, lp->w_up);
        F(g, &dg);
        F(g, &du);
    } else {
        uint64_t E = (uint64_t)c->experts, Fe = (uint64_t)c->expert_ffn;
        dh2 = A(g, NH2);
        for (int e = c->experts - 1; e >= 0; e--) {
            uint64_t n = s->tokens[e];
            if (n == 0)
                continue;
            uint32_t dd = A(g, n * H * 2);   /* gathered output gradient */
            uint32_t dp = A(g, n * Fe * 2);
            grad(g, lp->e_down[e]);
            F(g, &dd);
            F(g, &s->pe[e]);
            uint32_t dg = A(g, n * Fe * 2), du = A(g, n * Fe * 2);
            F(g, &dp);
            F(g, &s->ge[e]);
            F(g, &s->ue[e]);
            uint32_t dxe = A(g, n * H * 2);
            grad(g, lp->e_gate[e]);
            grad(g, lp->e_up[e]);
            F(g, &dg);
            F(g, &du);
            F(g, &s->xe[e]);
            F(g, &dxe);                      /* scattered into dh2 */
        }
        uint32_t drl = A(g, N * E * 4);
        F(g, &s->topk_w);
        F(g, &s->topk_i);
        grad(g, lp->router);
        temp(g, NH2);                        /* router input gradient */
        F(g, &drl);
        F(g, &s->router_logits);
    }
    uint32_t dn2 = A(g, NH2);                /* RMSNorm backward */
    grad(g, lp->ffn_norm);
    F(g, &dh2);
    F(g, &s->h2);
    F(g, &s->rstd2);
    uint32_t dxm = A(g, NH2);                /* residual */
    F(g, &dn2);
    F(g, &dx);
    F(g, &s->x_mid);

    uint32_t d_o = A(g, NH2);                /* output projection */
    grad(g, lp->wo);
    workspace(g);
    F(g, &s->o);
    uint32_t dq = A(g, NH2), dk = A(g, NKV2), dv = A(g, NKV2);  /* flash attention */
    temp(g, N * H * 4);                      /* fp32 dq accumulator */
    workspace(g);
    F(g, &d_o);
    F(g, &s->lse);
    F(g, &s->q_r);
    F(g, &s->k_r);
    F(g, &s->v);
    uint32_t dq0 = A(g, NH2);                /* RoPE backward */
    F(g, &dq);
    uint32_t dk0 = A(g, NKV2);
    F(g, &dk);
    uint32_t dh1 = A(g, NH2);                /* projections */
    grad(g, lp->wq);
    workspace(g);
    temp(g, NH2);
    grad(g, lp->wk);
    temp(g, NH2);
    grad(g, lp->wv);
    F(g, &dq0);
    F(g, &dk0);
    F(g, &dv);
    F(g, &s->h1);
    uint32_t dn1 = A(g, NH2);                /* RMSNorm backward */
    grad(g, lp->attn_norm);
    F(g, &dh1);
    F(g, &s->rstd1);
    uint32_t dxi = A(g, NH2);                /* residual */
    F(g, &dn1);
    F(g, &dxm);
    F(g, &s->x_in);
    return dxi;
}

static void step(gen_t *g)
{
    const bench_trace_config_t *c = g->c;
    uint64_t H = (uint64_t)c->hidden, V = (uint64_t)c->vocab;
    /* Half the steps use the longest sequence; the others are shorter by
     * 1/16 to 8/16 (variable-length batches). */
    uint64_t r = rnd_below(g, 2) ? 0 : 1 + rnd_below(g, 8);
    g->T = (uint64_t)c->seq - (uint64_t)c->seq / 16 * r;
    g->N = (uint64_t)c->batch * g->T;
    uint64_t N = g->N, NH2 = N * H * 2;

    uint32_t tokens = A(g, N * 4), targets = A(g, N * 8);
    uint32_t x = A(g, NH2);                  /* embedding */
    for (int l = 0; l < c->layers; l++)
        x = layer_forward(g, l, x);
    uint32_t hf = A(g, NH2), rstd = A(g, N * 4);   /* final norm */
    uint32_t logits = A(g, N * V * 2);
    workspace(g);
    uint32_t logits32 = A(g, N * V * 4);     /* cross-entropy in fp32 */
    uint32_t logprobs = A(g, N * V * 4);
    F(g, &logits32);
    uint32_t loss = A(g, 4);

    g->bucket_fill = 0;
    g->bucket = NONE;
    uint32_t dlog32 = A(g, N * V * 4);       /* backward */
    F(g, &logprobs);
    uint32_t dlogits = A(g, N * V * 2);
    F(g, &dlog32);
    uint32_t dhf = A(g, NH2);
    grad(g, g->lm_head);
    workspace(g);
    F(g, &dlogits);
    F(g, &logits);
    uint32_t dx = A(g, NH2);
    grad(g, g->final_norm);
    F(g, &dhf);
    F(g, &hf);
    F(g, &rstd);
    F(g, &x);
    for (int l = c->layers - 1; l >= 0; l--)
        dx = layer_backward(g, l, dx);
    grad(g, g->emb);
    F(g, &dx);
    F(g, &tokens);
    if (g->bucket_fill > 0) {                /* last, partial bucket */
        F(g, &g->bucket);
        g->bucket = builder_alloc(&g->b, g->bucket_fill, 1);
    }
    F(g, &g->bucket);

    /* clip_grad_norm_: a norm per gradient, stacked, reduced. */
    uint32_t *norms = calloc((size_t)g->n_params, sizeof *norms);
    if (!norms) {
        g->b.failed = true;
        return;
    }
    int n_grads = 0;
    for (int i = 0; i < g->n_params; i++)
        norms[i] = g->params[i].grad != NONE ? (n_grads++, A(g, 4)) : NONE;
    uint32_t stacked = A(g, (uint64_t)n_grads * 4);
    for (int i = 0; i < g->n_params; i++)
        F(g, &norms[i]);
    free(norms);
    uint32_t total = A(g, 4);
    F(g, &stacked);
    temp(g, 4);                              /* clip coefficient */
    F(g, &total);
    /* AdamW (foreach): an fp32 copy of each gradient, then zero_grad. */
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].grad != NONE)
            temp(g, g->params[i].elems * 4);
    for (int i = 0; i < g->n_params; i++)
        F(g, &g->params[i].grad);
    F(g, &targets);
    F(g, &loss);
}

static bool config_ok(const bench_trace_config_t *c, char *err, size_t err_size)
{
    if (c->layers < 1 || c->hidden < 1 || c->heads < 1 || c->kv_heads < 1 || c->ffn < 1 ||
        c->vocab < 1 || c->batch < 1 || c->seq < 16 || c->hidden % c->heads != 0 ||
        c->heads % c->kv_heads != 0) {
        set_err(err, err_size, "trace model: invalid shape");
        return false;
    }
    if (c->moe_every < 0 || (c->moe_every > 0 &&
        (c->experts < 1 || c->experts > MAX_EXPERTS || c->top_k < 1 ||
         c->top_k > c->experts || c->expert_ffn < 1))) {
        set_err(err, err_size, "trace model: invalid MoE settings (1..%d experts)",
                MAX_EXPERTS);
        return false;
    }
    return true;
}

bool bench_trace_generate(const bench_trace_config_t *config, bench_trace_t *trace,
                          char *err, size_t err_size)
{
    if (!config_ok(config, err, err_size))
        return false;
    gen_t g;
    memset(&g, 0, sizeof g);
    g.c = config;
    g.rng = config->seed;
    builder_init(&g.b, trace);
    g.lp = calloc((size_t)config->layers, sizeof *g.lp);
    g.ls = calloc((size_t)config->layers, sizeof *g.ls);
    g.bucket = NONE;
    if (!g.lp || !g.ls)
        g.b.failed = true;
    if (!g.b.failed)
        build_model(&g);
    trace->steps_begin = trace->n_ops;
    size_t cap_steps = 0;
    while (!g.b.failed && trace->n_ops < config->min_ops) {
        step(&g);
        size_t *ends = grow(trace->step_ends, &cap_steps, trace->steps + 1, sizeof *ends);
        if (!ends) {
            g.b.failed = true;
            break;
        }
        trace->step_ends = ends;
        trace->step_ends[trace->steps++] = trace->n_ops;
    }
    trace->steps_end = trace->n_ops;
    /* Teardown: the model and optimizer go away, so that the trace ends
     * with nothing allocated. */
    F(&g, &g.rope_cos);
    F(&g, &g.rope_sin);
    for (int i = 0; i < g.n_params; i++) {
        F(&g, &g.params[i].v);
        F(&g, &g.params[i].m);
        F(&g, &g.params[i].master);
        F(&g, &g.params[i].slot);
    }
    bool ok = !g.b.failed;
    builder_done(&g.b);
    free(g.params);
    free(g.lp);
    free(g.ls);
    if (!ok) {
        bench_trace_release(trace);
        set_err(err, err_size, "trace generator: out of host memory");
    }
    return ok;
}

/* ---- text format -------------------------------------------------------------
 * IDs of a loaded file map to slots through an open-addressing hash table
 * with linear probing and backward-shift deletion.
 * Invariant: every live ID is in the table, reachable from its home bucket
 * without crossing an empty bucket. */
typedef struct id_map {
    uint64_t *keys;
    uint32_t *slots;         /* UINT32_MAX = empty */
    size_t cap, n;           /* cap is a power of two */
} id_map_t;

static size_t id_hash(uint64_t id, size_t cap)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

static bool id_map_grow(id_map_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : 4096;
    id_map_t nm = {malloc(cap * sizeof *nm.keys), malloc(cap * sizeof *nm.slots), cap, 0};
    if (!nm.keys || !nm.slots) {
        free(nm.keys);
        free(nm.slots);
        return false;
    }
    for (size_t i = 0; i < cap; i++)
        nm.slots[i] = UINT32_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i] == UINT32_MAX)
            continue;
        size_t h = id_hash(m->keys[i], cap);
        while (nm.slots[h] != UINT32_MAX)
            h = (h + 1) & (cap - 1);
        nm.keys[h] = m->keys[i];
        nm.slots[h] = m->slots[i];
        nm.n++;
    }
    free(m->keys);
    free(m->slots);
    *m = nm;
    return true;
}

/* Index of the bucket holding id, or of the empty bucket where it would go. */
static size_t id_map_find(const id_map_t *m, uint64_t id)
{
    size_t h = id_hash(id, m->cap);
    while (m->slots[h] != UINT32_MAX && m->keys[h] != id)
        h = (h + 1) & (m->cap - 1);
    return h;
}

static void id_map_erase(id_map_t *m, size_t i)
{
    size_t mask = m->cap - 1, j = i;
    m->slots[i] = UINT32_MAX;
    m->n--;
    for (;;) {
        j = (j + 1) & mask;
        if (m->slots[j] == UINT32_MAX)
            return;
        size_t home = id_hash(m->keys[j], m->cap);
        /* Move j back to i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->slots[i] = m->slots[j];
        m->slots[j] = UINT32_MAX;
        i = j;
    }
}

/* Parses an unsigned decimal field; advances *p past it. */
static bool parse_u64(const char **p, uint64_t *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return false;
    uint64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
        s++;
    }
    *p = s;
    *out = v;
    return true;
}

static const char *skip_blanks(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* After a field there must be a blank or the end of the line. */
static bool field_end(const char *s)
{
    return *s == ' ' || *s == '\t' || *s == '\0' || *s == '\n' || *s == '\r';
}

static bool at_eol(const char *s)
{
    s = skip_blanks(s);
    return *s == '\0' || *s == '\n' || (*s == '\r' && (s[1] == '\n' || s[1] == '\0'));
}

/* Length of s up to the end of the line, at most 40, for messages. */
static int text_len(const char *s)
{
    size_t n = strcspn(s, "\r\n");
    return n > 40 ? 40 : (int)n;
}

/* The message for a bad or missing field. */
static void field_err(char *err, size_t err_size, const char *path, uint64_t lineno,
                      const char *s, const char *name, const char *what)
{
    size_t n = strcspn(s, " \t\r\n");
    if (at_eol(s))
        set_err(err, err_size, "%s:%" PRIu64 ": missing %s (expected \"a ID BYTES STREAM\" "
                "or \"f ID\")", path, lineno, name);
    else
        set_err(err, err_size, "%s:%" PRIu64 ": %s must be %s, got \"%.*s\"", path, lineno,
                name, what, n > 40 ? 40 : (int)n, s);
}

bool bench_trace_load(const char *path, bench_trace_t *trace, char *err, size_t err_size)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        set_err(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    builder_t b;
    builder_init(&b, trace);
    id_map_t map = {0};
    char *line = NULL;
    size_t line_cap = 0;
    uint64_t lineno = 0;
    bool ok = id_map_grow(&map);
    if (!ok)
        set_err(err, err_size, "%s: out of host memory", path);
    while (ok) {
        errno = 0;
        ssize_t len = getline(&line, &line_cap, f);
        if (len < 0) {
            if (ferror(f)) {
                set_err(err, err_size, "%s:%" PRIu64 ": read error: %s", path, lineno + 1,
                        strerror(errno));
                ok = false;
            }
            break;
        }
        lineno++;
        if ((size_t)len != strlen(line)) {
            set_err(err, err_size, "%s:%" PRIu64 ": NUL byte in line", path, lineno);
            ok = false;
            break;
        }
        const char *s = skip_blanks(line);
        if (*s == '#' || at_eol(s))
            continue;
        char op = *s++;
        if ((op != 'a' && op != 'f') || !field_end(s)) {
            set_err(err, err_size,
                    "%s:%" PRIu64 ": expected \"a ID BYTES STREAM\" or \"f ID\", got \"%.*s\"",
                    path, lineno, text_len(skip_blanks(line)), skip_blanks(line));
            ok = false;
            break;
        }
        uint64_t id, bytes = 0, stream = 0;
        s = skip_blanks(s);
        const char *field = s;
        if (!parse_u64(&s, &id) || !field_end(s)) {
            field_err(err, err_size, path, lineno, field,
                      "ID", "an unsigned 64-bit integer");
            ok = false;
            break;
        }
        if (op == 'a') {
            s = field = skip_blanks(s);
            if (!parse_u64(&s, &bytes) || !field_end(s) || bytes == 0 ||
                bytes > ((uint64_t)1 << 50)) {
                field_err(err, err_size, path, lineno, field,
                          "BYTES", "an integer from 1 to 2^50");
                ok = false;
                break;
            }
            s = field = skip_blanks(s);
            if (!parse_u64(&s, &stream) || !field_end(s) ||
                stream >= BENCH_TRACE_MAX_STREAMS) {
                field_err(err, err_size, path, lineno, field,
                          "STREAM", "an integer from 0 to 15");
                ok = false;
                break;
            }
        }
        if (!at_eol(s)) {
            set_err(err, err_size, "%s:%" PRIu64 ": unexpected text after the %s: \"%.*s\"",
                    path, lineno, op == 'a' ? "STREAM" : "ID", text_len(skip_blanks(s)),
                    skip_blanks(s));
            ok = false;
            break;
        }
        size_t h = id_map_find(&map, id);
        if (op == 'a') {
            if (map.slots[h] != UINT32_MAX) {
                set_err(err, err_size,
                        "%s:%" PRIu64 ": ID %" PRIu64 " allocated again while still live",
                        path, lineno, id);
                ok = false;
                break;
            }
            uint32_t slot = builder_alloc(&b, bytes, (int)stream);
            if (slot == UINT32_MAX) {
                set_err(err, err_size, "%s:%" PRIu64 ": out of host memory", path, lineno);
                ok = false;
                break;
            }
            map.keys[h] = id;
            map.slots[h] = slot;
            map.n++;
            if (map.n * 2 > map.cap && !id_map_grow(&map)) {
                set_err(err, err_size, "%s:%" PRIu64 ": out of host memory", path, lineno);
                ok = false;
            }
        } else {
            if (map.slots[h] == UINT32_MAX) {
                set_err(err, err_size,
                        "%s:%" PRIu64 ": free of ID %" PRIu64 ", which is not allocated",
                        path, lineno, id);
                ok = false;
                break;
            }
            builder_free(&b, map.slots[h]);
            id_map_erase(&map, h);
            if (b.failed) {
                set_err(err, err_size, "%s:%" PRIu64 ": out of host memory", path, lineno);
                ok = false;
            }
        }
    }
    if (ok && trace->n_ops == 0) {
        set_err(err, err_size, "%s: no operations in the file", path);
        ok = false;
    }
    free(line);
    free(map.keys);
    free(map.slots);
    fclose(f);
    builder_done(&b);
    if (!ok)
        bench_trace_release(trace);
    return ok;
}

bool bench_trace_save(const char *path, const bench_trace_t *trace, const char *comment,
                      char *err, size_t err_size)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        set_err(err, err_size, "%s: cannot create: %s", path, strerror(errno));
        return false;
    }
    fprintf(f, "# chameleon allocation trace: \"a ID BYTES STREAM\" / \"f ID\"\n");
    if (comment && *comment)
        fprintf(f, "# %s\n", comment);
    for (size_t i = 0; i < trace->n_ops; i++) {
        const bench_op_t *op = &trace->ops[i];
        if (op->kind == BENCH_OP_ALLOC)
            fprintf(f, "a %" PRIu32 " %" PRIu64 " %u\n", op->slot, op->bytes,
                    (unsigned)op->stream);
        else
            fprintf(f, "f %" PRIu32 "\n", op->slot);
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0)
        ok = false;
    if (!ok)
        set_err(err, err_size, "%s: write failed: %s", path, strerror(errno));
    return ok;
}
