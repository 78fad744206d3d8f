/* Timeline traces in the Chrome trace-event JSON format, which Perfetto
 * (ui.perfetto.dev) and chrome://tracing open: one track per stream
 * (compute, swap-out, swap-in, the caller's, e.g. comm) and one for the
 * host's waits; kernels and copies as slices named by op or tensor; device
 * memory in use and the capacity as counters; stage changes, policies
 * generated and step ends as instant events. docs/trace.md. */
#ifndef CHAMELEON_TRACE_H
#define CHAMELEON_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "chameleon/status.h"
#include "chameleon/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cham_trace cham_trace_t;

/* Starts writing ctx's timeline to path; the device must offer the task
 * hook (cham_device_set_task_hook: sim does, cuda not yet). The trace
 * takes the context's step hook and the device's task hook until it is
 * closed. On failure err says why. */
CHAM_API cham_status_t cham_trace_open(cham_context_t *ctx, const char *path, cham_trace_t **out,
                                       char *err, size_t err_size);
/* Host CPU time spent writing the trace so far (ns): a caller measuring
 * its own overhead subtracts it. */
CHAM_API uint64_t cham_trace_cpu_ns(const cham_trace_t *t);
/* Finishes the file and gives the hooks back; CHAM_OK when every byte was
 * written. NULL is fine. */
CHAM_API cham_status_t cham_trace_close(cham_trace_t *t, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
