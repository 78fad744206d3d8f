/* The scripted workload's kernels (train_kernels.h). */
#include "support/train_kernels.h"

static uint64_t fold(uint64_t h, uint32_t v)
{
    return (h ^ v) * 0x100000001b3u;
}

/* in[k][i] for any i: inputs of other sizes wrap around (the division only
 * where they do: a division per element was about 15% of test_executor's
 * time under the sanitizers). */
static inline uint32_t at(const ts_kargs_t *a, int k, size_t i)
{
    size_t n = a->n_in[k];
    return a->in[k][i < n ? i : i % n];
}

void ts_run_kernel(void *p)
{
    ts_kargs_t *a = p;
    size_t n = a->n_out[0];
    switch (a->kind) {
    case EMBED:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = (uint32_t)(a->seed * 2654435761u) ^ (uint32_t)(i * 40503u);
        break;
    case LN:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i) ^ (at(a, 0, i) >> 5);
        break;
    case MATMUL:          /* in: x, W */
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i) * 3u + at(a, 1, i);
        break;
    case ATTN:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i) + at(a, 0, i + n) * 7u + at(a, 0, i + 2 * n);
        break;
    case ADD:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i) + at(a, 1, i);
        break;
    case GELU:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i) ^ (at(a, 0, i) >> 7);
        break;
    case PROBE:
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i) + 1u;
        break;
    case LOSS:            /* in: x; out: its gradient */
        for (size_t i = 0; i < n; i++) {
            *a->sum = fold(*a->sum, at(a, 0, i));
            a->out[0][i] = at(a, 0, i) * 5u + 1u;
        }
        break;
    case SUM:
        for (size_t i = 0; i < a->n_in[0]; i++)
            *a->sum = fold(*a->sum, at(a, 0, i));
        break;
    case ADAMW:           /* in: gW; out: W, gW, m, v (integer stand-ins) */
        for (size_t j = 0; j < n; j++) {
            uint32_t g = at(a, 0, j);
            a->out[2][j] = a->out[2][j] - (a->out[2][j] >> 3) + (g >> 3);
            a->out[3][j] = a->out[3][j] - (a->out[3][j] >> 4) + ((g * g) >> 4);
            a->out[0][j] -= (a->out[2][j] >> 3) ^ (a->out[3][j] >> 11);
            a->out[1][j] = 0;
        }
        break;
    case SGD:             /* in: gW; out: W, gW */
        for (size_t j = 0; j < n; j++) {
            a->out[0][j] -= at(a, 0, j) >> 3;
            a->out[1][j] = 0;
        }
        break;
    case LN_BWD:          /* in: g, x */
    case ATTN_BWD:        /* in: g, qkv */
    case GELU_BWD:        /* in: g, f */
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i) + (at(a, 1, i) ^ (uint32_t)a->kind);
        break;
    case MATMUL_BWD:      /* in: g, x, W; out: gx, gW */
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = (at(a, 0, i) ^ at(a, 1, i)) + at(a, 2, i);
        for (size_t j = 0; j < a->n_out[1]; j++)
            a->out[1][j] += at(a, 0, j) * at(a, 1, j);
        break;
    case ADD_BWD:         /* in: g; out: g0, g1 */
        for (size_t i = 0; i < n; i++)
            a->out[0][i] = at(a, 0, i);
        for (size_t i = 0; i < a->n_out[1]; i++)
            a->out[1][i] = at(a, 0, i) * 3u;
        break;
    case ACC:             /* in: g; out: the sum so far */
        for (size_t i = 0; i < n; i++)
            a->out[0][i] += at(a, 0, i);
        break;
    case N_KINDS:
        break;
    }
}
