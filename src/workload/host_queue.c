/* The host's optimizer updating in the backward (host_optimizer, but
 * with ZeRO 1-2): a queue of the groups whose gradient went to the host.
 * The host takes, among the gradients that have arrived, the group the
 * next forward needs first (the lowest in execution order), keeping two
 * updates queued on its stream so it never waits for the dispatching
 * thread; what the forward reaches still unqueued is queued then.
 *
 * Why not in arrival order, as ProTrain: the backward delivers the
 * gradients from the last layer down, so the first layers' updates would
 * come last and the next forward would wait for the whole queue, the
 * host idle while that forward runs. Taking the lowest first, the
 * highest layers' updates are what remains when the backward ends, and
 * the next forward runs behind the host instead of after it
 * (docs/workloads.md). Polling costs the dispatching thread an event
 * query each time, as on real hardware. */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "workload/workload-impl.h"

enum { QUEUED_MAX = 2 };         /* updates on the host stream not known done */

cham_status_t wl_host_queue_new(cham_workload_t *w)
{
    w->sent = calloc(w->n_groups, sizeof *w->sent);
    w->pending = calloc(w->n_groups, sizeof *w->pending);
    if (!w->sent || !w->pending)
        return CHAM_ERR_HOST_OOM;
    return wl_events_new(w, &w->ev_grad);
}

void wl_host_queue_free(cham_workload_t *w)
{
    free(w->sent);
    free(w->pending);
    wl_events_free(w, &w->ev_grad);
}

/* Queues group g's AdamW (sent[i]) on the host stream; the weights come
 * back from the host after it. */
static cham_status_t issue(cham_workload_t *w, size_t i)
{
    uint32_t g = w->sent[i];
    memmove(&w->sent[i], &w->sent[i + 1], (w->n_sent - i - 1) * sizeof *w->sent);
    w->n_sent--;
    if (i < w->n_arrived)
        w->n_arrived--;
    w->pending[g] = false;
    TRY(wl_host_adamw(w, g));
    TRY(cham_event_record(w->ev_update[g], w->host));
    if (w->n_queued == QUEUED_MAX) {            /* only `need` goes beyond: forget the oldest */
        w->queued[0] = w->queued[1];
        w->n_queued--;
    }
    w->queued[w->n_queued++] = g;
    return cham_tensor_host_ready(w->weights[g], w->host);
}

cham_status_t wl_host_queue_sent(cham_workload_t *w, uint32_t g)
{
    CHAM_ASSERT(!w->pending[g] && w->n_sent < w->n_groups);
    TRY(cham_event_record(w->ev_grad[g], w->offload));
    w->sent[w->n_sent++] = g;
    w->pending[g] = true;
    return wl_host_queue_pump(w);
}

cham_status_t wl_host_queue_pump(cham_workload_t *w)
{
    while (w->n_queued && cham_event_query(w->ev_update[w->queued[0]]) == CHAM_OK) {
        w->queued[0] = w->queued[1];
        w->n_queued--;
    }
    while (w->n_arrived < w->n_sent &&
           cham_event_query(w->ev_grad[w->sent[w->n_arrived]]) == CHAM_OK)
        w->n_arrived++;
    while (w->n_queued < QUEUED_MAX && w->n_arrived) {
        size_t best = 0;
        for (size_t i = 1; i < w->n_arrived; i++)
            if (wl_exec_index(w, w->sent[i]) < wl_exec_index(w, w->sent[best]))
                best = i;
        TRY(issue(w, best));
    }
    return CHAM_OK;
}

cham_status_t wl_host_queue_need(cham_workload_t *w, uint32_t g)
{
    if (!w->pending || !w->pending[g])
        return CHAM_OK;
    size_t i = 0;
    while (w->sent[i] != g)
        i++;
    return issue(w, i);
}
