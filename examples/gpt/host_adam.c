/* The optimizer on the host (host_adam.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_adam.h"

struct gpt_host_adam {
    gpt_ops_t *ops;
    cham_device_t *dev;
    cham_stream_t *compute, *copy, *cpu;   /* cpu: the host stream */
    cham_event_t *ev_compute, *ev_copy, *ev_cpu;
    size_t n;
    float *grads, *master, *m, *v;         /* pinned, n floats each */
};

/* `later` waits for the work queued on `earlier` so far. */
static cham_status_t order(cham_event_t *ev, cham_stream_t *earlier, cham_stream_t *later)
{
    cham_status_t st = cham_event_record(ev, earlier);
    return st != CHAM_OK ? st : cham_stream_wait_event(later, ev);
}

static cham_access_t host_range(float *p, size_t n, cham_access_mode_t mode)
{
    return (cham_access_t){p, n * sizeof *p, mode};
}

/* A kernel on the host stream over the n floats of up to four buffers. */
static cham_status_t on_host(gpt_host_adam_t *h, gpt_args_t *a, float *const *f,
                             const cham_access_mode_t *modes, size_t k, double flops)
{
    cham_access_t acc[4];
    double bytes = 0;
    for (size_t i = 0; i < k; i++) {
        a->f[i] = f[i];
        acc[i] = host_range(f[i], h->n, modes[i]);
        bytes += (double)acc[i].bytes * (modes[i] == CHAM_ACCESS_READ_WRITE ? 2 : 1);
    }
    return gpt_launch(h->cpu, a, acc, k, flops, bytes);
}

/* The copy of tensor t to the host buffer (GPT_TO_HOST, on the copy
 * stream after the compute stream's work so far) or from it into t
 * (GPT_FROM_HOST, on the compute stream after the host's work), inside an
 * op, so that the runtime has the tensor on the device meanwhile. */
static cham_status_t copy_op(gpt_host_adam_t *h, gpt_kind_t kind, cham_tensor_t *t,
                             float *host)
{
    cham_context_t *ctx = h->ops->ctx;
    bool to_host = kind == GPT_TO_HOST;
    cham_status_t st = to_host ? cham_op_begin(ctx, h->ops->tok[kind], &t, 1, NULL, 0)
                               : cham_op_begin(ctx, h->ops->tok[kind], NULL, 0, &t, 1);
    if (st != CHAM_OK)
        return st;
    void *dev = cham_tensor_data(t);
    size_t bytes = cham_tensor_bytes(t);
    if (to_host) {
        st = order(h->ev_compute, h->compute, h->copy);
        if (st == CHAM_OK)
            st = cham_copy_async(h->copy, host, dev, bytes, CHAM_COPY_D2H, "grads_to_host");
        if (st == CHAM_OK)        /* the block stays until the copy has read it */
            st = cham_tensor_record_stream(t, h->copy);
    } else {
        st = order(h->ev_cpu, h->cpu, h->compute);
        if (st == CHAM_OK)
            st = cham_copy_async(h->compute, dev, host, bytes, CHAM_COPY_H2D,
                                 "params_from_host");
    }
    cham_status_t end = cham_op_end(ctx);
    return st != CHAM_OK ? st : end;
}

cham_status_t gpt_host_adam_new(gpt_ops_t *ops, cham_tensor_t *params, size_t n,
                                gpt_host_adam_t **out, char *err, size_t err_size)
{
    *out = NULL;
    gpt_host_adam_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_size, "host optimizer: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    h->ops = ops;
    h->dev = cham_context_device(ops->ctx);
    h->compute = cham_context_compute_stream(ops->ctx);
    h->n = n;
    cham_status_t st = cham_stream_new_host(h->dev, "host_adam", &h->cpu);
    if (st == CHAM_OK)
        st = cham_stream_new(h->dev, "grads_to_host", &h->copy);
    cham_event_t **ev[] = {&h->ev_compute, &h->ev_copy, &h->ev_cpu};
    for (size_t i = 0; i < 3 && st == CHAM_OK; i++)
        st = cham_event_new(h->dev, ev[i]);
    float **buf[] = {&h->grads, &h->master, &h->m, &h->v};
    for (size_t i = 0; i < 4 && st == CHAM_OK; i++)
        st = cham_device_host_alloc(h->dev, n * sizeof(float), (void **)buf[i]);
    if (st != CHAM_OK) {
        snprintf(err, err_size, "host optimizer: %s", cham_device_last_error(h->dev));
        gpt_host_adam_free(h);
        return st;
    }
    /* Zero moments, and the master weights as initialised on the device. */
    cham_access_mode_t w = CHAM_ACCESS_WRITE;
    for (size_t i = 0; i < 2 && st == CHAM_OK; i++) {
        gpt_args_t z = {.kind = GPT_ZERO, .n = n};
        st = on_host(h, &z, i ? &h->v : &h->m, &w, 1, (double)n);
    }
    if (st == CHAM_OK)
        st = copy_op(h, GPT_TO_HOST, params, h->master);
    if (st != CHAM_OK) {
        snprintf(err, err_size, "host optimizer: %s", cham_context_last_error(ops->ctx));
        gpt_host_adam_free(h);
        return st;
    }
    *out = h;
    return CHAM_OK;
}

void gpt_host_adam_free(gpt_host_adam_t *h)
{
    if (!h)
        return;
    if (h->cpu)
        cham_stream_synchronize(h->cpu);
    if (h->copy)
        cham_stream_synchronize(h->copy);
    cham_device_host_free(h->dev, h->grads);
    cham_device_host_free(h->dev, h->master);
    cham_device_host_free(h->dev, h->m);
    cham_device_host_free(h->dev, h->v);
    cham_event_free(h->ev_compute);
    cham_event_free(h->ev_copy);
    cham_event_free(h->ev_cpu);
    cham_stream_free(h->copy);
    cham_stream_free(h->cpu);
    free(h);
}

cham_status_t gpt_host_adam_send(gpt_host_adam_t *h, cham_tensor_t *grads, size_t first,
                                 size_t count)
{
    cham_tensor_t *view;
    cham_status_t st = cham_tensor_view(grads, first * sizeof(float), count * sizeof(float),
                                        CHAM_DTYPE_F32, NULL, &view);
    if (st != CHAM_OK)
        return st;
    st = copy_op(h, GPT_TO_HOST, view, h->grads + first);
    cham_tensor_release(view);
    return st;
}

cham_status_t gpt_host_adam_check(gpt_host_adam_t *h, bool *overflow, double *sum_squares)
{
    cham_status_t st = order(h->ev_copy, h->copy, h->cpu);
    gpt_args_t a = {.kind = GPT_CHECK_GRADS, .n = h->n, .out_flag = overflow,
                    .out_value = sum_squares};
    cham_access_mode_t r = CHAM_ACCESS_READ;
    if (st == CHAM_OK)
        st = on_host(h, &a, &h->grads, &r, 1, 2.0 * (double)h->n);
    /* found_inf.item(): the host waits for its own stream. */
    return st != CHAM_OK ? st : cham_stream_synchronize(h->cpu);
}

cham_status_t gpt_host_adam_fence(gpt_host_adam_t *h)
{
    return order(h->ev_copy, h->copy, h->compute);
}

cham_status_t gpt_host_adam_step(gpt_host_adam_t *h, cham_tensor_t *params, float factor,
                                 const gpt_args_t *adam)
{
    gpt_args_t sc = {.kind = GPT_SCALE, .n = h->n, .scale = factor};
    cham_access_mode_t rw = CHAM_ACCESS_READ_WRITE, r = CHAM_ACCESS_READ;
    cham_status_t st = on_host(h, &sc, &h->grads, &rw, 1, (double)h->n);
    gpt_args_t ad = *adam;
    ad.n = h->n;
    float *f[4] = {h->grads, h->master, h->m, h->v};
    cham_access_mode_t modes[4] = {r, rw, rw, rw};
    if (st == CHAM_OK)
        st = on_host(h, &ad, f, modes, 4, 12.0 * (double)h->n);
    return st != CHAM_OK ? st : copy_op(h, GPT_FROM_HOST, params, h->master);
}

cham_status_t gpt_host_adam_read_master(gpt_host_adam_t *h, float *host)
{
    cham_status_t st = cham_stream_synchronize(h->cpu);
    if (st == CHAM_OK)
        st = cham_stream_synchronize(h->copy);
    if (st == CHAM_OK)
        memcpy(host, h->master, h->n * sizeof *host);
    return st;
}
