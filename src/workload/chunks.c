/* ProTrain's runtime in the generator (chameleon/protrain.h,
 * docs/protrain.md): the chunks on the host fetched into at most n_buffer
 * buffers (least recently used evicted, the next chunk prefetched while
 * the current one computes), their gradients sent to the host as the
 * backward completes them and updated there at once; the layers' modes in
 * the interleaved layout. */
#include <stdlib.h>

#include "workload/workload-impl.h"

uint32_t wl_exec_index(const cham_workload_t *w, uint32_t g)
{
    return g == wl_embed_group(w) ? 0 : g == wl_head_group(w) ? w->n_layers + 1 : g + 1;
}

static uint32_t group_of(const cham_workload_t *w, uint32_t c)
{
    return c == 0 ? wl_embed_group(w) : c == w->n_layers + 1 ? wl_head_group(w) : c - 1;
}

bool wl_host_updates(const cham_workload_t *w, uint32_t g)
{
    return wl_exec_index(w, g) >= wl_device_groups(&w->m);
}

bool wl_on_host(const cham_workload_t *w, uint32_t g)
{
    return w->m.protrain && wl_host_updates(w, g);
}

cham_block_mode_t wl_block_mode(const cham_workload_t *w, uint32_t l)
{
    if (w->m.recompute)
        return CHAM_BLOCK_CHECKPOINT;
    return w->m.protrain ? cham_protrain_block_mode(&w->m.protrain_config, w->n_layers, l)
                         : CHAM_BLOCK_KEEP;
}

cham_status_t wl_chunks_new(cham_workload_t *w)
{
    w->chunk_used = calloc(w->n_groups, sizeof *w->chunk_used);
    if (!w->chunk_used)
        return CHAM_ERR_HOST_OOM;
    for (uint32_t g = 0; g < w->n_groups; g++) {
        uint64_t bytes = w->group_params[g] * cham_dtype_size(w->m.dtype);
        if (wl_on_host(w, g) && bytes > w->chunk_buffer)
            w->chunk_buffer = bytes;
    }
    return wl_events_new(w, &w->ev_fetch);
}

void wl_chunks_free(cham_workload_t *w)
{
    wl_events_free(w, &w->ev_fetch);
    free(w->chunk_used);
}

static void release(cham_workload_t *w, uint32_t g)
{
    wl_drop(w, &w->weights[g]);
    w->chunk_used[g] = 0;
    w->chunks_resident--;
}

/* A buffer for a chunk: one is free, or the least recently used chunk
 * other than `keep` leaves (its weights are on the host: nothing to copy).
 * False when none can. */
static bool make_room(cham_workload_t *w, uint32_t keep)
{
    if (w->chunks_resident < w->m.protrain_config.n_buffer)
        return true;
    uint32_t victim = UINT32_MAX;
    for (uint32_t g = 0; g < w->n_groups; g++)
        if (w->chunk_used[g] && g != keep &&
            (victim == UINT32_MAX || w->chunk_used[g] < w->chunk_used[victim]))
            victim = g;
    if (victim == UINT32_MAX)
        return false;
    release(w, victim);
    return true;
}

/* Group g's weights into a buffer (as ProTrain's, the size of the
 * largest chunk on the host, so that every buffer fits every chunk and
 * the allocator reuses them whole): copied from the host on the fetch
 * stream once the host's last update of them is done. */
static cham_status_t fetch(cham_workload_t *w, uint32_t g)
{
    uint64_t bytes = w->group_params[g] * cham_dtype_size(w->m.dtype);
    cham_tensor_t *buffer;
    TRY(wl_new(w, w->chunk_buffer, w->m.dtype, &buffer, "chunk_buffer"));
    cham_status_t st = wl_view(w, buffer, 0, bytes, &w->weights[g]);
    wl_drop(w, &buffer);
    TRY(st);
    w->chunk_used[g] = ++w->chunk_clock;
    w->chunks_resident++;
    TRY(wl_offload(w, OP_PARAM_FROM_HOST, w->weights[g], w->host_grad[g], false, w->fetch,
                   w->ev_update[g]));
    return cham_event_record(w->ev_fetch[g], w->fetch);
}

uint32_t wl_next_group(const cham_workload_t *w, uint32_t g)
{
    uint32_t c = wl_exec_index(w, g), L = w->n_layers;   /* layer c - 1 is at c */
    if (!w->backward && c <= L) {
        do
            c++;
        while (c <= L && wl_layer_dropped(w, c - 1));
        return group_of(w, c);
    }
    if (w->backward && (c < 2 || c > L))
        return UINT32_MAX;
    if (!w->backward)
        c = L + 1;                           /* the head: the last layer's backward next */
    do
        c--;
    while (c >= 1 && wl_layer_dropped(w, c - 1));
    return c >= 1 ? group_of(w, c) : UINT32_MAX;
}

cham_status_t wl_chunk_use(cham_workload_t *w, uint32_t g)
{
    if (!wl_on_host(w, g))
        return CHAM_OK;
    if (!w->weights[g]) {
        if (!make_room(w, UINT32_MAX))
            return CHAM_ERR_OUT_OF_MEMORY;   /* n_buffer >= 1 (validated): unreachable */
        TRY(fetch(w, g));
    }
    w->chunk_used[g] = ++w->chunk_clock;
    TRY(cham_stream_wait_event(w->compute, w->ev_fetch[g]));
    uint32_t next = wl_next_group(w, g);
    if (next == UINT32_MAX || !wl_on_host(w, next) || w->weights[next] ||
        !w->group_params[next] || !make_room(w, g))
        return CHAM_OK;
    return fetch(w, next);
}

cham_status_t wl_chunk_done(cham_workload_t *w, uint32_t g)
{
    TRY(wl_grads_to_host(w, g));
    if (w->weights[g])               /* done with this step */
        release(w, g);
    /* ProTrain updates each chunk as its gradient arrives, while the
     * backward goes on; the weights in the compute type replace the
     * gradient, for the next fetch (made again where the step overflowed). */
    TRY(w->skip_update ? wl_host_restore(w, g) : wl_host_adamw(w, g));
    return cham_event_record(w->ev_update[g], w->host);
}
