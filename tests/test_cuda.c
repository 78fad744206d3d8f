/* Tests of the cuda device backend.
 *
 * Opening a "cuda" device decides what runs. Without a usable device (no
 * CUDA runtime, no driver, no GPU) the open-failure tests run — the status
 * is CHAM_ERR_DEVICE_UNAVAILABLE, the message names the CUDA error or the
 * library that could not be loaded, nothing crashes or leaks — and then the
 * program prints "test_cuda: skipped: ..." and exits 77, which CTest reports
 * as skipped. The runtime loader's tests run in both cases: a library that
 * does not exist, one that is not the CUDA runtime, a search that finds
 * nothing, and, where the toolkit is installed, its libcudart named through
 * CHAM_CUDA_RUNTIME. With a device, the same tests run and then the real
 * ones: copies through pinned memory across two streams ordered by an
 * event, event states, errors and the capacity cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chameleon/backend.h"
#include "device/cuda_api.h"

/* The CUDA runtime, for the tests' own native_fn kernels; loaded in main
 * when a device opens. */
static cham_cudart_t rt;

/* Where the toolkit installs its runtime (docs/cuda.md). */
#define TOOLKIT_CUDART "/usr/local/cuda/lib64/libcudart.so"

static cham_device_config_t cuda_config(void)
{
    cham_device_config_t c = cham_device_config_default();
    c.backend = "cuda";
    return c;
}

/* ---- tests that run everywhere ------------------------------------------*/

/* Runs only when no device could be opened: the failure must be clean. */
static void test_open_unavailable(void **state)
{
    (void)state;
    cham_device_config_t c = cuda_config();
    char first[512];
    for (int i = 0; i < 3; i++) {
        cham_device_t *dev = (cham_device_t *)&c; /* must be reset to NULL */
        assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_DEVICE_UNAVAILABLE);
        assert_null(dev);
        const char *msg = cham_device_last_error(NULL);
        assert_non_null(msg);
        assert_true(strlen(msg) > 0);
        assert_int_equal(strncmp(msg, "cuda: ", 6), 0);
        if (i == 0)
            snprintf(first, sizeof first, "%s", msg);
        else /* repeated opens fail the same way: no state left behind */
            assert_string_equal(msg, first);
    }
    /* A CUDA error, not a made-up one, when the runtime refused. */
    if (strstr(first, " failed: "))
        assert_non_null(strstr(first, "(cudaError"));
}

static void test_open_bad_ordinal(void **state)
{
    (void)state;
    cham_device_config_t c = cuda_config();
    cham_device_t *dev = NULL;

    c.ordinal = -1;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_INVALID_ARG);
    assert_null(dev);
    assert_non_null(strstr(cham_device_last_error(NULL), "ordinal -1"));

    c.ordinal = 1 << 20;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_DEVICE_UNAVAILABLE);
    assert_null(dev);
    assert_true(strlen(cham_device_last_error(NULL)) > 0);
}

/* ---- the runtime loader: run everywhere -----------------------------------
 * Each test sets CHAM_CUDA_RUNTIME and puts back what was there before, so
 * the tests do not depend on each other or on how ctest was started. */

typedef struct saved_env {
    char value[1024];
    int was_set;
} saved_env_t;

static saved_env_t env_set(const char *value)
{
    saved_env_t saved = {.was_set = 0};
    const char *old = getenv(CHAM_CUDA_RUNTIME_ENV);
    if (old) {
        saved.was_set = 1;
        snprintf(saved.value, sizeof saved.value, "%s", old);
    }
    assert_int_equal(setenv(CHAM_CUDA_RUNTIME_ENV, value, 1), 0);
    return saved;
}

static void env_restore(const saved_env_t *saved)
{
    if (saved->was_set)
        assert_int_equal(setenv(CHAM_CUDA_RUNTIME_ENV, saved->value, 1), 0);
    else
        assert_int_equal(unsetenv(CHAM_CUDA_RUNTIME_ENV), 0);
}

/* What dlopen itself says about name, for the expected message: taken from
 * the C library, not from the code under test. */
static void dlopen_error(const char *name, char *out, size_t size)
{
    (void)dlerror();
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    assert_null(h);
    const char *e = dlerror();
    assert_non_null(e);
    snprintf(out, size, "%s", e);
}

/* CHAM_CUDA_RUNTIME names a file that does not exist: a clean "could not
 * load" failure naming the variable, the file and dlerror's reason, and
 * the same again on a second open. */
static void test_runtime_missing(void **state)
{
    (void)state;
    const char *path = "/nonexistent/chameleon-test/libcudart.so.13";
    char expect_why[512], expect_head[1200];
    dlopen_error(path, expect_why, sizeof expect_why);
    snprintf(expect_head, sizeof expect_head, "cuda: could not load the CUDA runtime named "
             "by CHAM_CUDA_RUNTIME=%s: %s", path, expect_why);
    saved_env_t saved = env_set(path);
    cham_device_config_t c = cuda_config();
    for (int i = 0; i < 2; i++) {
        cham_device_t *dev = (cham_device_t *)&c;
        assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_DEVICE_UNAVAILABLE);
        assert_null(dev);
        assert_string_equal(cham_device_last_error(NULL), expect_head);
    }
    env_restore(&saved);
}

/* CHAM_CUDA_RUNTIME names a real library that is not the CUDA runtime
 * (libm): refused, naming the first function it lacks. */
static void test_runtime_not_cudart(void **state)
{
    (void)state;
    const char *lib = "libm.so.6";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        skip();
    (void)dlerror();
    assert_null(dlsym(h, "cudaRuntimeGetVersion"));
    char expect[512], dl_why[400];
    snprintf(dl_why, sizeof dl_why, "%s", dlerror());
    dlclose(h);
    snprintf(expect, sizeof expect, "cuda: %s (from CHAM_CUDA_RUNTIME) is not a usable CUDA "
             "runtime: %s", lib, dl_why);
    saved_env_t saved = env_set(lib);
    cham_device_config_t c = cuda_config();
    cham_device_t *dev = NULL;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_DEVICE_UNAVAILABLE);
    assert_null(dev);
    assert_string_equal(cham_device_last_error(NULL), expect);
    env_restore(&saved);
}

/* The default search when no candidate exists (here: names that exist
 * nowhere, since this machine's linker may well find the real ones): the
 * first candidate's reason, the others listed, and the way out. */
static void test_runtime_search_finds_nothing(void **state)
{
    (void)state;
    const char *names[] = {"libcham-test-no-cudart.so.13", "libcham-test-no-cudart.so",
                           "/nonexistent/libcudart.so", NULL};
    char why[512], expect[1200], msg[1200];
    dlopen_error(names[0], why, sizeof why);
    snprintf(expect, sizeof expect, "cuda: could not load the CUDA runtime: %s (also tried "
             "libcham-test-no-cudart.so, /nonexistent/libcudart.so); set CHAM_CUDA_RUNTIME "
             "to the library's path", why);
    cham_cudart_t t;
    assert_int_equal(cham_cudart_search(names, &t, msg, sizeof msg),
                     CHAM_ERR_DEVICE_UNAVAILABLE);
    assert_string_equal(msg, expect);
    /* The real search order starts with the runtime this backend is
     * written for and ends with the toolkit's default place. */
    assert_string_equal(cham_cudart_search_order[0], "libcudart.so.13");
    size_t n = 0;
    while (cham_cudart_search_order[n])
        n++;
    assert_string_equal(cham_cudart_search_order[n - 1], TOOLKIT_CUDART);
}

/* With the toolkit installed: CHAM_CUDA_RUNTIME pointing at its libcudart
 * loads it, and opening a device either works (a GPU and its driver) or
 * reports the CUDA runtime's own error. Without a driver (no libcuda.so.1
 * for dlopen), that error must be cudaErrorInsufficientDriver from the
 * first runtime call. */
static void test_runtime_from_toolkit(void **state)
{
    (void)state;
    if (access(TOOLKIT_CUDART, R_OK) != 0)
        skip();
    saved_env_t saved = env_set(TOOLKIT_CUDART);

    cham_cudart_t t;
    char msg[512];
    assert_int_equal(cham_cudart_load(&t, msg, sizeof msg), CHAM_OK);
    assert_string_equal(t.library, TOOLKIT_CUDART);
    assert_true(t.version >= CHAM_CUDA_RUNTIME_MIN_VERSION);
    int version = 0;
    assert_int_equal(t.cudaRuntimeGetVersion(&version), cudaSuccess);
    assert_int_equal(version, t.version);

    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    cham_device_config_t c = cuda_config();
    cham_device_t *dev = NULL;
    cham_status_t st = cham_device_open(&c, &dev);
    if (st == CHAM_OK) {
        assert_non_null(driver);
        cham_device_close(dev);
    } else {
        assert_int_equal(st, CHAM_ERR_DEVICE_UNAVAILABLE);
        assert_null(dev);
        const char *err = cham_device_last_error(NULL);
        assert_non_null(strstr(err, "(cudaError"));
        if (!driver)
            assert_string_equal(err, "cuda: no usable device: cudaGetDeviceCount failed: "
                                     "CUDA driver version is insufficient for CUDA runtime "
                                     "version (cudaErrorInsufficientDriver)");
    }
    if (driver)
        dlclose(driver);
    env_restore(&saved);
}

/* ---- tests that need a device -------------------------------------------*/

/* A host callback queued on a stream that holds the stream until the test
 * opens it: makes "not ready yet" deterministic without a device kernel. */
typedef struct gate {
    atomic_int open;
    atomic_int timed_out;
} gate_t;

static void gate_wait(void *arg)
{
    gate_t *g = arg;
    struct timespec nap = {0, 100000};
    for (long i = 0; !atomic_load(&g->open); i++) {
        if (i > 200000) { /* about 20 s: never hang the test suite */
            atomic_store(&g->timed_out, 1);
            return;
        }
        nanosleep(&nap, NULL);
    }
}

static void gate_launch(void *native_stream, void *arg)
{
    (void)rt.cudaLaunchHostFunc((cudaStream_t)native_stream, gate_wait, arg);
}

/* A device with two streams and two events. Teardown frees whatever the
 * test left (a failed assertion leaves early), so that closing the device
 * does not stop the program and hide which assertion failed. */
typedef struct fixture {
    cham_device_t *dev;
    cham_stream_t *s[2];
    cham_event_t *e[2];
    gate_t gate;             /* opened at teardown, so closing never waits on it */
} fixture_t;

static int open_device(void **state)
{
    fixture_t *fx = calloc(1, sizeof *fx);
    cham_device_config_t c = cuda_config();
    if (!fx || cham_device_open(&c, &fx->dev) != CHAM_OK ||
        cham_stream_new(fx->dev, "first", &fx->s[0]) != CHAM_OK ||
        cham_stream_new(fx->dev, "second", &fx->s[1]) != CHAM_OK ||
        cham_event_new(fx->dev, &fx->e[0]) != CHAM_OK ||
        cham_event_new(fx->dev, &fx->e[1]) != CHAM_OK) {
        fprintf(stderr, "test_cuda: setup: %s\n",
                fx && fx->dev ? cham_device_last_error(fx->dev) : cham_device_last_error(NULL));
        *state = fx;
        return -1;
    }
    *state = fx;
    return 0;
}

static int close_device(void **state)
{
    fixture_t *fx = *state;
    if (!fx)
        return 0;
    atomic_store(&fx->gate.open, 1);
    for (int i = 0; i < 2; i++) {
        cham_event_free(fx->e[i]);
        cham_stream_free(fx->s[i]);
    }
    cham_device_close(fx->dev); /* frees memory a failed test left */
    free(fx);
    return 0;
}

static void test_info(void **state)
{
    cham_device_t *dev = ((fixture_t *)*state)->dev;
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_string_equal(info.backend, "cuda");
    assert_true(strlen(info.name) > 0);
    assert_true(info.capacity > 0);
    assert_true(info.hbm_bandwidth >= 0);
    assert_true(info.peak_flops == 0); /* unknown without an override */
    assert_true(info.data);
    uint64_t t0 = cham_device_host_time(dev);
    cham_device_host_work(dev, 1000000000); /* no effect on real backends */
    uint64_t t1 = cham_device_host_time(dev);
    assert_true(t1 >= t0);
    assert_true(t1 - t0 < 1000000000);
}

/* H2D on one stream, an event, a wait on a second stream, D2D and D2H
 * there: the bytes come back only if the event orders the streams. */
static void test_copy_across_streams(void **state)
{
    fixture_t *fx = *state;
    cham_device_t *dev = fx->dev;
    const size_t n = (size_t)4 << 20;
    void *d_a, *d_b, *h_src, *h_dst;
    assert_int_equal(cham_device_mem_alloc(dev, n, &d_a), CHAM_OK);
    assert_int_equal(cham_device_mem_alloc(dev, n, &d_b), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(dev, n, &h_src), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(dev, n, &h_dst), CHAM_OK);
    unsigned char *src = h_src, *dst = h_dst;
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 131 + 7 + (i >> 12));
    memset(dst, 0, n);

    cham_stream_t *s1 = fx->s[0], *s2 = fx->s[1];
    cham_event_t *e1 = fx->e[0], *e2 = fx->e[1];
    assert_int_equal(cham_event_query(e1), CHAM_OK); /* never recorded: complete */

    gate_t *gate = &fx->gate;
    atomic_init(&gate->open, 0);
    atomic_init(&gate->timed_out, 0);
    cham_kernel_t k = {.label = "gate", .native_fn = gate_launch, .arg = gate};
    assert_int_equal(cham_kernel_launch(s1, &k), CHAM_OK);
    assert_int_equal(cham_copy_async(s1, d_a, h_src, n, CHAM_COPY_H2D, "in"), CHAM_OK);
    assert_int_equal(cham_event_record(e1, s1), CHAM_OK);
    assert_int_equal(cham_event_query(e1), CHAM_NOT_READY);

    assert_int_equal(cham_stream_wait_event(s2, e1), CHAM_OK);
    assert_int_equal(cham_copy_async(s2, d_b, d_a, n, CHAM_COPY_D2D, "mid"), CHAM_OK);
    assert_int_equal(cham_copy_async(s2, h_dst, d_b, n, CHAM_COPY_D2H, "out"), CHAM_OK);
    assert_int_equal(cham_event_record(e2, s2), CHAM_OK);
    assert_int_equal(cham_event_query(e2), CHAM_NOT_READY);
    assert_int_equal(cham_event_query(e1), CHAM_NOT_READY);
    /* Nothing on s2 may have run yet: it waits on e1, held by the gate. */
    for (size_t i = 0; i < n; i += 4093)
        assert_int_equal(dst[i], 0);

    atomic_store(&gate->open, 1);
    assert_int_equal(cham_event_synchronize(e2), CHAM_OK);
    assert_int_equal(cham_event_query(e2), CHAM_OK);
    assert_int_equal(cham_event_query(e1), CHAM_OK);
    assert_int_equal(atomic_load(&gate->timed_out), 0);
    assert_memory_equal(src, dst, n);

    /* Re-recording on an idle stream replaces the captured work. */
    assert_int_equal(cham_event_record(e1, s2), CHAM_OK);
    assert_int_equal(cham_event_synchronize(e1), CHAM_OK);
    assert_int_equal(cham_event_query(e1), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(s1), CHAM_OK);
    assert_int_equal(cham_device_synchronize(dev), CHAM_OK);

    cham_device_host_free(dev, h_src);
    cham_device_host_free(dev, h_dst);
    cham_device_mem_free(dev, d_a);
    cham_device_mem_free(dev, d_b);
    assert_string_equal(cham_device_last_error(dev), "");
}

static void cpu_only(void *arg)
{
    (void)arg;
}

/* Leaves a runtime error behind, as a failed launch inside native_fn would. */
static void failing_native(void *native_stream, void *arg)
{
    (void)native_stream;
    (void)arg;
    void *p = NULL;
    (void)rt.cudaMalloc(&p, (size_t)1 << 62);
}

static void test_errors(void **state)
{
    fixture_t *fx = *state;
    cham_device_t *dev = fx->dev;
    cham_stream_t *s = fx->s[0];
    void *p = NULL;
    assert_int_equal(cham_device_mem_alloc(dev, (size_t)1 << 62, &p), CHAM_ERR_OUT_OF_MEMORY);
    assert_null(p);
    const char *msg = cham_device_last_error(dev);
    assert_non_null(strstr(msg, "cudaMalloc failed"));
    assert_non_null(strstr(msg, "(cudaErrorMemoryAllocation)"));

    cham_kernel_t k = {.label = "cpu", .cpu_fn = cpu_only};
    assert_int_equal(cham_kernel_launch(s, &k), CHAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(cham_device_last_error(dev),
                           "cuda backend runs kernels only through native_fn"));
    cham_kernel_t none = {.label = "none"};
    assert_int_equal(cham_kernel_launch(s, &none), CHAM_ERR_UNSUPPORTED);

    cham_kernel_t bad = {.label = "bad", .native_fn = failing_native};
    assert_int_equal(cham_kernel_launch(s, &bad), CHAM_ERR_OUT_OF_MEMORY);
    msg = cham_device_last_error(dev);
    assert_non_null(strstr(msg, "kernel \"bad\""));
    assert_non_null(strstr(msg, "cudaGetLastError failed"));

    /* The errors above were not sticky: the device still works. */
    assert_int_equal(cham_device_mem_alloc(dev, 4096, &p), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(s), CHAM_OK);
    cham_device_mem_free(dev, p);
}

static void test_capacity_cap(void **state)
{
    (void)state;
    cham_device_config_t c = cuda_config();
    c.capacity = 1 << 20;
    c.peak_flops = 1e12;
    c.h2d_bandwidth = 2e10;
    cham_device_t *dev = NULL;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_int_equal(info.capacity, 1 << 20);
    assert_true(info.peak_flops == 1e12);
    assert_true(info.h2d_bandwidth == 2e10);
    assert_true(info.d2h_bandwidth == 0);

    void *a, *b;
    assert_int_equal(cham_device_mem_alloc(dev, 768 << 10, &a), CHAM_OK);
    assert_int_equal(cham_device_mem_alloc(dev, 512 << 10, &b), CHAM_ERR_OUT_OF_MEMORY);
    assert_null(b);
    assert_non_null(strstr(cham_device_last_error(dev), "capacity cap"));
    cham_device_mem_free(dev, a);
    assert_int_equal(cham_device_mem_alloc(dev, 512 << 10, &b), CHAM_OK);
    void *h;
    assert_int_equal(cham_device_host_alloc(dev, 4096, &h), CHAM_OK);
    cham_device_close(dev); /* frees b and h itself */
}

int main(void)
{
    const struct CMUnitTest everywhere[] = {
        cmocka_unit_test(test_open_unavailable),
        cmocka_unit_test(test_open_bad_ordinal),
        cmocka_unit_test(test_runtime_missing),
        cmocka_unit_test(test_runtime_not_cudart),
        cmocka_unit_test(test_runtime_search_finds_nothing),
        cmocka_unit_test(test_runtime_from_toolkit),
    };
    const struct CMUnitTest with_device[] = {
        cmocka_unit_test(test_open_bad_ordinal),
        cmocka_unit_test(test_runtime_missing),
        cmocka_unit_test(test_runtime_not_cudart),
        cmocka_unit_test(test_runtime_search_finds_nothing),
        cmocka_unit_test(test_runtime_from_toolkit),
        cmocka_unit_test_setup_teardown(test_info, open_device, close_device),
        cmocka_unit_test_setup_teardown(test_copy_across_streams, open_device, close_device),
        cmocka_unit_test_setup_teardown(test_errors, open_device, close_device),
        cmocka_unit_test(test_capacity_cap),
    };

    cham_device_config_t c = cuda_config();
    cham_device_t *dev = NULL;
    cham_status_t st = cham_device_open(&c, &dev);
    if (st == CHAM_ERR_DEVICE_UNAVAILABLE) {
        char why[512];
        snprintf(why, sizeof why, "%s", cham_device_last_error(NULL));
        int failed = cmocka_run_group_tests_name("cuda (no device)", everywhere, NULL, NULL);
        if (failed)
            return 1;
        printf("test_cuda: skipped: %s\n", why);
        return 77;
    }
    if (st != CHAM_OK) {
        fprintf(stderr, "test_cuda: opening a cuda device failed with %s: %s\n",
                cham_status_string(st), cham_device_last_error(NULL));
        return 1;
    }
    cham_device_close(dev);
    char why[512];
    if (cham_cudart_load(&rt, why, sizeof why) != CHAM_OK) {
        fprintf(stderr, "test_cuda: a device opened but the runtime did not load: %s\n", why);
        return 1;
    }
    return cmocka_run_group_tests_name("cuda", with_device, NULL, NULL) ? 1 : 0;
}
