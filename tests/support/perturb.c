/* The perturbation harness (perturb.h, docs/testing.md).
 *
 * A program is a table of slots (tensors: size, dtype, up to four chunks
 * at offsets that ops may use as views with dtypes of their own) and a list
 * of entries: an op (the chunk ranges it reads and writes, a workspace it
 * allocates inside, its kernel's salt), a tensor the host makes and fills
 * outside any op, or a phase mark. The base program is generated once per
 * seed; each step is the base program perturbed with that step's own
 * random numbers, so both runs of a seed execute exactly the same steps.
 *
 * Executing an entry list is total: an input whose slot is not alive or
 * whose chunks were never written (its producer was deleted, or moved
 * after it) is dropped from the op; an output slot not alive is made; a
 * view handle is released right after the last entry of the step that uses
 * it (a storage lives while any of its views does). These decisions depend
 * on the program only, never on the runtime, so both runs agree on them.
 *
 * Kernels do real work on the bytes: each hashes every byte of every
 * input, and fills every output byte from the hash of the inputs and the
 * op's salt. The reference run records the hashes of every op's inputs; the
 * constrained run compares each op's with them as it goes: a lost, stale or
 * wrong swap shows at the first op that reads the bytes. */
#include "support/perturb.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chameleon/chameleon.h"
#include "common/rng.h"
#include "support/rng.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define MAX_CHUNKS 4
#define MAX_IN 6
#define MAX_OUT 3
#define MAX_SLOTS 512
#define MAX_ENTRIES 1024
#define MAX_LAYERS 12
#define REF_CAPACITY ((uint64_t)64 << 30)

/* ---- random numbers ----------------------------------------------------------*/

static test_rng_t rng_for(uint64_t a, uint64_t b)
{
    uint64_t s = cham_mix64(a * CHAM_GOLDEN64 ^ cham_mix64(b + 0x51ed27));
    return (test_rng_t){s ? s : 1};
}

static double unit(test_rng_t *r)
{
    return cham_unit53(test_rng_next(r));
}

static bool chance(test_rng_t *r, double p)
{
    return unit(r) < p;
}

static int below(test_rng_t *r, int n)
{
    return (int)test_rng_below(r, (uint64_t)n);
}

/* Log-uniform in [lo, hi]. */
static double log_uniform(test_rng_t *r, double lo, double hi)
{
    return exp(log(lo) + unit(r) * (log(hi) - log(lo)));
}

/* ---- programs ------------------------------------------------------------------*/

enum {
    K_EMBED, K_LINEAR, K_RELU, K_SPLIT, K_ATTN, K_CAT, K_RESID, K_NORM, K_LOSS,
    K_BWD_LINEAR, K_BWD_ATTN, K_BWD_NORM, K_BWD_RESID, K_BWD_ACT, K_ADAM, K_ZERO,
    K_EXTRA0, K_EXTRA1, K_EXTRA2, K_EXTRA3, K_READ, K_INIT, K_SEND, N_KINDS
};

static const char *const kind_names[N_KINDS] = {
    "embed", "linear", "relu_", "split", "attention", "cat", "residual", "norm", "loss",
    "linear_bwd", "attention_bwd", "norm_bwd", "residual_bwd", "act_bwd", "adam", "zero_grad",
    "extra0", "extra1", "extra2", "extra3", "read", "init", "send"};

/* A tensor of the program. Chunk c is [cut[c], cut[c+1]). */
typedef struct slot {
    size_t bytes;                /* this step's */
    size_t cut[MAX_CHUNKS + 1];
    uint8_t n_chunks;
    uint8_t dtype;               /* of the whole view */
    uint8_t chunk_dtype[MAX_CHUNKS];
    bool persistent;             /* lives across steps (parameters, ...) */
    bool dynamic;                /* a new size every step */
    bool param;
    char label[24];
} slot_t;

/* Chunks [lo, hi) of a slot. */
typedef struct ref {
    uint16_t slot;
    uint8_t lo, hi;
} ref_t;

/* E_OP with token K_SEND runs its kernel on a communication stream and
 * calls cham_tensor_record_stream; E_SWAP_OUT / E_SWAP_IN are the caller's
 * own cham_tensor_swap_out / cham_tensor_swap_in of a slot; E_HOST_UPDATE
 * is an update of a parameter on the host (cham_tensor_host_update, new
 * bytes written into the caller's pinned buffer, cham_tensor_host_ready),
 * as an optimizer on the host does during the backward. */
typedef enum { E_OP, E_HOST_NEW, E_PHASE, E_SWAP_OUT, E_SWAP_IN, E_HOST_UPDATE } entry_kind_t;

typedef struct entry {
    uint8_t kind;                /* entry_kind_t */
    uint8_t phase;               /* E_PHASE */
    uint8_t token;               /* E_OP: K_* */
    uint8_t n_in, n_out;
    uint16_t slot;               /* E_HOST_NEW, E_SWAP_*, E_HOST_UPDATE */
    ref_t in[MAX_IN], out[MAX_OUT];  /* an output also read is also an input */
    int8_t layer;                /* backward ops: the layer (-1 none) */
    uint32_t ws;                 /* workspace bytes allocated inside the op */
    uint32_t id;                 /* the kernel's salt */
    float intensity;             /* FLOPs per byte moved */
} entry_t;

typedef struct prog {
    slot_t slots[MAX_SLOTS];
    int n_slots;
    entry_t e[MAX_ENTRIES];
    int n;
} prog_t;

/* Entry ranges of one layer in the base program. */
typedef struct span {
    int f0, f1, b0, b1;
} span_t;

typedef struct gen {
    uint64_t seed;
    int n_steps;
    double fraction;
    pt_mode_t mode;
    cham_config_t knobs;         /* all but the capacity */
    double budget_share;         /* memory_budget as a share of the capacity, 0 = off */
    size_t small_max, big_max;
    prog_t base;
    int fwd0, fwd1, bwd0, bwd1, opt0, opt1;   /* entry ranges in base */
    span_t layer[MAX_LAYERS];
    int n_layers;
    uint32_t next_id;
    bool init_op;                /* step 0 begins with an op that uses no tensor */
    bool recompute;              /* single-output ops are declared recomputable */
    cham_strategy_t strategy;    /* the planner and its knobs */
    bool call_back;              /* hooks call back into the runtime (refused) */
} gen_t;

static size_t dtype_size(int dtype)
{
    return cham_dtype_size((cham_dtype_t)dtype);
}

static size_t round_up(size_t n, size_t k)
{
    return (n + k - 1) / k * k;
}

/* A size: mostly small, one in ten up to big_max. */
static size_t rand_bytes(gen_t *g, test_rng_t *r)
{
    if (chance(r, 0.03))
        return (size_t)log_uniform(r, (double)g->small_max, (double)g->big_max);
    return (size_t)log_uniform(r, 16, (double)g->small_max);
}

/* Cuts a slot of bytes into n chunks at multiples of the dtype size. */
static void cut_chunks(slot_t *s, int n, test_rng_t *r)
{
    size_t d = dtype_size(s->dtype), units = s->bytes / d;
    if ((size_t)n > units)
        n = (int)units;
    s->n_chunks = (uint8_t)n;
    s->cut[0] = 0;
    s->cut[n] = s->bytes;
    /* n - 1 distinct cut points in (0, units), sorted. */
    for (int c = 1; c < n; c++) {
        size_t lo = s->cut[c - 1] / d + 1, hi = units - (size_t)(n - c);
        s->cut[c] = (lo + (size_t)test_rng_below(r, hi - lo + 1)) * d;
    }
    for (int c = 0; c < n; c++) {
        size_t off = s->cut[c], len = s->cut[c + 1] - s->cut[c];
        int dt = s->dtype;
        if (chance(r, 0.3)) {
            dt = below(r, CHAM_DTYPE_COUNT_);
            if (off % dtype_size(dt) || len % dtype_size(dt))
                dt = CHAM_DTYPE_U8;
        }
        s->chunk_dtype[c] = (uint8_t)dt;
    }
}

static int new_slot(prog_t *p, size_t bytes, int n_chunks, const char *prefix, test_rng_t *r)
{
    if (p->n_slots >= MAX_SLOTS)
        return -1;
    int i = p->n_slots++;
    slot_t *s = &p->slots[i];
    memset(s, 0, sizeof *s);
    s->dtype = (uint8_t)below(r, CHAM_DTYPE_COUNT_);
    size_t d = dtype_size(s->dtype);
    s->bytes = round_up(bytes ? bytes : 1, d);
    if (s->bytes < (size_t)n_chunks * d)
        s->bytes = (size_t)n_chunks * d;
    cut_chunks(s, n_chunks, r);
    snprintf(s->label, sizeof s->label, "%s%d", prefix, i);
    return i;
}

/* A slot with the layout of another (a gradient, an optimizer state). */
static int twin_slot(prog_t *p, int of, const char *prefix)
{
    if (p->n_slots >= MAX_SLOTS)
        return -1;
    int i = p->n_slots++;
    p->slots[i] = p->slots[of];
    p->slots[i].param = false;
    snprintf(p->slots[i].label, sizeof p->slots[i].label, "%s%d", prefix, i);
    return i;
}

static ref_t full(const prog_t *p, int slot)
{
    return (ref_t){(uint16_t)slot, 0, p->slots[slot].n_chunks};
}

static ref_t chunk(int slot, int c)
{
    return (ref_t){(uint16_t)slot, (uint8_t)c, (uint8_t)(c + 1)};
}

/* The whole slot, one chunk, or a run of chunks. */
static ref_t any_ref(const prog_t *p, int slot, test_rng_t *r)
{
    int n = p->slots[slot].n_chunks;
    double u = unit(r);
    if (n == 1 || u < 0.55)
        return full(p, slot);
    if (u < 0.9 || n < 3)
        return chunk(slot, below(r, n));
    int lo = below(r, n - 1), hi = lo + 2 + below(r, n - lo - 1);
    return (ref_t){(uint16_t)slot, (uint8_t)lo, (uint8_t)hi};
}

static entry_t op_entry(gen_t *g, int token, test_rng_t *r)
{
    entry_t e = {.kind = E_OP, .token = (uint8_t)token, .id = g->next_id++, .layer = -1};
    e.intensity = (float)log_uniform(r, 0.5, 2000);
    return e;
}

static void add_in(entry_t *e, ref_t x)
{
    if (e->n_in < MAX_IN)
        e->in[e->n_in++] = x;
}

static void add_out(entry_t *e, ref_t x)
{
    if (e->n_out < MAX_OUT)
        e->out[e->n_out++] = x;
}

/* In place: written and read. */
static void add_inout(entry_t *e, ref_t x)
{
    if (e->n_in < MAX_IN && e->n_out < MAX_OUT) {
        add_in(e, x);
        add_out(e, x);
    }
}

static entry_t host_new(int slot)
{
    return (entry_t){.kind = E_HOST_NEW, .slot = (uint16_t)slot};
}

static entry_t phase_mark(cham_phase_t ph)
{
    return (entry_t){.kind = E_PHASE, .phase = (uint8_t)ph};
}

/* A list of entries being built. */
typedef struct list {
    entry_t e[MAX_ENTRIES / 2];
    int n;
} list_t;

static void push(list_t *l, entry_t e)
{
    if (l->n < MAX_ENTRIES / 2)
        l->e[l->n++] = e;
}

/* What the backward of a forward op reads. */
typedef struct bwd_info {
    int token, layer;
    ref_t saved[4];
    int n_saved;
    ref_t w;
    bool has_w;
    size_t grad_bytes;
} bwd_info_t;

typedef struct builder {
    gen_t *g;
    test_rng_t *r;
    list_t top, fwd, bwd, opt;
    bwd_info_t info[MAX_ENTRIES / 4];
    int n_info;
    int grad_of[MAX_SLOTS], state_of[MAX_SLOTS];
    int params[4 * MAX_LAYERS + 2];
    int n_params;
    int hist[64];                /* activations made so far, for skips */
    int n_hist;
    int temp;                    /* a temporary the next op reads, or -1 */
} builder_t;

static int new_act(builder_t *b, const char *prefix)
{
    gen_t *g = b->g;
    test_rng_t *r = b->r;
    double u = unit(r);
    int n = u < 0.6 ? 1 : u < 0.8 ? 2 : u < 0.9 ? 3 : 4;
    int s = new_slot(&g->base, rand_bytes(g, r), n, prefix, r);
    if (s >= 0 && n == 1 && chance(r, 0.08))
        g->base.slots[s].dynamic = true;
    if (s >= 0 && b->n_hist < 64)
        b->hist[b->n_hist++] = s;
    return s;
}

/* A parameter slot with its gradient and, for some, an optimizer state; all
 * made and filled by the host at the top of the step (first step only). */
static int new_param(builder_t *b, size_t bytes, int n_chunks)
{
    prog_t *p = &b->g->base;
    int s = new_slot(p, bytes, n_chunks, "param", b->r);
    if (s < 0)
        return -1;
    p->slots[s].persistent = p->slots[s].param = true;
    p->slots[s].dynamic = false;
    int gs = twin_slot(p, s, "grad");
    int st = chance(b->r, 0.6) ? twin_slot(p, s, "state") : -1;
    if (gs < 0)
        return -1;
    b->grad_of[s] = gs;
    b->state_of[s] = st;
    b->params[b->n_params++] = s;
    return s;
}

/* Options every forward op may take: a temporary of the op before, a mask
 * the host made at the top of the step (read again by the backward), a
 * constant the host makes right before, a workspace inside. */
static void decorate(builder_t *b, entry_t *e, bwd_info_t *bi)
{
    gen_t *g = b->g;
    prog_t *p = &g->base;
    test_rng_t *r = b->r;
    if (b->temp >= 0) {
        add_in(e, full(p, b->temp));
        b->temp = -1;
    }
    if (chance(r, 0.12)) {
        int m = new_slot(p, rand_bytes(g, r), 1, "mask", r);
        if (m >= 0) {
            push(&b->top, host_new(m));
            add_in(e, full(p, m));
            if (bi && bi->n_saved < 4)
                bi->saved[bi->n_saved++] = full(p, m);
        }
    }
    if (chance(r, 0.06)) {
        int k = new_slot(p, rand_bytes(g, r), 1, "const", r);
        if (k >= 0) {
            push(&b->fwd, host_new(k));
            add_in(e, full(p, k));
        }
    }
    if (chance(r, 0.2) && e->n_out < MAX_OUT) {
        int t = new_slot(p, rand_bytes(g, r), 1, "tmp", r);
        if (t >= 0) {
            add_out(e, full(p, t));
            b->temp = t;
        }
    }
    if (chance(r, 0.1))
        e->ws = (uint32_t)rand_bytes(g, r);
}

static bwd_info_t *new_info(builder_t *b, int token, int layer, size_t grad_bytes)
{
    if (b->n_info >= MAX_ENTRIES / 4)
        return NULL;
    bwd_info_t *bi = &b->info[b->n_info++];
    *bi = (bwd_info_t){.token = token, .layer = layer, .grad_bytes = grad_bytes};
    return bi;
}

static void save(bwd_info_t *bi, ref_t x)
{
    if (bi && bi->n_saved < 4)
        bi->saved[bi->n_saved++] = x;
}

/* One forward op (sometimes two) of layer l reading cur; returns the new cur. */
static ref_t forward_op(builder_t *b, int l, ref_t cur, const ref_t *w, int n_w, int j)
{
    gen_t *g = b->g;
    prog_t *p = &g->base;
    test_rng_t *r = b->r;
    size_t cur_bytes = p->slots[cur.slot].bytes;
    double u = unit(r);
    ref_t wj = w[j % n_w];
    if (u < 0.4) {                                   /* y = x W */
        int y = new_act(b, "act");
        if (y < 0)
            return cur;
        entry_t e = op_entry(g, K_LINEAR, r);
        add_in(&e, cur);
        add_in(&e, wj);
        add_out(&e, full(p, y));
        bwd_info_t *bi = new_info(b, K_BWD_LINEAR, l, cur_bytes);
        save(bi, cur);
        if (bi)
            bi->w = wj, bi->has_w = true;
        decorate(b, &e, bi);
        push(&b->fwd, e);
        return any_ref(p, y, r);
    }
    if (u < 0.55) {                                  /* x = relu(x) in place */
        entry_t e = op_entry(g, K_RELU, r);
        add_inout(&e, cur);
        bwd_info_t *bi = new_info(b, K_BWD_ACT, l, cur_bytes);
        save(bi, cur);
        decorate(b, &e, bi);
        push(&b->fwd, e);
        return cur;
    }
    if (u < 0.7) {                                   /* qkv = x W; y = attn(q, k, v) */
        int qkv = new_slot(p, 3 * rand_bytes(g, r), 3, "qkv", r);
        int y = new_act(b, "act");
        if (qkv < 0 || y < 0)
            return cur;
        entry_t e = op_entry(g, K_SPLIT, r);
        add_in(&e, cur);
        add_in(&e, wj);
        add_out(&e, full(p, qkv));
        bwd_info_t *bi = new_info(b, K_BWD_LINEAR, l, cur_bytes);
        save(bi, cur);
        if (bi)
            bi->w = wj, bi->has_w = true;
        decorate(b, &e, bi);
        push(&b->fwd, e);
        entry_t a = op_entry(g, K_ATTN, r);
        bwd_info_t *ba = new_info(b, K_BWD_ATTN, l, p->slots[qkv].bytes);
        for (int c = 0; c < p->slots[qkv].n_chunks; c++) {
            add_in(&a, chunk(qkv, c));
            save(ba, chunk(qkv, c));
        }
        add_out(&a, full(p, y));
        decorate(b, &a, ba);
        push(&b->fwd, a);
        return full(p, y);
    }
    if (u < 0.8) {                                   /* y = cat(f(x), g(x, skip)) */
        int c2 = new_slot(p, 2 * rand_bytes(g, r), 2, "cat", r);
        if (c2 < 0)
            return cur;
        if (b->n_hist < 64)
            b->hist[b->n_hist++] = c2;
        entry_t e0 = op_entry(g, K_CAT, r), e1 = op_entry(g, K_CAT, r);
        add_in(&e0, cur);
        add_out(&e0, chunk(c2, 0));
        add_in(&e1, cur);
        if (b->n_hist > 1)
            add_in(&e1, full(p, b->hist[below(r, b->n_hist - 1)]));
        add_out(&e1, chunk(c2, 1));
        push(&b->fwd, e0);
        bwd_info_t *bi = new_info(b, K_BWD_ACT, l, cur_bytes);
        decorate(b, &e1, bi);
        push(&b->fwd, e1);
        return full(p, c2);
    }
    if (u < 0.9 && b->n_hist > 1) {                  /* y = x + skip */
        int y = new_act(b, "act");
        if (y < 0)
            return cur;
        entry_t e = op_entry(g, K_RESID, r);
        add_in(&e, cur);
        add_in(&e, full(p, b->hist[below(r, b->n_hist - 1)]));
        add_out(&e, full(p, y));
        bwd_info_t *bi = new_info(b, K_BWD_RESID, l, cur_bytes);
        decorate(b, &e, bi);
        push(&b->fwd, e);
        return full(p, y);
    }
    int y = new_act(b, "act");                       /* y = norm(x, w) */
    if (y < 0)
        return cur;
    entry_t e = op_entry(g, K_NORM, r);
    add_in(&e, cur);
    add_in(&e, wj);
    add_out(&e, full(p, y));
    bwd_info_t *bi = new_info(b, K_BWD_NORM, l, cur_bytes);
    save(bi, cur);
    save(bi, full(p, y));
    if (bi)
        bi->w = wj, bi->has_w = true;
    decorate(b, &e, bi);
    push(&b->fwd, e);
    return any_ref(p, y, r);
}

/* The gradient slot's chunks that a parameter reference names. */
static ref_t grad_ref(const builder_t *b, ref_t w)
{
    return (ref_t){(uint16_t)b->grad_of[w.slot], w.lo, w.hi};
}

static void put(prog_t *p, entry_t e)
{
    if (p->n < MAX_ENTRIES - 1)  /* room for step 0's init op */
        p->e[p->n++] = e;
}

static void append(prog_t *p, const list_t *l)
{
    for (int i = 0; i < l->n; i++)
        put(p, l->e[i]);
}

/* The base program: tensors the host makes, forward, loss, backward, optimizer. */
static void gen_program(gen_t *g, test_rng_t *r)
{
    builder_t *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    b->g = g;
    b->r = r;
    b->temp = -1;
    prog_t *p = &g->base;
    for (int i = 0; i < MAX_SLOTS; i++)
        b->grad_of[i] = b->state_of[i] = -1;

    int batch = new_slot(p, rand_bytes(g, r), 1, "batch", r);
    int labels = new_slot(p, rand_bytes(g, r), 1, "labels", r);
    /* (One draw per statement: argument order is unspecified in C, and
     * the same seed must make the same program with every compiler.) */
    size_t emb_bytes = rand_bytes(g, r);
    int emb = new_param(b, emb_bytes, 1 + below(r, 2));
    push(&b->top, host_new(batch));
    push(&b->top, host_new(labels));

    /* Forward: an embedding, then layers of 2-5 ops over 1-2 weights. */
    entry_t e = op_entry(g, K_EMBED, r);
    add_in(&e, full(p, batch));
    add_in(&e, any_ref(p, emb, r));
    int x = new_act(b, "act");
    add_out(&e, full(p, x));
    bwd_info_t *bi = new_info(b, K_BWD_LINEAR, -1, p->slots[batch].bytes);
    bi->w = e.in[1], bi->has_w = true;
    push(&b->fwd, e);
    ref_t cur = full(p, x);
    int fwd_start[MAX_LAYERS + 1];
    g->n_layers = 4 + below(r, MAX_LAYERS - 3);
    for (int l = 0; l < g->n_layers; l++) {
        fwd_start[l] = b->fwd.n;
        ref_t w[4];
        int n_w = 1 + below(r, 2);
        if (n_w == 2 && chance(r, 0.5)) {            /* two weights, one storage */
            int ps = new_param(b, 2 * rand_bytes(g, r), 2);
            w[0] = chunk(ps, 0), w[1] = chunk(ps, 1);
        } else {
            for (int k = 0; k < n_w; k++) {
                size_t bytes = rand_bytes(g, r);
                int ps = new_param(b, bytes, chance(r, 0.2) ? 2 : 1);
                w[k] = full(p, ps);
            }
        }
        int n_ops = 3 + below(r, 5);
        for (int j = 0; j < n_ops; j++)
            cur = forward_op(b, l, cur, w, n_w, j);
    }
    fwd_start[g->n_layers] = b->fwd.n;
    /* The loss reads the last activation and the labels the host made at
     * the top of the step. */
    int g0 = new_slot(p, p->slots[cur.slot].bytes, 1, "dloss", r);
    e = op_entry(g, K_LOSS, r);
    add_in(&e, cur);
    add_in(&e, full(p, labels));
    if (b->temp >= 0)
        add_in(&e, full(p, b->temp));
    add_out(&e, full(p, g0));
    push(&b->fwd, e);

    /* Backward, in reverse: each op reads the running gradient, what its
     * forward saved and its weight, writes the next gradient and adds into
     * the weight's gradient in place. */
    int grad = g0;
    for (int i = b->n_info - 1; i >= 0; i--) {
        const bwd_info_t *f = &b->info[i];
        int l = f->layer;
        int ng = new_slot(p, f->grad_bytes, 1, "dact", r);
        if (ng < 0)
            break;
        e = op_entry(g, f->token, r);
        add_in(&e, full(p, grad));
        for (int k = 0; k < f->n_saved; k++)
            add_in(&e, f->saved[k]);
        if (f->has_w)
            add_in(&e, f->w);
        add_out(&e, full(p, ng));
        if (f->has_w) {
            add_in(&e, grad_ref(b, f->w));
            add_out(&e, grad_ref(b, f->w));
        }
        if (chance(r, 0.08))
            e.ws = (uint32_t)rand_bytes(g, r);
        e.layer = (int8_t)l;
        push(&b->bwd, e);
        grad = ng;
    }

    /* Data-parallel style: in some programs each gradient, once complete,
     * is sent on a communication stream (its kernel reads it there). */
    if (chance(r, 0.4)) {
        list_t *with = calloc(1, sizeof *with);
        if (!with)
            abort();
        for (int i = 0; i < b->bwd.n; i++) {
            push(with, b->bwd.e[i]);
            const entry_t *be = &b->bwd.e[i];
            for (int k = 0; k < be->n_out; k++) {
                int gs = be->out[k].slot;
                if (!p->slots[gs].persistent)
                    continue;
                bool later = false;
                for (int j = i + 1; j < b->bwd.n && !later; j++)
                    for (int q = 0; q < b->bwd.e[j].n_out; q++)
                        later |= b->bwd.e[j].out[q].slot == gs;
                if (!later && chance(r, 0.7)) {
                    entry_t send = op_entry(g, K_SEND, r);
                    send.layer = be->layer;
                    add_in(&send, full(p, gs));
                    push(with, send);
                }
            }
        }
        b->bwd = *with;
        free(with);
        /* A slow network: a send spans many ops, as an all-reduce does. */
        g->knobs.device.p2p_bandwidth = log_uniform(r, 1e8, 1e10);
    }

    /* Optimizer: each parameter (or each chunk of it) with its gradient and
     * state, then the gradient zeroed. */
    for (int i = 0; i < b->n_params; i++) {
        int ps = b->params[i], gs = b->grad_of[ps], ss = b->state_of[ps];
        int n = p->slots[ps].n_chunks;
        bool per_chunk = n > 1 && chance(r, 0.5);
        for (int c = 0; c < (per_chunk ? n : 1); c++) {
            ref_t pr = per_chunk ? chunk(ps, c) : full(p, ps);
            e = op_entry(g, K_ADAM, r);
            add_in(&e, (ref_t){(uint16_t)gs, pr.lo, pr.hi});
            add_inout(&e, pr);
            if (ss >= 0)
                add_inout(&e, (ref_t){(uint16_t)ss, pr.lo, pr.hi});
            push(&b->opt, e);
        }
        e = op_entry(g, K_ZERO, r);
        add_out(&e, full(p, gs));
        push(&b->opt, e);
    }
    /* In some programs the caller keeps optimizer states on the host
     * itself: out after the optimizer, back (prefetched) as it starts. */
    if (chance(r, 0.3)) {
        list_t *with = calloc(1, sizeof *with);
        if (!with)
            abort();
        for (int i = 0; i < b->n_params; i++)
            if (b->state_of[b->params[i]] >= 0)
                push(with, (entry_t){.kind = E_SWAP_IN,
                                     .slot = (uint16_t)b->state_of[b->params[i]]});
        for (int i = 0; i < b->opt.n; i++)
            push(with, b->opt.e[i]);
        for (int i = 0; i < b->n_params; i++)
            if (b->state_of[b->params[i]] >= 0)
                push(with, (entry_t){.kind = E_SWAP_OUT,
                                     .slot = (uint16_t)b->state_of[b->params[i]]});
        b->opt = *with;
        free(with);
    }

    /* In some programs the host updates parameters right after their last
     * use in the backward (from numbers of their own, so that the rest of
     * every seed's program stays as it was). */
    test_rng_t hr = rng_for(g->seed, 5);
    if (chance(&hr, 0.3)) {
        list_t *with = calloc(1, sizeof *with);
        if (!with)
            abort();
        int after[MAX_SLOTS];
        for (int i = 0; i < MAX_SLOTS; i++)
            after[i] = -1;
        for (int i = 0; i < b->n_params; i++) {
            int ps = b->params[i];
            for (int j = 0; j < b->bwd.n; j++)
                for (int k = 0; k < b->bwd.e[j].n_in; k++)
                    if (b->bwd.e[j].in[k].slot == ps)
                        after[ps] = j;
        }
        for (int j = 0; j < b->bwd.n; j++) {
            push(with, b->bwd.e[j]);
            for (int i = 0; i < b->n_params; i++)
                if (after[b->params[i]] == j && chance(&hr, 0.6))
                    push(with, (entry_t){.kind = E_HOST_UPDATE,
                                         .slot = (uint16_t)b->params[i]});
        }
        b->bwd = *with;
        free(with);
    }

    /* The top: every persistent tensor (made once), then the step's own,
     * in a random order. */
    list_t *top = calloc(1, sizeof *top);
    if (!top)
        abort();
    for (int i = 0; i < b->n_params; i++) {
        int ps = b->params[i];
        push(top, host_new(ps));
        push(top, host_new(b->grad_of[ps]));
        if (b->state_of[ps] >= 0)
            push(top, host_new(b->state_of[ps]));
    }
    for (int i = 0; i < b->top.n; i++)
        push(top, b->top.e[i]);
    for (int i = top->n - 1; i > 0; i--) {
        int j = below(r, i + 1);
        entry_t t = top->e[i];
        top->e[i] = top->e[j];
        top->e[j] = t;
    }

    p->n = 0;
    append(p, top);
    put(p, phase_mark(CHAM_PHASE_FORWARD));
    g->fwd0 = p->n;
    append(p, &b->fwd);
    g->fwd1 = p->n;
    put(p, phase_mark(CHAM_PHASE_BACKWARD));
    g->bwd0 = p->n;
    append(p, &b->bwd);
    g->bwd1 = p->n;
    put(p, phase_mark(CHAM_PHASE_OPTIMIZER));
    g->opt0 = p->n;
    append(p, &b->opt);
    g->opt1 = p->n;
    /* Layer spans, for skipping a layer. */
    for (int l = 0; l < g->n_layers; l++) {
        g->layer[l].f0 = g->fwd0 + fwd_start[l];
        g->layer[l].f1 = g->fwd0 + fwd_start[l + 1];
        g->layer[l].b0 = g->layer[l].b1 = g->bwd0;
        for (int i = g->bwd1 - 1; i >= g->bwd0; i--)
            if (p->e[i].layer == l) {
                if (g->layer[l].b1 == g->bwd0)
                    g->layer[l].b1 = i + 1;
                g->layer[l].b0 = i;
            }
    }
    free(top);
    free(b);
}

/* The seed's program and knobs. */
static gen_t *gen_new(uint64_t seed, pt_mode_t mode)
{
    gen_t *g = calloc(1, sizeof *g);
    if (!g)
        abort();
    test_rng_t r = rng_for(seed, 0);
    g->seed = seed;
    g->mode = mode == PT_MODE_SEED ? (seed % 2 ? PT_MODE_PYTORCH : PT_MODE_CHAMELEON) : mode;
    g->n_steps = 16 + below(&r, 25);
    g->fraction = 0.2 + 0.8 * unit(&r);
    static const size_t smalls[] = {16 * KiB, 32 * KiB, 64 * KiB};
    g->small_max = smalls[below(&r, 3)];
    g->big_max = g->small_max << 2;

    cham_config_t c = cham_config_default();
    c.device.preset = cham_preset_at((size_t)below(&r, (int)cham_preset_count()))->name;
    c.device.data = true;
    c.device.hazard_check = true;
    if (chance(&r, 0.5))
        c.device.h2d_bandwidth = c.device.d2h_bandwidth = log_uniform(&r, 1e9, 64e9);
    if (chance(&r, 0.3))
        c.device.d2h_bandwidth = log_uniform(&r, 1e9, 64e9);
    if (chance(&r, 0.5))
        c.device.launch_ns = (uint64_t)log_uniform(&r, 200, 20000);
    if (chance(&r, 0.3))
        c.device.queue_depth = 2 + (uint32_t)below(&r, 62);
    if (chance(&r, 0.3))
        c.device.copy_latency_ns = (uint64_t)log_uniform(&r, 100, 20000);
    if (chance(&r, 0.3))
        c.device.kernel_overhead_ns = (uint64_t)log_uniform(&r, 100, 20000);
    c.pinned_budget = (uint64_t)1 << 30;
    c.warmup_steps = (uint32_t)below(&r, 4);
    c.genpolicy_steps = 1 + (uint32_t)below(&r, 5);
    static const uint64_t mins[] = {0, 512, 4096, 16384, 65536, 1 << 20};
    c.min_swap_bytes = mins[below(&r, 6)];
    static const uint32_t caches[] = {0, 1, 4};
    c.policy_cache = caches[below(&r, 3)];
    static const double cs[] = {0.5, 1.0, 4.0};
    c.score_c = cs[below(&r, 3)];
    c.executor = chance(&r, 0.9);
    if (chance(&r, 0.2))
        c.length_tolerance = 0.1;
    if (chance(&r, 0.2))
        c.cosine_threshold = 0.9;
    c.pytorch_record_stream = g->mode == PT_MODE_PYTORCH;
    /* Every third seed forces expandable segments on these MiB-sized
     * devices (auto would choose classic), from the seed rather than the
     * generator, so that the other knobs of every seed stay as they were. */
    c.allocator = seed % 3 == 0 ? CHAM_ALLOCATOR_EXPANDABLE : CHAM_ALLOCATOR_AUTO;
    /* Two seeds in three declare their single-output ops recomputable, so
     * policies drop and re-run tensors (from the seed, as above). */
    g->recompute = seed % 3 != 1;
    g->budget_share = chance(&r, 0.15) ? 0.7 + 0.3 * unit(&r) : 0;
    g->init_op = chance(&r, 0.5);
    /* The planner, and hooks that call back, from numbers of their own:
     * the other knobs of every seed stay as they were. Half the seeds run
     * Chameleon's planner, the others one of the rest. */
    test_rng_t pr = rng_for(seed, 6);
    static const cham_strategy_t others[] = {
        CHAM_STRATEGY_CHAMELEON_SWAP, CHAM_STRATEGY_VDNN, CHAM_STRATEGY_CAPUCHIN,
        CHAM_STRATEGY_SWAPADVISOR, CHAM_STRATEGY_HYPEROFFLOAD};
    g->strategy = chance(&pr, 0.5) ? CHAM_STRATEGY_CHAMELEON
                                   : others[below(&pr, (int)(sizeof others / sizeof *others))];
    if (g->strategy != CHAM_STRATEGY_CHAMELEON) {
        bool executor = c.executor;
        cham_strategy_apply(g->strategy, &c);
        c.executor = executor;
        c.swapadvisor.generations = 4;        /* a short search: many seeds run it */
        c.swapadvisor.population = 8;
        c.swapadvisor.threads = 1;
    }
    g->call_back = chance(&pr, 0.3);
    g->knobs = c;
    g->next_id = 1;
    gen_program(g, &r);
    return g;
}

/* ---- perturbations ---------------------------------------------------------------*/

static bool is_op(const prog_t *p, int i)
{
    return i >= 0 && i < p->n && p->e[i].kind == E_OP;
}

static void remove_range(prog_t *p, int a, int b)
{
    if (a >= b)
        return;
    memmove(&p->e[a], &p->e[b], (size_t)(p->n - b) * sizeof p->e[0]);
    p->n -= b - a;
}

/* Does entry x write a slot entry y reads or writes? */
static bool conflicts(const entry_t *x, const entry_t *y)
{
    for (int i = 0; i < x->n_out; i++) {
        for (int j = 0; j < y->n_in; j++)
            if (x->out[i].slot == y->in[j].slot)
                return true;
        for (int j = 0; j < y->n_out; j++)
            if (x->out[i].slot == y->out[j].slot)
                return true;
    }
    return false;
}

static void insert_op(gen_t *g, prog_t *p, int step, test_rng_t *r)
{
    if (p->n >= MAX_ENTRIES)
        return;
    int at = g->fwd0 + below(r, p->n - g->fwd0 + 1);
    entry_t e = {.kind = E_OP, .token = (uint8_t)(K_EXTRA0 + below(r, 4))};
    e.id = (uint32_t)cham_mix64((uint64_t)step << 32 | (uint64_t)test_rng_next(r));
    e.intensity = (float)log_uniform(r, 0.5, 2000);
    /* Read what ops nearby read or write. */
    int n_in = below(r, 3);
    for (int k = 0; k < n_in; k++) {
        int j = at - 6 + below(r, 12);
        if (!is_op(p, j))
            continue;
        const entry_t *o = &p->e[j];
        int n = o->n_in + o->n_out;
        if (!n)
            continue;
        int q = below(r, n);
        add_in(&e, q < o->n_in ? o->in[q] : o->out[q - o->n_in]);
    }
    ref_t x = e.n_in ? e.in[below(r, e.n_in)] : (ref_t){0, 0, 0};
    if (e.n_in && !p->slots[x.slot].persistent && chance(r, 0.3)) {
        add_out(&e, x);                              /* in place */
    } else {
        int s = new_slot(p, rand_bytes(g, r), 1, "extra", r);
        if (s < 0)
            return;
        add_out(&e, full(p, s));
    }
    if (chance(r, 0.1))
        e.ws = (uint32_t)rand_bytes(g, r);
    memmove(&p->e[at + 1], &p->e[at], (size_t)(p->n - at) * sizeof p->e[0]);
    p->e[at] = e;
    p->n++;
}

/* The caller moves a tensor used nearby out, and maybe back later. */
static void insert_swap(prog_t *p, test_rng_t *r)
{
    if (p->n + 2 > MAX_ENTRIES)
        return;
    int j = below(r, p->n);
    if (!is_op(p, j) || !p->e[j].n_in)
        return;
    int slot = p->e[j].in[below(r, p->e[j].n_in)].slot;
    int at = j + 1 + below(r, 4);
    at = at > p->n ? p->n : at;
    memmove(&p->e[at + 1], &p->e[at], (size_t)(p->n - at) * sizeof p->e[0]);
    p->e[at] = (entry_t){.kind = E_SWAP_OUT, .slot = (uint16_t)slot};
    p->n++;
    if (chance(r, 0.5)) {
        int back = at + 1 + below(r, 8);
        back = back > p->n ? p->n : back;
        memmove(&p->e[back + 1], &p->e[back], (size_t)(p->n - back) * sizeof p->e[0]);
        p->e[back] = (entry_t){.kind = E_SWAP_IN, .slot = (uint16_t)slot};
        p->n++;
    }
}

static void delete_op(prog_t *p, test_rng_t *r)
{
    for (int tries = 0; tries < 8; tries++) {
        int i = below(r, p->n);
        if (is_op(p, i)) {
            remove_range(p, i, i + 1);
            return;
        }
    }
}

static void swap_ops(prog_t *p, test_rng_t *r)
{
    for (int tries = 0; tries < 16; tries++) {
        int i = below(r, p->n - 1);
        if (is_op(p, i) && is_op(p, i + 1) && !conflicts(&p->e[i], &p->e[i + 1]) &&
            !conflicts(&p->e[i + 1], &p->e[i])) {
            entry_t t = p->e[i];
            p->e[i] = p->e[i + 1];
            p->e[i + 1] = t;
            return;
        }
    }
}

/* Step `step` of the program (step == n_steps: the final read of every
 * persistent tensor). What changed, for -v. */
static const char *make_step(const gen_t *g, int step, prog_t *p)
{
    const prog_t *base = &g->base;
    p->n_slots = base->n_slots;
    memcpy(p->slots, base->slots, (size_t)base->n_slots * sizeof p->slots[0]);
    test_rng_t r = rng_for(g->seed, 1000 + (uint64_t)step);
    if (step == g->n_steps) {
        p->n = 0;
        for (int s = 0; s < p->n_slots; s++)
            if (p->slots[s].persistent) {
                entry_t e = {.kind = E_OP, .token = K_READ, .id = 0xfeed0000u + (uint32_t)s,
                             .intensity = 1};
                add_in(&e, full(p, s));
                p->e[p->n++] = e;
            }
        return "final read";
    }
    /* Sizes of dynamic tensors change every step. */
    for (int s = 0; s < p->n_slots; s++) {
        slot_t *sl = &p->slots[s];
        if (!sl->dynamic)
            continue;
        static const double scale[] = {0.5, 1.0, 1.5, 2.0};
        size_t d = dtype_size(sl->dtype);
        sl->bytes = round_up((size_t)((double)sl->bytes * scale[below(&r, 4)]) + 1, d);
        sl->cut[1] = sl->bytes;
    }
    p->n = base->n;
    memcpy(p->e, base->e, (size_t)base->n * sizeof p->e[0]);
    if (step == 0 && g->init_op) {
        memmove(&p->e[1], &p->e[0], (size_t)p->n * sizeof p->e[0]);
        p->e[0] = (entry_t){.kind = E_OP, .token = K_INIT, .id = 0xfeedf00du, .intensity = 1};
        p->n++;
        return "init op first";
    }
    const char *what = "as is";
    double u = unit(&r);
    if (step > 0 && u < 0.03) {
        remove_range(p, g->fwd1, g->opt1);            /* validation: forward only */
        what = "validation";
    } else if (step > 0 && u < 0.05) {
        remove_range(p, g->opt0 - 1, g->opt1);         /* overflow: no update */
        what = "update skipped";
    } else if (step > 0 && u < 0.07) {
        const span_t *l = &g->layer[below(&r, g->n_layers)];
        remove_range(p, l->b0, l->b1);                /* stochastic depth */
        remove_range(p, l->f0, l->f1);
        what = "layer skipped";
    } else if (step > 0 && u < 0.09 && base->n + (g->bwd1 - g->fwd0) < MAX_ENTRIES) {
        /* Gradient accumulation: forward and backward twice. */
        int len = g->bwd1 - g->fwd0;
        memmove(&p->e[g->bwd1 + len], &p->e[g->bwd1],
                (size_t)(p->n - g->bwd1) * sizeof p->e[0]);
        memcpy(&p->e[g->bwd1], &p->e[g->fwd0], (size_t)len * sizeof p->e[0]);
        for (int i = g->bwd1; i < g->bwd1 + len; i++)
            p->e[i].id ^= 0x5a5a0000u;
        p->n += len;
        what = "two micro-batches";
    } else if (step > 0 && u < 0.10) {
        for (int i = g->bwd1 - 1; i > g->bwd0; i--) {  /* a shuffled backward */
            int j = g->bwd0 + below(&r, i - g->bwd0 + 1);
            entry_t t = p->e[i];
            p->e[i] = p->e[j];
            p->e[j] = t;
        }
        what = "backward shuffled";
    }
    int k = chance(&r, 0.6) ? 0 : 1 + below(&r, 2);
    for (int i = 0; i < k; i++) {
        double v = unit(&r);
        if (v < 0.35)
            insert_op((gen_t *)g, p, step, &r);
        else if (v < 0.6)
            delete_op(p, &r);
        else if (v < 0.75)
            insert_swap(p, &r);
        else
            swap_ops(p, &r);
    }
    return k ? (u < 0.10 && step > 0 ? what : "small changes") : what;
}

/* ---- kernels ---------------------------------------------------------------------*/

typedef struct kern {
    const unsigned char *in[MAX_IN];
    size_t in_bytes[MAX_IN];
    int n_in;
    unsigned char *out[MAX_OUT];
    size_t out_bytes[MAX_OUT];
    int n_out;
    unsigned char *ws;
    size_t ws_bytes;
    uint64_t salt;
    uint64_t in_hash[MAX_IN], h;
    bool ws_ok;
} kern_t;

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325) ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * CHAM_GOLDEN64;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return cham_mix64(h);
}

static void fill_bytes(unsigned char *p, size_t n, uint64_t s)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = cham_splitmix64(&s);
        memcpy(p + i, &w, 8);
    }
    if (i < n) {
        uint64_t w = cham_splitmix64(&s);
        memcpy(p + i, &w, n - i);
    }
}

/* Every input byte counts; every output byte is written. */
static void kernel_fn(void *arg)
{
    kern_t *k = arg;
    uint64_t h = k->salt;
    for (int i = 0; i < k->n_in; i++) {
        k->in_hash[i] = hash_bytes(k->in[i], k->in_bytes[i]);
        h = cham_mix64(h ^ k->in_hash[i]) + (uint64_t)i;
    }
    if (k->ws)
        fill_bytes(k->ws, k->ws_bytes, h ^ 0x77);
    for (int o = 0; o < k->n_out; o++)
        fill_bytes(k->out[o], k->out_bytes[o], h + (uint64_t)o * 0x1234567);
    if (k->ws) {
        unsigned char *expect = malloc(k->ws_bytes);
        if (expect) {
            fill_bytes(expect, k->ws_bytes, h ^ 0x77);
            k->ws_ok = memcmp(expect, k->ws, k->ws_bytes) == 0;
            free(expect);
        }
    }
    k->h = h;
}

/* Runs an op again for the runtime (a dropped tensor is needed): the
 * kernel is a pure function of its inputs and the salt the tag carries,
 * so the bytes are those of the first run. */
typedef struct run run_t;
static bool calls_back(const run_t *r);

static cham_status_t rerun(cham_context_t *ctx, const cham_recompute_call_t *call, void *user)
{
    const run_t *r = user;
    if (call->n_inputs > MAX_IN || call->n_outputs > MAX_OUT)
        return CHAM_ERR_INVALID_ARG;
    /* A hook that calls back into the runtime is refused (issue 47). */
    cham_tensor_t *t = NULL;
    if (calls_back(r) &&
        (cham_step_end(ctx) != CHAM_ERR_INVALID_ARG ||
         cham_tensor_new(ctx, 64, CHAM_DTYPE_U8, "from the recompute hook", &t) !=
             CHAM_ERR_INVALID_ARG || t))
        return CHAM_ERR_BACKEND;      /* fails the run, naming the hook */
    kern_t k = {.n_in = (int)call->n_inputs, .n_out = (int)call->n_outputs, .ws_ok = true,
                .salt = call->tag};
    cham_access_t acc[MAX_IN + MAX_OUT];
    size_t n = 0;
    double bytes = 0;
    for (size_t i = 0; i < call->n_inputs; i++, n++) {
        k.in[i] = call->inputs[i];
        k.in_bytes[i] = call->input_bytes[i];
        acc[n] = (cham_access_t){call->inputs[i], call->input_bytes[i], CHAM_ACCESS_READ};
        bytes += (double)call->input_bytes[i];
    }
    for (size_t o = 0; o < call->n_outputs; o++, n++) {
        k.out[o] = call->outputs[o];
        k.out_bytes[o] = call->output_bytes[o];
        acc[n] = (cham_access_t){call->outputs[o], call->output_bytes[o], CHAM_ACCESS_WRITE};
        bytes += (double)call->output_bytes[o];
    }
    cham_kernel_t kern = {.label = "recompute", .bytes = bytes, .accesses = acc, .n_accesses = n,
                          .cpu_fn = kernel_fn, .arg = &k};
    return cham_kernel_launch(call->stream, &kern);
}

/* May the runtime drop this op's outputs and run it again? Whole outputs,
 * none of them read or written twice, on the compute stream. */
static bool rerunnable(cham_tensor_t *const *ins, int n_in, cham_tensor_t *const *outs, int n_out,
                       bool send)
{
    if (send || n_in < 1 || n_out < 1)
        return false;
    for (int j = 0; j < n_out; j++) {
        if (cham_tensor_bytes(outs[j]) != cham_tensor_storage_bytes(outs[j]))
            return false;
        for (int i = 0; i < n_in; i++)
            if (cham_tensor_same_storage(ins[i], outs[j]))
                return false;
        for (int i = 0; i < j; i++)
            if (cham_tensor_same_storage(outs[i], outs[j]))
                return false;
    }
    return true;
}

/* ---- running a program -----------------------------------------------------------*/

/* What the reference saw at one op. */
typedef struct rec {
    uint64_t h, in[MAX_IN];
    uint8_t n_in;
} rec_t;

#define NOTES 128

typedef struct note {
    bool out;
    uint8_t cause;
    uint32_t step, op;
    char label[24];
} note_t;

struct run {
    cham_context_t *ctx;
    const gen_t *g;
    bool reference;
    bool verbose;
    cham_op_token_t tok[N_KINDS];
    cham_tensor_t *h[MAX_SLOTS][MAX_CHUNKS + 1];   /* [0] the whole, [1 + c] chunk c */
    uint8_t written[MAX_SLOTS];  /* chunks written, a bit each */
    int last[MAX_SLOTS][MAX_CHUNKS + 1];
    rec_t *rec;                  /* reference: made; else: to compare with */
    size_t n_rec, cap_rec, at;
    uint64_t bound, ops;
    const char *bound_op;        /* the op of the bound */
    int step, steps_run, steps_stable;
    /* outcome */
    bool stopped, oom, fragmented;
    uint64_t limit;              /* the device's bytes for tensors */
    pt_verdict_t verdict;
    char detail[640];
    /* notes */
    note_t notes[NOTES];
    uint64_t n_notes;
    char hazard[320];
    uint64_t hazards;
    bool corrupt, corrupted;
    const prog_t *prog;          /* the step running */
    /* The communication stream of K_SEND ops, and what it may still read. */
    cham_stream_t *comm;
    cham_event_t *ev_compute, *ev_comm;
    bool comm_reads[MAX_SLOTS];
    void *host_buf[MAX_SLOTS];   /* E_HOST_UPDATE's pinned buffers */
    size_t host_buf_bytes[MAX_SLOTS];
};

static bool calls_back(const run_t *r)
{
    return r->g->call_back;
}

static void fail(run_t *r, pt_verdict_t v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(run_t *r, pt_verdict_t v, const char *fmt, ...)
{
    if (r->stopped)
        return;
    r->stopped = true;
    r->verdict = v;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->detail, sizeof r->detail, fmt, ap);
    va_end(ap);
}

static void on_log(const char *line, void *user)
{
    run_t *r = user;
    if (r->verbose)
        fprintf(stderr, "  [%s] %s\n", r->reference ? "ref" : "run", line);
}

static void on_hazard(const cham_hazard_t *hz, void *user)
{
    run_t *r = user;
    if (r->hazards++ == 0) {
        char buf[256];
        snprintf(r->hazard, sizeof r->hazard, "step %d: %s", r->step,
                 cham_hazard_format(hz, buf, sizeof buf));
    }
}

static bool is_param_label(const char *label)
{
    return strncmp(label, "param", 5) == 0;
}

static void on_swap(const cham_swap_event_t *e, void *user)
{
    run_t *r = user;
    note_t *n = &r->notes[r->n_notes++ % NOTES];
    *n = (note_t){.out = e->out, .cause = (uint8_t)e->cause, .step = (uint32_t)e->step,
                  .op = e->op};
    snprintf(n->label, sizeof n->label, "%s", e->label);
    /* A hook that calls back into the runtime is refused (issue 47). */
    if (r->g->call_back && (cham_step_end(r->ctx) != CHAM_ERR_INVALID_ARG ||
                            cham_op_begin(r->ctx, r->tok[0], NULL, 0, NULL, 0) !=
                                CHAM_ERR_INVALID_ARG))
        fail(r, PT_FAIL_ERROR, "step %d: the swap hook's calls into the runtime were not "
             "refused", r->step);
    if (r->verbose)
        fprintf(stderr, "  [run] step %llu op %u: swap-%s of \"%s\" (%llu bytes, %s)\n",
                (unsigned long long)e->step, e->op, e->out ? "out" : "in", e->label,
                (unsigned long long)e->bytes, cham_swap_cause_name(e->cause));
    /* The negative control: the bytes a swap-in of a parameter brought
     * back differ in one place from what went out. */
    if (r->corrupt && !r->corrupted && !e->out && is_param_label(e->label)) {
        unsigned char *p = (unsigned char *)(uintptr_t)e->device_ptr;
        p[e->bytes / 2] ^= 0x5a;
        r->corrupted = true;
    }
}

/* The last swaps of a storage, for a failure's detail. */
static void swaps_of(const run_t *r, const char *label, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    int shown = 0;
    for (uint64_t i = r->n_notes; i-- > 0 && i + NOTES >= r->n_notes && shown < 4;) {
        const note_t *n = &r->notes[i % NOTES];
        if (strcmp(n->label, label) != 0)
            continue;
        int k = snprintf(buf + at, size - at, "%s%s at step %u op %u (%s)", shown ? ", " : "",
                         n->out ? "out" : "in", n->step, n->op,
                         cham_swap_cause_name((cham_swap_cause_t)n->cause));
        if (k < 0 || (size_t)k >= size - at)
            break;
        at += (size_t)k;
        shown++;
    }
    if (!shown)
        snprintf(buf, size, "no swap of it noted");
}

static uint8_t mask_of(ref_t x)
{
    return (uint8_t)(((1u << x.hi) - 1) & ~((1u << x.lo) - 1));
}

static int handle_index(const slot_t *s, ref_t x)
{
    if (s->n_chunks == 1 || (x.lo == 0 && x.hi == s->n_chunks) || x.hi != x.lo + 1)
        return 0;
    return 1 + x.lo;
}

static bool alive(const run_t *r, int slot)
{
    for (int i = 0; i <= MAX_CHUNKS; i++)
        if (r->h[slot][i])
            return true;
    return false;
}

static void release_slot(run_t *r, int slot)
{
    for (int i = 0; i <= MAX_CHUNKS; i++) {
        cham_tensor_release(r->h[slot][i]);
        r->h[slot][i] = NULL;
    }
    r->written[slot] = 0;
}

/* The device allocator's view, for an out-of-memory detail. */
static void alloc_view(const run_t *r, char *buf, size_t size)
{
    cham_alloc_stats_t a;
    if (cham_context_alloc_stats(r->ctx, &a) != CHAM_OK) {
        buf[0] = 0;
        return;
    }
    snprintf(buf, size, " [allocator: %llu of %llu bytes in segments, %llu allocated, "
             "fragmentation %.2f]", (unsigned long long)a.reserved, (unsigned long long)a.limit,
             (unsigned long long)a.allocated, a.fragmentation);
}

/* Makes a slot's storage and its chunk views. */
static bool make_slot(run_t *r, const prog_t *p, int slot)
{
    const slot_t *s = &p->slots[slot];
    cham_status_t st = cham_tensor_new(r->ctx, s->bytes, (cham_dtype_t)s->dtype, s->label,
                                       &r->h[slot][0]);
    if (st == CHAM_ERR_OUT_OF_MEMORY) {
        char view[160];
        alloc_view(r, view, sizeof view);
        r->oom = true;
        fail(r, PT_CLEAN_OOM, "step %d: tensor \"%s\" (%zu bytes): %.400s%s", r->step,
             s->label, s->bytes, cham_context_last_error(r->ctx), view);
        return false;
    }
    if (st != CHAM_OK) {
        fail(r, PT_FAIL_ERROR, "step %d: tensor \"%s\": %s: %s", r->step, s->label,
             cham_status_string(st), cham_context_last_error(r->ctx));
        return false;
    }
    r->written[slot] = 0;
    for (int c = 0; s->n_chunks > 1 && c < s->n_chunks; c++) {
        char label[32];
        snprintf(label, sizeof label, "%s[%d]", s->label, c);
        st = cham_tensor_view(r->h[slot][0], s->cut[c], s->cut[c + 1] - s->cut[c],
                              (cham_dtype_t)s->chunk_dtype[c], label, &r->h[slot][1 + c]);
        if (st != CHAM_OK) {
            fail(r, PT_FAIL_ERROR, "step %d: view %s: %s", r->step, label,
                 cham_context_last_error(r->ctx));
            return false;
        }
    }
    return true;
}

/* A tensor the host makes and fills outside any op. */
static void run_host_new(run_t *r, const prog_t *p, int slot)
{
    if (alive(r, slot))
        return;                  /* persistent, made in an earlier step */
    if (!make_slot(r, p, slot))
        return;
    const slot_t *s = &p->slots[slot];
    unsigned char *d = cham_tensor_data(r->h[slot][0]);
    if (!d) {
        fail(r, PT_FAIL_NO_ADDRESS, "step %d: new tensor \"%s\" has no device address",
             r->step, s->label);
        return;
    }
    uint64_t salt = cham_mix64(r->g->seed ^ (uint64_t)slot << 20 ^
                          (s->persistent ? 0 : (uint64_t)r->step << 40));
    fill_bytes(d, s->bytes, salt);
    r->written[slot] = (uint8_t)((1u << s->n_chunks) - 1);
}

static cham_tensor_t *handle_for(run_t *r, const prog_t *p, ref_t x, cham_tensor_t **transient,
                                 int *n_transient)
{
    const slot_t *s = &p->slots[x.slot];
    int hi = handle_index(s, x);
    if (hi > 0 || (x.lo == 0 && x.hi == s->n_chunks)) {
        if (!r->h[x.slot][hi])
            fail(r, PT_FAIL_ERROR, "harness: step %d: view %d of \"%s\" released too early",
                 r->step, hi, s->label);
        return r->h[x.slot][hi];
    }
    /* A run of chunks: a view made for this op only. */
    cham_tensor_t *t = NULL;
    if (!r->h[x.slot][0] ||
        cham_tensor_view(r->h[x.slot][0], s->cut[x.lo], s->cut[x.hi] - s->cut[x.lo],
                         CHAM_DTYPE_U8, s->label, &t) != CHAM_OK) {
        fail(r, PT_FAIL_ERROR, "step %d: a view of chunks %d-%d of \"%s\": %s", r->step, x.lo,
             x.hi, s->label, cham_context_last_error(r->ctx));
        return NULL;
    }
    transient[(*n_transient)++] = t;
    return t;
}

/* An error from the runtime: out of memory ends the run, anything else fails it. */
static void runtime_failed(run_t *r, cham_status_t st, const char *what, const char *name)
{
    if (st == CHAM_ERR_OUT_OF_MEMORY) {
        char view[160];
        alloc_view(r, view, sizeof view);
        r->oom = true;
        fail(r, PT_CLEAN_OOM, "step %d: %s of op \"%s\": %.400s%s", r->step, what, name,
             cham_context_last_error(r->ctx), view);
    } else if (st == CHAM_ERR_POLICY_MISMATCH && r->g->strategy == CHAM_STRATEGY_CAPUCHIN) {
        /* Capuchin's policy names tensors by position: a changed step is
         * the clear error it promises (docs/baselines.md). */
        fail(r, PT_CLEAN_STATIC, "step %d: %s of op \"%s\": %.400s", r->step, what, name,
             cham_context_last_error(r->ctx));
    } else {
        fail(r, PT_FAIL_ERROR, "step %d: %s of op \"%s\" returned %s: %s", r->step, what, name,
             cham_status_string(st), cham_context_last_error(r->ctx));
    }
}

static void record(run_t *r, const kern_t *k, const entry_t *e, int pos, cham_tensor_t **ins)
{
    rec_t now = {.h = k->h, .n_in = (uint8_t)k->n_in};
    for (int i = 0; i < k->n_in; i++)
        now.in[i] = k->in_hash[i];
    if (r->reference) {
        if (r->n_rec == r->cap_rec) {
            size_t cap = r->cap_rec ? 2 * r->cap_rec : 4096;
            rec_t *n = realloc(r->rec, cap * sizeof *n);
            if (!n)
                abort();
            r->rec = n, r->cap_rec = cap;
        }
        r->rec[r->n_rec++] = now;
        return;
    }
    if (r->at >= r->n_rec) {
        fail(r, PT_FAIL_ERROR, "harness: step %d op %d: more ops than the reference ran",
             r->step, pos);
        return;
    }
    const rec_t *want = &r->rec[r->at++];
    if (want->h == now.h && want->n_in == now.n_in)
        return;
    const char *name = kind_names[e->token];
    if (want->n_in != now.n_in) {
        fail(r, PT_FAIL_ERROR, "harness: step %d op %d \"%s\": %d inputs, the reference %d",
             r->step, pos, name, now.n_in, want->n_in);
        return;
    }
    for (int i = 0; i < now.n_in; i++) {
        if (want->in[i] == now.in[i])
            continue;
        const char *label = cham_tensor_label(ins[i]);
        char storage[32], swaps[200];
        snprintf(storage, sizeof storage, "%s", label);
        char *bracket = strchr(storage, '[');
        if (bracket)
            *bracket = 0;
        swaps_of(r, storage, swaps, sizeof swaps);
        fail(r, PT_FAIL_MISMATCH,
             "step %d op %d \"%s\": input %d \"%s\" (%zu bytes) hashes %016llx, the "
             "unconstrained run's %016llx; \"%s\": %s", r->step, pos, name, i, label,
             cham_tensor_bytes(ins[i]), (unsigned long long)now.in[i],
             (unsigned long long)want->in[i], storage, swaps);
        return;
    }
    fail(r, PT_FAIL_MISMATCH, "step %d op %d \"%s\": same inputs, other result (harness?)",
         r->step, pos, name);
}

/* A caller that moves a tensor of the op it is dispatching, inside the
 * op's bracket: each move must be refused, else the op's write could be
 * lost (issue 47). Whether all were. */
static bool moves_refused(run_t *r, cham_tensor_t *t, const char *name, int pos)
{
    static unsigned char host[64];
    if (!t)
        return true;
    const char *moved = cham_tensor_swap_out(t, false) == CHAM_OK ? "cham_tensor_swap_out"
                        : cham_tensor_host_update(t, host) == CHAM_OK ? "cham_tensor_host_update"
                        : cham_tensor_set_host_copy(t, host) == CHAM_OK
                            ? "cham_tensor_set_host_copy"
                        : cham_tensor_discard(t) == CHAM_OK ? "cham_tensor_discard"
                                                            : NULL;
    if (moved)
        fail(r, PT_FAIL_ERROR, "step %d op %d \"%s\": %s of its own \"%s\" inside its bracket "
             "was not refused", r->step, pos, name, moved, cham_tensor_label(t));
    return !moved;
}

static void run_op(run_t *r, const prog_t *p, const entry_t *e, int pos)
{
    cham_tensor_t *ins[MAX_IN], *outs[MAX_OUT], *transient[MAX_IN + MAX_OUT];
    int n_in = 0, n_out = 0, n_transient = 0, used[MAX_IN + MAX_OUT], n_used = 0;
    const char *name = kind_names[e->token];
    for (int i = 0; i < e->n_in; i++) {
        ref_t x = e->in[i];
        uint8_t m = mask_of(x);
        if (!alive(r, x.slot) || (r->written[x.slot] & m) != m)
            continue;            /* its producer did not run: dropped */
        ins[n_in] = handle_for(r, p, x, transient, &n_transient);
        if (!ins[n_in])
            goto out;
        n_in++;
        used[n_used++] = x.slot;
    }
    for (int i = 0; i < e->n_out; i++) {
        ref_t x = e->out[i];
        if (!alive(r, x.slot) && !make_slot(r, p, x.slot))
            goto out;
        outs[n_out] = handle_for(r, p, x, transient, &n_transient);
        if (!outs[n_out])
            goto out;
        n_out++;
        used[n_used++] = x.slot;
    }
    /* The working set of this op: every storage it touches, whole. */
    uint64_t need = round_up(e->ws, 512);
    for (int i = 0; i < n_used; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = used[j] == used[i];
        if (!seen)
            need += round_up(p->slots[used[i]].bytes, 512);
    }
    if (need > r->bound)
        r->bound = need, r->bound_op = name;

    /* A correct caller lets the collective finish before it writes the
     * buffer again. */
    bool wait = false;
    for (int i = 0; i < e->n_out; i++)
        wait |= r->comm_reads[e->out[i].slot];
    if (wait) {
        if (cham_stream_wait_event(cham_context_compute_stream(r->ctx), r->ev_comm) != CHAM_OK) {
            fail(r, PT_FAIL_ERROR, "step %d: waiting for the communication stream", r->step);
            goto out;
        }
        memset(r->comm_reads, 0, sizeof r->comm_reads);
    }
    /* An output the op writes whole and does not read has dead bytes
     * before it, as a caller may say (cham_tensor_discard); the check
     * against the unconstrained run sees any of them read. */
    for (int i = 0; i < n_out; i++) {
        bool read = false;
        for (int j = 0; j < n_in && !read; j++)
            read = cham_tensor_same_storage(ins[j], outs[i]);
        if (!read && cham_tensor_bytes(outs[i]) == cham_tensor_storage_bytes(outs[i]) &&
            cham_tensor_discard(outs[i]) != CHAM_OK) {
            runtime_failed(r, CHAM_ERR_INVALID_ARG, "discard", name);
            goto out;
        }
    }
    bool send = e->token == K_SEND;
    cham_status_t st = cham_op_begin(r->ctx, r->tok[e->token], ins, (size_t)n_in, outs,
                                     (size_t)n_out);
    if (st != CHAM_OK) {
        runtime_failed(r, st, "begin", name);
        goto out;
    }
    r->ops++;
    kern_t k = {.n_in = n_in, .n_out = n_out, .ws_ok = true};
    k.salt = cham_mix64(r->g->seed ^ (uint64_t)e->id * UINT64_C(0x2545f4914f6cdd1d) ^
                   (uint64_t)r->step << 48);
    cham_access_t acc[MAX_IN + MAX_OUT + 1];
    size_t n_acc = 0;
    double bytes = 0;
    for (int i = 0; i < n_in + n_out; i++) {
        cham_tensor_t *t = i < n_in ? ins[i] : outs[i - n_in];
        void *d = cham_tensor_data(t);
        cham_residency_t res = cham_tensor_residency(t);
        if (!d || res != CHAM_RESIDENT_DEVICE) {
            fail(r, PT_FAIL_NO_ADDRESS, "step %d op %d \"%s\": cham_op_begin returned OK but "
                 "%s %d \"%s\" has %s (residency %d)", r->step, pos, name,
                 i < n_in ? "input" : "output", i < n_in ? i : i - n_in, cham_tensor_label(t),
                 d ? "an address" : "no device address", (int)res);
            cham_op_end(r->ctx);
            goto out;
        }
        size_t b = cham_tensor_bytes(t);
        bytes += (double)b;
        if (i < n_in) {
            k.in[i] = d, k.in_bytes[i] = b;
            acc[n_acc++] = (cham_access_t){d, b, CHAM_ACCESS_READ};
        } else {
            bool inplace = false;
            for (int j = 0; j < n_in; j++)
                inplace |= ins[j] == t;
            k.out[i - n_in] = d, k.out_bytes[i - n_in] = b;
            acc[n_acc++] = (cham_access_t){d, b, inplace ? CHAM_ACCESS_READ_WRITE
                                                         : CHAM_ACCESS_WRITE};
        }
    }
    cham_tensor_t *ws = NULL;
    if (e->ws) {
        st = cham_tensor_new(r->ctx, e->ws, CHAM_DTYPE_U8, "workspace", &ws);
        if (st != CHAM_OK) {
            cham_runtime_stats_t now;
            cham_context_get_stats(r->ctx, &now);
            r->fragmented = st == CHAM_ERR_OUT_OF_MEMORY &&
                            r->limit - now.mem_in_use >= e->ws;
            runtime_failed(r, st, "a workspace inside", name);
            cham_op_end(r->ctx);
            goto out;
        }
        k.ws = cham_tensor_data(ws);
        k.ws_bytes = e->ws;
        if (!k.ws) {
            fail(r, PT_FAIL_NO_ADDRESS, "step %d op %d \"%s\": a new workspace has no device "
                 "address", r->step, pos, name);
            cham_tensor_release(ws);
            cham_op_end(r->ctx);
            goto out;
        }
        acc[n_acc++] = (cham_access_t){k.ws, e->ws, CHAM_ACCESS_READ_WRITE};
        bytes += e->ws;
    }
    cham_kernel_t kern = {.label = name, .flops = bytes * e->intensity, .bytes = bytes,
                          .link_bytes = send ? 2 * bytes : 0, /* a ring all-reduce */
                          .accesses = acc, .n_accesses = n_acc, .cpu_fn = kernel_fn,
                          .arg = &k};
    cham_stream_t *stream = cham_context_compute_stream(r->ctx);
    if (send) {
        /* After the producers on compute; the tensors are recorded on the
         * communication stream, as PyTorch's record_stream. */
        if ((st = cham_event_record(r->ev_compute, stream)) == CHAM_OK)
            st = cham_stream_wait_event(r->comm, r->ev_compute);
        stream = r->comm;
    }
    if (st == CHAM_OK)
        st = cham_kernel_launch(stream, &kern);
    for (int i = 0; send && st == CHAM_OK && i < n_in; i++) {
        st = cham_tensor_record_stream(ins[i], r->comm);
        r->comm_reads[used[i]] = true;
    }
    if (send && st == CHAM_OK)
        st = cham_event_record(r->ev_comm, r->comm);
    cham_tensor_release(ws);
    if (st != CHAM_OK) {
        fail(r, PT_FAIL_ERROR, "step %d op %d \"%s\": kernel launch: %s", r->step, pos, name,
             cham_status_string(st));
        cham_op_end(r->ctx);
        goto out;
    }
    if (!k.ws_ok)
        fail(r, PT_FAIL_MISMATCH, "step %d op %d \"%s\": the workspace made inside the op "
             "overlaps one of its tensors", r->step, pos, name);
    /* The op's roofline time, so the planner and the out-of-memory path
     * can price re-running it. */
    cham_device_info_t info;
    cham_device_get_info(cham_context_device(r->ctx), &info);
    double t_flops = kern.flops / info.peak_flops, t_bytes = bytes / info.hbm_bandwidth;
    if (r->g->recompute && !send &&
        cham_op_set_cost(r->ctx, 1e9 * (t_flops > t_bytes ? t_flops : t_bytes)) != CHAM_OK) {
        fail(r, PT_FAIL_ERROR, "step %d op %d \"%s\": cham_op_set_cost: %s", r->step, pos, name,
             cham_context_last_error(r->ctx));
        cham_op_end(r->ctx);
        goto out;
    }
    if (r->g->recompute && rerunnable(ins, n_in, outs, n_out, send) &&
        cham_op_set_recompute(r->ctx, k.salt) != CHAM_OK) {
        fail(r, PT_FAIL_ERROR, "step %d op %d \"%s\": cham_op_set_recompute: %s", r->step, pos,
             name, cham_context_last_error(r->ctx));
        cham_op_end(r->ctx);
        goto out;
    }
    if (r->g->call_back &&
        cham_mix64(r->g->seed ^ cham_mix64((uint64_t)r->step << 20 | (uint64_t)pos)) % 8 == 0 &&
        !moves_refused(r, n_out ? outs[0] : n_in ? ins[0] : NULL, name, pos)) {
        cham_op_end(r->ctx);
        goto out;
    }
    st = cham_op_end(r->ctx);
    if (st != CHAM_OK) {
        runtime_failed(r, st, "end", name);
        goto out;
    }
    for (int i = 0; i < e->n_out; i++)
        r->written[e->out[i].slot] |= mask_of(e->out[i]);
    record(r, &k, e, pos, ins);
out:
    for (int i = 0; i < n_transient; i++)
        cham_tensor_release(transient[i]);
}

/* Releases the handles of the slots entry i touched whose last use this
 * step is behind. */
static void sweep(run_t *r, const prog_t *p, int i)
{
    const entry_t *e = &p->e[i];
    int slots[MAX_IN + MAX_OUT + 1], n = 0;
    if (e->kind == E_HOST_NEW || e->kind == E_SWAP_OUT || e->kind == E_SWAP_IN ||
        e->kind == E_HOST_UPDATE)
        slots[n++] = e->slot;
    for (int k = 0; e->kind == E_OP && k < e->n_in; k++)
        slots[n++] = e->in[k].slot;
    for (int k = 0; e->kind == E_OP && k < e->n_out; k++)
        slots[n++] = e->out[k].slot;
    for (int k = 0; k < n; k++) {
        int s = slots[k];
        if (p->slots[s].persistent)
            continue;
        for (int h = 0; h <= MAX_CHUNKS; h++)
            if (r->h[s][h] && r->last[s][h] <= i) {
                cham_tensor_release(r->h[s][h]);
                r->h[s][h] = NULL;
            }
        if (!alive(r, s))
            r->written[s] = 0;
    }
}

/* The caller's own swap of a live slot; a swap-in that finds no room is a
 * prefetch given up, not an error. */
static void run_caller_swap(run_t *r, const prog_t *p, const entry_t *e)
{
    cham_tensor_t *t = NULL;
    for (int h = 0; h <= MAX_CHUNKS && !t; h++)
        t = r->h[e->slot][h];
    if (!t)
        return;
    bool out = e->kind == E_SWAP_OUT;
    cham_status_t st = out ? cham_tensor_swap_out(t, false) : cham_tensor_swap_in(t);
    if (st != CHAM_OK && !(st == CHAM_ERR_OUT_OF_MEMORY && !out))
        fail(r, PT_FAIL_ERROR, "step %d: the caller's swap-%s of \"%s\" returned %s: %s",
             r->step, out ? "out" : "in", p->slots[e->slot].label, cham_status_string(st),
             cham_context_last_error(r->ctx));
}

/* The host writes a parameter's next bytes (a hash of the seed, the step
 * and the slot) into its pinned buffer: an update on the host, which must
 * first make again whatever was dropped to be recomputed from the old
 * bytes (issue 47). */
static void run_host_update(run_t *r, const prog_t *p, const entry_t *e)
{
    cham_tensor_t *t = NULL;
    for (int h = 0; h <= MAX_CHUNKS && !t; h++)
        t = r->h[e->slot][h];
    if (!t || !r->written[e->slot])
        return;
    size_t bytes = cham_tensor_storage_bytes(t);
    cham_device_t *dev = cham_context_device(r->ctx);
    if (r->host_buf[e->slot] && r->host_buf_bytes[e->slot] != bytes)
        return;                  /* its size changed: no update this time */
    if (!r->host_buf[e->slot]) {
        if (cham_device_host_alloc(dev, bytes, &r->host_buf[e->slot]) != CHAM_OK) {
            fail(r, PT_FAIL_ERROR, "step %d: a host buffer for \"%s\": %s", r->step,
                 p->slots[e->slot].label, cham_device_last_error(dev));
            return;
        }
        r->host_buf_bytes[e->slot] = bytes;
    }
    cham_status_t st = cham_tensor_host_update(t, r->host_buf[e->slot]);
    if (st == CHAM_OK) {
        /* No copy may still read the buffer: the host waits for the device. */
        cham_device_synchronize(dev);
        fill_bytes(r->host_buf[e->slot], bytes,
                   cham_mix64(r->g->seed * 1000003u + (uint64_t)r->step * 1009u + e->slot));
        st = cham_tensor_host_ready(t, cham_context_compute_stream(r->ctx));
    }
    if (st != CHAM_OK)
        fail(r, PT_FAIL_ERROR, "step %d: the host's update of \"%s\" returned %s: %s", r->step,
             p->slots[e->slot].label, cham_status_string(st), cham_context_last_error(r->ctx));
}

static void run_step(run_t *r, const prog_t *p)
{
    r->prog = p;
    for (int s = 0; s < p->n_slots; s++)
        for (int h = 0; h <= MAX_CHUNKS; h++)
            r->last[s][h] = -1;
    for (int i = 0; i < p->n; i++) {
        const entry_t *e = &p->e[i];
        if (e->kind == E_HOST_NEW)
            r->last[e->slot][0] = i;
        for (int k = 0; e->kind == E_OP && k < e->n_in + e->n_out; k++) {
            ref_t x = k < e->n_in ? e->in[k] : e->out[k - e->n_in];
            r->last[x.slot][handle_index(&p->slots[x.slot], x)] = i;
        }
    }
    bool stable = cham_context_stage(r->ctx) == CHAM_STAGE_STABLE;
    int pos = 0;
    for (int i = 0; i < p->n && !r->stopped; i++) {
        const entry_t *e = &p->e[i];
        if (e->kind == E_PHASE) {
            cham_status_t st = cham_phase(r->ctx, (cham_phase_t)e->phase);
            if (st != CHAM_OK)
                fail(r, PT_FAIL_ERROR, "step %d: phase: %s", r->step,
                     cham_context_last_error(r->ctx));
        } else if (e->kind == E_HOST_NEW) {
            run_host_new(r, p, e->slot);
        } else if (e->kind == E_SWAP_OUT || e->kind == E_SWAP_IN) {
            run_caller_swap(r, p, e);
        } else if (e->kind == E_HOST_UPDATE) {
            run_host_update(r, p, e);
        } else {
            run_op(r, p, e, pos++);
        }
        if (!r->stopped)
            sweep(r, p, i);
    }
    /* Whatever is left of the step's own tensors goes (none should be). */
    for (int s = 0; s < p->n_slots; s++)
        if (!p->slots[s].persistent && alive(r, s))
            release_slot(r, s);
    if (r->stopped)
        return;
    cham_status_t st = cham_step_end(r->ctx);
    if (st != CHAM_OK) {
        fail(r, PT_FAIL_ERROR, "step %d: step end: %s", r->step,
             cham_context_last_error(r->ctx));
        return;
    }
    r->steps_run++;
    r->steps_stable += stable;
}

/* Uses the finest allocator granularity at which PyTorch's 20 MiB shared
 * segment is at most a sixteenth of the device (as the GPT trainer does). */
static uint32_t shift_for(uint64_t capacity)
{
    uint32_t shift = 0;
    while (shift < 10 && (UINT64_C(20) << 20 >> shift) * 16 > capacity)
        shift++;
    return shift;
}

static void run_program(run_t *r, uint64_t capacity, cham_runtime_stats_t *stats)
{
    const gen_t *g = r->g;
    cham_config_t c = g->knobs;
    c.device.capacity = capacity;
    c.allocator_shift = shift_for(capacity);
    if (r->reference) {
        c.executor = false;
        c.profiler = false;
    } else if (g->budget_share > 0) {
        c.memory_budget = (uint64_t)((double)capacity * g->budget_share);
    }
    r->limit = c.memory_budget ? c.memory_budget : capacity;
    memset(stats, 0, sizeof *stats);
    cham_status_t st = cham_context_new(&c, &r->ctx);
    if (st != CHAM_OK) {
        fail(r, PT_FAIL_ERROR, "context: %s", cham_context_last_error(NULL));
        return;
    }
    cham_context_set_log(r->ctx, on_log, r);
    cham_context_on_recompute(r->ctx, rerun, r);
    cham_device_set_hazard_hook(cham_context_device(r->ctx), on_hazard, r);
    if (!r->reference)
        cham_context_on_swap(r->ctx, on_swap, r);
    for (int k = 0; k < N_KINDS; k++)
        if (cham_op_token(r->ctx, kind_names[k], &r->tok[k]) != CHAM_OK)
            fail(r, PT_FAIL_ERROR, "op token %s", kind_names[k]);
    cham_device_t *dev = cham_context_device(r->ctx);
    if (cham_stream_new(dev, "comm", &r->comm) != CHAM_OK ||
        cham_event_new(dev, &r->ev_compute) != CHAM_OK ||
        cham_event_new(dev, &r->ev_comm) != CHAM_OK)
        fail(r, PT_FAIL_ERROR, "the communication stream: %s", cham_device_last_error(dev));
    prog_t *p = malloc(sizeof *p);
    if (!p)
        abort();
    for (r->step = 0; r->step <= g->n_steps && !r->stopped; r->step++) {
        const char *what = make_step(g, r->step, p);
        if (r->verbose && !r->reference)
            fprintf(stderr, "  [run] step %d: %s, %d entries, stage %s\n", r->step, what, p->n,
                    cham_stage_name(cham_context_stage(r->ctx)));
        run_step(r, p);
    }
    r->step--;
    cham_context_get_stats(r->ctx, stats);
    free(p);
    for (int s = 0; s < MAX_SLOTS; s++)
        release_slot(r, s);
    r->prog = NULL;
    cham_device_synchronize(dev);
    for (int s = 0; s < MAX_SLOTS; s++) {
        if (r->host_buf[s])
            cham_device_host_free(dev, r->host_buf[s]);
        r->host_buf[s] = NULL;
    }
    r->hazards = cham_device_hazard_count(dev);
    cham_event_free(r->ev_compute);
    cham_event_free(r->ev_comm);
    cham_stream_free(r->comm);
    cham_context_free(r->ctx);
    r->ctx = NULL;
    if (!r->reference && r->at != r->n_rec && !r->stopped)
        fail(r, PT_FAIL_ERROR, "harness: %zu ops run, the reference ran %zu", r->at, r->n_rec);
}

/* One line about the program and the knobs. */
static void describe(const gen_t *g, char *buf, size_t size)
{
    const prog_t *p = &g->base;
    int sends = 0, swaps = 0, ops = 0, persistent = 0;
    for (int i = 0; i < p->n; i++) {
        ops += p->e[i].kind == E_OP;
        sends += p->e[i].kind == E_OP && p->e[i].token == K_SEND;
        swaps += p->e[i].kind == E_SWAP_OUT || p->e[i].kind == E_SWAP_IN;
    }
    for (int i = 0; i < p->n_slots; i++)
        persistent += p->slots[i].persistent;
    const cham_config_t *c = &g->knobs;
    snprintf(buf, size, "%d layers, %d ops a step, %d tensors (%d persistent), %d sends, %d "
             "caller swaps, init op %s; %s, warmup %u, genpolicy %u, min_swap %llu, cache %u, "
             "executor %s, memory_budget %.0f%%, planner %s%s",
             g->n_layers, ops, p->n_slots, persistent, sends, swaps, g->init_op ? "yes" : "no",
             c->device.preset, c->warmup_steps, c->genpolicy_steps,
             (unsigned long long)c->min_swap_bytes, c->policy_cache, c->executor ? "on" : "off",
             100 * g->budget_share, cham_strategy_name(g->strategy),
             g->call_back ? ", hooks call back" : "");
}

/* ---- one seed ----------------------------------------------------------------------*/

const char *pt_verdict_name(pt_verdict_t v)
{
    static const char *const names[PT_VERDICT_COUNT_] = {
        "clean", "clean (out of memory below the working set)",
        "clean (out of memory: free bytes split by the running op's operands)", "MISMATCH",
        "HAZARD",
        "OPERAND NOT ON THE DEVICE", "ERROR", "OOM WITHOUT A CLEAR MESSAGE",
        "OOM ABOVE THE WORKING SET", "REFERENCE RUN FAILED", "CRASH",
        "clean (a static policy stopped at a changed step)"};
    return (int)v >= 0 && v < PT_VERDICT_COUNT_ ? names[v] : "?";
}

bool pt_verdict_ok(pt_verdict_t v)
{
    return v == PT_CLEAN || v == PT_CLEAN_OOM || v == PT_CLEAN_OOM_FRAGMENTED ||
           v == PT_CLEAN_STATIC;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void pt_run_seed(const pt_options_t *o, pt_result_t *res)
{
    double t0 = now_s();
    memset(res, 0, sizeof *res);
    gen_t *g = gen_new(o->seed, o->mode);
    res->mode = g->mode;
    res->steps = g->n_steps + 1;
    describe(g, res->program, sizeof res->program);
    run_t *ref = calloc(1, sizeof *ref), *run = calloc(1, sizeof *run);
    if (!ref || !run)
        abort();
    ref->g = run->g = g;
    ref->reference = true;
    ref->verbose = false;
    run->verbose = o->verbose;
    run->corrupt = o->corrupt_param_swap_in;

    cham_runtime_stats_t rs, cs;
    run_program(ref, REF_CAPACITY, &rs);
    res->bound = ref->bound;
    snprintf(res->bound_op, sizeof res->bound_op, "%s", ref->bound_op ? ref->bound_op : "");
    res->peak = rs.mem_peak;
    if (ref->stopped || ref->hazards) {
        res->verdict = PT_FAIL_REFERENCE;
        snprintf(res->detail, sizeof res->detail, "%.300s %.300s",
                 ref->stopped ? ref->detail : "", ref->hazards ? ref->hazard : "");
        goto done;
    }
    res->fraction = o->fraction > 0 ? o->fraction : g->fraction;
    res->budget = (uint64_t)((double)rs.mem_peak * res->fraction);
    run->rec = ref->rec, run->n_rec = ref->n_rec;
    run_program(run, res->budget, &cs);
    run->rec = NULL;
    res->steps_run = run->steps_run;
    res->ops = run->ops;
    res->hazards = run->hazards;
    res->swaps_out = cs.swaps_out;
    res->swaps_in = cs.swaps_in;
    res->planned_swaps_out = cs.planned_swaps_out;
    res->passive_swaps_out = cs.passive_swaps_out;
    res->on_demand_swaps_in = cs.on_demand_swaps_in;
    res->drops = cs.drops;
    res->recomputes = cs.recomputes;
    res->policies_generated = cs.policies_generated;
    res->policy_cache_hits = cs.policy_cache_hits;
    res->steps_stable = run->steps_stable;
    res->corrupted = run->corrupted;
    res->verdict = run->stopped ? run->verdict : PT_CLEAN;
    snprintf(res->detail, sizeof res->detail, "%s", run->stopped ? run->detail : "");
    if (run->oom && res->verdict == PT_CLEAN_OOM) {
        /* Clear means a message that names bytes; acceptable means a budget
         * below twice what the largest op needs at once. */
        if (!strstr(run->detail, "bytes"))
            res->verdict = PT_FAIL_OOM_MESSAGE;
        else if (res->budget >= 2 * res->bound && g->strategy != CHAM_STRATEGY_VDNN)
            /* (vDNN has no passive swaps once its policy applies: its
             * out-of-memory error is the baseline's, at any budget.) */
            res->verdict = run->fragmented ? PT_CLEAN_OOM_FRAGMENTED : PT_FAIL_OOM_ABOVE;
    }
    if (run->hazards && pt_verdict_ok(res->verdict)) {
        res->verdict = PT_FAIL_HAZARD;
        snprintf(res->detail, sizeof res->detail, "%llu hazards, the first: %s",
                 (unsigned long long)run->hazards, run->hazard);
    }
done:
    free(ref->rec);
    free(ref);
    free(run);
    free(g);
    res->seconds = now_s() - t0;
}
