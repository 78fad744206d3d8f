/* The sim backend's hazard detector: an interval map from byte ranges to
 * the last write and the recent reads per stream, checked on every access.
 * See sim_hazard.h for the rules. */
#include "device/sim_hazard.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/intern.h"

/* Readers remembered per range: compute, swap-out, swap-in and one more.
 * With more streams reading the same bytes between two writes, the reader
 * that finished earliest is forgotten (the least likely to conflict). */
#define HZ_READERS 4
#define HZ_NO_STREAM (-1)

/* One remembered access. Explicitly padded-free so ranges compare with
 * memcmp. stream == HZ_NO_STREAM marks an empty slot. */
typedef struct hz_access {
    int32_t stream;
    uint32_t label;          /* index into the label table */
    uint64_t end;            /* virtual time the access finishes */
} hz_access_t;

/* Invariant: ranges are sorted by lo, non-empty (lo < hi) and disjoint.
 * Reads hold only reads since the last write; an empty write slot means
 * the bytes have not been written since they were first seen. */
typedef struct hz_range {
    uintptr_t lo, hi;
    hz_access_t write;
    hz_access_t reads[HZ_READERS];
} hz_range_t;

struct sim_hazard {
    hz_range_t *ranges;
    size_t n, cap;
    hz_range_t *scratch;     /* pieces of the range being rewritten */
    size_t scratch_cap;

    cham_intern_t labels;    /* task labels; index 0 is "" */

    char stream_names[CHAM_SIM_MAX_STREAMS][48];
    sim_hazard_report_fn report;
    void *user;
};

static const hz_access_t no_access = {HZ_NO_STREAM, 0, 0};

/* Makes *v hold at least need ranges. */
static bool reserve(hz_range_t **v, size_t *cap, size_t need)
{
    hz_range_t *p = cham_grow(*v, cap, need, sizeof *p, 64);
    if (p)
        *v = p;
    return p != NULL;
}

/* ---- lifetime -----------------------------------------------------------*/

sim_hazard_t *sim_hazard_new(sim_hazard_report_fn report, void *user)
{
    sim_hazard_t *hz = calloc(1, sizeof *hz);
    if (!hz)
        return NULL;
    hz->report = report;
    hz->user = user;
    cham_intern_init(&hz->labels);
    if (cham_intern_add(&hz->labels, "") != 0 || !reserve(&hz->scratch, &hz->scratch_cap, 64)) {
        sim_hazard_free(hz);
        return NULL;
    }
    for (int i = 0; i < CHAM_SIM_MAX_STREAMS; i++)
        snprintf(hz->stream_names[i], sizeof hz->stream_names[i], "stream%d", i);
    return hz;
}

void sim_hazard_free(sim_hazard_t *hz)
{
    if (!hz)
        return;
    cham_intern_free(&hz->labels);
    free(hz->ranges);
    free(hz->scratch);
    free(hz);
}

void sim_hazard_name_stream(sim_hazard_t *hz, int stream, const char *name)
{
    CHAM_ASSERT(stream >= 0 && stream < CHAM_SIM_MAX_STREAMS);
    snprintf(hz->stream_names[stream], sizeof hz->stream_names[stream], "%s", name);
}

size_t sim_hazard_range_count(const sim_hazard_t *hz)
{
    return hz->n;
}

/* ---- the map ------------------------------------------------------------*/

/* First range with hi > addr (binary search). */
static size_t first_ending_after(const sim_hazard_t *hz, uintptr_t addr)
{
    size_t lo = 0, hi = hz->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (hz->ranges[mid].hi <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static hz_range_t empty_range(uintptr_t lo, uintptr_t hi)
{
    hz_range_t r;
    memset(&r, 0, sizeof r);
    r.lo = lo;
    r.hi = hi;
    r.write = no_access;
    for (int i = 0; i < HZ_READERS; i++)
        r.reads[i] = no_access;
    return r;
}

static bool same_state(const hz_range_t *a, const hz_range_t *b)
{
    return memcmp(&a->write, &b->write,
                  sizeof *a - offsetof(hz_range_t, write)) == 0;
}

/* Replaces ranges [i, j) with the m pieces in scratch, then merges
 * neighbours whose state is equal and whose bytes touch. */
static void splice(sim_hazard_t *hz, size_t i, size_t j, size_t m)
{
    memmove(hz->ranges + i + m, hz->ranges + j, (hz->n - j) * sizeof *hz->ranges);
    memcpy(hz->ranges + i, hz->scratch, m * sizeof *hz->ranges);
    hz->n = hz->n - (j - i) + m;
    if (hz->n == 0)
        return;
    size_t from = i > 0 ? i - 1 : 0, to = i + m < hz->n ? i + m : hz->n - 1;
    size_t w = from;
    for (size_t k = from + 1; k <= to; k++) {
        hz_range_t *last = &hz->ranges[w];
        if (last->hi == hz->ranges[k].lo && same_state(last, &hz->ranges[k]))
            last->hi = hz->ranges[k].hi;
        else
            hz->ranges[++w] = hz->ranges[k];
    }
    size_t removed = to - w;
    if (removed) {
        memmove(hz->ranges + w + 1, hz->ranges + to + 1,
                (hz->n - to - 1) * sizeof *hz->ranges);
        hz->n -= removed;
    }
}

/* A hazard being assembled: consecutive pieces that conflict with the same
 * earlier access are reported once, over their joint bytes. */
typedef struct pending {
    bool active;
    const char *kind;
    uintptr_t lo, hi;
    hz_access_t earlier;
} pending_t;

static void flush(sim_hazard_t *hz, pending_t *p, int stream, uint64_t start,
                  uint32_t label, size_t *found)
{
    if (!p->active)
        return;
    cham_hazard_t h = {
        .kind = p->kind,
        .addr = p->lo,
        .bytes = p->hi - p->lo,
        .earlier_stream = p->earlier.stream,
        .later_stream = stream,
        .earlier_stream_name = hz->stream_names[p->earlier.stream],
        .later_stream_name = hz->stream_names[stream],
        .earlier_label = cham_intern_name(&hz->labels, p->earlier.label),
        .later_label = cham_intern_name(&hz->labels, label),
        .earlier_end_ns = p->earlier.end,
        .later_start_ns = start,
    };
    (*found)++;
    if (hz->report)
        hz->report(&h, hz->user);
    p->active = false;
}

static void conflict(sim_hazard_t *hz, pending_t *p, const char *kind, const hz_range_t *piece,
                     const hz_access_t *earlier, int stream, uint64_t start, uint32_t label,
                     size_t *found)
{
    if (p->active && p->kind == kind && p->hi == piece->lo &&
        memcmp(&p->earlier, earlier, sizeof *earlier) == 0) {
        p->hi = piece->hi;
        return;
    }
    flush(hz, p, stream, start, label, found);
    *p = (pending_t){true, kind, piece->lo, piece->hi, *earlier};
}

/* Checks one piece against the access and updates its state. */
static void visit(sim_hazard_t *hz, hz_range_t *piece, bool write, int stream, uint64_t start,
                  uint64_t end, uint32_t label, pending_t *p, size_t *found)
{
    const hz_access_t *w = &piece->write;
    if (w->stream != HZ_NO_STREAM && w->stream != stream && start < w->end)
        conflict(hz, p, write ? "write-after-write" : "read-after-write", piece, w, stream,
                 start, label, found);
    if (write) {
        for (int i = 0; i < HZ_READERS; i++) {
            const hz_access_t *r = &piece->reads[i];
            if (r->stream != HZ_NO_STREAM && r->stream != stream && start < r->end)
                conflict(hz, p, "write-after-read", piece, r, stream, start, label, found);
        }
        piece->write = (hz_access_t){stream, label, end};
        for (int i = 0; i < HZ_READERS; i++)
            piece->reads[i] = no_access;
        return;
    }
    int slot = -1;
    for (int i = 0; i < HZ_READERS && slot < 0; i++)
        if (piece->reads[i].stream == stream)
            slot = i;
    for (int i = 0; i < HZ_READERS && slot < 0; i++)
        if (piece->reads[i].stream == HZ_NO_STREAM)
            slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < HZ_READERS; i++)
            if (piece->reads[i].end < piece->reads[slot].end)
                slot = i;
    }
    hz_access_t *r = &piece->reads[slot];
    uint64_t prev = r->stream == stream ? r->end : 0;
    *r = (hz_access_t){stream, label, end > prev ? end : prev};
}

size_t sim_hazard_access(sim_hazard_t *hz, uintptr_t addr, size_t bytes, bool write, int stream,
                         uint64_t start, uint64_t end, const char *label)
{
    CHAM_ASSERT(stream >= 0 && stream < CHAM_SIM_MAX_STREAMS && start <= end);
    if (bytes == 0)
        return 0;
    uintptr_t lo = addr, hi = addr + bytes;
    CHAM_ASSERT(hi > lo);
    uint32_t lab = cham_intern_add(&hz->labels, label ? label : "");
    if (lab == UINT32_MAX)
        return SIZE_MAX;

    size_t i = first_ending_after(hz, lo), j = i;
    while (j < hz->n && hz->ranges[j].lo < hi)
        j++;
    /* Worst case: a left and a right remainder plus a piece and a gap per range. */
    size_t most = 2 * (j - i) + 3;
    if (!reserve(&hz->scratch, &hz->scratch_cap, most) ||
        !reserve(&hz->ranges, &hz->cap, hz->n + most))
        return SIZE_MAX;

    size_t m = 0, found = 0;
    pending_t p = {0};
    uintptr_t cur = lo;
    for (size_t k = i; k < j; k++) {
        hz_range_t r = hz->ranges[k];
        if (r.lo < lo) {                      /* left remainder keeps its state */
            hz->scratch[m] = r;
            hz->scratch[m++].hi = lo;
            r.lo = lo;
        }
        if (cur < r.lo) {                     /* gap: bytes never touched */
            hz->scratch[m] = empty_range(cur, r.lo);
            visit(hz, &hz->scratch[m++], write, stream, start, end, lab, &p, &found);
        }
        uintptr_t right = r.hi;
        if (r.hi > hi)
            r.hi = hi;
        hz->scratch[m] = r;
        visit(hz, &hz->scratch[m++], write, stream, start, end, lab, &p, &found);
        if (right > hi) {                     /* right remainder keeps its state */
            hz->scratch[m] = hz->ranges[k];
            hz->scratch[m].lo = hi;
            m++;
        }
        cur = r.hi;
    }
    if (cur < hi) {
        hz->scratch[m] = empty_range(cur, hi);
        visit(hz, &hz->scratch[m++], write, stream, start, end, lab, &p, &found);
    }
    flush(hz, &p, stream, start, lab, &found);
    CHAM_ASSERT(m <= most);
    splice(hz, i, j, m);
    return found;
}

void sim_hazard_forget(sim_hazard_t *hz, uintptr_t addr, size_t bytes)
{
    uintptr_t lo = addr, hi = addr + bytes;
    size_t i = first_ending_after(hz, lo), j = i;
    while (j < hz->n && hz->ranges[j].lo < hi)
        j++;
    if (i == j)
        return;
    /* Keep the parts outside [lo, hi) of the first and last ranges. */
    size_t m = 0;
    hz_range_t first = hz->ranges[i], last = hz->ranges[j - 1];
    CHAM_ASSERT(hz->scratch_cap >= 2);     /* reserved at creation */
    if (first.lo < lo) {
        hz->scratch[m] = first;
        hz->scratch[m++].hi = lo;
    }
    if (last.hi > hi) {
        hz->scratch[m] = last;
        hz->scratch[m++].lo = hi;
    }
    splice(hz, i, j, m);
}

char *cham_hazard_format(const cham_hazard_t *h, char *buf, size_t size)
{
    snprintf(buf, size,
             "hazard %s at 0x%" PRIxPTR " (%zu bytes): \"%s\" on stream %s starts at %" PRIu64
             " ns, before \"%s\" on stream %s finishes at %" PRIu64 " ns",
             h->kind, h->addr, h->bytes, h->later_label, h->later_stream_name,
             h->later_start_ns, h->earlier_label, h->earlier_stream_name, h->earlier_end_ns);
    return buf;
}
