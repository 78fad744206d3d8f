/* Fuzz target: the JSON policy loader (cham_policy_load_json,
 * src/policy/policy_json.c over the shared reader src/json/read.c)
 * and the save/load round trip of a policy that loaded, which must
 * reproduce the saved file byte for byte (docs/policy-format.md: a file
 * this library saves is one it loads). Any crash, sanitizer report, leak
 * or broken round trip is a finding. Seeds: fuzz/corpus/policy/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "chameleon/policy.h"
#include "memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_memfile_t input, saved;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (input.path[0] == '\0') {
        fuzz_memfile_open(&input, "policy-in");
        fuzz_memfile_open(&saved, "policy-saved");
    }
    fuzz_memfile_set(&input, data, size);
    cham_policy_t *p = NULL;
    char err[512];
    if (cham_policy_load_json(input.path, &p, err, sizeof err) != CHAM_OK) {
        if (p)
            fuzz_fail("a failed load returned a policy", err);
        if (strncmp(err, input.path, strlen(input.path)) != 0)
            fuzz_fail("a message does not start with the path", err);
        fuzz_note("rejected", err);
        return 0;
    }
    fuzz_note("loaded", input.path);

    /* What the executor and the report read: every item's ops lie inside
     * the planned ops and its layer inside the layers (the loader checks). */
    cham_policy_view_t v;
    cham_policy_get(p, &v);
    for (size_t i = 0; i < v.n_items; i++) {
        const cham_policy_item_t *it = &v.items[i];
        if (it->use_op >= v.n_ops || it->swap_in_layer >= v.n_layers)
            fuzz_fail("a loaded item points outside the policy", NULL);
    }

    /* save(load(x)) loads, and saves to the same bytes. */
    if (cham_policy_save_json(p, saved.path, err, sizeof err) != CHAM_OK)
        fuzz_fail("a loaded policy does not save", err);
    size_t len1, len2;
    char *text1 = fuzz_memfile_get(&saved, &len1);
    cham_policy_t *q = NULL;
    if (cham_policy_load_json(saved.path, &q, err, sizeof err) != CHAM_OK)
        fuzz_fail("a saved policy does not load", err);
    if (cham_policy_save_json(q, saved.path, err, sizeof err) != CHAM_OK)
        fuzz_fail("a reloaded policy does not save", err);
    char *text2 = fuzz_memfile_get(&saved, &len2);
    if (len1 != len2 || memcmp(text1, text2, len1) != 0)
        fuzz_fail("save(load(save(p))) differs from save(p)", NULL);
    free(text1);
    free(text2);
    cham_policy_free(q);
    cham_policy_free(p);
    return 0;
}
