/* The machine a benchmark runs on, as its output describes it: the
 * monotonic clock every timing reads, what one read costs, and the CPU. */
#ifndef BENCH_LIB_MACHINE_H
#define BENCH_LIB_MACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns; inline, so a timed loop pays only the read. */
static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The median of n > 0 samples; sorts v in place. */
uint64_t bench_median_u64(uint64_t *v, size_t n);

/* Average cost of one bench_now_ns(), in ns: the best of a few runs. */
double bench_clock_cost_ns(void);

/* "AMD EPYC (family 25, model 17)", from /proc/cpuinfo ("unknown CPU"). */
void bench_cpu_model(char *buf, size_t size);

/* Makes stdout line-buffered, as it is on a terminal: each row shows as
 * it is measured also when the output is a pipe or a file, so a run
 * stopped early (or read through `head`) still shows what it measured.
 * Every benchmark's main calls it first. */
void bench_output_by_line(void);

/* A target's verdict as every benchmark prints it. */
static inline const char *bench_verdict(bool met)
{
    return met ? "met" : "NOT met";
}

#endif
