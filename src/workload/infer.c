/* Inference on the generator (docs/workloads.md, "Inference"): step 0 is
 * the prefill of the prompt, each later step decodes one token per
 * sequence. A layer's keys and values go to its KV cache, sized for the
 * whole context (prompt + generated tokens, as a static cache is); its
 * attention reads the tokens so far. Decode is memory-bound: every step
 * reads all the weights and every layer's cache once, and its kernels'
 * bytes say so.
 *
 * With kv_offload the caches live in pinned host memory, the way
 * HyperOffload's cache operators move them: before a layer's attention
 * its cache is on the device (Prefetch, issued one layer ahead on the
 * fetch stream), the step's new keys and values go back to the host
 * (Store, on the offload stream) and the device copy is released two
 * layers later (Detach), when the compute stream has waited for the
 * store. At most four layers' caches are on the device at once.
 *
 * Also the longest sequence a model takes (cham_model_max_seq), where
 * `chameleon infer --find-max-context` stops its search. */
#include <stdlib.h>
#include <string.h>

#include "workload/workload-impl.h"

/* An op with its kernel's bytes given (weights read in part, caches in
 * their filled part). */
#define OP(w, op, flops, bytes, ...)                                                          \
    wl_run((w), (op), (const wl_arg_t[]){__VA_ARGS__},                                        \
           sizeof((const wl_arg_t[]){__VA_ARGS__}) / sizeof(wl_arg_t), (flops), (bytes))

uint64_t wl_kv_token_bytes(const cham_model_config_t *m)
{
    return (uint64_t)m->mbs * 2 * m->kv_heads * wl_head_dim(m) * cham_dtype_size(m->dtype);
}

uint64_t cham_model_kv_cache_bytes(const cham_model_config_t *m)
{
    if (!m->infer)
        return 0;
    return wl_kv_token_bytes(m) * ((uint64_t)m->seq + m->generate) * m->layers;
}

static bool seq_accepted(const cham_model_config_t *m, uint32_t seq)
{
    cham_model_config_t c = *m;
    c.seq = seq;
    char err[8];   /* the message is not wanted */
    return cham_model_validate(&c, err, sizeof err) == CHAM_OK;
}

/* Bisection: every check of cham_model_validate that involves seq (its
 * range, the context seq + generate, the largest tensors, GPT-2's position
 * table) grows with it, so the accepted lengths are 1 .. some maximum.
 * Here, not in the CLI, so that `infer --find-max-context` never runs into
 * a limit it has to find by failing. */
uint32_t cham_model_max_seq(const cham_model_config_t *m)
{
    if (!seq_accepted(m, 1))
        return 0;
    if (seq_accepted(m, CHAM_MODEL_MAX_SEQ))
        return CHAM_MODEL_MAX_SEQ;
    uint32_t good = 1, bad = CHAM_MODEL_MAX_SEQ;
    while (bad - good > 1) {
        uint32_t mid = good + (bad - good) / 2;
        *(seq_accepted(m, mid) ? &good : &bad) = mid;
    }
    return good;
}

cham_status_t wl_infer_new(cham_workload_t *w)
{
    const cham_model_config_t *m = &w->m;
    uint64_t bytes = wl_kv_token_bytes(m) * ((uint64_t)m->seq + m->generate);
    if (!(w->kv = calloc(w->n_layers, sizeof *w->kv)))
        return CHAM_ERR_HOST_OOM;
    if (!m->kv_offload) {
        for (uint32_t l = 0; l < w->n_layers; l++)
            TRY(wl_new(w, bytes, m->dtype, &w->kv[l], "layer%u.kv_cache", l));
        return CHAM_OK;
    }
    if (!(w->host_kv = calloc(w->n_layers, sizeof *w->host_kv)))
        return CHAM_ERR_HOST_OOM;
    TRY(wl_events_new(w, &w->ev_kv));
    for (uint32_t l = 0; l < w->n_layers; l++) {
        TRY(cham_device_host_alloc(w->dev, bytes, &w->host_kv[l]));
        TRY(cham_event_record(w->ev_kv[l], w->offload));
    }
    return CHAM_OK;
}

void wl_infer_free(cham_workload_t *w)
{
    for (uint32_t l = 0; w->host_kv && l < w->n_layers; l++)
        cham_device_host_free(w->dev, w->host_kv[l]);
    free(w->host_kv);
    w->host_kv = NULL;
    wl_events_free(w, &w->ev_kv);
    free(w->kv);   /* the tensors are in the held set */
    w->kv = NULL;
}

/* The tokens of one step: all of the prompt's, or one per sequence. */
typedef struct step_span {
    uint64_t tokens;             /* rows this step computes (all sequences) */
    uint64_t past;               /* per sequence, tokens in the cache before */
    uint64_t ctx;                /* ... and after this step */
} step_span_t;

/* Prefetch: layer l's cache, its past tokens copied from the host after
 * their last store, into a new device tensor with room for this step's. */
static cham_status_t prefetch(cham_workload_t *w, uint32_t l, const step_span_t *s)
{
    uint64_t tb = wl_kv_token_bytes(&w->m);
    TRY(wl_new(w, s->ctx * tb, w->m.dtype, &w->kv[l], "layer%u.kv_cache", l));
    if (s->past == 0)
        return CHAM_OK;
    cham_tensor_t *filled;
    TRY(wl_view(w, w->kv[l], 0, s->past * tb, &filled));
    cham_status_t st = wl_offload_ordered(w, OP_KV_PREFETCH, filled, w->host_kv[l], false,
                                          w->fetch, w->ev_kv[l]);
    wl_drop(w, &filled);
    return st;
}

/* Store: this step's keys and values to the host. */
static cham_status_t store(cham_workload_t *w, uint32_t l, const step_span_t *s)
{
    uint64_t tb = wl_kv_token_bytes(&w->m);
    cham_tensor_t *fresh;
    TRY(wl_view(w, w->kv[l], s->past * tb, (s->ctx - s->past) * tb, &fresh));
    cham_status_t st = wl_offload_ordered(w, OP_KV_STORE, fresh,
                                          (char *)w->host_kv[l] + s->past * tb, true, w->offload,
                                          NULL);
    wl_drop(w, &fresh);
    return st == CHAM_OK ? cham_event_record(w->ev_kv[l], w->offload) : st;
}

/* Detach: layer l's device copy is released once the compute stream has
 * waited for its store (a layer or two later, when it is long done), so
 * its block is reused in stream order. */
static cham_status_t detach(cham_workload_t *w, uint32_t l)
{
    if (!w->kv[l])
        return CHAM_OK;
    TRY(cham_stream_wait_event(w->compute, w->ev_kv[l]));
    wl_drop(w, &w->kv[l]);
    return CHAM_OK;
}

/* The MLP of n rows: Llama's SwiGLU (Mixtral: top-k of its experts, with
 * the weights of the experts the rows touch), GPT-2's GELU. */
static cham_status_t mlp(cham_workload_t *w, uint64_t n, cham_tensor_t *wt, cham_tensor_t *in,
                         cham_tensor_t **out)
{
    const cham_model_config_t *m = &w->m;
    uint64_t h = m->hidden, f = m->ffn, p = cham_dtype_size(m->dtype);
    double k = 1, touched = 1;   /* rows per token through an expert; weights read */
    if (m->arch == CHAM_ARCH_MIXTRAL) {
        uint64_t rows = n * m->topk, e = rows < m->experts ? rows : m->experts;
        k = m->topk;
        touched = (double)e / m->experts;
        cham_tensor_t *gates;
        TRY(wl_new(w, n * m->experts * 4, CHAM_DTYPE_F32, &gates, "router_gates"));
        TRY(OP(w, OP_ROUTER, 2.0 * (double)(n * h * m->experts),
               (double)((n * h + h * m->experts) * p), R(in), R(wt), W(gates)));
        wl_drop(w, &gates);
    }
    double wbytes = (double)w->lp.mlp * (double)p * touched;
    bool gpt = m->arch == CHAM_ARCH_GPT2;
    cham_tensor_t *mid, *act;
    uint64_t width = gpt ? f : 2 * f;
    TRY(wl_new(w, n * width * p, m->dtype, &mid, "mlp_in"));
    TRY(OP(w, gpt ? OP_FC1 : OP_GATE_UP, 2.0 * k * (double)(n * h * width),
           k * (double)((n * h + n * width) * p) + wbytes * (double)width / (double)(width + f),
           R(in), R(wt), W(mid)));
    TRY(wl_new(w, n * f * p, m->dtype, &act, "mlp_act"));
    TRY(OP(w, gpt ? OP_GELU : OP_SWIGLU, 8.0 * k * (double)(n * f),
           k * (double)((n * width + n * f) * p), R(mid), W(act)));
    wl_drop(w, &mid);
    TRY(wl_new(w, n * h * p, m->dtype, out, "mlp_out"));
    TRY(OP(w, gpt ? OP_FC2 : OP_DOWN, 2.0 * k * (double)(n * f * h),
           k * (double)((n * f + n * h) * p) + wbytes * (double)f / (double)(width + f), R(act),
           R(wt), W(*out)));
    wl_drop(w, &act);
    return CHAM_OK;
}

/* Layer l on x (n rows): attention over the cache, then the MLP. */
static cham_status_t layer(cham_workload_t *w, uint32_t l, const step_span_t *s,
                           cham_tensor_t *x)
{
    const cham_model_config_t *m = &w->m;
    uint64_t n = s->tokens, h = m->hidden, p = cham_dtype_size(m->dtype);
    uint64_t qw = wl_qkv_width(m), cw = wl_ctx_width(m), tb = wl_kv_token_bytes(m);
    double xb = (double)(n * h * p);
    cham_tensor_t *wt, *n1, *qkv, *att, *o, *n2, *y;
    TRY(wl_weights(w, l, &wt));
    TRY(wl_new(w, n * h * p, m->dtype, &n1, "norm1_out"));
    TRY(OP(w, OP_NORM, 5.0 * (double)(n * h), 2 * xb + (double)(w->lp.norm1 * p), R(x), R(wt),
           W(n1)));
    TRY(wl_new(w, n * qw * p, m->dtype, &qkv, "qkv"));
    TRY(OP(w, OP_QKV, 2.0 * (double)(n * h * qw), xb + (double)((n * qw + w->lp.qkv) * p),
           R(n1), R(wt), W(qkv)));
    wl_drop(w, &n1);
    if (m->arch != CHAM_ARCH_GPT2)
        TRY(OP(w, OP_ROPE, 6.0 * (double)(n * qw), 2.0 * (double)(n * qw * p), RW(qkv)));
    if (m->kv_offload) {
        /* This layer's cache is in (its prefetch issued a layer ago); the
         * next layer's starts now, behind this one's work. */
        TRY(wl_join(w, w->fetch, w->ev_fetch[l]));
        if (l >= 2)
            TRY(detach(w, l - 2));
        if (l + 1 < w->n_layers)
            TRY(prefetch(w, l + 1, s));
    }
    double fresh = (double)((s->ctx - s->past) * tb);
    TRY(OP(w, OP_KV_WRITE, 0, 2 * fresh, R(qkv), RW(w->kv[l])));
    /* Each query reads the keys before it: all of them in decode, half
     * on average in the causal prefill. */
    double keys = s->past ? (double)s->ctx : (double)(s->ctx + 1) / 2;
    TRY(wl_new(w, n * cw * p, m->dtype, &att, "attention_out"));
    TRY(OP(w, OP_FLASH, 4.0 * (double)n * keys * (double)cw,
           (double)((n * qw + n * cw) * p) + keys * (double)tb,
           R(qkv), R(w->kv[l]), W(att)));
    wl_drop(w, &qkv);
    if (m->kv_offload)
        TRY(store(w, l, s));
    TRY(wl_new(w, n * h * p, m->dtype, &o, "attention_proj"));
    TRY(OP(w, OP_OUT, 2.0 * (double)(n * cw * h), (double)((n * cw + n * h + w->lp.out) * p),
           R(att), R(wt), W(o)));
    wl_drop(w, &att);
    TRY(OP(w, OP_ADD, (double)(n * h), 3 * xb, RW(x), R(o)));
    wl_drop(w, &o);
    TRY(wl_new(w, n * h * p, m->dtype, &n2, "norm2_out"));
    TRY(OP(w, OP_NORM, 5.0 * (double)(n * h), 2 * xb + (double)(w->lp.norm2 * p), R(x), R(wt),
           W(n2)));
    TRY(mlp(w, n, wt, n2, &y));
    wl_drop(w, &n2);
    TRY(OP(w, OP_ADD, (double)(n * h), 3 * xb, RW(x), R(y)));
    wl_drop(w, &y);
    wl_drop(w, &wt);
    return CHAM_OK;
}

/* Final norm and head on each sequence's last row, the next token chosen:
 * w->next_ids, which the next step's embedding reads. */
static cham_status_t head(cham_workload_t *w, cham_tensor_t *x, uint64_t n)
{
    const cham_model_config_t *m = &w->m;
    uint64_t b = m->mbs, h = m->hidden, p = cham_dtype_size(m->dtype), V = m->vocab;
    bool tied = m->arch == CHAM_ARCH_GPT2;
    cham_tensor_t *wn, *wh = NULL, *nf, *logits;
    TRY(wl_weights(w, wl_head_group(w), &wn));
    if (tied)
        TRY(wl_weights(w, wl_embed_group(w), &wh));
    TRY(wl_new(w, b * h * p, m->dtype, &nf, "final_norm_out"));
    TRY(OP(w, OP_NORM, 5.0 * (double)(b * h), (double)((n + b) * h * p), R(x), R(wn), W(nf)));
    TRY(wl_new(w, b * V * 4, CHAM_DTYPE_F32, &logits, "logits"));
    TRY(OP(w, OP_HEAD, 2.0 * (double)(b * h * V), (double)((b * h + V * h) * p + b * V * 4),
           R(nf), R(tied ? wh : wn), W(logits)));
    wl_drop(w, &nf);
    wl_drop(w, &wn);
    wl_drop(w, &wh);
    wl_drop(w, &w->next_ids);
    TRY(wl_new(w, b * 8, CHAM_DTYPE_I64, &w->next_ids, "next_ids"));
    TRY(OP(w, OP_SAMPLE, (double)(b * V), (double)(b * V * 4 + b * 8), R(logits),
           W(w->next_ids)));
    wl_drop(w, &logits);
    return CHAM_OK;
}

cham_status_t wl_infer_step(cham_workload_t *w, uint64_t step)
{
    const cham_model_config_t *m = &w->m;
    if (step > m->generate) {
        cham_set_err(w->error, sizeof w->error, "workload: inference runs 1 + generate (%u) "
                     "steps: the prefill and one per generated token; step %llu asked for",
                     m->generate, (unsigned long long)step);
        return CHAM_ERR_INVALID_ARG;
    }
    step_span_t s = {.tokens = step ? m->mbs : wl_tokens(m),
                     .past = step ? m->seq + step - 1 : 0, .ctx = m->seq + step};
    uint64_t h = m->hidden, p = cham_dtype_size(m->dtype), n = s.tokens;
    /* NULL until made: a failure part-way drops only what was made. */
    cham_tensor_t *ids = w->next_ids, *wt = NULL, *x = NULL;
    cham_status_t st = cham_phase(w->ctx, CHAM_PHASE_FORWARD);
    if (st == CHAM_OK && !step) {
        st = wl_new(w, n * 8, CHAM_DTYPE_I64, &ids, "prompt_ids");
        if (st == CHAM_OK)
            st = OP(w, OP_LOAD, 0, (double)(n * 8), W(ids));
    }
    if (st == CHAM_OK)
        st = wl_weights(w, wl_embed_group(w), &wt);
    if (st == CHAM_OK)
        st = wl_new(w, n * h * p, m->dtype, &x, "embedded");
    if (st == CHAM_OK) {
        st = OP(w, OP_EMBED, (double)(n * h), (double)(2 * n * h * p + n * 8), R(ids), R(wt),
                W(x));
        wl_drop(w, &wt);
    }
    if (!step)
        wl_drop(w, &ids);
    if (st == CHAM_OK && m->kv_offload)
        st = prefetch(w, 0, &s);
    for (uint32_t l = 0; st == CHAM_OK && l < w->n_layers; l++)
        st = layer(w, l, &s, x);
    if (st == CHAM_OK)
        st = head(w, x, n);
    for (uint32_t l = w->n_layers > 2 ? w->n_layers - 2 : 0;
         st == CHAM_OK && m->kv_offload && l < w->n_layers; l++)
        st = detach(w, l);
    wl_drop(w, &x);
    return st;
}
