/* The backend interface: a counting test double built by filling in the
 * table shows what the public wrappers check before a backend is called,
 * how handles map to backend objects, the version handshake, and that
 * watching (task and hazard hooks) is optional. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/backend.h"
#include "chameleon/sim.h"

typedef struct counting {
    cham_device_t *attached;
    int destroyed, mem_allocs, copies, kernels, streams, events, syncs;
    char buf[64];
    int objects[8];
} counting_t;

static void c_attach(void *ctx, cham_device_t *dev) { ((counting_t *)ctx)->attached = dev; }
static void c_destroy(void *ctx) { ((counting_t *)ctx)->destroyed++; }
static void c_info(void *ctx, cham_device_info_t *i)
{
    (void)ctx;
    i->backend = "counting";
    i->name = "double";
    i->capacity = 1 << 20;
}
static cham_status_t c_mem_alloc(void *ctx, size_t bytes, void **ptr)
{
    counting_t *c = ctx;
    c->mem_allocs++;
    if (bytes > sizeof c->buf) {
        cham_device_set_error(c->attached, "counting: %zu bytes is too many", bytes);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    *ptr = c->buf;
    return CHAM_OK;
}
static void c_mem_free(void *ctx, void *ptr) { (void)ctx, (void)ptr; }
static cham_status_t c_stream_new(void *ctx, int id, const char *name, void **s)
{
    counting_t *c = ctx;
    (void)name;
    c->streams++;
    *s = &c->objects[id];
    return CHAM_OK;
}
static void c_stream_free(void *ctx, void *s) { (void)s, ((counting_t *)ctx)->streams--; }
static cham_status_t c_sync_stream(void *ctx, void *s)
{
    (void)s, ((counting_t *)ctx)->syncs++;
    return CHAM_OK;
}
static cham_status_t c_wait(void *ctx, void *s, void *e) { (void)ctx, (void)s, (void)e; return CHAM_OK; }
static cham_status_t c_event_new(void *ctx, void **e)
{
    counting_t *c = ctx;
    c->events++;
    *e = &c->objects[7];
    return CHAM_OK;
}
static void c_event_free(void *ctx, void *e) { (void)e, ((counting_t *)ctx)->events--; }
static cham_status_t c_record(void *ctx, void *e, void *s) { (void)ctx, (void)e, (void)s; return CHAM_OK; }
static cham_status_t c_query(void *ctx, void *e) { (void)ctx, (void)e; return CHAM_NOT_READY; }
static cham_status_t c_event_sync(void *ctx, void *e) { (void)ctx, (void)e; return CHAM_OK; }
static cham_status_t c_copy(void *ctx, void *s, void *d, const void *src, size_t n,
                            cham_copy_kind_t k, const char *l)
{
    (void)s, (void)d, (void)src, (void)n, (void)k, (void)l;
    ((counting_t *)ctx)->copies++;
    return CHAM_OK;
}
static cham_status_t c_kernel(void *ctx, void *s, const cham_kernel_t *k)
{
    (void)s, (void)k;
    ((counting_t *)ctx)->kernels++;
    return CHAM_OK;
}
static cham_status_t c_dev_sync(void *ctx) { ((counting_t *)ctx)->syncs++; return CHAM_OK; }
static uint64_t c_time(void *ctx) { (void)ctx; return 42; }

static const cham_backend_iface_t counting_iface = {
    .api_version = CHAM_BACKEND_API_VERSION,
    .name = "counting",
    .attach = c_attach,
    .destroy = c_destroy,
    .get_info = c_info,
    .mem_alloc = c_mem_alloc,
    .mem_free = c_mem_free,
    .host_alloc = c_mem_alloc,
    .host_free = c_mem_free,
    .stream_new = c_stream_new,
    .stream_free = c_stream_free,
    .stream_synchronize = c_sync_stream,
    .stream_wait_event = c_wait,
    .event_new = c_event_new,
    .event_free = c_event_free,
    .event_record = c_record,
    .event_query = c_query,
    .event_synchronize = c_event_sync,
    .copy_async = c_copy,
    .kernel_launch = c_kernel,
    .device_synchronize = c_dev_sync,
    .host_time = c_time,
    .host_work = NULL,       /* optional: time passes by itself */
};

static void test_wrappers_check_before_calling(void **state)
{
    (void)state;
    counting_t c = {0};
    cham_device_t *dev;
    assert_int_equal(cham_device_open_iface(&counting_iface, &c, &dev), CHAM_OK);
    assert_ptr_equal(c.attached, dev);
    assert_ptr_equal(cham_device_backend_ctx(dev, &counting_iface), &c);

    void *p;
    assert_int_equal(cham_device_mem_alloc(dev, 0, &p), CHAM_ERR_INVALID_ARG);
    assert_int_equal(c.mem_allocs, 0);
    assert_non_null(strstr(cham_device_last_error(dev), "0 bytes"));
    assert_int_equal(cham_device_mem_alloc(dev, 1000, &p), CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(cham_device_last_error(dev), "1000 bytes is too many"));
    assert_int_equal(cham_device_mem_alloc(dev, 16, &p), CHAM_OK);
    assert_int_equal(c.mem_allocs, 2);

    cham_stream_t *s;
    assert_int_equal(cham_stream_new(dev, "only", &s), CHAM_OK);
    assert_int_equal(c.streams, 1);
    assert_int_equal(cham_copy_async(s, NULL, p, 8, CHAM_COPY_H2D, "x"), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "NULL destination"));
    assert_int_equal(cham_copy_async(s, p, p, 8, (cham_copy_kind_t)9, "x"), CHAM_ERR_INVALID_ARG);
    assert_int_equal(c.copies, 0);
    assert_int_equal(cham_copy_async(s, p, p, 8, CHAM_COPY_D2D, "x"), CHAM_OK);
    assert_int_equal(c.copies, 1);

    cham_kernel_t bad = {.label = "neg", .flops = -1};
    assert_int_equal(cham_kernel_launch(s, &bad), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "\"neg\""));
    cham_kernel_t good = {.label = "ok", .flops = 1};
    assert_int_equal(cham_kernel_launch(s, &good), CHAM_OK);
    assert_int_equal(c.kernels, 1);

    cham_event_t *e;
    assert_int_equal(cham_event_new(dev, &e), CHAM_OK);
    assert_int_equal(cham_event_query(e), CHAM_NOT_READY);
    uint64_t when;               /* event_time is optional: only a timeline knows */
    assert_int_equal(cham_event_time(e, &when), CHAM_ERR_UNSUPPORTED);
    /* host_work is optional: a backend whose time passes by itself. */
    cham_device_host_work(dev, 100);
    assert_int_equal(cham_device_host_time(dev), 42);

    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_string_equal(info.backend, "counting");
    assert_false(cham_sim_is_sim(dev));
    cham_event_free(e);
    cham_stream_free(s);
    cham_device_mem_free(dev, p);
    cham_device_close(dev);
    assert_int_equal(c.destroyed, 1);
    assert_int_equal(c.streams, 0);
    assert_int_equal(c.events, 0);
}

static void test_version_handshake(void **state)
{
    (void)state;
    cham_backend_iface_t future = counting_iface;
    future.api_version = CHAM_BACKEND_API_VERSION + 1;
    counting_t c = {0};
    cham_device_t *dev = (cham_device_t *)1;
    assert_int_equal(cham_device_open_iface(&future, &c, &dev), CHAM_ERR_INVALID_ARG);
    assert_null(dev);
    assert_non_null(strstr(cham_device_last_error(NULL), "api_version"));
    assert_int_equal(c.destroyed, 0);    /* the caller still owns ctx */
}

/* A double that watches: remembers the hooks it was given, reports 7
 * hazards. */
static cham_task_hook_t seen_task_hook;
static cham_hazard_hook_t seen_hazard_hook;
static cham_status_t w_task_hook(void *ctx, cham_task_hook_t hook, void *user)
{
    (void)ctx, (void)user;
    seen_task_hook = hook;
    return CHAM_OK;
}
static cham_status_t w_hazard_hook(void *ctx, cham_hazard_hook_t hook, void *user)
{
    (void)ctx, (void)user;
    seen_hazard_hook = hook;
    return CHAM_OK;
}
static bool w_hazards(void *ctx, uint64_t *count)
{
    (void)ctx;
    *count = 7;
    return true;
}
static void a_task_hook(const cham_task_record_t *t, void *user) { (void)t, (void)user; }
static void a_hazard_hook(const cham_hazard_t *h, void *user) { (void)h, (void)user; }

/* Watching is optional: a backend without the slots says so clearly, one
 * with them gets the calls, and a version-1 table is never read past its
 * end (its watching slots, here filled in, are not looked at). */
static void test_watching_is_optional(void **state)
{
    (void)state;
    counting_t c = {0};
    cham_device_t *dev;
    assert_int_equal(cham_device_open_iface(&counting_iface, &c, &dev), CHAM_OK);
    assert_int_equal(cham_device_set_task_hook(dev, a_task_hook, NULL), CHAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(cham_device_last_error(dev), "the counting backend does not time"));
    assert_int_equal(cham_device_set_hazard_hook(dev, a_hazard_hook, NULL),
                     CHAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(cham_device_last_error(dev), "no hazard detector"));
    assert_false(cham_device_checks_hazards(dev));
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_device_close(dev);

    cham_backend_iface_t watching = counting_iface;
    watching.set_task_hook = w_task_hook;
    watching.set_hazard_hook = w_hazard_hook;
    watching.hazards = w_hazards;
    assert_int_equal(cham_device_open_iface(&watching, &c, &dev), CHAM_OK);
    assert_int_equal(cham_device_set_task_hook(dev, a_task_hook, NULL), CHAM_OK);
    assert_ptr_equal(seen_task_hook, a_task_hook);
    assert_int_equal(cham_device_set_hazard_hook(dev, a_hazard_hook, NULL), CHAM_OK);
    assert_ptr_equal(seen_hazard_hook, a_hazard_hook);
    assert_true(cham_device_checks_hazards(dev));
    assert_int_equal(cham_device_hazard_count(dev), 7);
    cham_device_close(dev);

    seen_task_hook = NULL;
    watching.api_version = 1;
    assert_int_equal(cham_device_open_iface(&watching, &c, &dev), CHAM_OK);
    assert_int_equal(cham_device_set_task_hook(dev, a_task_hook, NULL), CHAM_ERR_UNSUPPORTED);
    assert_null(seen_task_hook);
    assert_false(cham_device_checks_hazards(dev));
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_device_close(dev);

    /* The sim offers both; its detector can be switched off. */
    cham_device_config_t cfg = cham_device_config_default();
    assert_int_equal(cham_device_open(&cfg, &dev), CHAM_OK);
    assert_int_equal(cham_device_set_task_hook(dev, a_task_hook, NULL), CHAM_OK);
    assert_true(cham_device_checks_hazards(dev));
    assert_int_equal(cham_device_set_hazard_hook(dev, a_hazard_hook, NULL), CHAM_OK);
    cham_device_close(dev);
    cfg.hazard_check = false;
    assert_int_equal(cham_device_open(&cfg, &dev), CHAM_OK);
    assert_false(cham_device_checks_hazards(dev));
    assert_int_equal(cham_device_set_hazard_hook(dev, a_hazard_hook, NULL), CHAM_ERR_UNSUPPORTED);
    cham_device_close(dev);
}

static void test_too_many_streams(void **state)
{
    (void)state;
    cham_device_config_t cfg = cham_device_config_default();
    cham_device_t *dev;
    assert_int_equal(cham_device_open(&cfg, &dev), CHAM_OK);
    cham_stream_t *s[65];
    for (int i = 0; i < 64; i++)
        assert_int_equal(cham_stream_new(dev, NULL, &s[i]), CHAM_OK);
    assert_int_equal(cham_stream_new(dev, NULL, &s[64]), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "at most 64"));
    for (int i = 0; i < 64; i++)
        cham_stream_free(s[i]);
    cham_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrappers_check_before_calling),
        cmocka_unit_test(test_version_handshake),
        cmocka_unit_test(test_watching_is_optional),
        cmocka_unit_test(test_too_many_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
