/* Hand-built profiles for the planner tests: ops with phases, memory
 * samples and tensor uses given in MiB, 1 s per op. */
#ifndef CHAM_TEST_PROFILE_BUILD_H
#define CHAM_TEST_PROFILE_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/policy.h"
#include "chameleon/profile.h"
#include "chameleon/workload.h"
#include "support/rng.h"

typedef struct use_spec {
    int op;
    uint64_t storage, bytes;     /* bytes in MiB */
    bool output;
} use_spec_t;

/* n ops with phases ph ("F", "B", "O", "X" = other), memory samples mem
 * (2 n values, MiB), uses (sorted by op), 1 s per op. Fails the test on
 * host OOM. */
cham_profile_t *test_build_profile(const char *ph, const uint64_t *mem, const use_spec_t *uses,
                                   size_t n_uses);
/* A random training step (test_hyperoffload and its fixpoint test): nf
 * forward ops each writing an activation (1..64 MiB) that a mirrored
 * backward op reads, then an optimizer op per state storage (persistent,
 * read and written), op costs 0.1..3 ms. */
cham_profile_t *test_random_step(test_rng_t *r);
/* The profile of a step of the workload generator's job c, run with
 * unlimited memory (strategy native, 3 steps, the profile written to path
 * and read back); *peak its peak in bytes. Fails the test if the run
 * does. */
cham_profile_t *test_workload_profile(cham_run_config_t c, const char *path, uint64_t *peak);
/* The planner's default configuration for device preset `preset` (its
 * link bandwidths) at `capacity` bytes with no reserve. */
cham_planner_config_t test_preset_planner(const char *preset, uint64_t capacity);
/* The highest point of the profile's memory curve, bytes. */
uint64_t test_profile_peak(const cham_profile_t *p);
/* Marks every use of storage as persistent (model state). */
void test_mark_persistent(cham_profile_t *p, uint64_t storage);
/* Marks every read of storage as host-backed (the caller keeps its bytes
 * on the host, cham_tensor_set_host_copy). */
void test_mark_backed(cham_profile_t *p, uint64_t storage);
/* Marks the storage's writes as overwriting dead bytes (cham_tensor_discard
 * before each). */
void test_mark_overwrites(cham_profile_t *p, uint64_t storage);

#endif
