/* Published measurements of real training runs, each with the run's
 * configuration as its source states it, for the fidelity experiment
 * (issue 51; docs/fidelity.md cites every source in full and says how each
 * figure was read). */
#ifndef CHAM_FIDELITY_H
#define CHAM_FIDELITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/chameleon.h"

/* How a source states its time figure; fid_step_seconds turns each into
 * seconds per optimizer step of one device. */
typedef enum fid_time_unit {
    FID_NO_TIME,
    FID_MS_PER_STEP,             /* milliseconds per iteration (global batch) */
    FID_TOKENS_S_DEVICE,         /* tokens per second per device */
    FID_TOKENS_S_JOB,            /* tokens per second of the whole job */
} fid_time_unit_t;

/* How a source states its memory figure, per device. */
typedef enum fid_memory_unit {
    FID_NO_MEMORY,
    FID_MIB,                     /* MiB, as nvidia-smi prints */
    FID_GIB,                     /* GiB */
    FID_GB_AS_GIB,               /* written "GB" of an "80 GB" card: read as GiB
                                    (docs/devices.md, "Conventions") */
} fid_memory_unit_t;

/* What a source's memory figure counts. */
typedef enum fid_memory_kind {
    FID_RESERVED,                /* what the card holds (nvidia-smi, or the
                                    caching allocator's reserved peak) */
    FID_ALLOCATED,               /* tensors only (torch.cuda.max_memory_allocated) */
} fid_memory_kind_t;

typedef struct fid_case {
    const char *id;              /* the source's name for the run, or ours */
    const char *source;          /* a key of docs/fidelity.md, "Sources" */
    const char *device;          /* the preset of the source's accelerator */
    cham_arch_t arch;
    uint32_t layers, hidden, heads, vocab, seq, mbs, gbs, tp, pp, dp, zero;
    uint32_t ffn, kv_heads;      /* 0: 4 x hidden, heads */
    cham_dtype_t dtype;
    cham_precision_t precision;  /* the framework's: docs/fidelity.md */
    bool flash, recompute;
    double time;                 /* as published, in time_unit */
    fid_time_unit_t time_unit;
    double memory;               /* as published, in memory_unit */
    fid_memory_unit_t memory_unit;
    fid_memory_kind_t memory_kind;
    uint32_t capacity_gib;       /* the card's memory when not the preset's */
} fid_case_t;

extern const fid_case_t fid_cases[];
extern const size_t fid_n_cases;

/* The case's training set-up as cham_model_config_t. */
cham_model_config_t fid_model(const fid_case_t *c);
/* Its published figures in seconds per optimizer step and bytes; NAN when
 * it has none. */
double fid_step_seconds(const fid_case_t *c);
double fid_memory_bytes(const fid_case_t *c);

#endif
