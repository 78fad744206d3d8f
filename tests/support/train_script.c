/* The scripted transformer-shaped workload (train_script.h).
 *
 * A step is first written down as a tape of forward entries (the op, its
 * input slots and weight, its output slot), then run: the forward in tape
 * order, the backward in reverse. Every slot knows how many forward ops
 * read it and how many backward ops read it as a saved input; its tensor is
 * released when both counts are spent, as autograd would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/train_kernels.h"
#include "support/train_script.h"

#define KiB ((size_t)1 << 10)

static const char *const op_names[N_KINDS] = {
    "embed", "layer_norm", "matmul", "attention", "add", "gelu", "probe", "loss", "sum", "sgd",
    "layer_norm_bwd", "matmul_bwd", "attention_bwd", "add_bwd", "gelu_bwd", "grad_acc",
    "adamw"};

/* Which forward ops keep their first input for the backward. */
static bool saves_input(ts_op_kind_t k)
{
    return k == LN || k == MATMUL || k == ATTN || k == GELU;
}

static ts_op_kind_t backward_of(ts_op_kind_t k)
{
    switch (k) {
    case LN: return LN_BWD;
    case MATMUL: return MATMUL_BWD;
    case ATTN: return ATTN_BWD;
    case ADD: return ADD_BWD;
    case GELU: return GELU_BWD;
    default: return N_KINDS;
    }
}

#define ENTRIES_PER_LAYER 10
#define WEIGHTS_PER_LAYER 4

typedef struct entry {
    ts_op_kind_t kind;
    int in[2];                   /* slots; -1 none */
    int w;                       /* weight; -1 none */
    int out;                     /* slot */
} entry_t;

typedef struct slot {
    size_t bytes;
    char label[24];
    cham_tensor_t *val, *grad;
    int fwd_uses, saved_uses;    /* left to run */
} slot_t;

struct ts_model {
    cham_context_t *ctx;
    ts_config_t c;
    cham_op_token_t tok[N_KINDS];
    int n_w;
    cham_tensor_t **w, **gw;
    cham_tensor_t **mom;         /* adamw: per weight its two moments */
    entry_t *tape;               /* 1 + layers * ENTRIES_PER_LAYER */
    int n_tape;
    slot_t *slots;
    int n_slots;
    bool skip;                   /* this step skips layer L/2 */
    uint64_t sum;                /* folded by LOSS and SUM kernels */
};

ts_config_t ts_config_default(void)
{
    return (ts_config_t){.layers = 8, .act_bytes = 256 * KiB, .weight_bytes = 64 * KiB,
                         .layer_flops = 2e11, .extra_op_step = -1, .forward_only_step = -1,
                         .reorder_step = -1, .skip_layer_step = -1};
}

/* One op: begin, its kernel on the compute stream, end. Outputs are read
 * and written (gradients accumulate, SGD updates in place). */
static cham_status_t op(ts_model_t *m, ts_op_kind_t kind, cham_tensor_t **in, size_t n_in,
                        cham_tensor_t **out, size_t n_out, double flops, uint64_t seed)
{
    cham_context_t *ctx = m->ctx;
    cham_status_t st = cham_op_begin(ctx, m->tok[kind], in, n_in, out, n_out);
    if (st != CHAM_OK)
        return st;
    ts_kargs_t a = {.kind = kind, .seed = seed, .sum = &m->sum};
    cham_access_t acc[5];
    size_t n = 0;
    double bytes = 0;
    for (size_t i = 0; i < n_in; i++) {
        a.in[i] = cham_tensor_data(in[i]);
        a.n_in[i] = cham_tensor_bytes(in[i]) / 4;
        acc[n++] = (cham_access_t){a.in[i], cham_tensor_bytes(in[i]), CHAM_ACCESS_READ};
        bytes += (double)cham_tensor_bytes(in[i]);
    }
    for (size_t i = 0; i < n_out; i++) {
        a.out[i] = cham_tensor_data(out[i]);
        a.n_out[i] = cham_tensor_bytes(out[i]) / 4;
        acc[n++] = (cham_access_t){a.out[i], cham_tensor_bytes(out[i]), CHAM_ACCESS_READ_WRITE};
        bytes += (double)cham_tensor_bytes(out[i]);
    }
    cham_kernel_t k = {.label = op_names[kind], .flops = flops, .bytes = bytes,
                       .accesses = acc, .n_accesses = n, .cpu_fn = ts_run_kernel, .arg = &a};
    st = cham_kernel_launch(cham_context_compute_stream(ctx), &k);
    if (st != CHAM_OK)
        return st;
    return cham_op_end(ctx);
}

/* ---- the tape ---------------------------------------------------------------*/

static int new_slot(ts_model_t *m, size_t bytes, const char *name, int layer)
{
    slot_t *s = &m->slots[m->n_slots];
    *s = (slot_t){.bytes = bytes};
    snprintf(s->label, sizeof s->label, layer >= 0 ? "%s%d" : "%s", name, layer);
    return m->n_slots++;
}

static void add_entry(ts_model_t *m, ts_op_kind_t kind, int in0, int in1, int w, int out)
{
    m->tape[m->n_tape++] = (entry_t){.kind = kind, .in = {in0, in1}, .w = w, .out = out};
}

/* The step's forward, written down once (the same every step). */
static void build_tape(ts_model_t *m)
{
    size_t A = m->c.act_bytes;
    int x = new_slot(m, A, "x", 0);
    add_entry(m, EMBED, -1, -1, -1, x);
    for (int l = 0; l < m->c.layers; l++) {
        int w = l * WEIGHTS_PER_LAYER;
        int a = new_slot(m, A, "a", l), qkv = new_slot(m, 3 * A, "qkv", l);
        int y = new_slot(m, A, "y", l), o = new_slot(m, A, "o", l);
        int x1 = new_slot(m, A, "x1_", l), b = new_slot(m, A, "b", l);
        int f = new_slot(m, 4 * A, "f", l), g = new_slot(m, 4 * A, "g", l);
        int mm = new_slot(m, A, "m", l), x2 = new_slot(m, A, "x", l + 1);
        add_entry(m, LN, x, -1, -1, a);
        add_entry(m, MATMUL, a, -1, w, qkv);
        add_entry(m, ATTN, qkv, -1, -1, y);
        add_entry(m, MATMUL, y, -1, w + 1, o);
        add_entry(m, ADD, x, o, -1, x1);
        add_entry(m, LN, x1, -1, -1, b);
        add_entry(m, MATMUL, b, -1, w + 2, f);
        add_entry(m, GELU, f, -1, -1, g);
        add_entry(m, MATMUL, g, -1, w + 3, mm);
        add_entry(m, ADD, x1, mm, -1, x2);
        x = x2;
    }
}

static double cost(const ts_model_t *m, size_t out_bytes)
{
    /* A layer's FLOPs spread by output size (a layer writes 18 A). */
    return m->c.layer_flops * (double)out_bytes / (18.0 * (double)m->c.act_bytes);
}

/* ---- the model --------------------------------------------------------------*/

ts_model_t *ts_model_new(cham_context_t *ctx, const ts_config_t *c)
{
    ts_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->ctx = ctx;
    m->c = *c;
    m->n_w = c->layers * WEIGHTS_PER_LAYER;
    m->w = calloc((size_t)m->n_w, sizeof *m->w);
    m->gw = calloc((size_t)m->n_w, sizeof *m->gw);
    m->mom = calloc(2 * (size_t)m->n_w, sizeof *m->mom);
    m->tape = calloc(1 + (size_t)c->layers * ENTRIES_PER_LAYER, sizeof *m->tape);
    m->slots = calloc(1 + (size_t)c->layers * ENTRIES_PER_LAYER, sizeof *m->slots);
    bool ok = m->w && m->gw && m->mom && m->tape && m->slots;
    if (ok)
        build_tape(m);
    for (int k = 0; ok && k < N_KINDS; k++)
        ok = cham_op_token(ctx, op_names[k], &m->tok[k]) == CHAM_OK;
    for (int i = 0; ok && i < m->n_w; i++) {
        char label[32];
        snprintf(label, sizeof label, "w%d", i);
        ok = cham_tensor_new(ctx, c->weight_bytes, CHAM_DTYPE_F32, label, &m->w[i]) == CHAM_OK;
        snprintf(label, sizeof label, "gw%d", i);
        ok = ok &&
             cham_tensor_new(ctx, c->weight_bytes, CHAM_DTYPE_F32, label, &m->gw[i]) == CHAM_OK;
        /* Initialised by ops, as a framework would. */
        ok = ok && op(m, EMBED, NULL, 0, &m->w[i], 1, 0, 1000 + (uint64_t)i) == CHAM_OK;
        ok = ok && op(m, EMBED, NULL, 0, &m->gw[i], 1, 0, 0) == CHAM_OK;
        for (int k = 0; ok && c->adamw && k < 2; k++) {
            cham_tensor_t **t = &m->mom[2 * i + k];
            snprintf(label, sizeof label, "%s%d", k ? "v" : "m", i);
            ok = cham_tensor_new(ctx, c->weight_bytes, CHAM_DTYPE_F32, label, t) == CHAM_OK &&
                 op(m, EMBED, NULL, 0, t, 1, 0, 0) == CHAM_OK;
        }
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
    for (int i = 0; i < m->n_w; i++) {
        if (m->w)
            cham_tensor_release(m->w[i]);
        if (m->gw)
            cham_tensor_release(m->gw[i]);
        if (m->mom) {
            cham_tensor_release(m->mom[2 * i]);
            cham_tensor_release(m->mom[2 * i + 1]);
        }
    }
    free(m->w);
    free(m->gw);
    free(m->mom);
    free(m->tape);
    free(m->slots);
    free(m);
}

/* ---- a step -----------------------------------------------------------------*/

/* The first tape entry of layer L/2, and whether entry i is one of the
 * layer's this step skips. */
static int skipped_first(const ts_model_t *m)
{
    return 1 + (m->c.layers / 2) * ENTRIES_PER_LAYER;
}

static bool skipped(const ts_model_t *m, int i)
{
    return m->skip && i >= skipped_first(m) && i < skipped_first(m) + ENTRIES_PER_LAYER;
}

/* The block of tape entry i where blocks are marked: its layer's, or
 * none (the embedding and what follows the layers). */
static void set_block(ts_model_t *m, int i)
{
    bool in_layers = i >= 1 && i < 1 + m->c.layers * ENTRIES_PER_LAYER;
    if (m->c.mark_blocks)
        (void)cham_set_block(m->ctx, in_layers ? (i - 1) / ENTRIES_PER_LAYER : -1);
}

#define TRY(call)                     \
    do {                              \
        if ((st = (call)) != CHAM_OK) \
            goto out;                 \
    } while (0)

static void drop_value(slot_t *s)
{
    if (s->fwd_uses == 0 && s->saved_uses == 0) {
        cham_tensor_release(s->val);
        s->val = NULL;
    }
}

/* Adds g into slot s's gradient (the first one is taken as is). */
static cham_status_t accumulate(ts_model_t *m, slot_t *s, cham_tensor_t *g)
{
    if (!s->grad) {
        s->grad = g;
        return CHAM_OK;
    }
    cham_status_t st = op(m, ACC, &g, 1, &s->grad, 1, cost(m, s->bytes) / 8, 0);
    cham_tensor_release(g);
    return st;
}

static cham_status_t new_act(ts_model_t *m, const slot_t *s, const char *suffix,
                             cham_tensor_t **out)
{
    char label[40];
    snprintf(label, sizeof label, "%s%s", s->label, suffix);
    return cham_tensor_new(m->ctx, s->bytes, CHAM_DTYPE_F32, label, out);
}

static cham_status_t forward(ts_model_t *m, int64_t step, bool fwd_only)
{
    cham_status_t st = CHAM_OK;
    cham_tensor_t *scratch = NULL, *probe = NULL;
    for (int i = 0; i < m->n_tape; i++) {
        const entry_t *e = &m->tape[i];
        slot_t *out = &m->slots[e->out];
        set_block(m, i);
        if (skipped(m, i)) {
            if (i == skipped_first(m) + ENTRIES_PER_LAYER - 1) {
                /* The layer's input is its output. */
                slot_t *x = &m->slots[m->tape[skipped_first(m)].in[0]];
                out->val = x->val;
                x->val = NULL;
            }
            continue;
        }
        cham_tensor_t *in[2], *outs[2];
        size_t n_in = 0, n_out = 1;
        for (int k = 0; k < 2; k++)
            if (e->in[k] >= 0)
                in[n_in++] = m->slots[e->in[k]].val;
        if (e->w >= 0)
            in[n_in++] = m->w[e->w];
        TRY(new_act(m, out, "", &out->val));
        outs[0] = out->val;
        if (e->kind == EMBED && m->c.shift_addresses) {
            size_t bytes = m->c.act_bytes / 2 * (size_t)(1 + step % 3);
            TRY(cham_tensor_new(m->ctx, bytes, CHAM_DTYPE_F32, "scratch", &scratch));
            outs[n_out++] = scratch;
        }
        TRY(op(m, e->kind, in, n_in, outs, n_out, cost(m, out->bytes), (uint64_t)step));
        for (int k = 0; k < 2; k++) {
            if (e->in[k] < 0)
                continue;
            slot_t *s = &m->slots[e->in[k]];
            s->fwd_uses--;
            if (fwd_only || !saves_input(e->kind) || k > 0)
                drop_value(s);
        }
        if (step == m->c.extra_op_step && i == 1 + (m->c.layers / 2) * ENTRIES_PER_LAYER + 6) {
            /* f of layer L/2 was just made: read it before gelu does. */
            TRY(cham_tensor_new(m->ctx, m->c.weight_bytes, CHAM_DTYPE_F32, "probe", &probe));
            TRY(op(m, PROBE, &out->val, 1, &probe, 1, cost(m, m->c.weight_bytes), 0));
            cham_tensor_release(probe), probe = NULL;
        }
    }
out:
    set_block(m, -1);
    cham_tensor_release(scratch);
    cham_tensor_release(probe);
    return st;
}

/* The tape entry whose saved input the backward of entry i reads: its own,
 * or, in the reordered step, that of the same op of the mirrored layer. */
static const entry_t *saved_entry(const ts_model_t *m, int i, bool reorder)
{
    if (!reorder || i == 0)
        return &m->tape[i];
    int layer = (i - 1) / ENTRIES_PER_LAYER, j = (i - 1) % ENTRIES_PER_LAYER;
    return &m->tape[1 + (m->c.layers - 1 - layer) * ENTRIES_PER_LAYER + j];
}

static cham_status_t backward(ts_model_t *m, bool reorder)
{
    cham_status_t st = CHAM_OK;
    cham_tensor_t *g0 = NULL, *g1 = NULL;
    for (int i = m->n_tape - 1; i >= 1; i--) {
        const entry_t *e = &m->tape[i];
        slot_t *out = &m->slots[e->out];
        set_block(m, i);
        if (skipped(m, i)) {
            if (i == skipped_first(m) + ENTRIES_PER_LAYER - 1) {
                /* The output's gradient is the input's. */
                TRY(accumulate(m, &m->slots[m->tape[skipped_first(m)].in[0]], out->grad));
                out->grad = NULL;
            }
            continue;
        }
        slot_t *s0 = &m->slots[e->in[0]];
        cham_tensor_t *in[3] = {out->grad}, *outs[2];
        size_t n_in = 1, n_out = 1;
        slot_t *saved = NULL;
        if (saves_input(e->kind)) {
            saved = &m->slots[saved_entry(m, i, reorder)->in[0]];
            in[n_in++] = saved->val;
        }
        if (e->w >= 0)
            in[n_in++] = m->w[e->w];
        TRY(new_act(m, s0, ".grad", &g0));
        outs[0] = g0;
        if (e->kind == ADD) {
            TRY(new_act(m, &m->slots[e->in[1]], ".grad", &g1));
            outs[n_out++] = g1;
        }
        if (e->w >= 0)
            outs[n_out++] = m->gw[e->w];
        TRY(op(m, backward_of(e->kind), in, n_in, outs, n_out, 2 * cost(m, out->bytes), 0));
        cham_tensor_release(out->grad), out->grad = NULL;
        if (saved) {
            saved->saved_uses--;
            drop_value(saved);
        }
        TRY(accumulate(m, s0, g0));
        g0 = NULL;
        if (g1) {
            TRY(accumulate(m, &m->slots[e->in[1]], g1));
            g1 = NULL;
        }
    }
out:
    set_block(m, -1);
    cham_tensor_release(g0);
    cham_tensor_release(g1);
    return st;
}

/* Counts each slot's forward uses (and, when a backward follows, the uses
 * its saved inputs get there). */
static void count_uses(ts_model_t *m, bool fwd_only)
{
    for (int s = 0; s < m->n_slots; s++)
        m->slots[s].fwd_uses = m->slots[s].saved_uses = 0;
    for (int i = 0; i < m->n_tape; i++)
        for (int k = 0; k < 2 && !skipped(m, i); k++)
            if (m->tape[i].in[k] >= 0) {
                m->slots[m->tape[i].in[k]].fwd_uses++;
                if (!fwd_only && k == 0 && saves_input(m->tape[i].kind))
                    m->slots[m->tape[i].in[0]].saved_uses++;
            }
    m->slots[m->tape[m->n_tape - 1].out].fwd_uses = 1;   /* the loss reads it */
}

/* The forward and the loss; with fwd_only nothing is kept, and a forward
 * no backward follows is an evaluation, marked as such. */
static cham_status_t forward_and_loss(ts_model_t *m, int64_t step, bool fwd_only)
{
    cham_status_t st = CHAM_OK;
    count_uses(m, fwd_only);
    slot_t *last = &m->slots[m->tape[m->n_tape - 1].out];
    cham_phase(m->ctx, fwd_only ? CHAM_PHASE_EVAL : CHAM_PHASE_FORWARD);
    TRY(forward(m, step, fwd_only));
    cham_tensor_t *g;
    TRY(new_act(m, last, ".grad", &g));
    last->grad = g;
    TRY(op(m, LOSS, &last->val, 1, &last->grad, 1, cost(m, last->bytes), 0));
    last->fwd_uses = 0;
    drop_value(last);
out:
    return st;
}

cham_status_t ts_step(ts_model_t *m, int64_t step, uint64_t *checksum)
{
    const ts_config_t *c = &m->c;
    bool fwd_only = step == c->forward_only_step ||
                    (c->validate_every && (step + 1) % c->validate_every == 0);
    cham_status_t st = CHAM_OK;
    m->sum = 0xcbf29ce484222325u;
    m->skip = step == c->skip_layer_step;
    if (!fwd_only && c->eval_opens_every && (step + 1) % c->eval_opens_every == 0) {
        TRY(forward_and_loss(m, step, true));
        slot_t *last = &m->slots[m->tape[m->n_tape - 1].out];
        cham_tensor_release(last->grad);
        last->grad = NULL;
    }
    TRY(forward_and_loss(m, step, fwd_only));
    if (!fwd_only) {
        cham_phase(m->ctx, CHAM_PHASE_BACKWARD);
        TRY(backward(m, step == c->reorder_step));
        cham_phase(m->ctx, CHAM_PHASE_OPTIMIZER);
        for (int i = 0; i < m->n_w; i++) {
            cham_tensor_t *out[4] = {m->w[i], m->gw[i], m->mom[2 * i], m->mom[2 * i + 1]};
            TRY(c->adamw ? op(m, ADAMW, &m->gw[i], 1, out, 4, 3 * cost(m, c->weight_bytes), 0)
                         : op(m, SGD, &m->gw[i], 1, out, 2, cost(m, c->weight_bytes), 0));
        }
    }
    for (int i = 0; i < m->n_w; i++)
        TRY(op(m, SUM, &m->w[i], 1, NULL, 0, cost(m, c->weight_bytes), 0));
    TRY(cham_step_end(m->ctx));
    *checksum = m->sum;
out:
    for (int s = 0; s < m->n_slots; s++) {
        cham_tensor_release(m->slots[s].val), m->slots[s].val = NULL;
        cham_tensor_release(m->slots[s].grad), m->slots[s].grad = NULL;
    }
    return st;
}
