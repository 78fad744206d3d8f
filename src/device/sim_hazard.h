/* The sim backend's hazard detector.
 *
 * It keeps, for every byte range ever touched, the last write and the last
 * access per stream (stream, end time, task label). A new access that starts
 * before a write on another stream has finished, or a write that starts
 * before an access on another stream has finished, is a hazard: on real
 * hardware the two would race. Reuse of a freed block is covered because the
 * ranges outlive the blocks: the next user's first write meets the previous
 * user's last access. Time is the sim's virtual time, so the detector finds
 * the races this timeline exhibits (see docs/device.md for what that means). */
#ifndef CHAM_DEVICE_SIM_HAZARD_H
#define CHAM_DEVICE_SIM_HAZARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/sim.h"

typedef struct sim_hazard sim_hazard_t;

/* Called for each hazard found; strings live for the call. */
typedef void (*sim_hazard_report_fn)(const cham_hazard_t *hazard, void *user);

sim_hazard_t *sim_hazard_new(sim_hazard_report_fn report, void *user);
void sim_hazard_free(sim_hazard_t *hz);

/* Names the stream with the given id in reports. */
void sim_hazard_name_stream(sim_hazard_t *hz, int stream, const char *name);

/* Checks and records one access to [addr, addr + bytes) by a task on
 * stream that runs over [start, end). Returns the hazards it found.
 * Returns SIZE_MAX if the host ran out of memory (nothing recorded). */
size_t sim_hazard_access(sim_hazard_t *hz, uintptr_t addr, size_t bytes, bool write,
                         int stream, uint64_t start, uint64_t end, const char *label);

/* Forgets everything about [addr, addr + bytes), e.g. a segment returned to
 * the device after a full synchronisation. */
void sim_hazard_forget(sim_hazard_t *hz, uintptr_t addr, size_t bytes);

/* Memory unmapped by the host at time now (what names the call in
 * reports): every access to [addr, addr + bytes) still running then is a
 * hazard ("unmap-while-in-use", the later side the host); then the bytes
 * are forgotten. Returns the hazards found. */
size_t sim_hazard_unmap(sim_hazard_t *hz, uintptr_t addr, size_t bytes, uint64_t now,
                        const char *what);

/* Number of ranges tracked (for tests of the detector's own bookkeeping). */
size_t sim_hazard_range_count(const sim_hazard_t *hz);

/* For tests: walks the whole map (O(n)) and returns NULL if its invariants
 * hold, else what is broken; *height (if not NULL) receives the height of
 * the tree that holds the ranges. */
const char *sim_hazard_check(const sim_hazard_t *hz, size_t *height);

/* For tests: the first max ranges in address order into lo[] and hi[];
 * returns how many there are. */
size_t sim_hazard_ranges(const sim_hazard_t *hz, uintptr_t *lo, uintptr_t *hi, size_t max);

#endif
