/* Fuzz target: the JSON profile loader (cham_profile_load_json,
 * src/profile/profile_json.c and the shared reader src/json/read.c)
 * and what `chameleon plan` and the run report do with a profile that
 * loaded: the memory curve, Chameleon's, vDNN's and HyperOffload's
 * planners, and the save/load round trip. Besides crashes, sanitizer reports, leaks and
 * hangs, it checks that a failed load says why, starting with the path;
 * that a planned policy saves (passes the policy file's invariants) and,
 * from Chameleon's planner, predicts a peak within the usable memory
 * (docs/policy.md, "Predictions"); that HyperOffload's refinement never
 * makes its placement worse (docs/hyperoffload.md); and that
 * save(load(save(p))) is
 * save(p) byte for byte ("a file this library saves is one it loads",
 * docs/profile-format.md). Seeds: fuzz/corpus/profile/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "chameleon/hyperoffload.h"
#include "chameleon/policy.h"
#include "chameleon/profile.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_memfile_t input, saved, policy_out;

typedef enum planner { CHAMELEON, VDNN, HYPEROFFLOAD } planner_t;

/* HyperOffload's refinement keeps what it was given or does better: the
 * bytes over the usable memory never grow and, where the inserted
 * placement fits, neither does the step. */
static void check_refinement(const cham_hyperoffload_result_t *r, const cham_policy_view_t *pv)
{
    if (r->refined.over_bytes > r->inserted.over_bytes ||
        (r->inserted.over_bytes == 0 && r->refined.step_ns > r->inserted.step_ns))
        fuzz_fail("hyperoffload's refinement made its placement worse", NULL);
    if (pv->predicted_peak != r->refined.peak)
        fuzz_fail("hyperoffload's policy predicts another peak than it planned", NULL);
}

/* Plans as `chameleon plan` does (tools/cmd_plan.c: the default preset's
 * bandwidths, the profile's capacity); a policy a planner returns must pass
 * the policy file's invariant check, which saving runs, and Chameleon's
 * must fit (vDNN's and HyperOffload's have other goals first). */
static void plan(const cham_profile_t *p, const cham_profile_view_t *v, planner_t who)
{
    const cham_preset_t *preset = cham_preset_find(cham_preset_default_name());
    cham_planner_config_t cfg = cham_planner_config_default();
    cfg.capacity = v->capacity ? v->capacity : preset->capacity;
    cfg.h2d_bandwidth = preset->h2d_bandwidth;
    cfg.d2h_bandwidth = preset->d2h_bandwidth;
    cham_policy_t *pol = NULL;
    char err[512];
    cham_hyperoffload_result_t r;
    cham_status_t st =
        who == VDNN           ? cham_plan_vdnn(p, &cfg, &pol, err, sizeof err)
        : who == HYPEROFFLOAD ? cham_plan_hyperoffload(p, &cfg, NULL, &pol, &r, err, sizeof err)
                              : cham_plan_chameleon(p, &cfg, &pol, err, sizeof err);
    if (st != CHAM_OK)
        return;
    cham_policy_view_t pv;
    cham_policy_get(pol, &pv);
    if (who == HYPEROFFLOAD)
        check_refinement(&r, &pv);
    if (who == CHAMELEON && pv.predicted_peak > pv.usable)
        fuzz_fail("a successful plan predicts a peak above the usable memory", NULL);
    if (cham_policy_save_json(pol, policy_out.path, err, sizeof err) != CHAM_OK)
        fuzz_fail("a planned policy does not save", err);
    cham_policy_free(pol);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (input.path[0] == '\0') {
        fuzz_memfile_open(&input, "profile-in");
        fuzz_memfile_open(&saved, "profile-saved");
        fuzz_memfile_open(&policy_out, "policy-out");
    }
    fuzz_memfile_set(&input, data, size);
    cham_profile_t *p = NULL;
    char err[512];
    if (cham_profile_load_json(input.path, &p, err, sizeof err) != CHAM_OK) {
        if (p)
            fuzz_fail("a failed load returned a profile", err);
        if (strncmp(err, input.path, strlen(input.path)) != 0)
            fuzz_fail("a message does not start with the path", err);
        fuzz_note("rejected", err);
        return 0;
    }
    fuzz_note("loaded", input.path);

    cham_profile_view_t v;
    cham_profile_get(p, &v);
    size_t n = 2 * v.n_ops;
    uint64_t *actual = malloc((n ? n : 1) * sizeof *actual);
    uint64_t *rebuilt = malloc((n ? n : 1) * sizeof *rebuilt);
    if (!actual || !rebuilt)
        fuzz_fail("out of memory", NULL);
    cham_profile_memory_curve(p, actual, rebuilt);
    free(actual);
    free(rebuilt);

    plan(p, &v, CHAMELEON);
    plan(p, &v, VDNN);
    plan(p, &v, HYPEROFFLOAD);

    /* save(load(x)) loads, and saves to the same bytes. */
    if (cham_profile_save_json(p, saved.path, err, sizeof err) != CHAM_OK)
        fuzz_fail("a loaded profile does not save", err);
    size_t len1, len2;
    char *text1 = fuzz_memfile_get(&saved, &len1);
    cham_profile_t *q = NULL;
    if (cham_profile_load_json(saved.path, &q, err, sizeof err) != CHAM_OK)
        fuzz_fail("a saved profile does not load", err);
    if (cham_profile_save_json(q, saved.path, err, sizeof err) != CHAM_OK)
        fuzz_fail("a reloaded profile does not save", err);
    char *text2 = fuzz_memfile_get(&saved, &len2);
    if (len1 != len2 || memcmp(text1, text2, len1) != 0)
        fuzz_fail("save(load(save(p))) differs from save(p)", NULL);
    free(text1);
    free(text2);
    cham_profile_free(q);
    cham_profile_free(p);
    return 0;
}
