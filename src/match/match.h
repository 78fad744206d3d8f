/* Multi-feature fuzzy matching (paper §6.1, appendix A): finds, for a
 * tensor use in a running step, the policy item planned for it, with
 * integer operations only.
 *
 * A tensor's features count from the start of each step: uses this step,
 * a one-hot tag of the 32 most frequent ops of the profiled step that used
 * it, the codes (token mod 256) of the ops of its last 8 uses, dtype and
 * storage size. Two keys are hashed from them at every use:
 *   strict = all of them;
 *   loose  = dtype, size and the op of this use.
 * The k-th use of a step with a given key is the k-th such use of the
 * profiled step (its rank), so look-alike tensors (the same activation of
 * layers 3 and 4) are told apart by order, and ops elsewhere in the step do
 * not disturb the match. An item is matched strictly first; a use whose
 * strict key the profile never saw falls back to the loose key (a tensor
 * an extra op also read), and takes its item's strict rank with it, so
 * that the look-alikes after it keep theirs.
 *
 * Model state that comes back for the optimizer is matched by storage id
 * and key instead, never by rank: it is the same storage in every step,
 * and the optimizer's ops are the same whichever layers a step ran, while
 * the ranks before them shift with the layers a step skips (one layer's
 * weights took another's item and came back on demand at their update).
 * Items that come back within the blocks keep their ranks, which the
 * clock follows there. docs/executor.md says why. */
#ifndef CHAM_MATCH_MATCH_H
#define CHAM_MATCH_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/policy.h"
#include "chameleon/profile.h"

#define CHAM_MATCH_TAG_OPS 32
#define CHAM_MATCH_NONE UINT32_MAX
#define CHAM_MATCH_NEW UINT64_MAX   /* the id of a storage made this step */

/* A tensor's features after a use. */
typedef struct cham_features {
    uint32_t use_count;          /* uses this step, this one included */
    uint32_t tag;                /* one-hot bits of the tagged ops that used it */
    uint64_t history;            /* op codes of the last 8 uses, newest low */
    uint64_t bytes;              /* storage bytes */
    uint32_t dtype;
} cham_features_t;

/* A map of nonzero 64-bit keys (hashes, or ids + 1) to 32-bit values,
 * open addressing. */
typedef struct cham_match_map {
    uint64_t *keys;              /* n_slots, 0 = empty */
    uint32_t *value;
    size_t n_slots;              /* a power of two, at most half full */
} cham_match_map_t;

/* One key table: key -> its distinct-key index, and per distinct key the
 * items in rank order. */
typedef struct cham_match_table {
    cham_match_map_t index;      /* key -> index into first/count */
    uint32_t *first, *count;     /* per distinct key: its run in rank/item */
    uint32_t *seen, *cursor;     /* per distinct key: uses this step, next run entry */
    size_t n_keys;
    uint32_t *rank, *item;       /* runs of (rank, item), grouped by key */
    uint32_t *key_of, *rank_of;  /* per item: its key and rank here, or NONE */
} cham_match_table_t;

/* Invariant: tag_bit has n_tag_tokens entries; matched[i] says whether item
 * i has been matched this step. */
typedef struct cham_match {
    uint32_t *tag_bit;           /* per op token: its one-hot bit, or 0 */
    size_t n_tag_tokens;
    cham_match_table_t strict, loose;
    /* (storage id, strict key) of every use of model state -> its item
     * matched by id, or NONE; (storage id, loose key) of those items'
     * out uses -> the item. */
    cham_match_map_t ids;
    bool *by_id;                 /* per item: matched by id, not by rank */
    bool *matched;
    size_t n_items;
    uint64_t hits_strict, hits_loose;   /* this step */
} cham_match_t;

/* The op code of a token in the history. */
static inline uint64_t cham_op_code(int32_t token)
{
    return (uint64_t)(uint32_t)token & 0xff;
}

/* The features after a use by token, from those before it. */
static inline void cham_features_advance(cham_features_t *f, int32_t token, uint32_t tag_bit)
{
    f->use_count++;
    f->tag |= tag_bit;
    f->history = f->history << 8 | cham_op_code(token);
}

/* Builds the index of a policy from the profile it was planned from.
 * false when the host is out of memory (m is then empty). */
bool cham_match_build(cham_match_t *m, const cham_policy_t *policy,
                      const cham_profile_t *profile);
void cham_match_free(cham_match_t *m);

/* The tag bit of a token (0 when it is not one of the tagged ops). */
static inline uint32_t cham_match_tag_bit(const cham_match_t *m, int32_t token)
{
    return token >= 0 && (size_t)token < m->n_tag_tokens ? m->tag_bit[token] : 0;
}

/* Forgets the counts of the step that ended. */
void cham_match_step_start(cham_match_t *m);

/* A use by token of storage `id` (CHAM_MATCH_NEW: one made this step, no
 * model state) whose features (after the use) are f: the item planned for
 * it, or CHAM_MATCH_NONE. Each item matches at most once a step. */
uint32_t cham_match_use(cham_match_t *m, const cham_features_t *f, int32_t token, uint64_t id);

#endif
