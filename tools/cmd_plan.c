/* `chameleon plan`: runs a planner (Chameleon's generator by default, or
 * vDNN's or SwapAdvisor's) on a saved profile for a device preset, prints
 * what the policy predicts and which tensors it swaps when, and optionally
 * saves the policy as JSON (docs/policy-format.md). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "chameleon/policy.h"
#include "chameleon/profile.h"
#include "chameleon/hyperoffload.h"
#include "chameleon/swapadvisor.h"
#include "args.h"
#include "commands.h"
#include "train.h"

#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * 1024.0 * 1024.0)

typedef struct plan_opts {
    const char *profile;
    const char *preset;      /* NULL = the default preset */
    uint64_t capacity;       /* 0 = the profile's, else the preset's */
    uint64_t reserve;        /* UINT64_MAX = the default rule */
    uint32_t layers;         /* 0 = the default rule */
    const char *save;        /* where to save the policy, or NULL */
    uint32_t free_delay;     /* planner's free_delay_ops */
    uint64_t min_swap;       /* planner's min_swap_bytes (default: train's) */
    bool bound;              /* --bound: also the lower bound on the step time */
    bool swap_only;          /* --swap-only: no recomputation */
    bool early_swap_in;      /* --early-swap-in: the planner's early_swap_in */
    bool no_refine;          /* --no-refine: the planner's refine off */
    bool partial;            /* --partial: print a policy that does not fit */
    const char *strategy;    /* --strategy: chameleon, chameleon-swap, vdnn, swapadvisor,
                                hyperoffload */
    cham_swapadvisor_options_t sa;   /* --search-seconds, --generations, ... */
} plan_opts_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chameleon plan PROFILE.json [--device PRESET] [--capacity SIZE]\n"
            "                      [--reserve SIZE] [--layers N] [--free-delay N]\n"
            "                      [--min-swap SIZE] [--swap-only] [--early-swap-in]\n"
            "                      [--no-refine] [--partial]\n"
            "                      [--bound] [--save FILE] [--strategy NAME]\n"
            "                      [--search-seconds S] [--generations N]\n"
            "                      [--population N] [--seed N] [--reorder on|off]\n"
            "Runs a planner on a saved profile and prints the\n"
            "policy: what it predicts and, per swapped tensor, when it goes out,\n"
            "when its block is reused and when it comes back (per recomputed tensor,\n"
            "when it is dropped and when its op runs again). Model state away across\n"
            "the step's end comes back in the next step: its ops there read \"+N\".\n"
            "  --device PRESET   device preset for the transfer bandwidths (and the\n"
            "                    capacity when neither --capacity nor the profile\n"
            "                    gives one); `chameleon devices` lists them\n"
            "  --capacity SIZE   device memory to plan for (default: the profile's)\n"
            "  --reserve SIZE    bytes kept free (default: the generator's rule)\n"
            "  --layers N        logical layers per phase (default: the generator's rule)\n"
            "  --free-delay N    ops a swapped-out block waits past its predicted copy\n"
            "                    end before reuse (default 0)\n"
            "  --min-swap SIZE   smallest tensor worth swapping (default 16KiB, as in\n"
            "                    `chameleon train`)\n"
            "  --swap-only       swaps only, no recomputation\n"
            "  --early-swap-in   with recomputation and op costs: each swap-in as early\n"
            "                    as memory allows, not as late as it is still done in\n"
            "                    time (what GenPolicy's first and fifth trials plan;\n"
            "                    docs/policy.md, \"The copy queues\")\n"
            "  --no-refine       with recomputation and op costs: keep each swap-in\n"
            "                    where Algorithm 2 put it, even where the replay says\n"
            "                    it stalls and the memory allows it earlier\n"
            "                    (docs/policy.md, \"Refinement\")\n"
            "  --bound           also the lower bound on the step time at this capacity\n"
            "                    for any mix of keeping, swapping and recomputing\n"
            "                    (docs/policy.md, \"The lower bound\")\n"
            "  --save FILE       also save the policy as JSON (docs/policy-format.md)\n"
            "  --partial         when no policy fits (its predicted peak is over the usable\n"
            "                    memory), print (and save) what the planner could place\n"
            "                    anyway; the exit status stays 1\n"
            "  --strategy NAME   the planner: chameleon (default), chameleon-swap (the\n"
            "                    same as --swap-only), vdnn, swapadvisor (a genetic\n"
            "                    search over op schedules and memory pools; docs/\n"
            "                    swapadvisor.md) or hyperoffload (cache operators\n"
            "                    placed by execution-order refinement; docs/\n"
            "                    hyperoffload.md); the policy is always for the\n"
            "                    profile's op order\n"
            "swapadvisor's search:\n"
            "  --search-seconds S  wall-clock limit (10)\n"
            "  --generations N   generations after the first (100); deterministic with\n"
            "                    a seed unless the time limit ends the search first\n"
            "  --population N    individuals per generation (24)\n"
            "  --seed N          of its random choices (1)\n"
            "  --reorder on|off  search schedules too (on); the printed step time is\n"
            "                    then the best schedule's, simulated as the paper does\n"
            "SIZE is a number with a unit: 512MiB, 1.5GiB, 64GB (docs/cli.md, \"Sizes\").\n");
}

#define CMD "plan"


/* ---- the options, one handler each ---------------------------------------------*/

static int set_flag(void *state, const char *a, const char *v)
{
    plan_opts_t *o = state;
    (void)v;
    bool *flag = strcmp(a, "--bound") == 0           ? &o->bound
                 : strcmp(a, "--swap-only") == 0     ? &o->swap_only
                 : strcmp(a, "--early-swap-in") == 0 ? &o->early_swap_in
                 : strcmp(a, "--no-refine") == 0     ? &o->no_refine
                                                     : &o->partial;
    *flag = true;
    return 0;
}

static int set_device(void *state, const char *a, const char *v)
{
    if (!tool_check_preset(CMD, a, v))
        return 2;
    ((plan_opts_t *)state)->preset = v;
    return 0;
}

static int set_save(void *state, const char *a, const char *v)
{
    (void)a;
    ((plan_opts_t *)state)->save = v;
    return 0;
}

/* The strategies that are one planner's policy for a profile; Capuchin's
 * names tensors by position in a run. */
static int set_strategy(void *state, const char *a, const char *v)
{
    cham_strategy_t s;
    if (tool_parse_strategy(CMD, a, v,
                            1u << CHAM_STRATEGY_NATIVE | 1u << CHAM_STRATEGY_IDEAL |
                                1u << CHAM_STRATEGY_RECOMPUTE | 1u << CHAM_STRATEGY_CAPUCHIN |
                                1u << CHAM_STRATEGY_PROTRAIN | 1u << CHAM_STRATEGY_ZERO_OFFLOAD,
                            &s))
        return 2;
    ((plan_opts_t *)state)->strategy = cham_strategy_name(s);
    return 0;
}

static int set_search_seconds(void *state, const char *a, const char *v)
{
    return tool_parse_search_seconds(CMD, a, v, &((plan_opts_t *)state)->sa.search_seconds);
}

static int set_generations(void *state, const char *a, const char *v)
{
    uint64_t n;
    if (!tool_parse_uint(v, 0, 1000000, &n))
        return tool_bad_value(CMD, a, "0..1000000", v);
    ((plan_opts_t *)state)->sa.generations = (uint32_t)n;
    return 0;
}

static int set_population(void *state, const char *a, const char *v)
{
    uint64_t n;
    if (!tool_parse_uint(v, 2, 10000, &n))
        return tool_bad_value(CMD, a, "2..10000", v);
    ((plan_opts_t *)state)->sa.population = (uint32_t)n;
    return 0;
}

static int set_seed(void *state, const char *a, const char *v)
{
    if (!tool_parse_uint(v, 0, UINT64_MAX, &((plan_opts_t *)state)->sa.seed))
        return tool_bad_value(CMD, a, "a number 0 or above", v);
    return 0;
}

static int set_reorder(void *state, const char *a, const char *v)
{
    if (strcmp(v, "on") && strcmp(v, "off"))
        return tool_bad_value(CMD, a, "on or off", v);
    ((plan_opts_t *)state)->sa.reorder = strcmp(v, "on") == 0;
    return 0;
}

static int set_capacity(void *state, const char *a, const char *v)
{
    uint64_t *c = &((plan_opts_t *)state)->capacity;
    if (!tool_parse_size(v, c) || *c == 0)
        return tool_bad_value(CMD, a, "a size above 0 such as 16GiB or 17179869184", v);
    return 0;
}

static int set_min_swap(void *state, const char *a, const char *v)
{
    if (!tool_parse_size(v, &((plan_opts_t *)state)->min_swap))
        return tool_bad_value(CMD, a, "a size such as 64KiB", v);
    return 0;
}

static int set_reserve(void *state, const char *a, const char *v)
{
    uint64_t *r = &((plan_opts_t *)state)->reserve;
    if (!tool_parse_size(v, r) || *r == UINT64_MAX)
        return tool_bad_value(CMD, a, "a size such as 512MiB or 0", v);
    return 0;
}

/* --layers (from 1) and --free-delay (from 0). */
static int set_count(void *state, const char *a, const char *v)
{
    plan_opts_t *o = state;
    bool layers = strcmp(a, "--layers") == 0;
    uint64_t n;
    if (!tool_parse_uint(v, layers ? 1 : 0, 1000000, &n))
        return tool_bad_value(CMD, a, layers ? "1..1000000" : "0..1000000", v);
    *(layers ? &o->layers : &o->free_delay) = (uint32_t)n;
    return 0;
}

static const tool_opt_t opts[] = {
    {"--device", true, set_device}, {"--capacity", true, set_capacity},
    {"--reserve", true, set_reserve}, {"--layers", true, set_count},
    {"--free-delay", true, set_count}, {"--min-swap", true, set_min_swap},
    {"--save", true, set_save}, {"--bound", false, set_flag}, {"--swap-only", false, set_flag},
    {"--early-swap-in", false, set_flag}, {"--no-refine", false, set_flag},
    {"--partial", false, set_flag}, {"--strategy", true, set_strategy},
    {"--search-seconds", true, set_search_seconds}, {"--generations", true, set_generations},
    {"--population", true, set_population}, {"--seed", true, set_seed},
    {"--reorder", true, set_reorder},
};

/* 0 on success, 2 for bad usage (message printed); -1 after --help. */
static int parse(int argc, char **argv, plan_opts_t *o)
{
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            if (o->profile) {
                fprintf(stderr, "chameleon plan: unexpected argument \"%s\" (one profile "
                        "only)\n", a);
                return 2;
            }
            o->profile = a;
            continue;
        }
        const char *v;
        const tool_opt_t *opt = tool_find_opt(CMD, opts, sizeof opts / sizeof opts[0], argc,
                                              argv, &i, &v);
        if (!opt)
            return 2;
        int rc = opt->apply(o, opt->name, v);
        if (rc)
            return rc;
    }
    if (!o->profile) {
        fprintf(stderr, "chameleon plan: no profile given\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* "17 relu": op index and name, from the profile's token names. */
/* "66 attention_backward"; an op of the next step (an item that wraps:
 * model state back for the next step) as "+3 matmul". */
static void op_name(char *buf, size_t n, const cham_profile_view_t *pv, uint32_t op,
                    bool next_step)
{
    if (op >= pv->n_ops && pv->n_ops) {      /* free_op n: the next step's first op */
        op -= (uint32_t)pv->n_ops;
        next_step = true;
    }
    const char *name = "?";
    if (op < pv->n_ops) {
        cham_op_token_t t = pv->ops[op].token;
        if (t >= 0 && (size_t)t < pv->n_tokens)
            name = pv->token_names[t];
    }
    snprintf(buf, n, "%s%" PRIu32 " %s", next_step ? "+" : "", op, name);
}

/* The op columns of an item: out, done, free, in, use. */
static void item_ops(const cham_policy_item_t *it, const cham_profile_view_t *pv,
                     char names[5][96])
{
    op_name(names[0], sizeof names[0], pv, it->swap_out_op, false);
    op_name(names[1], sizeof names[1], pv, it->swap_out_done_op, false);
    op_name(names[2], sizeof names[2], pv, it->free_op, false);
    op_name(names[3], sizeof names[3], pv, it->swap_in_op, it->wraps);
    op_name(names[4], sizeof names[4], pv, it->use_op, it->wraps);
}

/* "80.00 GiB" or, below 1 GiB, "136.0 MiB". */
static const char *size_str(char *buf, size_t n, uint64_t bytes)
{
    if ((double)bytes >= GiB)
        snprintf(buf, n, "%.2f GiB", (double)bytes / GiB);
    else
        snprintf(buf, n, "%.1f MiB", (double)bytes / MiB);
    return buf;
}

static void print_policy(const cham_policy_view_t *v, const cham_profile_view_t *pv,
                         const char *preset)
{
    uint64_t swapped = 0, dropped = 0;
    size_t n_rc = 0;
    for (size_t i = 0; i < v->n_items; i++) {
        bool rc = v->items[i].recompute;
        n_rc += rc;
        *(rc ? &dropped : &swapped) += v->items[i].bytes;
    }
    printf("planner:            %s (device %s, %zu ops, %zu logical layers)\n", v->planner,
           preset, v->n_ops, v->n_layers);
    char cap[32], usable[32];
    printf("capacity:           %s (%" PRIu64 " bytes), usable %s (%" PRIu64 " bytes)\n",
           size_str(cap, sizeof cap, v->capacity), v->capacity,
           size_str(usable, sizeof usable, v->usable), v->usable);
    printf("peak:               %.1f MiB without swaps -> %.1f MiB predicted\n",
           (double)v->peak_without_swaps / MiB, (double)v->predicted_peak / MiB);
    printf("step time:          %.3f ms -> %.3f ms predicted\n", (double)v->step_ns / 1e6,
           (double)v->predicted_step_ns / 1e6);
    printf("items:              %zu swapped, %.1f MiB in all; %zu recomputed, %.1f MiB\n",
           v->n_items - n_rc, (double)swapped / MiB, n_rc, (double)dropped / MiB);
    if (v->n_items == 0)
        return;
    /* Op columns as wide as their longest entry: names are never cut. */
    int w = (int)strlen("swap out after");
    char names[5][96];
    for (size_t i = 0; i < v->n_items; i++) {
        item_ops(&v->items[i], pv, names);
        for (size_t k = 0; k < 5; k++)
            if ((int)strlen(names[k]) > w)
                w = (int)strlen(names[k]);
    }
    printf("\n%8s %10s  %-*s %-*s %-*s %5s %-*s %-*s %9s %10s %s\n", "storage", "MiB", w,
           "swap out after", w, "copy done at", w, "free at", "layer", w, "swap in before", w,
           "used by", "score", "stall us", "recompute us");
    for (size_t i = 0; i < v->n_items; i++) {
        const cham_policy_item_t *it = &v->items[i];
        item_ops(it, pv, names);
        char rc[32] = "-";
        if (it->recompute)
            snprintf(rc, sizeof rc, "%.1f", (double)it->recompute_ns / 1e3);
        printf("%8" PRIu64 " %10.1f  %-*s %-*s %-*s %5" PRIu32 " %-*s %-*s %9.3g %10.1f %s\n",
               it->storage, (double)it->bytes / MiB, w, names[0], w, names[1], w, names[2],
               it->swap_in_layer, w, names[3], w, names[4], it->score,
               (double)it->stall_ns / 1e3, rc);
    }
}

/* SwapAdvisor's search: what it found and what it cost. */
static void print_search(const cham_swapadvisor_result_t *r)
{
    printf("search:             %u generations, %" PRIu64 " candidates in %.2f s (%s)\n",
           r->generations, r->evaluations, r->search_seconds,
           r->stopped_by_time ? "stopped by the time limit: not reproducible"
                              : "deterministic with its seed");
    printf("best candidate:     %.3f ms simulated, ops alone %.3f ms (%.1f%% of ideal); %s; "
           "pool of %u size classes, %.1f MiB\n", (double)r->step_ns / 1e6,
           (double)r->ideal_ns / 1e6, r->step_ns ? 100.0 * (double)r->ideal_ns /
                                                       (double)r->step_ns : 100.0,
           r->reordered ? "ops reordered" : "the profile's op order", r->n_classes,
           (double)r->pool_bytes / MiB);
    printf("                    %u swap-ins (%.1f MiB), %u swap-outs (%.1f MiB) a step\n",
           r->swaps_in, (double)r->swapped_in_bytes / MiB, r->swaps_out,
           (double)r->swapped_out_bytes / MiB);
    if (r->profile_order_ns == UINT64_MAX)
        printf("profile's order:    the best pool cannot run it\n");
    else
        printf("profile's order:    %.3f ms simulated with the best pool (the policy below)\n",
               (double)r->profile_order_ns / 1e6);
}

/* HyperOffload's insertion and refinement: what they did. */
static void print_hyperoffload(const cham_hyperoffload_result_t *r)
{
    printf("cache operators:    %zu of %zu idle tensors offloaded (%.1f MiB); peak %.1f MiB "
           "resident, %.1f MiB offloaded\n", r->offloaded, r->candidates,
           (double)r->offloaded_bytes / MiB, (double)r->resident_peak / MiB,
           (double)r->refined.peak / MiB);
    printf("refinement:         %zu operators moved, simulated step %.3f ms -> %.3f ms (ops "
           "alone %.3f ms), %" PRIu64 " placements simulated\n", r->moved,
           (double)r->inserted.step_ns / 1e6, (double)r->refined.step_ns / 1e6,
           (double)r->ideal_ns / 1e6, r->evaluations);
}

int cmd_plan(int argc, char **argv)
{
    plan_opts_t o = {.reserve = UINT64_MAX, .min_swap = GPT_MIN_SWAP_DEFAULT,
                     .strategy = "chameleon", .sa = cham_swapadvisor_options_default()};
    int rc = parse(argc, argv, &o);
    if (rc || tool_parse_only)
        return rc < 0 ? 0 : rc;
    const cham_preset_t *preset = cham_preset_find(o.preset ? o.preset
                                                            : cham_preset_default_name());
    if (o.save && tool_same_file(o.save, o.profile)) {
        fprintf(stderr, "chameleon plan: --save %s is the profile being read (%s): it would be "
                "overwritten; choose another path\n", o.save, o.profile);
        return 2;
    }
    if (o.save && !tool_check_output_file(CMD, "--save", o.save))
        return 1;

    char err[512];
    cham_profile_t *prof;
    if (cham_profile_load_json(o.profile, &prof, err, sizeof err) != CHAM_OK) {
        fprintf(stderr, "chameleon plan: %s\n", err);
        return 1;
    }
    cham_profile_view_t pv;
    cham_profile_get(prof, &pv);

    cham_planner_config_t cfg = cham_planner_config_default();
    cfg.capacity = o.capacity ? o.capacity : pv.capacity ? pv.capacity : preset->capacity;
    if (o.reserve != UINT64_MAX)
        cfg.reserve = o.reserve;
    cfg.h2d_bandwidth = preset->h2d_bandwidth;
    cfg.d2h_bandwidth = preset->d2h_bandwidth;
    cfg.forward_layers = o.layers;
    cfg.backward_layers = o.layers;
    cfg.free_delay_ops = o.free_delay;
    cfg.min_swap_bytes = o.min_swap;
    cfg.recompute = !o.swap_only && strcmp(o.strategy, "chameleon") == 0;
    cfg.early_swap_in = o.early_swap_in;
    cfg.refine = !o.no_refine;
    cfg.partial = o.partial;     /* Chameleon's planner: what it could place */

    if (o.bound) {
        cham_step_bound_t b;
        if (cham_plan_bound(prof, &cfg, &b, err, sizeof err) != CHAM_OK) {
            fprintf(stderr, "chameleon plan: %s\n", err);
            cham_profile_free(prof);
            return 1;
        }
        if (b.feasible)
            printf("lower bound:        %.3f ms a step (the ops and their collectives alone: "
                   "%.3f ms; binding at memory sample %" PRIu32 ", %.1f MiB above the "
                   "capacity, %.1f MiB of them copied out and %.1f MiB recomputed)\n",
                   (double)b.bound_ns / 1e6, (double)b.compute_ns / 1e6, b.sample,
                   (double)b.excess_bytes / MiB, (double)b.swap_bytes / MiB,
                   (double)b.recompute_bytes / MiB);
        else
            printf("lower bound:        none: at memory sample %" PRIu32 " %.1f MiB above the "
                   "capacity cannot leave the device under any policy\n", b.sample,
                   (double)b.excess_bytes / MiB);
    }

    cham_policy_t *pol;
    cham_status_t st;
    err[0] = '\0';   /* a planner that succeeds may still say what is left */
    if (strcmp(o.strategy, "vdnn") == 0) {
        st = cham_plan_vdnn(prof, &cfg, &pol, err, sizeof err);
    } else if (strcmp(o.strategy, "swapadvisor") == 0) {
        cham_swapadvisor_result_t r;
        st = cham_plan_swapadvisor(prof, &cfg, &o.sa, &pol, &r, err, sizeof err);
        if (st == CHAM_OK)
            print_search(&r);
        cham_swapadvisor_result_free(&r);
    } else if (strcmp(o.strategy, "hyperoffload") == 0) {
        cham_hyperoffload_result_t r;
        st = cham_plan_hyperoffload(prof, &cfg, NULL, &pol, &r, err, sizeof err);
        if (st == CHAM_OK)
            print_hyperoffload(&r);
    } else {
        st = cham_plan_chameleon(prof, &cfg, &pol, err, sizeof err);
    }
    if (st != CHAM_OK) {
        char cap[32];
        fprintf(stderr, "chameleon plan: %s: no policy for %s on %s: %s (%s)\n", o.profile,
                size_str(cap, sizeof cap, cfg.capacity), preset->name, err,
                cham_status_string(st));
        cham_profile_free(prof);
        return 1;
    }
    cham_policy_view_t v;
    cham_policy_get(pol, &v);
    /* One rule for every strategy: a policy whose predicted peak is over the
     * usable memory is no policy (exit 1); --partial prints it anyway. */
    bool fits = v.predicted_peak <= v.usable;
    if (!fits) {
        char peak[32], usable[32], cap[32];
        fprintf(stderr, "chameleon plan: %s: no policy fits %s on %s: the %s planner's policy "
                "predicts a peak of %s (%" PRIu64 " bytes), over the %s usable (%" PRIu64
                " bytes)%s%s%s; %s\n", o.profile, size_str(cap, sizeof cap, cfg.capacity),
                preset->name, v.planner, size_str(peak, sizeof peak, v.predicted_peak),
                v.predicted_peak, size_str(usable, sizeof usable, v.usable), v.usable,
                err[0] ? " (" : "", err[0] ? err : "", err[0] ? ")" : "",
                o.partial ? "the partial policy follows (--partial)"
                          : "--partial prints what it could place");
        if (!o.partial) {
            cham_policy_free(pol);
            cham_profile_free(prof);
            return 1;
        }
    }
    print_policy(&v, &pv, preset->name);

    rc = fits ? 0 : 1;
    if (o.save) {
        if (cham_policy_save_json(pol, o.save, err, sizeof err) != CHAM_OK) {
            fprintf(stderr, "chameleon plan: %s\n", err);
            rc = 1;
        } else {
            printf("\npolicy saved to %s\n", o.save);
        }
    }
    cham_policy_free(pol);
    cham_profile_free(prof);
    return rc;
}
