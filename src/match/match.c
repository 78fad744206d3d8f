/* Multi-feature fuzzy matching: building the index of a policy from its
 * profile, and the per-use lookup (match.h). */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/rng.h"
#include "match/match.h"

/* ---- keys -----------------------------------------------------------------*/

/* Combines v into the key h (Boost's hash_combine with a 64-bit constant). */
static inline uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + CHAM_GOLDEN64 + (h << 6) + (h >> 2);
    return cham_mix64_short(h);
}

static inline uint64_t nonzero(uint64_t h)
{
    return h ? h : 1;
}

static inline uint64_t strict_key(const cham_features_t *f)
{
    uint64_t h = mix(mix(0x5851f42d4c957f2du, f->use_count), f->tag);
    return nonzero(mix(mix(mix(h, f->history), f->bytes), f->dtype));
}

static inline uint64_t loose_key(const cham_features_t *f, int32_t token)
{
    return nonzero(mix(mix(mix(0x2545f4914f6cdd1du, f->bytes), f->dtype), (uint32_t)token));
}

/* ---- a map of keys to values ------------------------------------------------*/

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p *= 2;
    return p;
}

static bool map_init(cham_match_map_t *m, size_t n)
{
    m->n_slots = pow2_at_least(2 * n + 1);
    m->keys = calloc(m->n_slots, sizeof *m->keys);
    m->value = malloc(m->n_slots * sizeof *m->value);
    return m->keys && m->value;
}

static void map_free(cham_match_map_t *m)
{
    free(m->keys);
    free(m->value);
    memset(m, 0, sizeof *m);
}

/* The value of key (nonzero), or NULL when the map has none. */
static uint32_t *map_find(const cham_match_map_t *m, uint64_t key)
{
    size_t mask = m->n_slots - 1;
    for (size_t i = key & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key)
            return &m->value[i];
        if (m->keys[i] == 0)
            return NULL;
    }
}

/* The value of key, added as value when the map has none. */
static uint32_t map_add(cham_match_map_t *m, uint64_t key, uint32_t value)
{
    size_t mask = m->n_slots - 1;
    size_t i = key & mask;
    while (m->keys[i] != 0 && m->keys[i] != key)
        i = (i + 1) & mask;
    if (m->keys[i] == 0) {
        m->keys[i] = key;
        m->value[i] = value;
    }
    return m->value[i];
}

/* The key of a use of storage id by its strict or loose key. */
static inline uint64_t use_key(uint64_t id, uint64_t key)
{
    return nonzero(mix(mix(0x14057b7ef767814fu, id), key));
}

/* ---- a key table ----------------------------------------------------------*/

static bool table_init(cham_match_table_t *t, size_t n_items)
{
    memset(t, 0, sizeof *t);
    size_t k = n_items ? n_items : 1;
    bool index = map_init(&t->index, n_items);
    t->first = calloc(k, sizeof *t->first);
    t->count = calloc(k, sizeof *t->count);
    t->seen = calloc(k, sizeof *t->seen);
    t->cursor = calloc(k, sizeof *t->cursor);
    t->rank = malloc(k * sizeof *t->rank);
    t->item = malloc(k * sizeof *t->item);
    t->key_of = malloc(k * sizeof *t->key_of);
    t->rank_of = malloc(k * sizeof *t->rank_of);
    return index && t->first && t->count && t->seen && t->cursor && t->rank && t->item &&
           t->key_of && t->rank_of;
}

static void table_free(cham_match_table_t *t)
{
    map_free(&t->index);
    free(t->first);
    free(t->count);
    free(t->seen);
    free(t->cursor);
    free(t->rank);
    free(t->item);
    free(t->key_of);
    free(t->rank_of);
    memset(t, 0, sizeof *t);
}

/* The distinct-key index of key, or NONE. */
static inline uint32_t table_find(const cham_match_table_t *t, uint64_t key)
{
    const uint32_t *at = map_find(&t->index, key);
    return at ? *at : CHAM_MATCH_NONE;
}

static void table_add(cham_match_table_t *t, uint64_t key)
{
    t->n_keys += map_add(&t->index, key, (uint32_t)t->n_keys) == t->n_keys;
}

/* ---- building -------------------------------------------------------------*/

/* Tags the 32 most frequent ops of the profile (ties: the lower token). */
static bool build_tags(cham_match_t *m, const cham_profile_view_t *v)
{
    int32_t max_token = -1;
    for (size_t i = 0; i < v->n_ops; i++)
        max_token = v->ops[i].token > max_token ? v->ops[i].token : max_token;
    m->n_tag_tokens = (size_t)(max_token + 1);
    size_t n = m->n_tag_tokens ? m->n_tag_tokens : 1;
    m->tag_bit = calloc(n, sizeof *m->tag_bit);
    uint64_t *freq = calloc(n, sizeof *freq);
    if (!m->tag_bit || !freq) {
        free(freq);
        return false;
    }
    for (size_t i = 0; i < v->n_ops; i++)
        freq[v->ops[i].token]++;
    for (uint32_t bit = 0; bit < CHAM_MATCH_TAG_OPS; bit++) {
        size_t best = SIZE_MAX;
        for (size_t t = 0; t < m->n_tag_tokens; t++)
            if (freq[t] && !m->tag_bit[t] && (best == SIZE_MAX || freq[t] > freq[best]))
                best = t;
        if (best == SIZE_MAX)
            break;
        m->tag_bit[best] = UINT32_C(1) << bit;
    }
    free(freq);
    return true;
}

/* The item whose out use is use u (its storage's last use in its swap-out
 * op), for every use; NONE elsewhere. */
static void mark_out_uses(const cham_policy_view_t *pv, const cham_profile_view_t *v,
                          uint32_t *item_of_use)
{
    for (size_t u = 0; u < v->n_uses; u++)
        item_of_use[u] = CHAM_MATCH_NONE;
    for (size_t i = 0; i < pv->n_items; i++) {
        const cham_policy_item_t *it = &pv->items[i];
        if (it->swap_out_op >= v->n_ops || v->ops[it->swap_out_op].phase == CHAM_PHASE_EVAL)
            continue;     /* the runtime matches no evaluation's use */
        const cham_profile_op_t *op = &v->ops[it->swap_out_op];
        for (uint32_t k = op->n_uses; k-- > 0;) {
            if (v->uses[op->first_use + k].storage == it->storage) {
                item_of_use[op->first_use + k] = (uint32_t)i;
                break;
            }
        }
    }
}

/* Ranks of the items' keys among the uses of the profile the runtime
 * matches (not an evaluation's, keys[u] = 0), then the runs. */
static bool build_table(cham_match_table_t *t, const uint64_t *keys, size_t n_uses,
                        const uint32_t *item_of_use, size_t n_items)
{
    if (!table_init(t, n_items))
        return false;
    for (size_t u = 0; u < n_uses; u++)
        if (item_of_use[u] != CHAM_MATCH_NONE)
            table_add(t, keys[u]);
    /* Entries in use order: (key, rank, item); then grouped by key. */
    uint32_t *ekey = malloc((n_items ? n_items : 1) * sizeof *ekey);
    uint32_t *erank = malloc((n_items ? n_items : 1) * sizeof *erank);
    uint32_t *eitem = malloc((n_items ? n_items : 1) * sizeof *eitem);
    if (!ekey || !erank || !eitem) {
        free(ekey), free(erank), free(eitem);
        return false;
    }
    size_t n = 0;
    for (size_t u = 0; u < n_uses; u++) {
        uint32_t k = keys[u] ? table_find(t, keys[u]) : CHAM_MATCH_NONE;
        if (k == CHAM_MATCH_NONE)
            continue;
        uint32_t rank = t->seen[k]++;
        if (item_of_use[u] != CHAM_MATCH_NONE) {
            ekey[n] = k, erank[n] = rank, eitem[n] = item_of_use[u];
            t->count[k]++;
            n++;
        }
    }
    for (size_t k = 1; k < t->n_keys; k++)
        t->first[k] = t->first[k - 1] + t->count[k - 1];
    memset(t->seen, 0, t->n_keys * sizeof *t->seen);
    for (size_t i = 0; i < n_items; i++)
        t->key_of[i] = t->rank_of[i] = CHAM_MATCH_NONE;
    for (size_t e = 0; e < n; e++) {          /* stable: ranks stay increasing */
        uint32_t at = t->first[ekey[e]] + t->seen[ekey[e]]++;
        t->rank[at] = erank[e];
        t->item[at] = eitem[e];
        t->key_of[eitem[e]] = ekey[e];
        t->rank_of[eitem[e]] = erank[e];
    }
    memset(t->seen, 0, t->n_keys * sizeof *t->seen);
    free(ekey), free(erank), free(eitem);
    return true;
}

/* The items matched by id (model state back for the optimizer) and the
 * keys of model state's uses. An item's out use decides whether it is. */
static void build_ids(cham_match_t *m, const cham_policy_view_t *pv,
                      const cham_profile_view_t *v, const uint64_t *strict,
                      const uint64_t *loose, const uint32_t *item_of_use)
{
    for (size_t u = 0; u < v->n_uses; u++) {
        if (!v->uses[u].persistent || !strict[u])
            continue;     /* not model state, or an evaluation's use */
        uint32_t i = item_of_use[u], mine = CHAM_MATCH_NONE;
        if (i != CHAM_MATCH_NONE) {
            uint32_t back = pv->items[i].use_op;
            m->by_id[i] = back < v->n_ops && v->ops[back].phase == CHAM_PHASE_OPTIMIZER;
            mine = m->by_id[i] ? i : CHAM_MATCH_NONE;
        }
        /* A storage's strict keys differ from use to use (its use count). */
        map_add(&m->ids, use_key(v->uses[u].storage, strict[u]), mine);
        if (mine != CHAM_MATCH_NONE)
            map_add(&m->ids, use_key(v->uses[u].storage, loose[u]), mine);
    }
}

bool cham_match_build(cham_match_t *m, const cham_policy_t *policy,
                      const cham_profile_t *profile)
{
    memset(m, 0, sizeof *m);
    cham_policy_view_t pv;
    cham_profile_view_t v;
    cham_policy_get(policy, &pv);
    cham_profile_get(profile, &v);
    size_t nu = v.n_uses ? v.n_uses : 1;
    uint64_t *strict = malloc(nu * sizeof *strict);
    uint64_t *loose = malloc(nu * sizeof *loose);
    uint32_t *item_of_use = malloc(nu * sizeof *item_of_use);
    cham_features_t *feat = calloc(nu, sizeof *feat);
    cham_match_map_t storages = {0};    /* storage id -> index of its features */
    uint32_t n_storages = 0;
    m->n_items = pv.n_items;
    m->matched = calloc(pv.n_items ? pv.n_items : 1, sizeof *m->matched);
    m->by_id = calloc(pv.n_items ? pv.n_items : 1, sizeof *m->by_id);
    bool ok = strict && loose && item_of_use && feat && map_init(&storages, nu) &&
              map_init(&m->ids, nu + pv.n_items) && m->matched && m->by_id && build_tags(m, &v);
    if (ok) {
        /* The features after every use, as the runtime computes them. */
        for (size_t o = 0; o < v.n_ops; o++) {
            const cham_profile_op_t *op = &v.ops[o];
            for (uint32_t k = 0; k < op->n_uses; k++) {
                const cham_tensor_use_t *use = &v.uses[op->first_use + k];
                uint32_t at = map_add(&storages, use->storage + 1, n_storages);  /* 0: empty */
                n_storages += at == n_storages;
                cham_features_t *f = &feat[at];
                f->bytes = use->storage_bytes;
                f->dtype = (uint32_t)use->dtype;
                cham_features_advance(f, op->token, cham_match_tag_bit(m, op->token));
                /* An evaluation's uses advance the features but are never
                 * matched (cham_exec_use), so they take no rank. */
                bool eval = op->phase == CHAM_PHASE_EVAL;
                strict[op->first_use + k] = eval ? 0 : strict_key(f);
                loose[op->first_use + k] = eval ? 0 : loose_key(f, op->token);
            }
        }
        mark_out_uses(&pv, &v, item_of_use);
        build_ids(m, &pv, &v, strict, loose, item_of_use);
        ok = build_table(&m->strict, strict, v.n_uses, item_of_use, pv.n_items) &&
             build_table(&m->loose, loose, v.n_uses, item_of_use, pv.n_items);
    }
    free(strict), free(loose), free(item_of_use), free(feat);
    map_free(&storages);
    if (!ok)
        cham_match_free(m);
    return ok;
}

void cham_match_free(cham_match_t *m)
{
    free(m->tag_bit);
    free(m->matched);
    table_free(&m->strict);
    table_free(&m->loose);
    free(m->by_id);
    map_free(&m->ids);
    memset(m, 0, sizeof *m);
}

void cham_match_step_start(cham_match_t *m)
{
    cham_match_table_t *ts[2] = {&m->strict, &m->loose};
    for (int i = 0; i < 2; i++) {
        if (ts[i]->n_keys) {
            memset(ts[i]->seen, 0, ts[i]->n_keys * sizeof *ts[i]->seen);
            memset(ts[i]->cursor, 0, ts[i]->n_keys * sizeof *ts[i]->cursor);
        }
    }
    if (m->n_items)
        memset(m->matched, 0, m->n_items * sizeof *m->matched);
    m->hits_strict = m->hits_loose = 0;
}

/* Counts a use of key k; the item at this rank, or NONE. */
static inline uint32_t table_use(cham_match_table_t *t, uint32_t k)
{
    uint32_t rank = t->seen[k]++;
    uint32_t end = t->first[k] + t->count[k];
    uint32_t at = t->first[k] + t->cursor[k];
    while (at < end && t->rank[at] < rank)
        at++;
    t->cursor[k] = at - t->first[k];
    return at < end && t->rank[at] == rank ? t->item[at] : CHAM_MATCH_NONE;
}

/* An item matched by id for a use of storage id: judged strictly where
 * the profile knew the use's strict key, else loosely; NULL when neither
 * key is known. */
static const uint32_t *id_use(const cham_match_t *m, uint64_t id, uint64_t strict,
                              uint64_t loose, bool *is_strict)
{
    const uint32_t *at = map_find(&m->ids, use_key(id, strict));
    *is_strict = at != NULL;
    return at ? at : map_find(&m->ids, use_key(id, loose));
}

uint32_t cham_match_use(cham_match_t *m, const cham_features_t *f, int32_t token, uint64_t id)
{
    if (m->n_items == 0)
        return CHAM_MATCH_NONE;
    uint64_t strict = strict_key(f), loose = loose_key(f, token);
    uint32_t ks = table_find(&m->strict, strict);
    uint32_t kl = table_find(&m->loose, loose);
    uint32_t is = ks == CHAM_MATCH_NONE ? CHAM_MATCH_NONE : table_use(&m->strict, ks);
    uint32_t il = kl == CHAM_MATCH_NONE ? CHAM_MATCH_NONE : table_use(&m->loose, kl);
    /* Uses matched by id still count in the ranks, as in the profile. */
    bool by_strict = false;
    const uint32_t *at = id == CHAM_MATCH_NEW ? NULL : id_use(m, id, strict, loose, &by_strict);
    if (at && *at != CHAM_MATCH_NONE) {
        if (m->matched[*at])
            return CHAM_MATCH_NONE;
        m->matched[*at] = true;
        *(by_strict ? &m->hits_strict : &m->hits_loose) += 1;
        return *at;
    }
    /* A use the profile knew strictly is judged strictly only. */
    uint32_t item = ks != CHAM_MATCH_NONE ? is : il;
    if (item == CHAM_MATCH_NONE || m->matched[item] || m->by_id[item])
        return CHAM_MATCH_NONE;
    m->matched[item] = true;
    if (ks != CHAM_MATCH_NONE) {
        m->hits_strict++;
        return item;
    }
    /* The item's strict use will not come: the look-alikes after it
     * count their ranks as if it had (else each took the one before's
     * item, test_extra_op_still_matches). */
    uint32_t k = m->strict.key_of[item], r = m->strict.rank_of[item];
    if (k != CHAM_MATCH_NONE && m->strict.seen[k] <= r)
        m->strict.seen[k] = r + 1;
    m->hits_loose++;
    return item;
}
