/* ProTrain's search (papers/protrain.txt §3.3): every (n_swap,
 * n_checkpoint) layout, every n_persist, and for each the most chunk
 * buffers that fit, estimated; the shortest step wins. Pruned as the
 * paper does: n_swap only as far as the swap interval lets swap blocks be
 * spaced, and memory first, so that a configuration that does not fit is
 * never timed. docs/protrain.md, "The search". */
#include <math.h>
#include <stdlib.h>

#include "common/message.h"
#include "common/size.h"
#include "policy/protrain/protrain-impl.h"

/* N_interval: how many blocks' forward a block's swap-out takes (the
 * blocks' averages), at least 1. */
static uint32_t swap_interval(const cham_protrain_model_t *m, const cham_protrain_device_t *dev)
{
    double out_ns = 0, fwd_ns = 0;
    for (uint32_t b = 0; b < m->n_blocks; b++) {
        out_ns += (double)m->saved[b] / dev->d2h_bandwidth * 1e9;
        fwd_ns += m->seg[pt_seg_fwd(m, b)].ns;
    }
    double k = fwd_ns > 0 ? ceil(out_ns / fwd_ns) : m->n_blocks;
    return k < 1 ? 1 : k > m->n_blocks ? m->n_blocks : (uint32_t)k;
}

/* Per n_persist: what the chunks from there on move and cost the host at
 * least once a step (fetch, gradient, update), and the optimizer's time
 * the device keeps. */
typedef struct traffic {
    double *in_ns, *out_ns, *host_ns, *opt_ns;
    double before_bwd_ns;        /* the compute before the first block's backward:
                                    no gradient reaches the host earlier */
} traffic_t;

static void traffic_free(traffic_t *t)
{
    free(t->in_ns);
    free(t->out_ns);
    free(t->host_ns);
    free(t->opt_ns);
}

static bool traffic_new(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                        traffic_t *t)
{
    size_t n = (size_t)m->n_chunks + 1;
    t->in_ns = calloc(n, sizeof *t->in_ns);
    t->out_ns = calloc(n, sizeof *t->out_ns);
    t->host_ns = calloc(n, sizeof *t->host_ns);
    t->opt_ns = calloc(n, sizeof *t->opt_ns);
    if (!t->in_ns || !t->out_ns || !t->host_ns || !t->opt_ns)
        return false;
    double opt = 0, w = 0;
    for (uint32_t s = 0; s < m->n_segs; s++) {
        opt += m->seg[s].opt_ns;
        if (s <= pt_seg_post(m))
            t->before_bwd_ns += m->seg[s].ns;
    }
    for (uint32_t k = m->n_chunks; k-- > 0;) {
        t->in_ns[k] = t->in_ns[k + 1] + (double)m->w[k] / dev->h2d_bandwidth * 1e9;
        t->out_ns[k] = t->out_ns[k + 1] + (double)m->g[k] / dev->d2h_bandwidth * 1e9;
        t->host_ns[k] = t->host_ns[k + 1] + pt_host_ns(m, dev, k);
    }
    for (uint32_t k = 0; k < n; k++) {
        t->opt_ns[k] = m->weights ? opt * w / (double)m->weights : opt;
        w += k < m->n_chunks ? (double)m->w[k] : 0;
    }
    return true;
}

/* No configuration with this layout (compute, swapped bytes' time each
 * way) and n_persist has a shorter step: each resource's work alone. */
static double bound(const traffic_t *t, double compute, double swap_in, double swap_out,
                    uint32_t n_persist)
{
    double b = compute + t->opt_ns[n_persist];
    b = fmax(b, t->in_ns[n_persist] + swap_in);
    b = fmax(b, t->out_ns[n_persist] + swap_out);
    return fmax(b, t->before_bwd_ns + t->host_ns[n_persist]);
}

/* One search: its inputs, scratch and best so far. */
typedef struct search {
    const cham_protrain_model_t *m;
    const cham_protrain_device_t *dev;
    traffic_t t;
    pt_layout_mem_t lm;
    uint64_t usable, least;
    cham_protrain_config_t smallest;
    bool found;
    cham_protrain_plan_t *out;
} search_t;

/* Every n_persist of one layout, most chunks on the device first (usually
 * the fastest that fits, so that the bound prunes the rest), each with the
 * most buffers that fit. False when the host is out of memory. */
static bool try_layout(search_t *s, cham_protrain_config_t c)
{
    const cham_protrain_model_t *m = s->m;
    cham_protrain_plan_t *out = s->out;
    uint32_t N = m->n_chunks;
    double compute;
    uint64_t swapped;
    pt_layout_work(m, &c, &compute, &swapped);
    double swap_in = (double)swapped / s->dev->h2d_bandwidth * 1e9;
    double swap_out = (double)swapped / s->dev->d2h_bandwidth * 1e9;
    if (!pt_layout_mem(m, s->dev, &c, &s->lm))
        return false;
    for (uint32_t i = 0; i <= N && N - i >= s->dev->min_persist; i++) {
        c.n_persist = N - i;
        uint32_t n_np = N - c.n_persist, lo = pt_min_buffers(m, c.n_persist);
        c.n_buffer = lo;
        uint64_t peak = pt_peak(m, &s->lm, &c);
        if (peak < s->least) {
            s->least = peak;
            s->smallest = c;
        }
        /* Memory first; then nothing here can beat the best so far when
         * one resource's work alone is longer. */
        if (peak > s->usable ||
            (s->found && bound(&s->t, compute, swap_in, swap_out, c.n_persist) >=
                             out->estimate.step_ns)) {
            out->pruned++;
            continue;
        }
        /* The peak grows by the largest chunk with each buffer. */
        uint64_t wmax = m->np_wmax[c.n_persist];
        uint64_t more = wmax ? (s->usable - peak) / wmax : n_np;
        c.n_buffer = more >= n_np - lo ? n_np : lo + (uint32_t)more;
        double ns;
        if (!pt_step_ns(m, s->dev, &c, &ns))
            return false;
        out->evaluated++;
        if (!s->found || ns < out->estimate.step_ns) {
            s->found = true;
            out->config = c;
            out->estimate = (cham_protrain_estimate_t){
                .step_ns = ns, .peak_bytes = pt_peak(m, &s->lm, &c), .fits = true};
        }
    }
    return true;
}

cham_status_t cham_protrain_search(const cham_protrain_model_t *m,
                                   const cham_protrain_device_t *dev, cham_protrain_plan_t *out,
                                   char *err, size_t err_size)
{
    *out = (cham_protrain_plan_t){0};
    bool host = dev->min_persist < m->n_chunks;
    if (!(dev->h2d_bandwidth > 0 && dev->d2h_bandwidth > 0 && dev->capacity > 0 &&
          (!host || (dev->host_flops > 0 && dev->host_mem_bandwidth > 0)))) {
        cham_set_err(err, err_size, "protrain: the device needs a capacity, both link "
                     "bandwidths and the host's figures (host_flops %g, host_mem_bandwidth %g)",
                     dev->host_flops, dev->host_mem_bandwidth);
        return CHAM_ERR_INVALID_ARG;
    }
    search_t s = {.m = m, .dev = dev, .usable = pt_usable(dev), .least = UINT64_MAX, .out = out};
    bool ok = traffic_new(m, dev, &s.t) && pt_layout_mem_init(m, &s.lm);
    uint32_t L = m->n_blocks, N = m->n_chunks, k = swap_interval(m, dev);
    /* Every block checkpointed first: where memory is short, usually near
     * the best, which makes the bound prune early. */
    ok = ok && try_layout(&s, (cham_protrain_config_t){.n_checkpoint = L, .swap_interval = k});
    for (uint32_t n_swap = 0; ok && n_swap * k <= L; n_swap++)
        for (uint32_t n_ckpt = 0; ok && n_swap + n_ckpt <= L; n_ckpt++) {
            /* Swap blocks at least N_interval apart among the managed ones. */
            if ((n_swap && (uint64_t)n_swap * k > (uint64_t)n_swap + n_ckpt) ||
                (n_swap == 0 && n_ckpt == L)) {
                out->pruned += N + 1;
                continue;
            }
            ok = try_layout(&s, (cham_protrain_config_t){
                                    .n_swap = n_swap, .n_checkpoint = n_ckpt, .swap_interval = k});
        }
    traffic_free(&s.t);
    pt_layout_mem_free(&s.lm);
    if (!ok) {
        cham_set_err(err, err_size, "protrain: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    if (s.found)
        return CHAM_OK;
    char a[32], b[32], c[32];
    cham_set_err(err, err_size, "protrain: no configuration fits: the smallest estimated peak, "
                 "%s (n_persist %u, n_buffer %u, n_swap %u, n_checkpoint %u), is above the %s "
                 "usable of %s", cham_size_format(a, sizeof a, s.least), s.smallest.n_persist,
                 s.smallest.n_buffer, s.smallest.n_swap, s.smallest.n_checkpoint,
                 cham_size_format(b, sizeof b, s.usable),
                 cham_size_format(c, sizeof c, dev->capacity));
    return CHAM_ERR_OUT_OF_MEMORY;
}
