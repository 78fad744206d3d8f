/* ProTrain's model of one profiled step, shared by its estimators
 * (protrain.c) and its search (protrain_search.c). docs/protrain.md. */
#ifndef CHAM_PROTRAIN_IMPL_H
#define CHAM_PROTRAIN_IMPL_H

#include <stdint.h>

#include "chameleon/protrain.h"

/* The step cut where ProTrain's decisions change what runs: the ops
 * before the first block (PRE), each block's forward (FWD), the ops
 * between the last block's forward and its backward (POST: final norm,
 * head, loss and their backward), each block's backward (BWD, last block
 * first) and the rest (TAIL: the embedding's backward, the optimizer). */
typedef enum pt_kind { PT_PRE, PT_FWD, PT_POST, PT_BWD, PT_TAIL } pt_kind_t;

#define PT_MAX_READS 8

typedef struct pt_seg {
    pt_kind_t kind;
    uint32_t block;              /* FWD, BWD */
    double ns;                   /* its ops' costs and their share of the
                                    step's time no op cost explains */
    double opt_ns;               /* of ns, the optimizer's ops */
    uint64_t start, end, peak;   /* bytes held at its start, end, most */
    uint32_t reads[PT_MAX_READS];/* chunks whose weights its ops read */
    uint32_t n_reads;
    uint32_t grads_of;           /* the chunk whose gradient it completes,
                                    UINT32_MAX: none */
} pt_seg_t;

struct cham_protrain_model {
    uint32_t n_blocks, n_chunks, n_segs;
    pt_seg_t *seg;               /* PRE, FWD 0.., POST, BWD L-1..0, TAIL */
    uint64_t *saved, *input;     /* per block: kept for the backward, its input */
    uint64_t *w, *g, *o;         /* per chunk: weights, gradients, optimizer states */
    uint64_t weights;            /* sum of w */
    /* Per n_persist (0 .. n_chunks): over the chunks from n_persist on,
     * their whole model state, their largest weights and gradient, and
     * the most of them one segment reads (the fewest buffers). */
    uint64_t *np_state, *np_wmax, *np_gmax;
    uint32_t *np_min_buffers;
    uint32_t elt;                /* bytes per weight */
    bool tied;                   /* POST reads the first chunk's weights (a
                                    head tied to the embedding) */
};

static inline uint32_t pt_seg_fwd(const cham_protrain_model_t *m, uint32_t b)
{
    (void)m;
    return 1 + b;
}
static inline uint32_t pt_seg_post(const cham_protrain_model_t *m)
{
    return m->n_blocks + 1;
}
static inline uint32_t pt_seg_bwd(const cham_protrain_model_t *m, uint32_t b)
{
    return m->n_blocks + 2 + (m->n_blocks - 1 - b);
}

/* The usable bytes of a device (capacity less the reserve, or its rule). */
uint64_t pt_usable(const cham_protrain_device_t *dev);

/* Memory: what a layout (n_swap, n_checkpoint, swap_interval) leaves of
 * the profile's curve, before the model state's share, with what the
 * backward's gradients in flight add wherever their chunks are on the
 * host: a BWD segment's own chunk's (being made) and, when its copy to
 * the host outlasts the segment, the one before's. */
typedef struct pt_layout_mem {
    uint64_t fwd;                /* most bytes in PRE and FWD segments */
    uint64_t post, tail;         /* in POST and in TAIL */
    uint64_t *bwd;               /* per block: in its BWD segment */
    uint64_t *both;              /* per block b: the most in BWD b' >= b with
                                    the gradients in flight */
    uint64_t *before;            /* per block b: the most in BWD b' < b */
} pt_layout_mem_t;

/* Allocates the arrays (false: out of host memory), and frees them. */
bool pt_layout_mem_init(const cham_protrain_model_t *m, pt_layout_mem_t *lm);
void pt_layout_mem_free(pt_layout_mem_t *lm);
/* Fills *lm (initialised) for the layout; false when the host is out of
 * memory. */
bool pt_layout_mem(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                   const cham_protrain_config_t *c, pt_layout_mem_t *lm);
/* The peak with the model state's share: n_persist and n_buffer. */
uint64_t pt_peak(const cham_protrain_model_t *m, const pt_layout_mem_t *lm,
                 const cham_protrain_config_t *c);
/* The fewest chunk buffers a step needs (the most non-persistent chunks
 * one segment reads), 0 when every chunk is persistent. */
uint32_t pt_min_buffers(const cham_protrain_model_t *m, uint32_t n_persist);
/* The host's time for a chunk: unscale and check its gradient, then
 * AdamW over fp32 master weights and moments (12 bytes per weight). */
double pt_host_ns(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                  uint32_t chunk);
/* A layout's work whatever the chunks: the compute stream's (the
 * segments', checkpointed blocks' forwards again, none of the
 * optimizer's) and the bytes its swap blocks move each way. */
void pt_layout_work(const cham_protrain_model_t *m, const cham_protrain_config_t *c,
                    double *compute_ns, uint64_t *swapped);
/* The step time of a configuration; false when the host is out of memory. */
bool pt_step_ns(const cham_protrain_model_t *m, const cham_protrain_device_t *dev,
                const cham_protrain_config_t *c, double *out);

#endif
