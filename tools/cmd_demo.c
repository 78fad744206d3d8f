/* `chameleon check` (until this release `chameleon demo`; not `make demo`,
 * which runs `chameleon train`): the runtime's building blocks at work on the simulated
 * device, before the planner and the trainer exist.
 *
 * A small model's forward pass produces one activation per layer; together
 * they need more memory than the device is given. The demo first runs the
 * step without swapping (it fails with the allocator's out-of-memory
 * report), then with a hand-written schedule: each activation is copied to
 * pinned host memory on a swap-out stream right after it is produced, its
 * block is handed back with free-after-op (reusable once the next layer has
 * been dispatched, ordered by an event, no host polling), and in the backward
 * pass it is brought back one layer ahead on a swap-in stream. Data mode is
 * on: every activation carries a pattern that backward checks, so the demo
 * proves the bytes survive the round trip, and the hazard detector proves no
 * stream raced another. Finally the same step with unlimited memory gives the
 * ideal time the swapped step is compared with. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"

#define MiB (1024.0 * 1024.0)

typedef struct demo_opts {
    const char *preset;
    int layers;
    size_t act_bytes;
    uint64_t capacity;
} demo_opts_t;

/* What a layer's kernel reads and writes, for the CPU functions. */
typedef struct layer_arg {
    uint32_t *out;           /* the activation this layer produces (forward) */
    const uint32_t *in;      /* the activation backward checks */
    size_t words;
    uint32_t seed;
    size_t *mismatches;
} layer_arg_t;

static uint32_t pattern(uint32_t seed, size_t i)
{
    uint32_t x = seed * 2654435761u + (uint32_t)i * 40503u;
    return x ^ (x >> 15);
}

static void forward_cpu(void *p)
{
    layer_arg_t *a = p;
    for (size_t i = 0; i < a->words; i++)
        a->out[i] = pattern(a->seed, i);
}

static void backward_cpu(void *p)
{
    layer_arg_t *a = p;
    for (size_t i = 0; i < a->words; i++)
        if (a->in[i] != pattern(a->seed, i))
            (*a->mismatches)++;
}

/* The pieces of one run. */
typedef struct run {
    cham_device_t *dev;
    cham_stream_t *compute, *out, *in;
    cham_allocator_t *mem, *pinned;
    uint64_t op;             /* operators dispatched so far */
    size_t mismatches;
    uint64_t compute_busy;   /* device time of kernels */
    uint64_t copy_busy;      /* device time of copies */
} run_t;

static void count_busy(const cham_task_record_t *t, void *user)
{
    run_t *r = user;
    uint64_t d = t->end_ns - t->start_ns;
    if (t->kind == CHAM_TASK_KERNEL)
        r->compute_busy += d;
    else if (t->kind == CHAM_TASK_COPY_D2H || t->kind == CHAM_TASK_COPY_H2D)
        r->copy_busy += d;
}

static int fail(const char *what, cham_status_t st, const char *detail)
{
    fprintf(stderr, "chameleon check: %s failed: %s%s%s\n", what, cham_status_string(st),
            detail && *detail ? ": " : "", detail ? detail : "");
    return 1;
}

static int run_open(run_t *r, const demo_opts_t *o, uint64_t capacity)
{
    memset(r, 0, sizeof *r);
    cham_device_config_t c = cham_device_config_default();
    c.preset = o->preset;
    c.capacity = capacity;
    c.data = true;
    cham_status_t st = cham_device_open(&c, &r->dev);
    if (st != CHAM_OK)
        return fail("opening the sim device", st, cham_device_last_error(NULL));
    cham_device_set_task_hook(r->dev, count_busy, r);
    if ((st = cham_stream_new(r->dev, "compute", &r->compute)) != CHAM_OK ||
        (st = cham_stream_new(r->dev, "swap-out", &r->out)) != CHAM_OK ||
        (st = cham_stream_new(r->dev, "swap-in", &r->in)) != CHAM_OK)
        return fail("creating streams", st, cham_device_last_error(r->dev));
    cham_allocator_config_t dc = {.kind = CHAM_MEM_DEVICE};
    cham_allocator_config_t hc = {.kind = CHAM_MEM_HOST_PINNED,
                                  .limit = (uint64_t)o->layers * o->act_bytes * 2};
    if ((st = cham_allocator_new(r->dev, &dc, &r->mem)) != CHAM_OK ||
        (st = cham_allocator_new(r->dev, &hc, &r->pinned)) != CHAM_OK)
        return fail("creating allocators", st, cham_device_last_error(r->dev));
    return 0;
}

static void run_close(run_t *r)
{
    if (r->dev)
        cham_device_synchronize(r->dev);
    cham_allocator_free(r->mem);
    cham_allocator_free(r->pinned);
    cham_stream_free(r->compute);
    cham_stream_free(r->out);
    cham_stream_free(r->in);
    cham_device_close(r->dev);
}

/* Launches one layer's kernel on the compute stream and tells the
 * allocator the operator has been dispatched. */
static cham_status_t launch_layer(run_t *r, const char *label, cham_block_t *rd,
                                  cham_block_t *wr, size_t bytes, void (*fn)(void *),
                                  layer_arg_t *arg)
{
    cham_access_t acc[2];
    size_t n = 0;
    if (rd)
        acc[n++] = (cham_access_t){cham_block_ptr(rd), bytes, CHAM_ACCESS_READ};
    if (wr)
        acc[n++] = (cham_access_t){cham_block_ptr(wr), bytes, CHAM_ACCESS_WRITE};
    /* As much arithmetic as a layer whose copy takes about as long. */
    cham_kernel_t k = {.label = label, .flops = 4.0e4 * (double)bytes,
                       .bytes = 2.0 * (double)bytes, .accesses = acc, .n_accesses = n,
                       .cpu_fn = fn, .arg = arg};
    cham_status_t st = cham_kernel_launch(r->compute, &k);
    if (st == CHAM_OK)
        st = cham_allocator_op_dispatched(r->mem, r->op++);
    return st;
}

/* One training step's memory behaviour. With swap, activations 0..L-3 go
 * to the host after their forward use and come back one layer ahead. */
static int step(run_t *r, const demo_opts_t *o, bool swap, bool verbose)
{
    int L = o->layers;
    size_t bytes = o->act_bytes, words = bytes / sizeof(uint32_t);
    cham_block_t **act = calloc((size_t)L, sizeof *act);
    cham_block_t **host = calloc((size_t)L, sizeof *host);
    layer_arg_t *args = calloc((size_t)L, sizeof *args);
    cham_event_t **ready = calloc((size_t)L, sizeof *ready);
    cham_event_t *ev = NULL;
    cham_status_t st = CHAM_OK;
    const char *what = "";
    char label[64];
    int rc = 1;
    if (!act || !host || !args || !ready) {
        fprintf(stderr, "chameleon check: out of host memory\n");
        goto out;
    }
    if ((st = cham_event_new(r->dev, &ev)) != CHAM_OK)
        goto fail;
    for (int i = 0; i < L; i++)
        if ((st = cham_event_new(r->dev, &ready[i])) != CHAM_OK)
            goto fail;

    /* Forward. */
    for (int i = 0; i < L; i++) {
        what = "allocating an activation";
        if ((st = cham_block_alloc(r->mem, bytes, r->compute, &act[i])) != CHAM_OK) {
            if (verbose)
                printf("  fwd.%d: %s\n", i, cham_allocator_last_error(r->mem));
            goto fail;
        }
        args[i] = (layer_arg_t){.out = cham_block_ptr(act[i]), .words = words,
                                .seed = (uint32_t)i + 1, .mismatches = &r->mismatches};
        snprintf(label, sizeof label, "fwd.%d", i);
        what = "launching a forward layer";
        if ((st = launch_layer(r, label, i ? act[i - 1] : NULL, act[i], bytes, forward_cpu,
                               &args[i])) != CHAM_OK)
            goto fail;
        if (swap && i < L - 2) {
            /* Swap-out after the producer: the swap stream waits for it. */
            what = "swapping out";
            if ((st = cham_block_alloc(r->pinned, bytes, r->out, &host[i])) != CHAM_OK ||
                (st = cham_event_record(ev, r->compute)) != CHAM_OK ||
                (st = cham_stream_wait_event(r->out, ev)) != CHAM_OK)
                goto fail;
            snprintf(label, sizeof label, "act.%d out", i);
            if ((st = cham_copy_async(r->out, cham_block_ptr(host[i]), cham_block_ptr(act[i]),
                                      bytes, CHAM_COPY_D2H, label)) != CHAM_OK)
                goto fail;
            /* Layer i+1 reads it next; after that op, its block may be reused. */
            if ((st = cham_block_free_after_op(r->mem, act[i], r->out, r->op)) != CHAM_OK)
                goto fail;
            act[i] = NULL;
        }
    }

    /* Backward, last layer first; swapped activations return one layer ahead. */
    for (int i = L - 1; i >= 0; i--) {
        int next = i - 1;
        if (swap && next >= 0 && next < L - 2) {
            what = "swapping in";
            if ((st = cham_block_alloc(r->mem, bytes, r->compute, &act[next])) != CHAM_OK) {
                if (verbose)
                    printf("  swap-in of act.%d: %s\n", next, cham_allocator_last_error(r->mem));
                goto fail;
            }
            /* The block's previous user ran on compute: order after it. */
            if ((st = cham_event_record(ev, r->compute)) != CHAM_OK ||
                (st = cham_stream_wait_event(r->in, ev)) != CHAM_OK)
                goto fail;
            snprintf(label, sizeof label, "act.%d in", next);
            if ((st = cham_copy_async(r->in, cham_block_ptr(act[next]),
                                      cham_block_ptr(host[next]), bytes, CHAM_COPY_H2D,
                                      label)) != CHAM_OK ||
                (st = cham_event_record(ready[next], r->in)) != CHAM_OK ||
                (st = cham_block_record_stream(r->pinned, host[next], r->in)) != CHAM_OK)
                goto fail;
            cham_block_free(r->pinned, host[next]);
            host[next] = NULL;
        }
        /* Use before arrival would be a hazard: wait for the swap-in. */
        if (swap && i < L - 2 && (st = cham_stream_wait_event(r->compute, ready[i])) != CHAM_OK)
            goto fail;
        args[i].in = cham_block_ptr(act[i]);
        snprintf(label, sizeof label, "bwd.%d", i);
        what = "launching a backward layer";
        if ((st = launch_layer(r, label, act[i], NULL, bytes, backward_cpu, &args[i])) != CHAM_OK)
            goto fail;
        cham_block_free(r->mem, act[i]);
        act[i] = NULL;
    }
    what = "synchronising";
    if ((st = cham_device_synchronize(r->dev)) != CHAM_OK)
        goto fail;
    rc = 0;
    goto out;
fail:
    if (verbose && st != CHAM_ERR_OUT_OF_MEMORY)
        fprintf(stderr, "chameleon check: %s: %s\n", what, cham_status_string(st));
out:
    if (r->dev)
        cham_device_synchronize(r->dev);
    for (int i = 0; act && i < L; i++)
        if (act[i])
            cham_block_free(r->mem, act[i]);
    for (int i = 0; host && i < L; i++)
        if (host[i])
            cham_block_free(r->pinned, host[i]);
    for (int i = 0; ready && i < L; i++)
        cham_event_free(ready[i]);
    cham_event_free(ev);
    free(act);
    free(host);
    free(args);
    free(ready);
    return rc;
}

/* Runs two steps and times the second: the first pays for segment and
 * pinned-memory allocations, as a real job's first step does. *copies and
 * *swapped receive the second step's copy time and bytes moved to the host. */
static int warm_step(run_t *r, const demo_opts_t *o, bool swap, uint64_t *ns, uint64_t *copies,
                     uint64_t *swapped)
{
    if (step(r, o, swap, true) != 0)
        return 1;
    cham_sim_stats_t before, after;
    cham_sim_get_stats(r->dev, &before);
    r->copy_busy = 0;
    if (step(r, o, swap, true) != 0)
        return 1;
    cham_sim_get_stats(r->dev, &after);
    *ns = after.host_ns - before.host_ns;
    *copies = r->copy_busy;
    *swapped = after.bytes_d2h - before.bytes_d2h;
    return 0;
}

/* 0, 2 after a usage error (printed), -1 after --help. */
static int parse(int argc, char **argv, demo_opts_t *o)
{
    static const tool_opt_t opts[] = {{"--device", true, NULL}, {"--layers", true, NULL}};
    if (tool_wants_help(argc, argv)) {
        printf("usage: chameleon check [--device PRESET] [--layers N]\n"
               "Runs a small model's step on the simulated device with less memory\n"
               "than it needs: without swapping, then with swapping.\n"
               "  --device PRESET   simulated device (`chameleon devices`; a100-80g)\n"
               "  --layers N        layers, 3..64 (8)\n");
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        const char *v;
        const tool_opt_t *opt = tool_find_opt("check", opts, 2, argc, argv, &i, &v);
        if (!opt)
            return 2;
        uint64_t n;
        if (strcmp(opt->name, "--device") == 0) {
            if (!tool_check_preset("check", opt->name, v))
                return 2;
            o->preset = v;
        } else {
            if (!tool_parse_uint(v, 3, 64, &n))
                return tool_bad_value("check", opt->name, "3..64", v);
            o->layers = (int)n;
        }
    }
    return 0;
}

int cmd_demo(int argc, char **argv)
{
    demo_opts_t o = {.preset = NULL, .layers = 8, .act_bytes = 8u << 20};
    int rc = parse(argc, argv, &o);
    if (rc || tool_parse_only)
        return rc < 0 ? 0 : rc;
    /* Room for half of the activations plus one layer in flight. */
    o.capacity = (uint64_t)(o.layers / 2 + 2) * o.act_bytes;
    const char *preset = o.preset ? o.preset : cham_preset_default_name();
    printf("chameleon check: sim device %s, memory cut to %.0f MiB, data and hazard detector on\n",
           preset, (double)o.capacity / MiB);
    printf("model: %d layers, one %.0f MiB activation each, all alive at the end of forward "
           "(%.0f MiB)\n\n", o.layers, (double)o.act_bytes / MiB,
           (double)o.layers * (double)o.act_bytes / MiB);

    run_t ideal, native, swapped;
    printf("1. without swapping:\n");
    if ((rc = run_open(&native, &o, o.capacity)) != 0)
        return rc;
    if (step(&native, &o, false, true) == 0) {
        fprintf(stderr, "chameleon check: the step fit without swapping; nothing to show\n");
        run_close(&native);
        return 1;
    }
    run_close(&native);

    printf("\n2. with swapping (swap-out after forward use, swap-in one layer ahead):\n");
    if ((rc = run_open(&swapped, &o, o.capacity)) != 0)
        return rc;
    uint64_t t_swap, copy_ns, swapped_bytes, t_ideal, unused;
    if (warm_step(&swapped, &o, true, &t_swap, &copy_ns, &swapped_bytes) != 0) {
        run_close(&swapped);
        return 1;
    }
    cham_alloc_stats_t as;
    cham_allocator_get_stats(swapped.mem, &as);
    uint64_t hazards = cham_device_hazard_count(swapped.dev);

    if ((rc = run_open(&ideal, &o, 0)) != 0) {
        run_close(&swapped);
        return rc;
    }
    rc = warm_step(&ideal, &o, false, &t_ideal, &unused, &unused);
    run_close(&ideal);
    if (rc) {
        run_close(&swapped);
        return 1;
    }

    /* Copy time not hidden shows up as step time beyond the ideal. */
    uint64_t exposed = t_swap > t_ideal ? t_swap - t_ideal : 0;
    double hidden = copy_ns > exposed ? 100.0 * (1.0 - (double)exposed / (double)copy_ns) : 0.0;
    printf("  step time            %8.3f ms   (second step; simulated, virtual time of %s)\n",
           t_swap / 1e6, preset);
    printf("  ideal step time      %8.3f ms   (same step, unlimited memory)\n", t_ideal / 1e6);
    printf("  overhead             %8.1f %%\n", 100.0 * ((double)t_swap / (double)t_ideal - 1));
    printf("  swapped per step     %8.0f MiB out and back in, %.3f ms of copies, %.0f%% hidden "
           "behind compute\n", swapped_bytes / MiB, copy_ns / 1e6, hidden);
    printf("  peak allocated       %8.0f MiB of %.0f MiB (reserved %.0f MiB)\n",
           as.peak_allocated / MiB, (double)o.capacity / MiB, as.peak_reserved / MiB);
    printf("  free-after-op reuse  %8.1f ops between free and reuse on average, max %" PRIu64
           "\n", as.n_deferred_released ? (double)as.reuse_interval_sum /
                                              (double)as.n_deferred_released : 0.0,
           as.reuse_interval_max);
    printf("  data check           %s\n", swapped.mismatches == 0
                                              ? "every activation came back bit-exact"
                                              : "MISMATCH: activations were corrupted");
    printf("  hazards              %" PRIu64 "\n", hazards);
    bool ok = swapped.mismatches == 0 && hazards == 0;
    run_close(&swapped);
    printf("\n%s\n", ok ? "check passed" : "check FAILED");
    fflush(stdout);
    return ok ? 0 : 1;
}
