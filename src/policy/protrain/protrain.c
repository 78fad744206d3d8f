/* ProTrain's model of a step and its two estimators (papers/protrain.txt
 * §3.2-3.3; the paper's appendix A, with the formulas, is not in our
 * copy: docs/protrain.md writes ours down). From one detailed profile of
 * the step with every chunk persistent and every block kept: the
 * segments' times and memory, each block's activations, each chunk's
 * model state. The runtime estimator replays a configuration's step on a
 * compute stream, one link per direction and the host; the memory
 * estimator takes the profile's curve and removes what the configuration
 * keeps elsewhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/types.h"
#include "common/message.h"
#include "common/order.h"
#include "policy/plan-impl.h"
#include "policy/protrain/protrain-impl.h"

cham_block_mode_t cham_protrain_block_mode(const cham_protrain_config_t *c, uint32_t n_blocks,
                                           uint32_t b)
{
    uint64_t managed = (uint64_t)c->n_swap + c->n_checkpoint;
    if (managed > n_blocks)
        managed = n_blocks;
    if (b >= managed)
        return CHAM_BLOCK_KEEP;
    /* Swap blocks at floor(i * managed / n_swap), i < n_swap: Figure 2's
     * 8 blocks with 2 swapped and 4 checkpointed are S C C S C C K K. The
     * only i that can land on b is the least with i * managed >= b * n_swap. */
    uint64_t s = c->n_swap < managed ? c->n_swap : managed;
    if (s == 0)
        return CHAM_BLOCK_CHECKPOINT;
    uint64_t i = ((uint64_t)b * s + managed - 1) / managed;
    return i < s && i * managed / s == b ? CHAM_BLOCK_SWAP : CHAM_BLOCK_CHECKPOINT;
}

uint32_t cham_protrain_swap_ahead(const cham_protrain_config_t *c)
{
    return c->swap_interval ? c->swap_interval : 1;
}

const char *cham_block_mode_name(cham_block_mode_t mode)
{
    static const char *const names[] = {"keep", "checkpoint", "swap"};
    return (unsigned)mode < 3 ? names[mode] : "?";
}

cham_protrain_device_t cham_protrain_device_of(const cham_device_info_t *info)
{
    return (cham_protrain_device_t){
        .capacity = info->capacity, .reserve = UINT64_MAX,
        .h2d_bandwidth = info->h2d_bandwidth, .d2h_bandwidth = info->d2h_bandwidth,
        .host_flops = info->host_flops, .host_mem_bandwidth = info->host_mem_bandwidth,
        .launch_ns = info->launch_ns, .kernel_ns = info->kernel_overhead_ns};
}

uint64_t pt_usable(const cham_protrain_device_t *dev)
{
    uint64_t r = dev->reserve == UINT64_MAX ? cham_planner_default_reserve(dev->capacity, false)
                                            : dev->reserve;
    return r < dev->capacity ? dev->capacity - r : 0;
}

void cham_protrain_model_free(cham_protrain_model_t *m)
{
    if (!m)
        return;
    free(m->seg);
    free(m->saved);
    free(m->input);
    free(m->w);
    free(m->g);
    free(m->o);
    free(m->np_state);
    free(m->np_wmax);
    free(m->np_gmax);
    free(m->np_min_buffers);
    free(m);
}

uint32_t cham_protrain_blocks(const cham_protrain_model_t *m)
{
    return m->n_blocks;
}

uint32_t cham_protrain_chunks(const cham_protrain_model_t *m)
{
    return m->n_chunks;
}

/* ---- reading the profile ------------------------------------------------------------*/

/* A weight interval the forward reads: [lo, hi) of a storage. */
typedef struct span {
    uint64_t storage, lo, hi;
    uint32_t chunk;
} span_t;

static int cmp_span(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    if (x->storage != y->storage)
        return x->storage < y->storage ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The merged span holding (storage, ptr), or NULL. */
static const span_t *find_span(const span_t *s, size_t n, uint64_t storage, uint64_t ptr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid].storage < storage || (s[mid].storage == storage && s[mid].hi <= ptr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && s[lo].storage == storage && s[lo].lo <= ptr ? &s[lo] : NULL;
}

typedef struct reader {
    cham_profile_view_t v;
    uint32_t *fs, *fe, *bs, *be; /* per block: first and last op, forward and backward */
    span_t *spans;
    size_t n_spans;
    char *err;
    size_t err_size;
} reader_t;

static cham_status_t bad(reader_t *r, const char *fmt, uint32_t op, int64_t a)
{
    char what[200];
    snprintf(what, sizeof what, fmt, (long long)a);
    cham_set_err(r->err, r->err_size, "protrain: profile op %u: %s", op, what);
    return CHAM_ERR_INVALID_ARG;
}

/* Each block's forward and backward ops: contiguous, blocks in order. */
static cham_status_t find_blocks(reader_t *r, cham_protrain_model_t *m)
{
    const cham_profile_view_t *v = &r->v;
    for (uint32_t b = 0; b < m->n_blocks; b++)
        r->fs[b] = r->fe[b] = r->bs[b] = r->be[b] = UINT32_MAX;
    for (uint32_t k = 0; k < v->n_ops; k++) {
        const cham_profile_op_t *op = &v->ops[k];
        if (op->phase == CHAM_PHASE_EVAL)
            return bad(r, "an evaluation's op (phase eval; block %lld): profile one training "
                       "step, without an evaluation", k, op->block);
        if (op->block < 0 || (op->phase != CHAM_PHASE_FORWARD && op->phase != CHAM_PHASE_BACKWARD))
            continue;
        uint32_t b = (uint32_t)op->block;
        uint32_t *first = op->phase == CHAM_PHASE_FORWARD ? r->fs : r->bs;
        uint32_t *last = op->phase == CHAM_PHASE_FORWARD ? r->fe : r->be;
        if (first[b] != UINT32_MAX && last[b] + 1 != k)
            return bad(r, "block %lld's ops of this phase are not contiguous (profile one "
                       "training step, without an evaluation)", k, b);
        if (first[b] == UINT32_MAX)
            first[b] = k;
        last[b] = k;
    }
    for (uint32_t b = 0; b < m->n_blocks; b++) {
        if (r->fs[b] == UINT32_MAX || r->bs[b] == UINT32_MAX)
            return bad(r, "block %lld has no forward or no backward ops", 0, b);
        if (b > 0 && r->fs[b] < r->fe[b - 1])
            return bad(r, "block %lld's forward runs before the previous block's", r->fs[b], b);
        if (b > 0 && r->bs[b] > r->be[b - 1])
            return bad(r, "block %lld's backward runs after the previous block's", r->bs[b], b);
    }
    uint32_t L = m->n_blocks;
    if (r->bs[L - 1] < r->fe[L - 1])
        return bad(r, "block %lld's backward starts before its forward ends", r->bs[L - 1],
                   L - 1);
    return CHAM_OK;
}

/* The segments' op ranges: [first[s], first[s + 1]). */
static void seg_ranges(const reader_t *r, const cham_protrain_model_t *m, uint32_t *first)
{
    uint32_t L = m->n_blocks;
    first[0] = 0;
    for (uint32_t b = 0; b < L; b++)
        first[pt_seg_fwd(m, b)] = r->fs[b];
    first[pt_seg_post(m)] = r->fe[L - 1] + 1;
    for (uint32_t b = L; b-- > 0;)
        first[pt_seg_bwd(m, b)] = r->bs[b];
    first[m->n_segs - 1] = r->be[0] + 1;
    first[m->n_segs] = (uint32_t)r->v.n_ops;
}

/* A run of ops' time: their kernels (costs and the device's fixed time
 * per kernel), or the host's dispatch of them when that is longer. */
static double run_ns(double costs, double kernels, double ops, const cham_protrain_device_t *dev)
{
    return fmax(costs + kernels * (double)dev->kernel_ns, ops * (double)dev->launch_ns);
}

static void fill_segments(const reader_t *r, const cham_protrain_device_t *dev,
                          cham_protrain_model_t *m, const uint32_t *first)
{
    const cham_profile_view_t *v = &r->v;
    /* The ops' costs where the caller gave them; without any, the step's
     * measured time spread evenly over the ops (Eq. 1). Not both: the
     * measured time runs from the host's end of the previous step, so it
     * also holds the device's drain of that step when the host ran ahead. */
    bool costed = false;
    for (size_t k = 0; k < v->n_ops && !costed; k++)
        costed = v->ops[k].has_cost;
    double spread = costed || !v->n_ops ? 0 : (double)v->duration_ns / (double)v->n_ops;
    uint32_t L = m->n_blocks;
    uint64_t held = v->n_ops ? v->ops[0].mem_before : 0;
    for (uint32_t s = 0; s < m->n_segs; s++) {
        pt_seg_t *sg = &m->seg[s];
        sg->kind = s == 0 ? PT_PRE : s <= L ? PT_FWD : s == L + 1 ? PT_POST
                   : s + 1 < m->n_segs ? PT_BWD : PT_TAIL;
        sg->block = sg->kind == PT_FWD ? s - 1 : sg->kind == PT_BWD ? 2 * L + 1 - s : 0;
        sg->grads_of = sg->kind == PT_BWD ? sg->block + 1 : sg->kind == PT_POST ? L + 1
                       : sg->kind == PT_TAIL ? 0 : UINT32_MAX;
        sg->start = sg->end = sg->peak = held;
        double all[3] = {0}, opt[3] = {0};        /* costs, kernels, ops */
        for (uint32_t k = first[s]; k < first[s + 1]; k++) {
            const cham_profile_op_t *op = &v->ops[k];
            double cost = costed ? (op->has_cost ? op->cost_ns : 0) : spread;
            double *sum = op->phase == CHAM_PHASE_OPTIMIZER ? opt : all;
            sum[0] += cost;
            sum[1] += cost > 0;
            sum[2] += 1;
            if (k == first[s])
                sg->start = op->mem_before;
            uint64_t most = op->mem_before > op->mem_after ? op->mem_before : op->mem_after;
            if (most > sg->peak || k == first[s])
                sg->peak = most > sg->start ? most : sg->start;
            held = sg->end = op->mem_after;
        }
        sg->opt_ns = run_ns(opt[0], opt[1], opt[2], dev);
        sg->ns = run_ns(all[0], all[1], all[2], dev) + sg->opt_ns;
    }
    for (uint32_t b = 0; b < L; b++) {
        const pt_seg_t *f = &m->seg[pt_seg_fwd(m, b)];
        m->saved[b] = f->end > f->start ? f->end - f->start : 0;
        const cham_profile_op_t *op = &v->ops[r->fs[b]];
        for (uint32_t j = 0; j < op->n_uses && !m->input[b]; j++)
            if (!v->uses[op->first_use + j].output)
                m->input[b] = v->uses[op->first_use + j].storage_bytes;
        if (m->input[b] > m->saved[b])
            m->input[b] = m->saved[b];
    }
}

/* The chunk a forward segment's weights belong to. */
static uint32_t chunk_of_seg(const cham_protrain_model_t *m, uint32_t s)
{
    return s == 0 ? 0 : s <= m->n_blocks ? s : m->n_blocks + 1;
}

/* Chunks: the persistent spans the forward reads, merged per storage, each
 * to the earliest chunk reading it (a tied head reads the embedding's). */
static bool find_chunks(reader_t *r, cham_protrain_model_t *m, const uint32_t *first)
{
    const cham_profile_view_t *v = &r->v;
    size_t cap = 0;
    for (uint32_t s = 0; s <= pt_seg_post(m); s++)
        for (uint32_t k = first[s]; k < first[s + 1]; k++) {
            const cham_profile_op_t *op = &v->ops[k];
            if (op->phase != CHAM_PHASE_FORWARD)
                continue;
            for (uint32_t j = 0; j < op->n_uses; j++) {
                const cham_tensor_use_t *u = &v->uses[op->first_use + j];
                if (u->output || !u->persistent || !u->bytes)
                    continue;
                if (r->n_spans == cap) {
                    cap = cap ? 2 * cap : 64;
                    span_t *grown = realloc(r->spans, cap * sizeof *grown);
                    if (!grown)
                        return false;
                    r->spans = grown;
                }
                if (!m->elt)
                    m->elt = (uint32_t)cham_dtype_size(u->dtype);
                r->spans[r->n_spans++] = (span_t){u->storage, u->data_ptr,
                                                  u->data_ptr + u->bytes, chunk_of_seg(m, s)};
            }
        }
    if (r->n_spans > 1)   /* spans is NULL when no op reads a weight */
        qsort(r->spans, r->n_spans, sizeof *r->spans, cmp_span);
    size_t n = 0;
    for (size_t i = 0; i < r->n_spans; i++) {
        span_t *last = n ? &r->spans[n - 1] : NULL;
        const span_t *x = &r->spans[i];
        if (last && last->storage == x->storage && x->lo < last->hi) {
            if (x->hi > last->hi)
                last->hi = x->hi;
            if (x->chunk < last->chunk)
                last->chunk = x->chunk;
        } else {
            r->spans[n++] = *x;
        }
    }
    r->n_spans = n;
    for (size_t i = 0; i < n; i++) {
        m->w[r->spans[i].chunk] += r->spans[i].hi - r->spans[i].lo;
        m->weights += r->spans[i].hi - r->spans[i].lo;
    }
    if (!m->elt)
        m->elt = 2;
    return true;
}

/* Which chunks each segment's ops read. */
static cham_status_t find_reads(reader_t *r, cham_protrain_model_t *m, const uint32_t *first)
{
    const cham_profile_view_t *v = &r->v;
    for (uint32_t s = 0; s < m->n_segs; s++) {
        pt_seg_t *sg = &m->seg[s];
        for (uint32_t k = first[s]; k < first[s + 1]; k++) {
            const cham_profile_op_t *op = &v->ops[k];
            if (op->phase == CHAM_PHASE_OPTIMIZER)
                continue;
            for (uint32_t j = 0; j < op->n_uses; j++) {
                const cham_tensor_use_t *u = &v->uses[op->first_use + j];
                const span_t *sp = u->output || !u->persistent
                                       ? NULL
                                       : find_span(r->spans, r->n_spans, u->storage, u->data_ptr);
                if (!sp)
                    continue;
                uint32_t i = 0;
                while (i < sg->n_reads && sg->reads[i] != sp->chunk)
                    i++;
                if (i < sg->n_reads)
                    continue;
                if (sg->n_reads == PT_MAX_READS)
                    return bad(r, "its segment reads the weights of more than %lld chunks", k,
                               PT_MAX_READS);
                sg->reads[sg->n_reads++] = sp->chunk;
            }
        }
    }
    return CHAM_OK;
}

/* (storage, bytes) pairs: sorted by storage, the bytes of distinct ones. */
static uint64_t distinct_bytes(uint64_t *pairs, size_t n)
{
    qsort(pairs, n, 2 * sizeof *pairs, cham_order_u64);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || pairs[2 * i] != pairs[2 * i - 2])
            sum += pairs[2 * i + 1];
    return sum;
}

static bool has_storage(const uint64_t *pairs, size_t n, uint64_t storage)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pairs[2 * mid] < storage)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && pairs[2 * lo] == storage;
}

/* Adds the persistent storages (other than weights and, with `skip`,
 * those in skip) that the ops of `phase` use (outputs only with
 * `written`) to pairs; returns the new count. */
static size_t collect(const reader_t *r, cham_phase_t phase, bool written, const uint64_t *skip,
                      size_t n_skip, uint64_t *pairs)
{
    const cham_profile_view_t *v = &r->v;
    size_t n = 0;
    for (size_t k = 0; k < v->n_ops; k++) {
        const cham_profile_op_t *op = &v->ops[k];
        for (uint32_t j = 0; op->phase == phase && j < op->n_uses; j++) {
            const cham_tensor_use_t *u = &v->uses[op->first_use + j];
            if (!u->persistent || (written && !u->output) ||
                find_span(r->spans, r->n_spans, u->storage, u->data_ptr) ||
                (skip && has_storage(skip, n_skip, u->storage)))
                continue;
            pairs[2 * n] = u->storage;
            pairs[2 * n++ + 1] = u->storage_bytes;
        }
    }
    return n;
}

/* Gradients (persistent storages other than weights the backward writes)
 * and optimizer states (the other persistent storages the optimizer
 * uses), shared out over the chunks by their weights. */
static bool share_state(reader_t *r, cham_protrain_model_t *m)
{
    size_t n_uses = r->v.n_uses;
    uint64_t *grads = malloc((2 * n_uses + 1) * sizeof *grads);
    uint64_t *optim = malloc((2 * n_uses + 1) * sizeof *optim);
    bool ok = grads && optim;
    if (ok) {
        size_t n_grads = collect(r, CHAM_PHASE_BACKWARD, true, NULL, 0, grads);
        uint64_t g = distinct_bytes(grads, n_grads);      /* sorts grads */
        size_t n_optim = collect(r, CHAM_PHASE_OPTIMIZER, false, grads, n_grads, optim);
        uint64_t o = distinct_bytes(optim, n_optim);
        for (uint32_t c = 0; c < m->n_chunks; c++) {
            double share = m->weights ? (double)m->w[c] / (double)m->weights : 0;
            m->g[c] = (uint64_t)llround(share * (double)g);
            m->o[c] = (uint64_t)llround(share * (double)o);
        }
    }
    free(grads);
    free(optim);
    return ok;
}

static bool suffixes(cham_protrain_model_t *m)
{
    size_t n = (size_t)m->n_chunks + 1;
    m->np_state = calloc(n, sizeof *m->np_state);
    m->np_wmax = calloc(n, sizeof *m->np_wmax);
    m->np_gmax = calloc(n, sizeof *m->np_gmax);
    m->np_min_buffers = calloc(n, sizeof *m->np_min_buffers);
    if (!m->np_state || !m->np_wmax || !m->np_gmax || !m->np_min_buffers)
        return false;
    for (uint32_t k = m->n_chunks; k-- > 0;) {
        m->np_state[k] = m->np_state[k + 1] + m->w[k] + m->g[k] + m->o[k];
        m->np_wmax[k] = m->w[k] > m->np_wmax[k + 1] ? m->w[k] : m->np_wmax[k + 1];
        m->np_gmax[k] = m->g[k] > m->np_gmax[k + 1] ? m->g[k] : m->np_gmax[k + 1];
    }
    for (uint32_t k = 0; k < n; k++)
        for (uint32_t s = 0; s < m->n_segs; s++) {
            uint32_t reads = 0;
            for (uint32_t i = 0; i < m->seg[s].n_reads; i++)
                reads += m->seg[s].reads[i] >= k;
            if (reads > m->np_min_buffers[k])
                m->np_min_buffers[k] = reads;
        }
    return true;
}

cham_status_t cham_protrain_model_new(const cham_profile_t *profile,
                                      const cham_protrain_device_t *dev,
                                      cham_protrain_model_t **out, char *err, size_t err_size)
{
    *out = NULL;
    reader_t r = {.err = err, .err_size = err_size};
    cham_profile_get(profile, &r.v);
    int32_t top = -1;
    for (size_t k = 0; k < r.v.n_ops; k++)
        if (r.v.ops[k].block > top)
            top = r.v.ops[k].block;
    if (top < 0) {
        cham_set_err(err, err_size, "protrain: the profile (%zu ops) marks no transformer block: "
                     "ProTrain plans per block; mark them with cham_set_block", r.v.n_ops);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_protrain_model_t *m = calloc(1, sizeof *m);
    uint32_t L = (uint32_t)top + 1;
    uint32_t *first = NULL;
    cham_status_t st = CHAM_ERR_HOST_OOM;
    if (!m)
        goto done;
    m->n_blocks = L;
    m->n_chunks = L + 2;
    m->n_segs = 2 * L + 3;
    m->seg = calloc(m->n_segs, sizeof *m->seg);
    m->saved = calloc(L, sizeof *m->saved);
    m->input = calloc(L, sizeof *m->input);
    m->w = calloc(m->n_chunks, sizeof *m->w);
    m->g = calloc(m->n_chunks, sizeof *m->g);
    m->o = calloc(m->n_chunks, sizeof *m->o);
    r.fs = calloc(4 * (size_t)L, sizeof *r.fs);
    first = calloc(m->n_segs + 1, sizeof *first);
    if (!m->seg || !m->saved || !m->input || !m->w || !m->g || !m->o || !r.fs || !first)
        goto done;
    r.fe = r.fs + L;
    r.bs = r.fe + L;
    r.be = r.bs + L;
    if ((st = find_blocks(&r, m)) != CHAM_OK)
        goto done;
    seg_ranges(&r, m, first);
    fill_segments(&r, dev, m, first);
    st = CHAM_ERR_HOST_OOM;
    if (!find_chunks(&r, m, first))
        goto done;
    if ((st = find_reads(&r, m, first)) != CHAM_OK)
        goto done;
    const pt_seg_t *post = &m->seg[pt_seg_post(m)];
    for (uint32_t i = 0; i < post->n_reads; i++)
        m->tied = m->tied || post->reads[i] == 0;
    st = share_state(&r, m) && suffixes(m) ? CHAM_OK : CHAM_ERR_HOST_OOM;
done:
    if (st == CHAM_ERR_HOST_OOM)
        cham_set_err(err, err_size, "protrain: out of host memory");
    free(r.fs);
    free(r.spans);
    free(first);
    if (st != CHAM_OK) {
        cham_protrain_model_free(m);
        return st;
    }
    *out = m;
    return CHAM_OK;
}

/* ---- memory ---------------------------------------------------------------------------*/

/* The segments during which block b's activations (less what it keeps)
 * are off the device: [*from, *to). */
static void away(const cham_protrain_model_t *m, const cham_protrain_config_t *c, uint32_t b,
                 cham_block_mode_t mode, uint32_t *from, uint32_t *to)
{
    uint32_t L = m->n_blocks, k = cham_protrain_swap_ahead(c);
    if (mode == CHAM_BLOCK_CHECKPOINT) {       /* from its forward's end to its backward */
        *from = pt_seg_fwd(m, b) + 1;
        *to = pt_seg_bwd(m, b);
        return;
    }
    /* Swap: freed once the copy is done, k forward blocks later; back
     * when the backward reaches block b + k. */
    *from = b + k < L ? pt_seg_fwd(m, b + k) + 1 : pt_seg_post(m) + 1;
    *to = b + k < L ? pt_seg_bwd(m, b + k) : pt_seg_post(m);
}

bool pt_layout_mem_init(const cham_protrain_model_t *m, pt_layout_mem_t *lm)
{
    size_t n = (size_t)m->n_blocks + 1;
    lm->bwd = calloc(n, sizeof *lm->bwd);
    lm->both = calloc(n, sizeof *lm->both);
    lm->before = calloc(n, sizeof *lm->before);
    return lm->bwd && lm->both && lm->before;
}

void pt_layout_mem_free(pt_layout_mem_t *lm)
{
    free(lm->bwd);
    free(lm->both);
    free(lm->before);
}

bool pt_layout_mem(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                   const cham_protrain_config_t *c, pt_layout_mem_t *lm)
{
    uint32_t L = m->n_blocks;
    int64_t *diff = calloc(m->n_segs + 1, sizeof *diff);
    if (!diff)
        return false;
    for (uint32_t b = 0; b < L; b++) {
        cham_block_mode_t mode = cham_protrain_block_mode(c, L, b);
        if (mode == CHAM_BLOCK_KEEP)
            continue;
        uint64_t gone = mode == CHAM_BLOCK_SWAP ? m->saved[b] : m->saved[b] - m->input[b];
        uint32_t from, to;
        away(m, c, b, mode, &from, &to);
        if (from < to) {
            diff[from] += (int64_t)gone;
            diff[to] -= (int64_t)gone;
        }
    }
    lm->fwd = 0;
    int64_t gone = 0;
    for (uint32_t s = 0; s < m->n_segs; s++) {
        gone += diff[s];
        const pt_seg_t *sg = &m->seg[s];
        uint64_t peak = sg->peak;
        /* A checkpointed block's backward first runs its forward again
         * from its input: that forward's transient on top. */
        if (sg->kind == PT_BWD &&
            cham_protrain_block_mode(c, L, sg->block) == CHAM_BLOCK_CHECKPOINT) {
            const pt_seg_t *f = &m->seg[pt_seg_fwd(m, sg->block)];
            uint64_t again = sg->start + (f->peak - f->end) + m->input[sg->block];
            if (again > peak)
                peak = again;
        }
        uint64_t held = peak > (uint64_t)gone ? peak - (uint64_t)gone : 0;
        if (sg->kind == PT_PRE || sg->kind == PT_FWD)
            lm->fwd = held > lm->fwd ? held : lm->fwd;
        else if (sg->kind == PT_POST)
            lm->post = held;
        else if (sg->kind == PT_TAIL)
            lm->tail = held;
        else
            lm->bwd[sg->block] = held;
    }
    free(diff);
    /* Block b's chunk is b + 1; the one whose copy may outlast the
     * block's backward, b + 2 (the head's after the last block). */
    lm->both[L] = 0;
    for (uint32_t b = L; b-- > 0;) {
        double copy_ns = (double)m->g[b + 2] / dev->d2h_bandwidth * 1e9;
        uint64_t v = lm->bwd[b] + m->g[b + 1] +
                     (copy_ns > m->seg[pt_seg_bwd(m, b)].ns ? m->g[b + 2] : 0);
        lm->both[b] = v > lm->both[b + 1] ? v : lm->both[b + 1];
    }
    lm->before[0] = 0;
    for (uint32_t b = 0; b < L; b++)
        lm->before[b + 1] = lm->bwd[b] > lm->before[b] ? lm->bwd[b] : lm->before[b];
    return true;
}

uint64_t pt_peak(const cham_protrain_model_t *m, const pt_layout_mem_t *lm,
                 const cham_protrain_config_t *c)
{
    uint32_t p = c->n_persist, L = m->n_blocks;
    uint64_t bwd = 0;
#define MOST(x) bwd = (x) > bwd ? (x) : bwd
    /* The backward: blocks whose chunk (b + 1 >= p) is on the host carry
     * their gradients in flight; the block just before those the next
     * chunk's, being copied; the earlier ones none. POST's peak is its
     * loss, before the head's gradient exists. */
    uint32_t first = p ? p - 1 : 0;
    if (first < L)
        MOST(lm->both[first]);
    if (p >= 2 && p - 2 < L)
        MOST(lm->bwd[p - 2] + m->g[p]);
    MOST(lm->before[p >= 2 ? (p - 2 < L ? p - 2 : L) : 0]);
    MOST(lm->post);
    MOST(lm->tail + (p <= 1 ? m->g[1] : 0) + (p == 0 && !m->tied ? m->g[0] : 0));
#undef MOST
    /* Tied embeddings: the head makes the first chunk's gradient, which
     * lives through the whole backward. */
    if (p == 0 && m->tied)
        bwd += m->g[0];
    uint64_t most = lm->fwd > bwd ? lm->fwd : bwd;
    most = most > m->np_state[p] ? most - m->np_state[p] : 0;
    return most + (uint64_t)c->n_buffer * m->np_wmax[p];
}

uint32_t pt_min_buffers(const cham_protrain_model_t *m, uint32_t n_persist)
{
    return m->np_min_buffers[n_persist];
}

/* ---- time -------------------------------------------------------------------------*/

/* The step replayed: one compute stream, a link per direction (FIFO, as
 * the sim's), the host's AdamW; chunk buffers with LRU eviction, the
 * resident chunks in a list from least to most recently used. */
#define NONE UINT32_MAX

typedef struct replay {
    const cham_protrain_model_t *m;
    const cham_protrain_device_t *dev;
    const cham_protrain_config_t *c;
    double t, h2d, d2h, host;
    double *ready;               /* per chunk: its fetch done */
    uint32_t *prev, *next;       /* per chunk: its neighbours in the list */
    bool *resident;
    uint32_t lru, mru, n_resident;
} replay_t;

static bool is_np(const replay_t *r, uint32_t chunk)
{
    return chunk >= r->c->n_persist;
}

static bool needed_by(const pt_seg_t *sg, uint32_t chunk)
{
    for (uint32_t i = 0; i < sg->n_reads; i++)
        if (sg->reads[i] == chunk)
            return true;
    return false;
}

static void unlink_chunk(replay_t *r, uint32_t k)
{
    uint32_t p = r->prev[k], n = r->next[k];
    if (p != NONE)
        r->next[p] = n;
    else
        r->lru = n;
    if (n != NONE)
        r->prev[n] = p;
    else
        r->mru = p;
}

/* Chunk k is used now (it must be resident). */
static void touch(replay_t *r, uint32_t k)
{
    if (r->mru == k)
        return;
    unlink_chunk(r, k);
    r->prev[k] = r->mru;
    r->next[k] = NONE;
    if (r->mru != NONE)
        r->next[r->mru] = k;
    else
        r->lru = k;
    r->mru = k;
}

static void drop(replay_t *r, uint32_t k)
{
    unlink_chunk(r, k);
    r->resident[k] = false;
    r->n_resident--;
}

/* Frees a buffer: the least recently used chunk segment `keep` does not
 * read; false when every resident chunk is needed. */
static bool evict(replay_t *r, const pt_seg_t *keep)
{
    for (uint32_t k = r->lru; k != NONE; k = r->next[k])
        if (!needed_by(keep, k)) {
            drop(r, k);
            return true;
        }
    return false;
}

static void fetch(replay_t *r, uint32_t chunk, const pt_seg_t *keep)
{
    if (r->n_resident == r->c->n_buffer && !evict(r, keep))
        return;                 /* no buffer free: fetched when needed */
    double start = r->t > r->h2d ? r->t : r->h2d;
    r->h2d = start + (double)r->m->w[chunk] / r->dev->h2d_bandwidth * 1e9;
    r->ready[chunk] = r->h2d;
    r->resident[chunk] = true;
    r->n_resident++;
    r->prev[chunk] = r->next[chunk] = NONE;
    if (r->mru != NONE) {      /* linked as most recent */
        r->next[r->mru] = chunk;
        r->prev[chunk] = r->mru;
    } else {
        r->lru = chunk;
    }
    r->mru = chunk;
}

double pt_host_ns(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                  uint32_t chunk)
{
    double n = (double)m->w[chunk] / m->elt, g = (double)m->g[chunk];
    double f = dev->host_flops, bw = dev->host_mem_bandwidth;
    if (!(f > 0 && bw > 0))
        return INFINITY;         /* no host to update on */
    return 1e9 * (fmax(3 * n / f, 2 * g / bw) + fmax(12 * n / f, 2 * (g + 12 * n) / bw));
}

bool pt_step_ns(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                const cham_protrain_config_t *c, double *out)
{
    replay_t r = {.m = m, .dev = dev, .c = c, .lru = NONE, .mru = NONE};
    r.ready = calloc(m->n_chunks, sizeof *r.ready);
    r.prev = calloc(2 * (size_t)m->n_chunks, sizeof *r.prev);
    r.next = r.prev ? r.prev + m->n_chunks : NULL;
    r.resident = calloc(m->n_chunks, sizeof *r.resident);
    double *back = calloc(2 * (size_t)m->n_blocks, sizeof *back);   /* swap-ins done */
    double *sent = back ? back + m->n_blocks : NULL;                 /* swap-outs done */
    cham_block_mode_t *mode = calloc(m->n_blocks, sizeof *mode);
    uint32_t *due = calloc(m->n_blocks, sizeof *due);   /* swap-in's segment */
    bool ok = r.ready && r.prev && r.resident && back && mode && due;
    uint32_t L = m->n_blocks, k = cham_protrain_swap_ahead(c);
    for (uint32_t b = 0; ok && b < L; b++) {
        mode[b] = cham_protrain_block_mode(c, L, b);
        /* The backward reaching block b + k brings block b's activations
         * back (POST those of the last k blocks). */
        due[b] = b + k < L ? pt_seg_bwd(m, b + k) : pt_seg_post(m);
    }
    double persist_w = 0;
    for (uint32_t ch = 0; ch < c->n_persist && ch < m->n_chunks; ch++)
        persist_w += (double)m->w[ch];
    for (uint32_t s = 0; ok && s < m->n_segs; s++) {
        const pt_seg_t *sg = &m->seg[s];
        /* Swap-ins due here: at most the k blocks before the one whose
         * backward starts (all of the last k at POST). */
        uint32_t lo = 0, hi = 0;
        if (sg->kind == PT_POST)
            lo = L > k ? L - k : 0, hi = L;
        else if (sg->kind == PT_BWD && sg->block >= k)
            lo = sg->block - k, hi = lo + 1;
        for (uint32_t b = lo; b < hi; b++) {
            if (mode[b] != CHAM_BLOCK_SWAP || due[b] != s)
                continue;
            /* Tensor by tensor behind its swap-out, which may still be
             * copying: done no earlier than that. */
            double in_ns = (double)m->saved[b] / dev->h2d_bandwidth * 1e9;
            r.h2d = back[b] = fmax(fmax(r.t, r.h2d) + in_ns, sent[b]);
        }
        for (uint32_t i = 0; i < sg->n_reads; i++) {
            uint32_t ch = sg->reads[i];
            if (!is_np(&r, ch))
                continue;
            if (!r.resident[ch])
                fetch(&r, ch, sg);
            if (r.resident[ch])
                touch(&r, ch);
            r.t = fmax(r.t, r.ready[ch]);
        }
        if (s + 1 < m->n_segs) {      /* the next segment's chunks, ahead */
            const pt_seg_t *nx = &m->seg[s + 1];
            for (uint32_t i = 0; i < nx->n_reads; i++)
                if (is_np(&r, nx->reads[i]) && !r.resident[nx->reads[i]])
                    fetch(&r, nx->reads[i], sg);
        }
        double ns = sg->ns;
        if (sg->kind == PT_BWD && mode[sg->block] == CHAM_BLOCK_SWAP)
            r.t = fmax(r.t, back[sg->block]);
        if (sg->kind == PT_BWD && mode[sg->block] == CHAM_BLOCK_CHECKPOINT)
            ns += m->seg[pt_seg_fwd(m, sg->block)].ns;
        if (sg->opt_ns > 0 && m->weights)   /* the device updates persistent chunks */
            ns -= sg->opt_ns * (1 - persist_w / (double)m->weights);
        r.t += ns;
        if (sg->kind == PT_FWD && mode[sg->block] == CHAM_BLOCK_SWAP)
            r.d2h = sent[sg->block] =
                fmax(r.t, r.d2h) + (double)m->saved[sg->block] / dev->d2h_bandwidth * 1e9;
        uint32_t ch = sg->grads_of;
        if (ch != UINT32_MAX && is_np(&r, ch)) {
            r.d2h = fmax(r.t, r.d2h) + (double)m->g[ch] / dev->d2h_bandwidth * 1e9;
            r.host = fmax(r.d2h, r.host) + pt_host_ns(m, dev, ch);
            if (r.resident[ch])               /* its weights are done with this step */
                drop(&r, ch);
        }
    }
    *out = fmax(r.t, fmax(r.d2h, r.host));
    free(r.ready);
    free(r.prev);
    free(r.resident);
    free(back);
    free(mode);
    free(due);
    return ok;
}

void pt_layout_work(const cham_protrain_model_t *m, const cham_protrain_config_t *c,
                    double *compute_ns, uint64_t *swapped)
{
    double ns = 0;
    *swapped = 0;
    for (uint32_t s = 0; s < m->n_segs; s++)
        ns += m->seg[s].ns - m->seg[s].opt_ns;
    for (uint32_t b = 0; b < m->n_blocks; b++) {
        cham_block_mode_t mode = cham_protrain_block_mode(c, m->n_blocks, b);
        if (mode == CHAM_BLOCK_CHECKPOINT)
            ns += m->seg[pt_seg_fwd(m, b)].ns;
        else if (mode == CHAM_BLOCK_SWAP)
            *swapped += m->saved[b];
    }
    *compute_ns = ns;
}

/* ---- the estimators' entry -------------------------------------------------------------*/

static cham_status_t check(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                           const cham_protrain_config_t *c, char *err, size_t err_size)
{
    const char *what = NULL;
    uint64_t value = 0;
    uint32_t n_np = c->n_persist <= m->n_chunks ? m->n_chunks - c->n_persist : 0;
    if (!(dev->h2d_bandwidth > 0 && dev->d2h_bandwidth > 0 && dev->capacity > 0))
        what = "device (capacity and both bandwidths must be positive)";
    else if (n_np && !(dev->host_flops > 0 && dev->host_mem_bandwidth > 0))
        what = "device (chunks on the host need host_flops and host_mem_bandwidth)", value = n_np;
    else if (c->n_persist > m->n_chunks)
        what = "n_persist (at most the chunks)", value = c->n_persist;
    else if (n_np && c->n_buffer < pt_min_buffers(m, c->n_persist))
        what = "n_buffer (fewer than one segment reads at once)", value = c->n_buffer;
    else if (c->n_buffer > n_np)
        what = "n_buffer (more than the chunks on the host)", value = c->n_buffer;
    else if ((uint64_t)c->n_swap + c->n_checkpoint > m->n_blocks)
        what = "n_swap + n_checkpoint (more than the blocks)", value = c->n_swap + c->n_checkpoint;
    if (!what)
        return CHAM_OK;
    cham_set_err(err, err_size, "protrain: %s: %llu is not valid for %u blocks and %u chunks",
                 what, (unsigned long long)value, m->n_blocks, m->n_chunks);
    return CHAM_ERR_INVALID_ARG;
}

cham_status_t cham_protrain_estimate(const cham_protrain_model_t *m,
                                     const cham_protrain_device_t *dev,
                                     const cham_protrain_config_t *c,
                                     cham_protrain_estimate_t *out, char *err, size_t err_size)
{
    cham_status_t st = check(m, dev, c, err, err_size);
    if (st != CHAM_OK)
        return st;
    pt_layout_mem_t lm = {0};
    bool ok = pt_layout_mem_init(m, &lm) && pt_layout_mem(m, dev, c, &lm) &&
              pt_step_ns(m, dev, c, &out->step_ns);
    if (ok)
        out->peak_bytes = pt_peak(m, &lm, c);
    pt_layout_mem_free(&lm);
    if (!ok) {
        cham_set_err(err, err_size, "protrain: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    out->fits = out->peak_bytes <= pt_usable(dev);
    return CHAM_OK;
}
