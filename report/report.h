/* The run report (docs/trace.md): one HTML page from a run's JSON, and the
 * parts of that JSON `simulate` and `train` both write. The commands hand
 * the last step's profile and the final policy over in memory (their runs'
 * on_finish hooks), never through files. */
#ifndef CHAM_REPORT_REPORT_H
#define CHAM_REPORT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chameleon/chameleon.h"

/* What a run hands its report when it ends, in memory: JSON made from the
 * last step's profile and from the policy applied at the end (each JSON
 * null when there was none). Filled by report_parts_take during the
 * run's on_finish call, while the profile and policy are alive. */
typedef struct report_parts {
    json_t *curve;               /* report_curve_json of the last profile */
    json_t *policy;              /* report_policy_json of the final policy */
} report_parts_t;

/* Fills parts from the run's profile and policy (either may be NULL);
 * what parts held before is released. */
void report_parts_take(report_parts_t *parts, const cham_profile_t *profile,
                         const cham_policy_t *policy);
/* Sets run's "memory_curve" (with the limit it is drawn against: key is
 * "capacity_bytes" for a device's capacity, "budget_bytes" for a budget)
 * and "policy_applied" from parts, which are left empty. */
void report_parts_give(report_parts_t *parts, json_t *run, const char *limit_key,
                         uint64_t limit_bytes);
void report_parts_clear(report_parts_t *parts);

/* Writes the page for run (summary scalars, "series", "memory_curve",
 * "policy_applied") to out; false with err when it cannot. */
bool report_write_html(json_t *run, const char *out, char *err, size_t err_size);
/* The memory curve of a profile: ops, in use and without swaps before and
 * after each op (JSON null for a NULL profile or out of memory). */
json_t *report_curve_json(const cham_profile_t *profile);
/* A policy's figures and items (JSON null for NULL). */
json_t *report_policy_json(const cham_policy_t *policy);
/* The memory curve of a profile (memory_curve.svg and .csv in dir, the
 * --memory-curve output) against the device capacity it was taken under,
 * labelled limit_name ("capacity", or "budget" where the capacity is one);
 * false with err when a file cannot be written. */
bool report_write_curve(const cham_profile_t *profile, const char *limit_name, const char *dir,
                        char *err, size_t err_size);

#endif
