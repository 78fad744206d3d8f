/* The generator's model state and its step: the micro-batch schedule
 * (gradient accumulation; 1F1B on the first pipeline stage), the optional
 * evaluation that opens a step, data-parallel gradient reduction and ZeRO
 * sharding, and the mixed-precision optimizer step with dynamic loss
 * scaling. docs/workloads.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload/workload-impl.h"

static uint64_t group_params(const cham_workload_t *w, uint32_t g)
{
    return w->group_params[g];
}

static bool sharded(const cham_workload_t *w, uint32_t stage)
{
    return wl_sharded(&w->m, stage);
}

/* ---- model state ------------------------------------------------------------------*/

static const char *group_name(const cham_workload_t *w, uint32_t g, char *buf, size_t size)
{
    if (g == wl_embed_group(w))
        return "embedding";
    if (g == wl_head_group(w))
        return "head";
    snprintf(buf, size, "L%u", g);
    return buf;
}

/* Group g's parameters the optimizer updates here (wl_updated_of). */
static uint64_t updated_params(const cham_workload_t *w, uint32_t g)
{
    return wl_updated_of(&w->m, group_params(w, g));
}

/* ZeRO 1-2: the optimizer updates a shard and every rank gathers the
 * others' (ZeRO-3 keeps only its shard of the weights). */
static bool gathers_updated(const cham_workload_t *w)
{
    return sharded(w, 1) && !sharded(w, 3);
}

/* Group g's gradient as the optimizer reads it (the shard with ZeRO >= 2).
 * With the host's optimizer it lives from the backward's first write to
 * its copy to the host. */
static cham_status_t make_grads(cham_workload_t *w, uint32_t g)
{
    if (w->grads[g])
        return CHAM_OK;
    char buf[16];
    return wl_new(w, wl_grad_bytes_of(&w->m, group_params(w, g)), wl_grad_dtype(&w->m),
                  &w->grads[g], "%s.grads", group_name(w, g, buf, sizeof buf));
}

static cham_status_t make_state(cham_workload_t *w)
{
    const cham_model_config_t *m = &w->m;
    uint64_t p = cham_dtype_size(m->dtype);
    for (uint32_t g = 0; g < w->n_groups; g++) {
        uint64_t n = group_params(w, g);
        if (n == 0)
            continue;
        wl_state_t s = {0};
        wl_group_state(m, n, wl_host_updates(w, g), &s);
        char buf[16];
        const char *name = group_name(w, g, buf, sizeof buf);
        if (!wl_on_host(w, g))   /* ProTrain's chunks on the host are fetched when used */
            TRY(wl_new(w, s.weights, wl_weight_dtype(m), &w->weights[g], "%s.weights", name));
        if (m->infer)
            continue;
        if (wl_host_updates(w, g)) {
            uint64_t u = updated_params(w, g);
            TRY(cham_device_host_alloc(w->dev, u * p, &w->host_grad[g]));
            TRY(cham_device_host_alloc(w->dev, u * 12, &w->host_optim[g]));
            if (m->accumulate > 1)
                TRY(cham_device_host_alloc(w->dev, u * 4, &w->host_sum[g]));
            continue;
        }
        TRY(make_grads(w, g));
        if (wl_ddp_buckets(m))
            TRY(wl_new(w, cham_tensor_bytes(w->grads[g]), wl_grad_dtype(m), &w->bucket[g],
                       "%s.ddp_bucket", name));
        /* Master weights (unless the weights are fp32), then each moment. */
        uint64_t opt = s.optim / (wl_optim_bytes(m) / 4);
        if (wl_master_weights(m))
            TRY(wl_new(w, opt, CHAM_DTYPE_F32, &w->master[g], "%s.master", name));
        TRY(wl_new(w, opt, CHAM_DTYPE_F32, &w->adam_m[g], "%s.adam_m", name));
        TRY(wl_new(w, opt, CHAM_DTYPE_F32, &w->adam_v[g], "%s.adam_v", name));
    }
    TRY(wl_new(w, 4, CHAM_DTYPE_F32, &w->scale, "loss_scale"));
    return wl_new(w, 4, CHAM_DTYPE_F32, &w->found_inf, "found_inf");
}

/* host_optimizer: whether the host updates each group as its gradient
 * arrives (but with ZeRO 1-2, whose gather of the updated shards waits for
 * the whole step's update). */
static bool updates_in_backward(const cham_workload_t *w)
{
    return w->m.host_optimizer && !gathers_updated(w);
}

/* host_optimizer, updated in the backward: in the forward, group g's
 * weights come back from the host ahead of their use, the next group's
 * while one computes (the runtime's planner cannot know they are away:
 * its profile counts them on the device). UINT32_MAX: none. */
static cham_status_t prefetch(cham_workload_t *w, uint32_t g)
{
    if (!updates_in_backward(w) || w->backward || g == UINT32_MAX || !w->weights[g] ||
        !wl_host_updates(w, g))
        return CHAM_OK;
    return cham_tensor_swap_in(w->weights[g]);
}

cham_status_t wl_weights(cham_workload_t *w, uint32_t g, cham_tensor_t **out)
{
    if (w->chain && !w->backward)
        wl_chain_wait(w->chain, g, w->ops);   /* the read is the next op */
    TRY(wl_chunk_use(w, g));
    TRY(prefetch(w, wl_next_group(w, g)));
    cham_tensor_t *shard = w->weights[g];
    if (!sharded(w, 3))
        return wl_view(w, shard, 0, cham_tensor_bytes(shard), out);
    uint64_t bytes = group_params(w, g) * cham_dtype_size(wl_weight_dtype(&w->m));
    TRY(wl_new(w, bytes, wl_weight_dtype(&w->m), out, "%s.gathered", cham_tensor_label(shard)));
    wl_arg_t a[] = {R(shard), W(*out)};
    return wl_comm(w, OP_ALL_GATHER, a, 2, wl_gather_bytes(bytes, w->m.dp), 0, true);
}

cham_status_t wl_matmul_weights(cham_workload_t *w, uint32_t g, cham_tensor_t **out)
{
    if (w->m.precision != CHAM_PRECISION_AUTOCAST)
        return wl_weights(w, g, out);
    if (!w->cast[g]) {
        cham_tensor_t *fp32;
        char buf[16];
        TRY(wl_weights(w, g, &fp32));
        cham_status_t st = wl_new(w, group_params(w, g) * cham_dtype_size(w->m.dtype),
                                  w->m.dtype, &w->cast[g], "%s.cast",
                                  group_name(w, g, buf, sizeof buf));
        if (st == CHAM_OK)
            st = wl_run(w, OP_CAST, (wl_arg_t[]){R(fp32), W(w->cast[g])}, 2,
                        (double)group_params(w, g), 0);
        wl_drop(w, &fp32);
        TRY(st);
    }
    return wl_view(w, w->cast[g], 0, cham_tensor_bytes(w->cast[g]), out);
}

void wl_uncast(cham_workload_t *w, uint32_t g)
{
    wl_drop(w, &w->cast[g]);
}

void wl_autocast_exit(cham_workload_t *w, bool training)
{
    if (w->m.precision != CHAM_PRECISION_AUTOCAST)
        return;
    for (uint32_t g = 0; g < w->n_groups; g++)
        if (!training || (g < w->n_layers && wl_block_mode(w, g) == CHAM_BLOCK_CHECKPOINT))
            wl_uncast(w, g);
}

cham_status_t wl_grad(cham_workload_t *w, uint32_t g, cham_tensor_t **out)
{
    if (!sharded(w, 2))
        TRY(make_grads(w, g));
    else if (!w->grad_temp[g]) {
        uint64_t bytes = group_params(w, g) * cham_dtype_size(wl_grad_dtype(&w->m));
        char buf[16];
        TRY(wl_new(w, bytes, wl_grad_dtype(&w->m), &w->grad_temp[g], "%s.grads.bucket",
                   group_name(w, g, buf, sizeof buf)));
    }
    cham_tensor_t *t = sharded(w, 2) ? w->grad_temp[g] : w->grads[g];
    return wl_view(w, t, 0, cham_tensor_bytes(t), out);
}

/* The data-parallel reduction of group g's gradient after micro-batch mb. */
static cham_status_t reduce(cham_workload_t *w, uint32_t g, uint32_t mb)
{
    if (sharded(w, 2)) {         /* every micro-batch: into this rank's shard */
        TRY(make_grads(w, g));
        cham_tensor_t *full = w->grad_temp[g];
        wl_arg_t a[] = {R(full), RW(w->grads[g])};
        TRY(wl_comm(w, OP_REDUCE_SCATTER, a, 2,
                    wl_gather_bytes(cham_tensor_bytes(full), w->m.dp), 0, false));
        wl_drop(w, &w->grad_temp[g]);
    } else if (w->m.dp > 1 && mb + 1 == w->n_micro && (w->update || wl_host_updates(w, g))) {
        /* once the sum is complete; the host's groups' every step, as
         * their gradients leave (the host adds up the reduced ones) */
        cham_tensor_t *t = w->grads[g];
        if (w->bucket[g]) {      /* DDP copies it into its bucket and reduces that */
            TRY(wl_run(w, OP_BUCKET_COPY, (wl_arg_t[]){R(t), W(w->bucket[g])}, 2, 0, 0));
            t = w->bucket[g];
        }
        wl_arg_t a = RW(t);
        TRY(wl_comm(w, OP_ALL_REDUCE, &a, 1,
                    wl_all_reduce_bytes(cham_tensor_bytes(t), w->m.dp), 0, false));
    }
    return CHAM_OK;
}

/* Queues group g's AdamW on the host stream; the weights come back from
 * the host after it. */
static cham_status_t host_update_now(cham_workload_t *w, size_t i)
{
    uint32_t g = w->pending[i];
    memmove(&w->pending[i], &w->pending[i + 1], (w->n_pending - i - 1) * sizeof *w->pending);
    w->n_pending--;
    TRY(wl_host_adamw(w, g));
    TRY(cham_event_record(w->ev_update[g], w->host));
    return cham_tensor_host_ready(w->weights[g], w->host);
}

/* The host's worker: whenever it is free, it takes among the gradients it
 * has the group the next forward needs first (a CPU-Adam thread choosing
 * on its own clock, not in the order the dispatching thread saw them).
 * Queues such updates while the host stream's tail comes before `until`,
 * the next gradient's arrival (UINT64_MAX: every pending one). A backend
 * without a timeline (cham_event_time unsupported) gets them in arrival
 * order: `until` is then UINT64_MAX at each arrival. */
static cham_status_t host_work_until(cham_workload_t *w, uint64_t until)
{
    while (w->n_pending) {
        uint64_t free_at = 0;
        if (until != UINT64_MAX) {
            TRY(cham_event_record(w->ev_tail, w->host));
            if (cham_event_time(w->ev_tail, &free_at) == CHAM_OK && free_at >= until)
                break;
        }
        size_t best = 0;
        for (size_t i = 1; i < w->n_pending; i++)
            if (wl_exec_index(w, w->pending[i]) < wl_exec_index(w, w->pending[best]))
                best = i;
        TRY(host_update_now(w, best));
    }
    return CHAM_OK;
}

cham_status_t wl_grads_to_host(cham_workload_t *w, uint32_t g)
{
    uint64_t n = updated_params(w, g), bytes = n * cham_dtype_size(w->m.dtype);
    cham_tensor_t *grad;
    TRY(wl_view(w, w->grads[g], 0, bytes, &grad));
    uint64_t copy_op = w->ops;
    /* The host's last write of the buffer (an update, or the weights made
     * again) is done before the gradient takes its place. */
    TRY(cham_stream_wait_event(w->offload, w->ev_update[g]));
    cham_status_t st = wl_offload(w, OP_GRAD_TO_HOST, grad, w->host_grad[g], true, w->offload,
                                  NULL);
    wl_drop(w, &grad);
    wl_drop(w, &w->grads[g]);
    TRY(st);
    TRY(cham_event_record(w->ev_offload, w->offload));
    if (w->n_pending) {
        uint64_t arrives;
        if (cham_event_time(w->ev_offload, &arrives) != CHAM_OK)
            arrives = UINT64_MAX;
        TRY(host_work_until(w, arrives));
    }
    TRY(cham_stream_wait_event(w->host, w->ev_offload));
    if (w->chain) {              /* what the host queues from now on waits for the copy */
        wl_chain_copy(w->chain, copy_op, bytes);
        wl_chain_work(w->chain, g);
    }
    cham_access_t a[] = {{w->host_grad[g], (size_t)bytes, CHAM_ACCESS_READ_WRITE},
                         {w->host_sum[g], (size_t)(n * 4), CHAM_ACCESS_READ_WRITE}};
    if (w->host_sum[g]) {        /* accumulating: into the fp32 sum, checked when complete */
        a[0].mode = CHAM_ACCESS_READ;
        TRY(wl_host_run(w, "host_grad_accumulate", a, 2, (double)n));
        if (!w->update)
            return CHAM_OK;
    }
    return wl_host_run(w, "host_unscale_check", &a[w->host_sum[g] ? 1 : 0], 1, 3.0 * (double)n);
}

cham_status_t wl_host_restore(cham_workload_t *w, uint32_t g)
{
    uint64_t p = cham_dtype_size(w->m.dtype), n = updated_params(w, g);
    /* The fp32 master weights come first in the optimizer's state. */
    cham_access_t a[] = {{w->host_optim[g], (size_t)(n * 4), CHAM_ACCESS_READ},
                         {w->host_grad[g], (size_t)(n * p), CHAM_ACCESS_WRITE}};
    return wl_host_run(w, "host_weights_restore", a, 2, (double)n);
}

cham_status_t wl_host_adamw(cham_workload_t *w, uint32_t g)
{
    uint64_t p = cham_dtype_size(w->m.dtype), n = updated_params(w, g);
    /* Reads the gradient (accumulating: the fp32 sum, reset for the next),
     * writes the weights in the compute type over the gradient's buffer;
     * reads and writes the master weights and moments. */
    cham_access_t a[] = {{w->host_grad[g], (size_t)(n * p), CHAM_ACCESS_READ_WRITE},
                         {w->host_optim[g], (size_t)(n * 12), CHAM_ACCESS_READ_WRITE},
                         {w->host_sum[g], (size_t)(n * 4), CHAM_ACCESS_READ_WRITE}};
    if (w->chain)
        wl_chain_work(w->chain, g);
    TRY(wl_host_run(w, "host_adamw", a, w->host_sum[g] ? 3 : 2, 12.0 * (double)n));
    if (w->chain)
        wl_chain_update(w->chain, g, n * p);
    return CHAM_OK;
}

cham_status_t wl_grad_done(cham_workload_t *w, uint32_t g, uint32_t mb)
{
    wl_uncast(w, g);
    cham_status_t st = reduce(w, g, mb);
    if (st != CHAM_OK || mb + 1 != w->n_micro)
        return st;
    if (wl_on_host(w, g))
        return wl_chunk_done(w, g);
    if (!wl_host_updates(w, g))  /* the backward is past the host's groups */
        return host_work_until(w, UINT64_MAX);
    if (!updates_in_backward(w)) {
        /* The gradient takes the weights' place in the host's buffer: the
         * device's are the only ones until the host's update. */
        TRY(cham_tensor_set_host_copy(w->weights[g], NULL));
        return wl_grads_to_host(w, g);
    }
    if (w->skip_update || !w->update) {
        /* No update this step (it overflowed, or it accumulates: the
         * gradient is sent to be added up on the host, as ZeRO-Offload
         * does, so that no gradient stays on the device between steps).
         * The gradient takes the weights' place in the host's buffer, and
         * the host makes them again there after it, so that the device's
         * are backed as after an update. An overflow step also leaves them
         * where an update step does (stale on the device, back in the
         * next forward): the next step's plan was made on steps that
         * follow an update, and the weights it did not expect on the
         * device took its peak over the budget (docs/workloads.md, "Steps
         * without an update"). An accumulating step keeps them: the steps
         * after it are its class's, planned with them kept. */
        cham_tensor_t *t = w->weights[g];
        bool stale = w->skip_update;
        TRY(stale ? cham_tensor_host_update(t, w->host_grad[g])
                  : cham_tensor_set_host_copy(t, NULL));
        TRY(wl_grads_to_host(w, g));
        TRY(wl_host_restore(w, g));
        TRY(cham_event_record(w->ev_update[g], w->host));
        if (!stale)
            TRY(cham_tensor_set_host_copy(t, w->host_grad[g]));
        return cham_tensor_host_ready(t, w->host);
    }
    /* Updated on the host during the backward (the generator knows whether
     * the step overflows; a real runtime checks each gradient first): the
     * device's weights are stale and leave without a copy; the next
     * forward reads the host's, brought back after the update, which the
     * host's worker orders (host_work_until; docs/workloads.md, "The
     * host's order"). */
    TRY(cham_tensor_host_update(w->weights[g], w->host_grad[g]));
    TRY(wl_grads_to_host(w, g));
    w->pending[w->n_pending++] = g;
    /* No gradient comes after the lowest host group's: the worker takes
     * the rest as it is free. */
    return wl_exec_index(w, g) == wl_device_groups(&w->m) ? host_work_until(w, UINT64_MAX)
                                                          : CHAM_OK;
}

/* ---- creation ----------------------------------------------------------------------*/

cham_status_t wl_events_new(cham_workload_t *w, cham_event_t ***out)
{
    if (!(*out = calloc(w->n_groups, sizeof **out)))
        return CHAM_ERR_HOST_OOM;
    cham_status_t st = CHAM_OK;
    for (size_t g = 0; st == CHAM_OK && g < w->n_groups; g++)
        st = cham_event_new(w->dev, &(*out)[g]);
    return st;
}

void wl_events_free(cham_workload_t *w, cham_event_t ***ev)
{
    for (size_t g = 0; *ev && g < w->n_groups; g++)
        cham_event_free((*ev)[g]);
    free(*ev);
    *ev = NULL;
}

/* The ends of the groups' updates on the host, each recorded once on the
 * host stream at the start. */
static cham_status_t updates_new(cham_workload_t *w)
{
    TRY(wl_events_new(w, &w->ev_update));
    for (size_t g = 0; g < w->n_groups; g++)
        TRY(cham_event_record(w->ev_update[g], w->host));
    if (!updates_in_backward(w))
        return CHAM_OK;
    w->pending = calloc(w->n_groups, sizeof *w->pending);
    if (!w->pending)
        return CHAM_ERR_HOST_OOM;
    return cham_event_new(w->dev, &w->ev_tail);
}

cham_status_t cham_workload_new(cham_context_t *ctx, const cham_model_config_t *m,
                                cham_workload_t **out, char *err, size_t err_size)
{
    *out = NULL;
    cham_status_t st = cham_model_validate(m, err, err_size);
    if (st != CHAM_OK)
        return st;
    if (m->host_optimizer && m->device_groups == CHAM_DEVICE_GROUPS_AUTO) {
        cham_set_err(err, err_size, "workload: device_groups is auto: cham_run chooses it; "
                     "give the generator a number");
        return CHAM_ERR_INVALID_ARG;
    }
    /* Where model state cannot move, if it alone exceeds the device, say
     * so now instead of after allocating as much of it as fits. */
    cham_device_info_t info;
    cham_device_get_info(cham_context_device(ctx), &info);
    char why[1024];
    const cham_config_t *rc = cham_context_config(ctx);
    if (!wl_state_fits(m, info.capacity, rc->pinned_budget, cham_config_moves_model_state(rc),
                       why, sizeof why)) {
        cham_set_err(err, err_size, "workload: %s", why);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    cham_workload_t *w = calloc(1, sizeof *w);
    if (!w) {
        cham_set_err(err, err_size, "workload: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    w->ctx = ctx;
    w->dev = cham_context_device(ctx);
    cham_context_on_recompute(ctx, wl_recompute, w);
    cham_device_get_info(w->dev, &w->info);
    w->m = *m;
    w->compute = cham_context_compute_stream(ctx);
    w->n_layers = m->layers / m->pp;
    w->n_groups = w->n_layers + 2;
    w->n_micro = m->gbs ? m->gbs / (m->mbs * m->dp) : 1;
    wl_layer_params(m, m->tp, &w->lp);
    size_t ng = w->n_groups;
    w->group_params = calloc(ng, sizeof *w->group_params);
    cham_tensor_t ***arrays[] = {&w->weights,   &w->grads,     &w->master, &w->adam_m,
                                 &w->adam_v,    &w->grad_temp, &w->bucket, &w->cast};
    bool ok = w->group_params != NULL;
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        ok = ok && (*arrays[i] = calloc(ng, sizeof **arrays[i])) != NULL;
    ok = ok && (w->host_grad = calloc(ng, sizeof *w->host_grad)) != NULL &&
         (w->host_optim = calloc(ng, sizeof *w->host_optim)) != NULL &&
         (w->host_sum = calloc(ng, sizeof *w->host_sum)) != NULL;
    if (!ok) {
        cham_workload_free(w);
        cham_set_err(err, err_size, "workload: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    for (uint32_t l = 0; l < w->n_layers; l++)
        w->group_params[l] = wl_layer_total(&w->lp);
    w->group_params[wl_embed_group(w)] = wl_embed_params(m, m->tp);
    w->group_params[wl_head_group(w)] = m->pp == 1 ? wl_head_params(m, m->tp) : 0;
    if (!wl_ops_init(w, err, err_size)) {
        cham_workload_free(w);
        return CHAM_ERR_INVALID_ARG;
    }
    if ((st = cham_stream_new(w->dev, "comm", &w->comm)) != CHAM_OK ||
        (st = cham_event_new(w->dev, &w->ev_compute)) != CHAM_OK ||
        (st = cham_event_new(w->dev, &w->ev_comm)) != CHAM_OK ||
        ((m->host_optimizer || m->protrain) &&
         ((st = cham_stream_new(w->dev, "offload", &w->offload)) != CHAM_OK ||
          (st = cham_stream_new(w->dev, "fetch", &w->fetch)) != CHAM_OK ||
          (st = cham_stream_new_host(w->dev, "host_adam", &w->host)) != CHAM_OK ||
          (st = cham_event_new(w->dev, &w->ev_offload)) != CHAM_OK ||
          (st = cham_event_new(w->dev, &w->ev_host)) != CHAM_OK)) ||
        ((m->host_optimizer || m->protrain) && (st = updates_new(w)) != CHAM_OK) ||
        (m->protrain && (st = wl_chunks_new(w)) != CHAM_OK) ||
        (m->kv_offload && ((st = cham_stream_new(w->dev, "offload", &w->offload)) != CHAM_OK ||
                           (st = cham_stream_new(w->dev, "fetch", &w->fetch)) != CHAM_OK ||
                           (st = wl_events_new(w, &w->ev_fetch)) != CHAM_OK))) {
        cham_set_err(err, err_size, "workload: %s", st == CHAM_ERR_HOST_OOM
                                                       ? "out of host memory"
                                                       : cham_device_last_error(w->dev));
        cham_workload_free(w);
        return st;
    }
    if ((st = make_state(w)) != CHAM_OK || (m->infer && (st = wl_infer_new(w)) != CHAM_OK)) {
        cham_set_err(err, err_size, "workload: the model state (%llu parameters on this "
                     "device) does not fit: %s",
                     (unsigned long long)cham_model_device_parameters(m),
                     cham_context_last_error(ctx));
        cham_workload_free(w);
        return st;
    }
    *out = w;
    return CHAM_OK;
}

const char *cham_workload_last_error(const cham_workload_t *w)
{
    return w->error[0] ? w->error : cham_context_last_error(w->ctx);
}

static cham_status_t wait_streams(cham_workload_t *w, bool host)
{
    cham_stream_t *streams[] = {w->compute, w->comm, w->offload, host ? w->host : NULL, w->fetch};
    cham_status_t first = CHAM_OK;
    for (size_t i = 0; i < sizeof streams / sizeof *streams; i++) {
        cham_status_t st = streams[i] ? cham_stream_synchronize(streams[i]) : CHAM_OK;
        if (first == CHAM_OK)
            first = st;
    }
    return first;
}

cham_status_t cham_workload_wait(cham_workload_t *w)
{
    /* The host's updates queued in the backward run on into the next
     * forward, whose weights wait each for their own group's update. */
    return wait_streams(w, !w->pending);
}

void cham_workload_free(cham_workload_t *w)
{
    if (!w)
        return;
    cham_context_on_recompute(w->ctx, NULL, NULL);
    (void)wait_streams(w, true);     /* nothing of it may still run */
    cham_stream_t *streams[] = {w->comm, w->offload, w->host, w->fetch};   /* its own */
    wl_drop_all(w);
    wl_infer_free(w);
    wl_chunks_free(w);
    wl_events_free(w, &w->ev_update);
    free(w->pending);
    if (w->ev_tail)
        cham_event_free(w->ev_tail);
    for (uint32_t g = 0; w->host_grad && g < w->n_groups; g++) {
        cham_device_host_free(w->dev, w->host_grad[g]);
        cham_device_host_free(w->dev, w->host_optim[g]);
        cham_device_host_free(w->dev, w->host_sum[g]);
    }
    free(w->host_grad);
    free(w->host_optim);
    free(w->host_sum);
    cham_event_free(w->ev_compute);
    cham_event_free(w->ev_comm);
    cham_event_free(w->ev_offload);
    cham_event_free(w->ev_host);
    for (size_t i = 0; i < 4; i++)
        cham_stream_free(streams[i]);
    free(w->group_params);
    free(w->weights);
    free(w->grads);
    free(w->master);
    free(w->adam_m);
    free(w->adam_v);
    free(w->grad_temp);
    free(w->bucket);
    free(w->cast);
    free(w);
}

/* ---- the step ----------------------------------------------------------------------*/

/* What micro-batches in flight keep: per slot, the token ids, each layer's
 * saved tensors and (one stage) the gradient the head's backward made. */
typedef struct flight {
    uint32_t n_slots;
    wl_saved_t *sv;              /* n_slots x layers */
    cham_tensor_t **ids, **dy;   /* n_slots */
} flight_t;

static void flight_drop(cham_workload_t *w, flight_t *f)
{
    for (uint32_t i = 0; i < f->n_slots; i++) {
        for (uint32_t l = 0; l < w->n_layers; l++)
            wl_saved_drop(w, &f->sv[(size_t)i * w->n_layers + l]);
        if (f->ids)
            wl_drop(w, &f->ids[i]);
        if (f->dy)
            wl_drop(w, &f->dy[i]);
    }
    free(f->sv);
    free(f->ids);
    free(f->dy);
}

static uint64_t activation_bytes(const cham_workload_t *w)
{
    return wl_hidden_bytes(&w->m);
}

/* The first stage's output goes to the next stage; the handle is dropped
 * (record_stream keeps the block until the send is done). */
static cham_status_t send(cham_workload_t *w, cham_tensor_t **x)
{
    wl_arg_t a = R(*x);
    TRY(wl_comm(w, OP_SEND, &a, 1, (double)activation_bytes(w), 0, false));
    wl_drop(w, x);
    return CHAM_OK;
}

/* An evaluation micro-batch: forward only, nothing kept. */
static cham_status_t evaluate(cham_workload_t *w)
{
    TRY(cham_phase(w->ctx, CHAM_PHASE_EVAL));
    cham_tensor_t *ids, *x;
    w->evaluating = true;
    cham_status_t st = wl_embed_forward(w, false, &ids, &x);
    for (uint32_t l = 0; l < w->n_layers && st == CHAM_OK; l++) {
        wl_saved_t tmp;
        st = wl_layer_forward(w, l, UINT32_MAX, x, false, &tmp, &x);
        wl_saved_drop(w, &tmp);
    }
    if (st == CHAM_OK)
        st = w->m.pp == 1 ? wl_head(w, x, false, NULL) : send(w, &x);
    w->evaluating = false;
    return st;
}

/* How many layers ahead of its backward a swapped layer comes back. */
static uint32_t swap_ahead(const cham_workload_t *w)
{
    return cham_protrain_swap_ahead(&w->m.protrain_config);
}

static cham_status_t forward_mb(cham_workload_t *w, flight_t *f, uint32_t mb)
{
    uint32_t slot = mb % f->n_slots;
    wl_saved_t *sv = &f->sv[(size_t)slot * w->n_layers];
    cham_tensor_t *x;
    TRY(cham_phase(w->ctx, CHAM_PHASE_FORWARD));
    w->timing = mb == 0;
    if (w->timing)
        w->fwd_ns = 0;                 /* measured afresh every step */
    w->backward = false;
    TRY(prefetch(w, wl_embed_group(w)));
    TRY(wl_embed_forward(w, true, &f->ids[slot], &x));
    for (uint32_t l = 0; l < w->n_layers; l++) {
        TRY(wl_layer_forward(w, l, mb, x, true, &sv[l], &x));
        if (wl_block_mode(w, l) == CHAM_BLOCK_SWAP)
            TRY(wl_saved_swap(&sv[l], true));
    }
    w->timing = false;
    /* Swapped layers whose backward comes within swap_interval of the
     * backward's start come back now. */
    for (uint32_t l = 0; l < w->n_layers; l++)
        if (l + swap_ahead(w) >= w->n_layers && wl_block_mode(w, l) == CHAM_BLOCK_SWAP)
            TRY(wl_saved_swap(&sv[l], false));
    if (w->m.pp == 1) {                    /* the loss, and its backward starts */
        TRY(wl_head(w, x, true, &f->dy[slot]));
        return wl_grad_done(w, wl_head_group(w), mb);
    }
    return send(w, &x);
}

static cham_status_t backward_mb(cham_workload_t *w, flight_t *f, uint32_t mb)
{
    uint32_t slot = mb % f->n_slots;
    wl_saved_t *sv = &f->sv[(size_t)slot * w->n_layers];
    cham_tensor_t *dy;
    TRY(cham_phase(w->ctx, CHAM_PHASE_BACKWARD));
    if (w->m.pp == 1) {
        dy = f->dy[slot];
        f->dy[slot] = NULL;
    } else {
        /* The first gradient comes back after the micro-batch went through
         * the other stages and back: (pp - 1) of their backwards (about
         * twice a forward) beyond this stage's warm-up forwards. */
        double wait = mb == 0 ? (double)(w->m.pp - 1) * 2.0 * w->fwd_ns : 0;
        TRY(wl_new(w, activation_bytes(w), w->m.dtype, &dy, "recv_grad"));
        wl_arg_t a = W(dy);
        TRY(wl_comm(w, mb == 0 ? OP_PIPELINE_WAIT : OP_RECV, &a, 1,
                    (double)activation_bytes(w), wait, true));
    }
    w->backward = true;
    for (uint32_t l = w->n_layers; l-- > 0;) {
        uint32_t k = swap_ahead(w);
        if (l >= k && wl_block_mode(w, l - k) == CHAM_BLOCK_SWAP)
            TRY(wl_saved_swap(&sv[l - k], false));
        TRY(wl_layer_backward(w, l, mb, &sv[l], dy, &dy));
    }
    TRY(wl_embed_backward(w, &f->ids[slot], dy));
    return wl_grad_done(w, wl_embed_group(w), mb);
}

static cham_status_t schedule(cham_workload_t *w, flight_t *f)
{
    uint32_t n = w->n_micro;
    if (w->m.pp == 1) {
        for (uint32_t i = 0; i < n; i++) {
            TRY(forward_mb(w, f, i));
            TRY(backward_mb(w, f, i));
        }
        return CHAM_OK;
    }
    /* 1F1B on the first stage: pp - 1 warm-up forwards, then one forward
     * and one backward at a time, then the remaining backwards. */
    uint32_t warm = w->m.pp - 1 < n ? w->m.pp - 1 : n;
    for (uint32_t i = 0; i < warm; i++)
        TRY(forward_mb(w, f, i));
    for (uint32_t i = 0; i < n; i++) {
        if (i + warm < n)
            TRY(forward_mb(w, f, i + warm));
        TRY(backward_mb(w, f, i));
    }
    return CHAM_OK;
}

/* ZeRO 1-2: every rank gathers the others' updated shards of group g. */
static cham_status_t gather_updated(cham_workload_t *w, uint32_t g)
{
    if (!gathers_updated(w))
        return CHAM_OK;
    wl_arg_t b = RW(w->weights[g]);
    return wl_comm(w, OP_ALL_GATHER, &b, 1,
                   wl_gather_bytes(cham_tensor_bytes(w->weights[g]), w->m.dp), 0, false);
}

/* host_optimizer with ZeRO 1-2: AdamW on group g on the host, then its
 * updated weights copied back on the fetch stream while the host goes on. */
static cham_status_t host_update_group(cham_workload_t *w, uint32_t g)
{
    uint64_t p = cham_dtype_size(w->m.dtype), n = updated_params(w, g);
    TRY(wl_host_adamw(w, g));
    TRY(cham_event_record(w->ev_host, w->host));
    cham_tensor_t *weight;
    TRY(wl_view(w, w->weights[g], 0, n * p, &weight));
    cham_status_t st = wl_offload(w, OP_PARAM_FROM_HOST, weight, w->host_grad[g], false,
                                  w->fetch, w->ev_host);
    wl_drop(w, &weight);
    TRY(st);
    /* The gather reads what the copy wrote. */
    TRY(cham_event_record(w->ev_offload, w->fetch));
    TRY(wl_join(w, w->fetch, w->ev_offload));
    if (w->chain)
        wl_chain_wait(w->chain, g, w->ops);
    return gather_updated(w, g);
}

/* host_optimizer with ZeRO 1-2, once the host has every gradient: AdamW
 * per group on the host in the order the next forward needs them
 * (embedding, layers, head), each group's updated weights copied back
 * while the host updates the next. */
static cham_status_t host_update(cham_workload_t *w)
{
    for (uint32_t i = 0; i < w->n_groups; i++) {
        uint32_t g = i == 0 ? wl_embed_group(w) : i <= w->n_layers ? i - 1 : wl_head_group(w);
        if (group_params(w, g))
            TRY(host_update_group(w, g));
    }
    TRY(cham_event_record(w->ev_offload, w->fetch));
    TRY(wl_join(w, w->fetch, w->ev_offload));
    return wl_comm_join(w);
}

/* Unscale and check the gradients, update the scale, and unless they
 * overflowed, AdamW on this rank's shard (ZeRO 1-2: then gather the
 * updated weights), for the groups the device updates. The host has
 * unscaled and checked its groups' as they came and updated them (ZeRO
 * 1-2: waits for its verdict, then updates them). */
static cham_status_t optimizer(cham_workload_t *w, bool overflow)
{
    uint64_t pg = cham_dtype_size(wl_grad_dtype(&w->m));
    uint64_t pw = cham_dtype_size(wl_weight_dtype(&w->m));
    TRY(cham_phase(w->ctx, CHAM_PHASE_OPTIMIZER));
    TRY(wl_comm_join(w));                 /* the gradient reductions */
    for (uint32_t g = 0; g < w->n_groups; g++)   /* DDP: from its buckets back */
        if (w->bucket[g])
            TRY(wl_run(w, OP_BUCKET_COPY, (wl_arg_t[]){R(w->bucket[g]), W(w->grads[g])}, 2, 0,
                       0));
    bool host_after = w->m.host_optimizer && !updates_in_backward(w);
    if (host_after)
        TRY(cham_stream_synchronize(w->host));   /* found_inf.item() */
    else if (w->pending)
        TRY(host_work_until(w, UINT64_MAX));     /* the backward is over */
    for (uint32_t g = 0; g < w->n_groups; g++) {
        if (!group_params(w, g) || wl_host_updates(w, g))
            continue;
        wl_arg_t a[] = {RW(w->grads[g]), RW(w->found_inf)};
        TRY(wl_run(w, OP_UNSCALE, a, 2, 3.0 * (double)(cham_tensor_bytes(w->grads[g]) / pg),
                   0));
    }
    wl_arg_t s[] = {R(w->found_inf), RW(w->scale)};
    TRY(wl_run(w, OP_UPDATE_SCALE, s, 2, 1, 0));
    if (overflow)
        return CHAM_OK;
    if (host_after)
        return host_update(w);
    for (uint32_t g = 0; g < w->n_groups; g++) {
        uint64_t n = group_params(w, g), shard = updated_params(w, g);
        if (!n || wl_host_updates(w, g))
            continue;
        cham_tensor_t *grad, *weight;
        TRY(wl_view(w, w->grads[g], 0, shard * pg, &grad));
        TRY(wl_view(w, w->weights[g], 0, shard * pw, &weight));
        /* Without master weights AdamW updates the fp32 weights in place. */
        wl_arg_t a[] = {R(grad), RW(w->master[g]), RW(w->adam_m[g]), RW(w->adam_v[g]),
                        W(weight)};
        wl_arg_t fp32[] = {R(grad), RW(w->adam_m[g]), RW(w->adam_v[g]), RW(weight)};
        TRY(w->master[g] ? wl_run(w, OP_ADAM, a, 5, 12.0 * (double)shard, 0)
                         : wl_run(w, OP_ADAM, fp32, 4, 12.0 * (double)shard, 0));
        wl_drop(w, &grad);
        wl_drop(w, &weight);
        TRY(gather_updated(w, g));
    }
    return wl_comm_join(w);
}

/* A training step's work, up to its end: *done says what varied. */
static cham_status_t train_step(cham_workload_t *w, uint64_t step, cham_step_info_t *done)
{
    w->expert_max = 0;
    w->dropped = 0;
    bool val = cham_workload_validates(&w->m, step);
    w->update = cham_workload_updates(&w->m, step);
    bool overflow = w->update && cham_workload_overflows(&w->m, step);
    w->skip_update = overflow;
    w->backward = false;
    flight_t f = {.n_slots = w->m.pp < w->n_micro ? w->m.pp : w->n_micro};
    f.sv = calloc((size_t)f.n_slots * w->n_layers, sizeof *f.sv);
    f.ids = calloc(f.n_slots, sizeof *f.ids);
    f.dy = calloc(f.n_slots, sizeof *f.dy);
    cham_status_t st = f.sv && f.ids && f.dy ? CHAM_OK : CHAM_ERR_HOST_OOM;
    if (st == CHAM_OK)
        st = cham_phase(w->ctx, CHAM_PHASE_FORWARD);
    if (st == CHAM_OK && val)
        st = evaluate(w);
    if (st == CHAM_OK)
        st = schedule(w, &f);
    flight_drop(w, &f);
    if (st == CHAM_OK)
        st = w->update ? optimizer(w, overflow) : CHAM_OK;   /* else the gradients add up */
    *done = (cham_step_info_t){.validated = val, .overflow = overflow, .accumulated = !w->update,
                               .layers_dropped = w->dropped,
                               .tokens_per_expert_max = w->expert_max};
    return st;
}

cham_status_t cham_workload_step(cham_workload_t *w, uint64_t step, cham_step_info_t *info)
{
    w->error[0] = '\0';
    if (step != w->step) {
        cham_set_err(w->error, sizeof w->error, "workload: step %llu asked for, step %llu is next",
                     (unsigned long long)step, (unsigned long long)w->step);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_step_set_number(w->ctx, step);
    uint64_t ops = w->ops;
    cham_step_info_t done = {0};
    cham_status_t st = w->m.infer ? wl_infer_step(w, step) : train_step(w, step, &done);
    if (st == CHAM_OK)
        st = cham_step_end(w->ctx);
    if (st != CHAM_OK)
        return st;
    w->step++;
    done.ops = w->ops - ops;
    if (info)
        *info = done;
    return CHAM_OK;
}
