/* Op tokens, the set of tensor handles the generator holds, and dispatching
 * one op the way an eager framework does: begin with the tensors it reads
 * and writes, launch its kernel with their current addresses, end. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/rng.h"
#include "workload/workload-impl.h"

static const char *const op_names[WL_N_OPS] = {
    [OP_LOAD] = "load_batch", [OP_EMBED] = "embedding", [OP_NORM] = "norm",
    [OP_QKV] = "qkv_proj", [OP_ROPE] = "rotary", [OP_FLASH] = "flash_attention",
    [OP_SCORES] = "attn_scores", [OP_SOFTMAX] = "softmax", [OP_CONTEXT] = "attn_context",
    [OP_OUT] = "out_proj", [OP_ADD] = "add", [OP_FC1] = "fc1", [OP_GELU] = "gelu",
    [OP_FC2] = "fc2", [OP_GATE_UP] = "gate_up_proj", [OP_SWIGLU] = "swiglu",
    [OP_DOWN] = "down_proj", [OP_ROUTER] = "router", [OP_ROUTE] = "topk_route",
    [OP_PERMUTE] = "permute_tokens", [OP_COMBINE] = "combine_experts", [OP_HEAD] = "lm_head",
    [OP_TO_FLOAT] = "to_float", [OP_LOSS] = "cross_entropy",
    [OP_LOSS_BWD] = "cross_entropy_bwd", [OP_TO_FLOAT_BWD] = "to_float_bwd",
    [OP_HEAD_BWD] = "lm_head_bwd", [OP_NORM_BWD] = "norm_bwd", [OP_QKV_BWD] = "qkv_proj_bwd",
    [OP_ROPE_BWD] = "rotary_bwd", [OP_FLASH_BWD] = "flash_attention_bwd",
    [OP_SCORES_BWD] = "attn_scores_bwd", [OP_SOFTMAX_BWD] = "softmax_bwd",
    [OP_CONTEXT_BWD] = "attn_context_bwd", [OP_OUT_BWD] = "out_proj_bwd",
    [OP_FC1_BWD] = "fc1_bwd", [OP_GELU_BWD] = "gelu_bwd", [OP_FC2_BWD] = "fc2_bwd",
    [OP_GATE_UP_BWD] = "gate_up_proj_bwd", [OP_SWIGLU_BWD] = "swiglu_bwd",
    [OP_DOWN_BWD] = "down_proj_bwd", [OP_ROUTER_BWD] = "router_bwd",
    [OP_ROUTE_BWD] = "topk_route_bwd", [OP_PERMUTE_BWD] = "permute_tokens_bwd",
    [OP_COMBINE_BWD] = "combine_experts_bwd", [OP_EMBED_BWD] = "embedding_bwd",
    [OP_GRAD_ACC] = "grad_accumulate", [OP_ALL_REDUCE] = "all_reduce",
    [OP_REDUCE_SCATTER] = "reduce_scatter", [OP_ALL_GATHER] = "all_gather",
    [OP_SEND] = "send_activation", [OP_RECV] = "recv_gradient",
    [OP_PIPELINE_WAIT] = "pipeline_wait", [OP_UNSCALE] = "unscale_check_grads",
    [OP_UPDATE_SCALE] = "update_loss_scale", [OP_ADAM] = "adamw_step",
    [OP_GRAD_TO_HOST] = "grads_to_host", [OP_PARAM_FROM_HOST] = "params_from_host",
    [OP_KV_WRITE] = "kv_write", [OP_KV_PREFETCH] = "kv_prefetch", [OP_KV_STORE] = "kv_store",
    [OP_SAMPLE] = "sample", [OP_CAST] = "autocast_weight", [OP_BUCKET_COPY] = "ddp_bucket_copy",
};

bool wl_ops_init(cham_workload_t *w, char *err, size_t err_size)
{
    bool rms = w->m.arch != CHAM_ARCH_GPT2;
    for (int i = 0; i < WL_N_OPS; i++) {
        const char *name = op_names[i];
        if (i == OP_NORM)
            name = rms ? "rms_norm" : "layer_norm";
        else if (i == OP_NORM_BWD)
            name = rms ? "rms_norm_bwd" : "layer_norm_bwd";
        CHAM_ASSERT(name);
        if (cham_op_token(w->ctx, name, &w->tok[i]) != CHAM_OK) {
            cham_set_err(err, err_size, "workload: %s", cham_context_last_error(w->ctx));
            return false;
        }
    }
    return true;
}

/* ---- the held set ------------------------------------------------------------------*/

#define TOMB ((cham_tensor_t *)(uintptr_t)1)

static size_t slot_of(const cham_tensor_t *t, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)t * CHAM_GOLDEN64;   /* Fibonacci hashing */
    return (size_t)(h >> 20) & (cap - 1);
}

static bool held_insert(cham_workload_t *w, cham_tensor_t *t)
{
    if (2 * (w->held_used + 1) > w->held_cap) {       /* grow (or clear tombstones) */
        size_t cap = w->held_cap ? w->held_cap : 256;
        while (4 * (w->held_n + 1) > cap)      /* a quarter full after the rebuild */
            cap *= 2;
        cham_tensor_t **v = calloc(cap, sizeof *v);
        if (!v)
            return false;
        for (size_t i = 0; i < w->held_cap; i++) {
            cham_tensor_t *e = w->held[i];
            if (e && e != TOMB) {
                size_t j = slot_of(e, cap);
                while (v[j])
                    j = (j + 1) & (cap - 1);
                v[j] = e;
            }
        }
        free(w->held);
        w->held = v;
        w->held_cap = cap;
        w->held_used = w->held_n;
    }
    size_t j = slot_of(t, w->held_cap);
    while (w->held[j] && w->held[j] != TOMB)
        j = (j + 1) & (w->held_cap - 1);
    if (!w->held[j])
        w->held_used++;
    w->held[j] = t;
    w->held_n++;
    return true;
}

static void held_remove(cham_workload_t *w, cham_tensor_t *t)
{
    size_t j = slot_of(t, w->held_cap);
    while (w->held[j] != t) {
        CHAM_ASSERT(w->held[j] && "releasing a tensor the workload does not hold");
        j = (j + 1) & (w->held_cap - 1);
    }
    w->held[j] = TOMB;
    w->held_n--;
}

static cham_status_t hold(cham_workload_t *w, cham_tensor_t *t, cham_tensor_t **out)
{
    if (!held_insert(w, t)) {
        cham_tensor_release(t);
        return CHAM_ERR_HOST_OOM;
    }
    *out = t;
    return CHAM_OK;
}

cham_status_t wl_new(cham_workload_t *w, uint64_t bytes, cham_dtype_t dtype,
                     cham_tensor_t **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->label, sizeof w->label, fmt, ap);
    va_end(ap);
    cham_tensor_t *t;
    cham_status_t st = cham_tensor_new(w->ctx, (size_t)bytes, dtype, w->label, &t);
    return st != CHAM_OK ? st : hold(w, t, out);
}

cham_status_t wl_view(cham_workload_t *w, cham_tensor_t *base, uint64_t offset, uint64_t bytes,
                      cham_tensor_t **out)
{
    cham_tensor_t *t;
    cham_status_t st = cham_tensor_view(base, (size_t)offset, (size_t)bytes,
                                        cham_tensor_dtype(base), NULL, &t);
    return st != CHAM_OK ? st : hold(w, t, out);
}

void wl_drop(cham_workload_t *w, cham_tensor_t **t)
{
    if (!*t)
        return;
    held_remove(w, *t);
    cham_tensor_release(*t);
    *t = NULL;
}

void wl_drop_all(cham_workload_t *w)
{
    for (size_t i = 0; i < w->held_cap; i++)
        if (w->held[i] && w->held[i] != TOMB)
            cham_tensor_release(w->held[i]);
    free(w->held);
    w->held = NULL;
    w->held_cap = w->held_n = w->held_used = 0;
}

/* ---- dispatch ----------------------------------------------------------------------*/

double wl_kernel_ns(const cham_workload_t *w, double flops, double bytes)
{
    double s = flops / (w->info.peak_flops * w->info.flops_efficiency);
    double b = bytes / (w->info.hbm_bandwidth * w->info.hbm_efficiency);
    return 1e9 * (s > b ? s : b);
}

/* Memory traffic of accesses: a read-write range is read and written. */
static double moved_bytes(const cham_access_t *acc, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)acc[i].bytes * (acc[i].mode == CHAM_ACCESS_READ_WRITE ? 2 : 1);
    return sum;
}

/* Begins op with the args split into reads and writes; fills accesses. */
static cham_status_t begin(cham_workload_t *w, wl_op_t op, const wl_arg_t *args, size_t n,
                           cham_access_t *acc, double *bytes)
{
    CHAM_ASSERT(n <= WL_MAX_ARGS);
    cham_tensor_t *in[WL_MAX_ARGS] = {0}, *out[WL_MAX_ARGS] = {0};
    size_t n_in = 0, n_out = 0;
    for (size_t i = 0; i < n; i++) {
        if (args[i].mode == CHAM_ACCESS_READ)
            in[n_in++] = args[i].t;
        else
            out[n_out++] = args[i].t;
    }
    cham_status_t st = cham_op_begin(w->ctx, w->tok[op], in, n_in, out, n_out);
    if (st != CHAM_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        acc[i] = (cham_access_t){cham_tensor_data(args[i].t), cham_tensor_bytes(args[i].t),
                                 args[i].mode};
    *bytes = moved_bytes(acc, n);
    w->ops++;
    return CHAM_OK;
}

static cham_status_t launch(cham_workload_t *w, cham_stream_t *s, wl_op_t op,
                            const cham_access_t *acc, size_t n, double flops, double bytes,
                            double link_bytes)
{
    cham_kernel_t k = {.label = cham_op_name(w->ctx, w->tok[op]), .flops = flops,
                       .bytes = bytes, .link_bytes = link_bytes, .accesses = acc,
                       .n_accesses = n};
    cham_status_t st = cham_kernel_launch(s, &k);
    if (st != CHAM_OK)
        cham_op_end(w->ctx);
    else if (w->timing && s == w->compute)
        w->fwd_ns += wl_kernel_ns(w, flops, bytes);
    return st;
}

/* A recomputable op's tag: the op in the high 32 bits, its FLOPs as a
 * float in the low ones (its bytes follow from its tensors). */
static uint64_t recompute_tag(wl_op_t op, double flops)
{
    float f = (float)flops;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint64_t)op << 32 | bits;
}

cham_status_t wl_recompute(cham_context_t *ctx, const cham_recompute_call_t *call, void *user)
{
    (void)ctx;
    cham_workload_t *w = user;
    wl_op_t op = (wl_op_t)(call->tag >> 32);
    uint32_t bits = (uint32_t)call->tag;
    float flops;
    memcpy(&flops, &bits, sizeof flops);
    CHAM_ASSERT(op < WL_N_OPS && call->n_inputs + call->n_outputs <= WL_MAX_ARGS);
    cham_access_t acc[WL_MAX_ARGS];
    double bytes = 0;
    size_t n = 0;
    for (size_t i = 0; i < call->n_inputs; i++, n++) {
        acc[n] = (cham_access_t){call->inputs[i], call->input_bytes[i], CHAM_ACCESS_READ};
        bytes += (double)call->input_bytes[i];
    }
    for (size_t j = 0; j < call->n_outputs; j++, n++) {
        acc[n] = (cham_access_t){call->outputs[j], call->output_bytes[j], CHAM_ACCESS_WRITE};
        bytes += (double)call->output_bytes[j];
    }
    /* A gathered weight (ZeRO-3) is gathered again: the link's time. */
    double link = op == OP_ALL_GATHER ? wl_gather_bytes(call->output_bytes[0], w->m.dp) : 0;
    cham_kernel_t k = {.label = cham_op_name(w->ctx, w->tok[op]), .flops = flops,
                       .bytes = bytes, .link_bytes = link, .accesses = acc, .n_accesses = n};
    return cham_kernel_launch(call->stream, &k);
}

/* An op that reads tensors and writes whole tensors, nothing in place, is
 * a pure function of its inputs: the runtime may drop an output and call
 * wl_recompute to make it again (docs/workloads.md). */
static bool recomputable(const wl_arg_t *args, size_t n)
{
    size_t reads = 0, writes = 0;
    for (size_t i = 0; i < n; i++) {
        if (args[i].mode == CHAM_ACCESS_READ_WRITE)
            return false;
        reads += args[i].mode == CHAM_ACCESS_READ;
        if (args[i].mode != CHAM_ACCESS_WRITE)
            continue;
        writes++;
        if (cham_tensor_bytes(args[i].t) != cham_tensor_storage_bytes(args[i].t))
            return false;
    }
    for (size_t i = 0; i < n; i++)      /* nothing it reads is what it writes */
        for (size_t j = 0; j < n; j++)
            if (i != j && args[j].mode == CHAM_ACCESS_WRITE &&
                cham_tensor_same_storage(args[i].t, args[j].t))
                return false;
    return reads > 0 && writes > 0;
}

cham_status_t wl_run(cham_workload_t *w, wl_op_t op, const wl_arg_t *args, size_t n,
                     double flops, double bytes)
{
    cham_access_t acc[WL_MAX_ARGS];
    double moved;
    cham_status_t st = begin(w, op, args, n, acc, &moved);
    if (st != CHAM_OK)
        return st;
    double kernel_bytes = bytes > 0 ? bytes : moved;
    if ((st = launch(w, w->compute, op, acc, n, flops, kernel_bytes, 0)) != CHAM_OK)
        return st;
    if ((st = cham_op_set_cost(w->ctx, wl_kernel_ns(w, flops, kernel_bytes))) != CHAM_OK ||
        (recomputable(args, n) &&
         (st = cham_op_set_recompute(w->ctx, recompute_tag(op, flops))) != CHAM_OK)) {
        cham_op_end(w->ctx);
        return st;
    }
    if ((st = cham_op_end(w->ctx)) != CHAM_OK || !w->m.sync_every_op)
        return st;
    return cham_stream_synchronize(w->compute);   /* the op's time, as a profiler reads it */
}

cham_status_t wl_comm(cham_workload_t *w, wl_op_t op, const wl_arg_t *args, size_t n,
                      double link_bytes, double wait_ns, bool blocking)
{
    cham_access_t acc[WL_MAX_ARGS];
    double moved;
    cham_status_t st = begin(w, op, args, n, acc, &moved);
    if (st != CHAM_OK)
        return st;
    /* A pipeline wait is the other stages' work: as long as wait_ns of
     * compute on this device. */
    double flops = wait_ns * 1e-9 * w->info.peak_flops * w->info.flops_efficiency;
    if ((st = cham_event_record(w->ev_compute, w->compute)) != CHAM_OK ||
        (st = cham_stream_wait_event(w->comm, w->ev_compute)) != CHAM_OK) {
        cham_op_end(w->ctx);
        return st;
    }
    if ((st = launch(w, w->comm, op, acc, n, flops, moved, link_bytes)) != CHAM_OK)
        return st;
    for (size_t i = 0; i < n && st == CHAM_OK && (!blocking || !w->m.comm_stash); i++)
        st = cham_tensor_record_stream(args[i].t, w->comm);
    if (st == CHAM_OK && blocking)
        st = wl_comm_join(w);
    /* What the compute stream spends on it: the collective's time when it
     * waits for it, else nothing; the collective itself runs on the comm
     * stream after the compute stream's work so far and the collectives
     * before it. */
    if (st == CHAM_OK) {
        double link_ns = w->info.p2p_bandwidth > 0 ? 1e9 * link_bytes / w->info.p2p_bandwidth : 0;
        double ns = wl_kernel_ns(w, flops, moved);
        ns = ns > link_ns ? ns : link_ns;
        st = cham_op_set_cost(w->ctx, blocking ? ns : 0);
        if (st == CHAM_OK)
            st = cham_op_set_comm(w->ctx, ns, blocking && ns > 0);
    }
    /* A gather from a shard is a pure function of it: a gathered weight a
     * dropped tensor's op reads can be gathered again instead of kept. */
    if (st == CHAM_OK && recomputable(args, n))
        st = cham_op_set_recompute(w->ctx, recompute_tag(op, flops));
    cham_status_t end = cham_op_end(w->ctx);
    return st != CHAM_OK ? st : end;
}

cham_status_t wl_comm_join(cham_workload_t *w)
{
    return wl_join(w, w->comm, w->ev_comm);
}

static cham_status_t offload(cham_workload_t *w, wl_op_t op, cham_tensor_t *t, void *host,
                             bool to_host, cham_stream_t *s, cham_event_t *after, bool hold)
{
    wl_arg_t a = {t, to_host ? CHAM_ACCESS_READ : CHAM_ACCESS_WRITE};
    cham_access_t acc;
    double moved;
    cham_status_t st = begin(w, op, &a, 1, &acc, &moved);
    if (st != CHAM_OK)
        return st;
    /* After the compute stream's work so far (what wrote the source, or
     * the last reader of the destination's block), and what else wrote the
     * source: the gradient's reduction, or the host's update (recorded by
     * the caller). */
    if ((st = cham_event_record(w->ev_compute, w->compute)) == CHAM_OK &&
        (st = cham_stream_wait_event(s, w->ev_compute)) == CHAM_OK) {
        if (to_host && (st = cham_event_record(w->ev_comm, w->comm)) == CHAM_OK)
            st = cham_stream_wait_event(s, w->ev_comm);
        else if (!to_host)
            st = cham_stream_wait_event(s, after);
    }
    void *dev = cham_tensor_data(t);
    size_t bytes = cham_tensor_bytes(t);
    if (st == CHAM_OK)
        st = cham_copy_async(s, to_host ? host : dev, to_host ? dev : host, bytes,
                             to_host ? CHAM_COPY_D2H : CHAM_COPY_H2D,
                             cham_op_name(w->ctx, w->tok[op]));
    if (st == CHAM_OK && hold)  /* the block stays until the copy is done */
        st = cham_tensor_record_stream(t, s);
    if (st == CHAM_OK)          /* the compute stream does not wait for it */
        st = cham_op_set_cost(w->ctx, 0);
    cham_status_t end = cham_op_end(w->ctx);
    return st != CHAM_OK ? st : end;
}

cham_status_t wl_offload(cham_workload_t *w, wl_op_t op, cham_tensor_t *t, void *host,
                         bool to_host, cham_stream_t *s, cham_event_t *after)
{
    return offload(w, op, t, host, to_host, s, after, true);
}

cham_status_t wl_offload_ordered(cham_workload_t *w, wl_op_t op, cham_tensor_t *t, void *host,
                                 bool to_host, cham_stream_t *s, cham_event_t *after)
{
    return offload(w, op, t, host, to_host, s, after, false);
}

cham_status_t wl_host_run(cham_workload_t *w, const char *label, const cham_access_t *acc,
                          size_t n, double flops)
{
    cham_kernel_t k = {.label = label, .flops = flops, .bytes = moved_bytes(acc, n),
                       .accesses = acc,
                       .n_accesses = n};
    return cham_kernel_launch(w->host, &k);
}

cham_status_t wl_join(cham_workload_t *w, cham_stream_t *s, cham_event_t *ev)
{
    cham_status_t st = cham_event_record(ev, s);
    return st != CHAM_OK ? st : cham_stream_wait_event(w->compute, ev);
}
