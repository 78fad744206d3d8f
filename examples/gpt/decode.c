/* Greedy decoding with KV caches, on the device or offloaded (decode.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"

typedef struct decoder {
    gpt_model_t *m;
    gpt_ops_t *o;
    const gpt_decode_config_t *c;
    int B, C, NH, V;
    size_t row_floats;           /* one position of a cache: 2 B C */
    cham_tensor_t **cache;       /* per block: the device cache (not offloaded) */
    float **host;                /* per block: the pinned cache (offloaded) */
    cham_device_t *dev;
    cham_stream_t *compute, *copy;
    cham_event_t *ev;
    int32_t *tok;                /* per position: the B tokens fed there */
    int32_t *next;               /* B: the head's choice */
} decoder_t;

#define TRY(call)                     \
    do {                              \
        if ((st = (call)) != CHAM_OK) \
            return st;                \
    } while (0)

/* A new tensor of `floats` made by one op over `in`; released on failure. */
static cham_status_t make(decoder_t *d, gpt_args_t *a, cham_tensor_t *const *in, size_t n_in,
                          size_t floats, const char *name, int layer, double flops,
                          cham_tensor_t **out)
{
    cham_status_t st;
    TRY(gpt_model_act(d->m, floats, name, layer, out));
    if ((st = gpt_op_tensors(d->o, a, in, n_in, out, 1, 0, flops)) != CHAM_OK)
        gpt_release(d->o, out);
    return st;
}

static cham_status_t matmul(decoder_t *d, cham_tensor_t *x, int layer, int w, bool bias, int C,
                            int OC, const char *name, cham_tensor_t **out)
{
    gpt_args_t a = {.kind = GPT_MATMUL, .N = d->B, .C = C, .OC = OC,
                    .null_f = bias ? 0 : 1u << 2};
    cham_tensor_t *in[3] = {x, gpt_model_weight(d->m, layer, w),
                            bias ? gpt_model_weight(d->m, layer, w + 1) : NULL};
    return make(d, &a, in, bias ? 3 : 2, (size_t)d->B * (size_t)OC, name, layer,
                2.0 * d->B * C * OC, out);
}

static cham_status_t layernorm(decoder_t *d, cham_tensor_t *x, int layer, int w,
                               const char *name, cham_tensor_t **out)
{
    cham_status_t st;
    cham_tensor_t *stats[2] = {NULL, NULL};
    st = gpt_model_act(d->m, (size_t)d->B * (size_t)d->C, name, layer, out);
    for (int i = 0; i < 2 && st == CHAM_OK; i++)
        st = gpt_model_act(d->m, (size_t)d->B, i ? "rstd" : "mean", layer, &stats[i]);
    gpt_args_t a = {.kind = GPT_LAYERNORM, .N = d->B, .C = d->C};
    cham_tensor_t *in[3] = {x, gpt_model_weight(d->m, layer, w),
                            gpt_model_weight(d->m, layer, w + 1)};
    cham_tensor_t *outs[3] = {*out, stats[0], stats[1]};
    if (st == CHAM_OK)
        st = gpt_op_tensors(d->o, &a, in, 3, outs, 3, 0, 8.0 * d->B * d->C);
    gpt_release(d->o, &stats[0]);
    gpt_release(d->o, &stats[1]);
    if (st != CHAM_OK)
        gpt_release(d->o, out);
    return st;
}

static cham_status_t add(decoder_t *d, cham_tensor_t *x, cham_tensor_t *y, const char *name,
                         int layer, cham_tensor_t **out)
{
    size_t n = (size_t)d->B * (size_t)d->C;
    gpt_args_t a = {.kind = GPT_ADD, .n = n};
    cham_tensor_t *in[2] = {x, y};
    return make(d, &a, in, 2, n, name, layer, (double)n, out);
}

/* ---- the cache operators ------------------------------------------------- */

/* `later` waits for the work queued on `earlier` so far. */
static cham_status_t order(decoder_t *d, cham_stream_t *earlier, cham_stream_t *later)
{
    cham_status_t st = cham_event_record(d->ev, earlier);
    return st != CHAM_OK ? st : cham_stream_wait_event(later, d->ev);
}

/* Prefetch: a device tensor of pos + 1 rows holding the block's rows so
 * far, copied after the block's last Store. */
static cham_status_t prefetch(decoder_t *d, int l, int pos, cham_tensor_t **out)
{
    cham_status_t st;
    TRY(gpt_model_act(d->m, (size_t)(pos + 1) * d->row_floats, "kv", l, out));
    cham_context_t *ctx = d->o->ctx;
    st = cham_op_begin(ctx, d->o->tok[GPT_KV_PREFETCH], NULL, 0, out, 1);
    if (st == CHAM_OK) {
        if (pos > 0 && (st = order(d, d->copy, d->compute)) == CHAM_OK)
            st = cham_copy_async(d->compute, cham_tensor_data(*out), d->host[l],
                                 (size_t)pos * d->row_floats * sizeof(float), CHAM_COPY_H2D,
                                 "kv_prefetch");
        cham_status_t end = cham_op_end(ctx);
        st = st != CHAM_OK ? st : end;
    }
    if (st != CHAM_OK)
        gpt_release(d->o, out);
    return st;
}

/* Store: row pos back to the host on the copy stream, after the compute
 * stream's work so far; the block stays until the copy has read it. */
static cham_status_t store(decoder_t *d, int l, int pos, cham_tensor_t *t)
{
    cham_context_t *ctx = d->o->ctx;
    cham_status_t st = cham_op_begin(ctx, d->o->tok[GPT_KV_STORE], &t, 1, NULL, 0);
    if (st != CHAM_OK)
        return st;
    size_t off = (size_t)pos * d->row_floats;
    st = order(d, d->compute, d->copy);
    if (st == CHAM_OK)
        st = cham_copy_async(d->copy, d->host[l] + off, (float *)cham_tensor_data(t) + off,
                             d->row_floats * sizeof(float), CHAM_COPY_D2H, "kv_store");
    if (st == CHAM_OK)
        st = cham_tensor_record_stream(t, d->copy);
    cham_status_t end = cham_op_end(ctx);
    return st != CHAM_OK ? st : end;
}

/* ---- one position -------------------------------------------------------- */

/* The attention of block l at pos: the cache gets the position's keys and
 * values, its queries attend over the rows so far. */
static cham_status_t attend(decoder_t *d, int l, int pos, cham_tensor_t *qkv,
                            cham_tensor_t **out)
{
    cham_status_t st;
    cham_tensor_t *kv = d->c->kv_offload ? NULL : d->cache[l];
    if (d->c->kv_offload)
        TRY(prefetch(d, l, pos, &kv));
    gpt_args_t w = {.kind = GPT_KV_WRITE, .B = d->B, .C = d->C, .pos = pos};
    st = gpt_op_tensors(d->o, &w, &qkv, 1, &kv, 1, 1, 0);
    gpt_args_t a = {.kind = GPT_ATTENTION_DECODE, .B = d->B, .C = d->C, .NH = d->NH,
                    .pos = pos};
    cham_tensor_t *in[2] = {qkv, kv};
    if (st == CHAM_OK)
        st = make(d, &a, in, 2, (size_t)d->B * (size_t)d->C, "atty", l,
                  4.0 * d->B * (pos + 1) * d->C, out);
    if (d->c->kv_offload) {
        if (st == CHAM_OK && (st = store(d, l, pos, kv)) != CHAM_OK)
            gpt_release(d->o, out);
        gpt_release(d->o, &kv);   /* Detach */
    }
    return st;
}

/* Block l on x ([B, C]) at pos: *out = its output. */
static cham_status_t block(decoder_t *d, int l, int pos, cham_tensor_t *x, cham_tensor_t **out)
{
    int C = d->C;
    cham_tensor_t *ln = NULL, *qkv = NULL, *att = NULL, *proj = NULL, *res = NULL, *fc = NULL,
                  *g = NULL, *fcp = NULL;
    cham_status_t st = layernorm(d, x, l, GPT_LN1W, "ln1", &ln);
    if (st == CHAM_OK)
        st = matmul(d, ln, l, GPT_QKVW, true, C, 3 * C, "qkv", &qkv);
    gpt_release(d->o, &ln);
    if (st == CHAM_OK)
        st = attend(d, l, pos, qkv, &att);
    gpt_release(d->o, &qkv);
    if (st == CHAM_OK)
        st = matmul(d, att, l, GPT_PROJW, true, C, C, "proj", &proj);
    gpt_release(d->o, &att);
    if (st == CHAM_OK)
        st = add(d, x, proj, "res2", l, &res);
    gpt_release(d->o, &proj);
    if (st == CHAM_OK)
        st = layernorm(d, res, l, GPT_LN2W, "ln2", &ln);
    if (st == CHAM_OK)
        st = matmul(d, ln, l, GPT_FCW, true, C, 4 * C, "fch", &fc);
    gpt_release(d->o, &ln);
    size_t n = (size_t)d->B * 4 * (size_t)C;
    gpt_args_t ga = {.kind = GPT_GELU, .n = n};
    if (st == CHAM_OK)
        st = make(d, &ga, &fc, 1, n, "fch_gelu", l, (double)n, &g);
    gpt_release(d->o, &fc);
    if (st == CHAM_OK)
        st = matmul(d, g, l, GPT_FCPROJW, true, 4 * C, C, "fcproj", &fcp);
    gpt_release(d->o, &g);
    if (st == CHAM_OK)
        st = add(d, res, fcp, "out", l, out);
    gpt_release(d->o, &res);
    gpt_release(d->o, &fcp);
    return st;
}

/* Position pos: the embedding of its tokens, every block and, when the
 * next token is to be chosen, the head and the greedy choice, read back. */
static cham_status_t position(decoder_t *d, int pos, bool choose)
{
    cham_status_t st;
    cham_tensor_t *tok = NULL, *x = NULL;
    TRY(gpt_tensor(d->o, (size_t)d->B * sizeof(int32_t), CHAM_DTYPE_I32, "tokens", &tok));
    gpt_args_t lt = {.kind = GPT_LOAD_TOKENS, .host_tok = d->tok + (size_t)pos * d->B,
                     .n = (size_t)d->B};
    st = gpt_op_tensors(d->o, &lt, NULL, 0, &tok, 1, 0, 0);
    gpt_args_t em = {.kind = GPT_EMBED_AT, .B = d->B, .C = d->C, .pos = pos};
    cham_tensor_t *ei[3] = {tok, gpt_model_weight(d->m, -1, GPT_WTE),
                            gpt_model_weight(d->m, -1, GPT_WPE)};
    if (st == CHAM_OK)
        st = make(d, &em, ei, 3, (size_t)d->B * (size_t)d->C, "embedding", -1,
                  (double)d->B * d->C, &x);
    gpt_release(d->o, &tok);
    for (int l = 0; st == CHAM_OK && l < gpt_model_shape(d->m)->layers; l++) {
        cham_tensor_t *y = NULL;
        if ((st = cham_set_block(d->o->ctx, l)) == CHAM_OK)
            st = block(d, l, pos, x, &y);
        gpt_release(d->o, &x);
        x = y;
    }
    if (st == CHAM_OK)
        st = cham_set_block(d->o->ctx, -1);
    if (st != CHAM_OK || !choose) {
        gpt_release(d->o, &x);
        return st;
    }
    cham_tensor_t *lnf = NULL, *logits = NULL;
    st = layernorm(d, x, -1, GPT_LNFW, "lnf", &lnf);
    gpt_release(d->o, &x);
    if (st == CHAM_OK)
        st = matmul(d, lnf, -1, GPT_WTE, false, d->C, d->V, "logits", &logits);
    gpt_release(d->o, &lnf);
    gpt_args_t am = {.kind = GPT_ARGMAX, .N = d->B, .V = d->V, .host_dst = d->next};
    if (st == CHAM_OK)
        st = gpt_op_tensors(d->o, &am, &logits, 1, NULL, 0, 0, (double)d->B * d->V);
    gpt_release(d->o, &logits);
    /* .item(): the host waits for the choice. */
    return st != CHAM_OK ? st : cham_stream_synchronize(d->compute);
}

/* ---- the loop ------------------------------------------------------------ */

static void decoder_free(decoder_t *d, int layers)
{
    if (d->copy)
        cham_stream_synchronize(d->copy);
    if (d->compute)
        cham_stream_synchronize(d->compute);
    for (int l = 0; l < layers; l++) {
        if (d->cache)
            gpt_release(d->o, &d->cache[l]);
        if (d->host)
            cham_device_host_free(d->dev, d->host[l]);
    }
    free(d->cache);
    free(d->host);
    free(d->tok);
    free(d->next);
    cham_event_free(d->ev);
    cham_stream_free(d->copy);
}

bool gpt_decode_check(const gpt_shape_t *s, const gpt_decode_config_t *c, char *err,
                      size_t err_size)
{
    if (c->prompt < 1)
        snprintf(err, err_size, "decode: prompt %d is not valid (at least 1)", c->prompt);
    else if (c->generate < 1)
        snprintf(err, err_size, "decode: generate %d is not valid (at least 1)", c->generate);
    else if ((long)c->prompt + c->generate - 1 > s->seq)
        snprintf(err, err_size, "decode: prompt %d + generate %d needs %ld positions, more "
                 "than the model's seq of %d", c->prompt, c->generate,
                 (long)c->prompt + c->generate - 1, s->seq);
    else
        return true;
    return false;
}

/* The caches, the streams and event of the offload, the token rows. */
static cham_status_t decoder_open(decoder_t *d, int positions)
{
    int L = gpt_model_shape(d->m)->layers;
    cham_status_t st = CHAM_OK;
    d->tok = malloc((size_t)positions * (size_t)d->B * sizeof *d->tok);
    d->next = malloc((size_t)d->B * sizeof *d->next);
    if (d->c->kv_offload)
        d->host = calloc((size_t)L, sizeof *d->host);
    else
        d->cache = calloc((size_t)L, sizeof *d->cache);
    if (!d->tok || !d->next || (!d->host && !d->cache))
        return CHAM_ERR_HOST_OOM;
    size_t bytes = (size_t)positions * d->row_floats * sizeof(float);
    if (d->c->kv_offload) {
        st = cham_stream_new(d->dev, "kv_store", &d->copy);
        if (st == CHAM_OK)
            st = cham_event_new(d->dev, &d->ev);
        for (int l = 0; l < L && st == CHAM_OK; l++)
            st = cham_device_host_alloc(d->dev, bytes, (void **)&d->host[l]);
        return st;
    }
    for (int l = 0; l < L && st == CHAM_OK; l++)
        st = gpt_model_act(d->m, (size_t)positions * d->row_floats, "kv_cache", l, &d->cache[l]);
    return st;
}

cham_status_t gpt_decode(gpt_model_t *m, const gpt_decode_config_t *c, const int32_t *prompt,
                         int32_t *out, char *err, size_t err_size)
{
    const gpt_shape_t *s = gpt_model_shape(m);
    if (!gpt_decode_check(s, c, err, err_size))
        return CHAM_ERR_INVALID_ARG;
    gpt_ops_t *o = gpt_model_ops(m);
    decoder_t d = {.m = m, .o = o, .c = c, .B = s->batch, .C = s->hidden, .NH = s->heads,
                   .V = s->vocab, .row_floats = 2 * (size_t)s->batch * (size_t)s->hidden,
                   .dev = cham_context_device(o->ctx),
                   .compute = cham_context_compute_stream(o->ctx)};
    int positions = c->prompt + c->generate - 1;
    cham_status_t st = decoder_open(&d, positions);
    for (int b = 0; st == CHAM_OK && b < d.B; b++)
        for (int p = 0; p < c->prompt; p++)
            d.tok[(size_t)p * d.B + b] = prompt[(size_t)b * c->prompt + p];
    for (int pos = 0; st == CHAM_OK && pos < positions; pos++) {
        bool choose = pos >= c->prompt - 1;
        st = position(&d, pos, choose);
        if (st == CHAM_OK)
            st = cham_step_end(o->ctx);
        for (int b = 0; st == CHAM_OK && choose && b < d.B; b++) {
            out[(size_t)b * c->generate + (pos - c->prompt + 1)] = d.next[b];
            if (pos + 1 < positions)
                d.tok[(size_t)(pos + 1) * d.B + b] = d.next[b];
        }
    }
    if (st != CHAM_OK)
        snprintf(err, err_size, "decode: %s", st == CHAM_ERR_HOST_OOM
                                                  ? "out of host memory"
                                                  : cham_context_last_error(o->ctx));
    decoder_free(&d, s->layers);
    return st;
}
