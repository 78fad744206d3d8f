/* Chrome trace-event JSON from the sim's task hook and the runtime's stage
 * hook (chameleon/trace.h). Events are written as they come, so a long run
 * costs no memory; the file is one JSON object with a "traceEvents" array.
 * Times are microseconds of the device's virtual clock. The file is written
 * through common/file.h's writer: under a temporary name until
 * cham_trace_close renames it, so an interrupted run leaves no truncated
 * trace under the name asked for, and a failed write is reported with its
 * errno at close. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chameleon/chameleon.h"
#include "chameleon/trace.h"
#include "common/file.h"
#include "common/message.h"

#define PID 1                    /* one process: the device and its host */
#define HOST_TID 0

struct cham_trace {
    cham_context_t *ctx;
    cham_device_t *dev;
    cham_out_t *out;
    FILE *f;                     /* out's stream */
    bool failed;                 /* a write failed: nothing more is written */
    uint64_t capacity;
    uint64_t policies;           /* policies generated, as last seen */
    uint64_t last_mem;           /* the memory counter as last written */
    bool named[CHAM_SIM_MAX_STREAMS];
    uint64_t cpu_ns;             /* spent writing */
};

static uint64_t cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t cham_trace_cpu_ns(const cham_trace_t *t)
{
    return t ? t->cpu_ns : 0;
}

/* The length of the well-formed UTF-8 sequence at s (1 to 4), or 0 when
 * it is not one (a stray continuation byte, a truncated, overlong or
 * surrogate sequence, a code point above U+10FFFF). */
static size_t utf8_length(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                        : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0)
        return 0;
    unsigned cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[k] & 0x3f);
    }
    static const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* s as a JSON string body: quotes, backslashes and control characters
 * escaped, and bytes that are not UTF-8 as U+FFFD, so that a label with
 * a newline, a quote or binary bytes still gives valid JSON. */
static void json_text(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (p && *p) {
        size_t n = utf8_length(p);
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else if (n == 0)
            fputs("\\ufffd", f);
        else
            fwrite(p, 1, n, f);
        p += n ? n : 1;
    }
}

/* Whether the file still takes events: after the first failed write the
 * trace stops writing (the disk is full, say) and close reports it. */
static bool writable(cham_trace_t *t)
{
    if (!t->failed && !cham_out_ok(t->out))
        t->failed = true;
    return !t->failed;
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

/* The first event of a track gives it its name and order. */
static void name_track(cham_trace_t *t, int tid, const char *name)
{
    fprintf(t->f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
            "\"args\":{\"name\":\"", PID, tid);
    json_text(t->f, name);
    fprintf(t->f, "\"}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
            "\"args\":{\"sort_index\":%d}}", PID, tid, tid);
}

static void memory_counter(cham_trace_t *t, uint64_t at_ns)
{
    cham_runtime_stats_t s;
    cham_context_get_stats(t->ctx, &s);
    if (s.mem_in_use == t->last_mem)
        return;
    t->last_mem = s.mem_in_use;
    fprintf(t->f, ",\n{\"ph\":\"C\",\"pid\":%d,\"name\":\"device memory\",\"ts\":%.3f,"
            "\"args\":{\"in use\":%llu,\"capacity\":%llu}}", PID, us(at_ns),
            (unsigned long long)s.mem_in_use, (unsigned long long)t->capacity);
}

static void on_task(const cham_task_record_t *r, void *user)
{
    cham_trace_t *t = user;
    if (!writable(t))
        return;
    uint64_t t0 = cpu_now();
    static const char *const cat[] = {"kernel", "h2d", "d2h", "d2d", "host wait"};
    int tid = r->stream_id < 0 ? HOST_TID : r->stream_id + 1;
    if (r->stream_id >= 0 && r->stream_id < CHAM_SIM_MAX_STREAMS && !t->named[r->stream_id]) {
        t->named[r->stream_id] = true;
        name_track(t, tid, r->stream_name);
    }
    memory_counter(t, r->enqueue_ns);
    fprintf(t->f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
            "\"cat\":\"%s\",\"name\":\"", PID, tid, us(r->start_ns), us(r->end_ns - r->start_ns),
            cat[r->kind]);
    json_text(t->f, r->label ? r->label : cat[r->kind]);
    fprintf(t->f, "\",\"args\":{\"bytes\":%llu,\"flops\":%.6g,\"queued_at_us\":%.3f}}",
            (unsigned long long)r->bytes, r->flops, us(r->enqueue_ns));
    t->cpu_ns += cpu_now() - t0;
}

static void instant(cham_trace_t *t, const char *name)
{
    if (!writable(t))
        return;
    fprintf(t->f, ",\n{\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"name\":\"",
            PID, HOST_TID, us(cham_device_host_time(t->dev)));
    json_text(t->f, name);
    fputs("\"}", t->f);
}

/* Marks the step's end, and the stage change and policies it brought. */
static void on_step(cham_context_t *ctx, const cham_step_ended_t *e, void *user)
{
    (void)ctx;
    cham_trace_t *t = user;
    char name[96];
    if (e->to != e->from) {
        snprintf(name, sizeof name, "step %llu: %s -> %s", (unsigned long long)e->number,
                 cham_stage_name(e->from), cham_stage_name(e->to));
        instant(t, name);
    }
    if (e->policies_generated > t->policies) {
        snprintf(name, sizeof name, "policy %llu generated",
                 (unsigned long long)e->policies_generated);
        instant(t, name);
        t->policies = e->policies_generated;
    }
    snprintf(name, sizeof name, "step %llu ends%s", (unsigned long long)e->number,
             e->backward ? "" : " (forward only)");
    instant(t, name);
}

cham_status_t cham_trace_open(cham_context_t *ctx, const char *path, cham_trace_t **out,
                              char *err, size_t err_size)
{
    *out = NULL;
    cham_device_t *dev = cham_context_device(ctx);
    if (cham_device_set_task_hook(dev, NULL, NULL) != CHAM_OK) {   /* can it time tasks? */
        cham_set_err(err, err_size, "trace: %s", cham_device_last_error(dev));
        return CHAM_ERR_UNSUPPORTED;
    }
    cham_trace_t *t = calloc(1, sizeof *t);
    if (!t) {
        cham_set_err(err, err_size, "trace: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    char why[600];
    cham_status_t st = cham_out_open(path, &t->out, why, sizeof why);
    if (st != CHAM_OK) {
        cham_set_err(err, err_size, "trace: %s", why);
        free(t);
        return st == CHAM_ERR_HOST_OOM ? st : CHAM_ERR_INVALID_ARG;
    }
    t->f = cham_out_file(t->out);
    t->ctx = ctx;
    t->dev = dev;
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    t->capacity = info.capacity;
    t->last_mem = UINT64_MAX;
    const char *clock = strcmp(info.backend, "sim") == 0 ? "simulated" : "measured";
    fprintf(t->f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"device\":\"");
    json_text(t->f, info.name);
    fprintf(t->f, "\",\"clock\":\"%s\"},\n\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":%d,"
            "\"name\":\"process_name\",\"args\":{\"name\":\"", clock, PID);
    json_text(t->f, info.name);
    fprintf(t->f, " (%s)\"}}", clock);
    name_track(t, HOST_TID, "host");
    cham_device_set_task_hook(dev, on_task, t);
    cham_context_on_step(ctx, on_step, t);
    *out = t;
    return CHAM_OK;
}

cham_status_t cham_trace_close(cham_trace_t *t, char *err, size_t err_size)
{
    if (!t)
        return CHAM_OK;
    cham_device_set_task_hook(t->dev, NULL, NULL);
    cham_context_on_step(t->ctx, NULL, NULL);
    if (writable(t))
        fputs("\n]}\n", t->f);
    char why[600];
    cham_status_t st = cham_out_commit(t->out, why, sizeof why);
    free(t);
    if (st != CHAM_OK) {
        cham_set_err(err, err_size, "trace: %s", why);
        return CHAM_ERR_INVALID_ARG;
    }
    return CHAM_OK;
}
