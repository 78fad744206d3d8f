/* The recorded-trace text format (trace_io.h): load, with file:line
 * messages for bad input, and save. */
#include "lib/trace_io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/trace_builder.h"

/* IDs of a loaded file map to slots through an open-addressing hash table
 * with linear probing and backward-shift deletion.
 * Invariant: every live ID is in the table, reachable from its home bucket
 * without crossing an empty bucket. */
typedef struct id_map {
    uint64_t *keys;
    uint32_t *slots;         /* UINT32_MAX = empty */
    size_t cap, n;           /* cap is a power of two */
} id_map_t;

static size_t id_hash(uint64_t id, size_t cap)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

static bool id_map_grow(id_map_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : 4096;
    id_map_t nm = {malloc(cap * sizeof *nm.keys), malloc(cap * sizeof *nm.slots), cap, 0};
    if (!nm.keys || !nm.slots) {
        free(nm.keys);
        free(nm.slots);
        return false;
    }
    for (size_t i = 0; i < cap; i++)
        nm.slots[i] = UINT32_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i] == UINT32_MAX)
            continue;
        size_t h = id_hash(m->keys[i], cap);
        while (nm.slots[h] != UINT32_MAX)
            h = (h + 1) & (cap - 1);
        nm.keys[h] = m->keys[i];
        nm.slots[h] = m->slots[i];
        nm.n++;
    }
    free(m->keys);
    free(m->slots);
    *m = nm;
    return true;
}

/* Index of the bucket holding id, or of the empty bucket where it would go. */
static size_t id_map_find(const id_map_t *m, uint64_t id)
{
    size_t h = id_hash(id, m->cap);
    while (m->slots[h] != UINT32_MAX && m->keys[h] != id)
        h = (h + 1) & (m->cap - 1);
    return h;
}

static void id_map_erase(id_map_t *m, size_t i)
{
    size_t mask = m->cap - 1, j = i;
    m->slots[i] = UINT32_MAX;
    m->n--;
    for (;;) {
        j = (j + 1) & mask;
        if (m->slots[j] == UINT32_MAX)
            return;
        size_t home = id_hash(m->keys[j], m->cap);
        /* Move j back to i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->slots[i] = m->slots[j];
        m->slots[j] = UINT32_MAX;
        i = j;
    }
}

/* Parses an unsigned decimal field; advances *p past it. */
static bool parse_u64(const char **p, uint64_t *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return false;
    uint64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
        s++;
    }
    *p = s;
    *out = v;
    return true;
}

static const char *skip_blanks(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* After a field there must be a blank or the end of the line. */
static bool field_end(const char *s)
{
    return *s == ' ' || *s == '\t' || *s == '\0' || *s == '\n' || *s == '\r';
}

static bool at_eol(const char *s)
{
    s = skip_blanks(s);
    return *s == '\0' || *s == '\n' || (*s == '\r' && (s[1] == '\n' || s[1] == '\0'));
}

/* Length of s up to the end of the line, at most 40, for messages. */
static int text_len(const char *s)
{
    size_t n = strcspn(s, "\r\n");
    return n > 40 ? 40 : (int)n;
}

/* A file being loaded: where it is, and what it has built so far. */
typedef struct loader {
    const char *path;
    uint64_t lineno;
    char *err;
    size_t err_size;
    trace_builder_t b;
    id_map_t map;            /* the live IDs and their slots */
} loader_t;

/* "FILE:LINE: " and the message, into err; returns false. */
static bool line_err(loader_t *ld, const char *fmt, ...)
{
    if (!ld->err || ld->err_size == 0)
        return false;
    int n = snprintf(ld->err, ld->err_size, "%s:%" PRIu64 ": ", ld->path, ld->lineno);
    if (n >= 0 && (size_t)n < ld->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err + n, ld->err_size - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* The next field at *s, an integer from lo to hi, into *v; advances *s past
 * it. A bad or missing field is an error naming the field. */
static bool next_field(loader_t *ld, const char **s, uint64_t *v, uint64_t lo, uint64_t hi,
                       const char *name, const char *what)
{
    const char *field = *s = skip_blanks(*s);
    if (parse_u64(s, v) && field_end(*s) && *v >= lo && *v <= hi)
        return true;
    if (at_eol(field))
        return line_err(ld, "missing %s (expected \"a ID BYTES STREAM\" or \"f ID\")", name);
    size_t n = strcspn(field, " \t\r\n");
    return line_err(ld, "%s must be %s, got \"%.*s\"", name, what, n > 40 ? 40 : (int)n,
                    field);
}

static bool load_alloc(loader_t *ld, uint64_t id, uint64_t bytes, int stream)
{
    id_map_t *m = &ld->map;
    size_t h = id_map_find(m, id);
    if (m->slots[h] != UINT32_MAX)
        return line_err(ld, "ID %" PRIu64 " allocated again while still live", id);
    uint32_t slot = trace_builder_alloc(&ld->b, bytes, stream);
    if (slot == UINT32_MAX)
        return line_err(ld, "out of host memory");
    m->keys[h] = id;
    m->slots[h] = slot;
    m->n++;
    if (m->n * 2 > m->cap && !id_map_grow(m))
        return line_err(ld, "out of host memory");
    return true;
}

static bool load_free(loader_t *ld, uint64_t id)
{
    id_map_t *m = &ld->map;
    size_t h = id_map_find(m, id);
    if (m->slots[h] == UINT32_MAX)
        return line_err(ld, "free of ID %" PRIu64 ", which is not allocated", id);
    trace_builder_free(&ld->b, m->slots[h]);
    id_map_erase(m, h);
    return ld->b.failed ? line_err(ld, "out of host memory") : true;
}

/* One line of len bytes: a comment, a blank line or an operation. */
static bool load_line(loader_t *ld, const char *line, size_t len)
{
    if (len != strlen(line))
        return line_err(ld, "NUL byte in line");
    const char *start = skip_blanks(line), *s = start;
    if (*s == '#' || at_eol(s))
        return true;
    char op = *s++;
    if ((op != 'a' && op != 'f') || !field_end(s))
        return line_err(ld, "expected \"a ID BYTES STREAM\" or \"f ID\", got \"%.*s\"",
                        text_len(start), start);
    uint64_t id, bytes = 0, stream = 0;
    if (!next_field(ld, &s, &id, 0, UINT64_MAX, "ID", "an unsigned 64-bit integer"))
        return false;
    if (op == 'a' &&
        (!next_field(ld, &s, &bytes, 1, (uint64_t)1 << 50, "BYTES", "an integer from 1 to 2^50") ||
         !next_field(ld, &s, &stream, 0, BENCH_TRACE_MAX_STREAMS - 1, "STREAM",
                     "an integer from 0 to 15")))
        return false;
    if (!at_eol(s))
        return line_err(ld, "unexpected text after the %s: \"%.*s\"", op == 'a' ? "STREAM" : "ID",
                        text_len(skip_blanks(s)), skip_blanks(s));
    return op == 'a' ? load_alloc(ld, id, bytes, (int)stream) : load_free(ld, id);
}

bool bench_trace_load(const char *path, bench_trace_t *trace, char *err, size_t err_size)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        cham_set_err(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    loader_t ld = {.path = path, .err = err, .err_size = err_size};
    trace_builder_init(&ld.b, trace);
    char *line = NULL;
    size_t line_cap = 0;
    bool ok = id_map_grow(&ld.map);
    if (!ok)
        cham_set_err(err, err_size, "%s: out of host memory", path);
    while (ok) {
        errno = 0;
        ld.lineno++;
        ssize_t len = getline(&line, &line_cap, f);
        if (len < 0) {
            if (ferror(f))
                ok = line_err(&ld, "read error: %s", strerror(errno));
            break;
        }
        ok = load_line(&ld, line, (size_t)len);
    }
    if (ok && trace->n_ops == 0) {
        cham_set_err(err, err_size, "%s: no operations in the file", path);
        ok = false;
    }
    free(line);
    free(ld.map.keys);
    free(ld.map.slots);
    fclose(f);
    trace_builder_done(&ld.b);
    if (!ok)
        bench_trace_release(trace);
    return ok;
}

bool bench_trace_save(const char *path, const bench_trace_t *trace, const char *comment,
                      char *err, size_t err_size)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        cham_set_err(err, err_size, "%s: cannot create: %s", path, strerror(errno));
        return false;
    }
    fprintf(f, "# chameleon allocation trace: \"a ID BYTES STREAM\" / \"f ID\"\n");
    if (comment && *comment)
        fprintf(f, "# %s\n", comment);
    for (size_t i = 0; i < trace->n_ops; i++) {
        const bench_op_t *op = &trace->ops[i];
        if (op->kind == BENCH_OP_ALLOC)
            fprintf(f, "a %" PRIu32 " %" PRIu64 " %u\n", op->slot, op->bytes,
                    (unsigned)op->stream);
        else
            fprintf(f, "f %" PRIu32 "\n", op->slot);
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0)
        ok = false;
    if (!ok)
        cham_set_err(err, err_size, "%s: write failed: %s", path, strerror(errno));
    return ok;
}
