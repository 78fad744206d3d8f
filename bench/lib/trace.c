/* The allocation-trace generator (trace.h): one device training an
 * LLM-like model with mixed-precision AdamW, allocation by allocation, in
 * the order a PyTorch eager program allocates and frees. docs/bench.md
 * describes the model and the trace. */
#include "lib/trace.h"

#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/rng.h"
#include "lib/trace_builder.h"

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
    trace_builder_t b;
    uint64_t rng;
    param_t *params;
    int n_params;
    size_t cap_params;
    layer_params_t *lp;
    layer_saved_t *ls;
    int emb, final_norm, lm_head;
    uint32_t rope_cos, rope_sin;
    /* Gradient all-reduce bucket on stream 1. */
    uint64_t bucket_fill;
    uint32_t bucket;
    /* This step's shape, and the bytes of one fp16 activation of width
     * hidden and of width key/value. */
    uint64_t T, N;           /* sequence length, tokens */
    uint64_t NH2, NKV2;
} gen_t;

/* splitmix64: small, fast, and the same on every platform. */
static uint64_t rnd(gen_t *g)
{
    return cham_splitmix64(&g->rng);
}

static uint64_t rnd_below(gen_t *g, uint64_t n)
{
    return n ? rnd(g) % n : 0;
}

static uint32_t A(gen_t *g, uint64_t bytes)
{
    return trace_builder_alloc(&g->b, bytes, 0);
}

static void F(gen_t *g, uint32_t *slot)
{
    if (*slot != NONE)
        trace_builder_free(&g->b, *slot);
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
    param_t *p = cham_grow(g->params, &g->cap_params, (size_t)g->n_params + 1, sizeof *p, 256);
    if (!p) {
        g->b.failed = true;
        return 0;
    }
    g->params = p;
    p = &g->params[g->n_params];
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
        g->bucket = trace_builder_alloc(&g->b, g->bucket_fill, 1);
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

/* Forward of a layer with weights lp and input x (saved in s, with what
 * else backward needs); returns the output. */
static uint32_t layer_forward(gen_t *g, const layer_params_t *lp, layer_saved_t *s, uint32_t x)
{
    const bench_trace_config_t *c = g->c;
    uint64_t N = g->N, H = (uint64_t)c->hidden, NH2 = g->NH2, NKV2 = g->NKV2;

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

/* Backward of an RMSNorm with weight norm and of the residual around its
 * block: dh is the gradient of the norm's output, h and rstd what the norm
 * saved (h may be freed already), dy the gradient of the residual's output
 * and x the block's input; all of them are freed. Returns the gradient of
 * x. */
static uint32_t norm_backward(gen_t *g, int norm, uint32_t *dh, uint32_t *h, uint32_t *rstd,
                              uint32_t *dy, uint32_t *x)
{
    uint32_t dn = A(g, g->NH2);              /* RMSNorm backward */
    grad(g, norm);
    F(g, dh);
    F(g, h);
    F(g, rstd);
    uint32_t dx = A(g, g->NH2);              /* residual */
    F(g, &dn);
    F(g, dy);
    F(g, x);
    return dx;
}

/* Backward of a layer: dx is the gradient of its output (freed here), as
 * are the activations it saved in s; returns the gradient of its input. */
static uint32_t layer_backward(gen_t *g, const layer_params_t *lp, layer_saved_t *s,
                               uint32_t dx)
{
    const bench_trace_config_t *c = g->c;
    uint64_t N = g->N, H = (uint64_t)c->hidden, NH2 = g->NH2, NKV2 = g->NKV2;

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
    uint32_t dxm = norm_backward(g, lp->ffn_norm, &dh2, &s->h2, &s->rstd2, &dx, &s->x_mid);

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
    return norm_backward(g, lp->attn_norm, &dh1, &s->h1, &s->rstd1, &dxm, &s->x_in);
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
    uint64_t kvd = H / (uint64_t)c->heads * (uint64_t)c->kv_heads;
    g->NH2 = NH2;
    g->NKV2 = N * kvd * 2;

    uint32_t tokens = A(g, N * 4), targets = A(g, N * 8);
    uint32_t x = A(g, NH2);                  /* embedding */
    for (int l = 0; l < c->layers; l++)
        x = layer_forward(g, &g->lp[l], &g->ls[l], x);
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
        dx = layer_backward(g, &g->lp[l], &g->ls[l], dx);
    grad(g, g->emb);
    F(g, &dx);
    F(g, &tokens);
    if (g->bucket_fill > 0) {                /* last, partial bucket */
        F(g, &g->bucket);
        g->bucket = trace_builder_alloc(&g->b, g->bucket_fill, 1);
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
        cham_set_err(err, err_size, "trace model: invalid shape");
        return false;
    }
    if (c->moe_every < 0 || (c->moe_every > 0 &&
        (c->experts < 1 || c->experts > MAX_EXPERTS || c->top_k < 1 ||
         c->top_k > c->experts || c->expert_ffn < 1))) {
        cham_set_err(err, err_size, "trace model: invalid MoE settings (1..%d experts)",
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
    trace_builder_init(&g.b, trace);
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
        size_t *ends = cham_grow(trace->step_ends, &cap_steps, trace->steps + 1, sizeof *ends,
                                 1024);
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
    trace_builder_done(&g.b);
    free(g.params);
    free(g.lp);
    free(g.ls);
    if (!ok) {
        bench_trace_release(trace);
        cham_set_err(err, err_size, "trace generator: out of host memory");
    }
    return ok;
}
