/* Virtual memory through the device API on the sim backend: reservations,
 * physical chunks and mappings behave as CUDA's do, errors name the
 * problem, chunks count against the capacity, data survives a remap, and
 * unmapping memory that running work touches is a hazard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"

#define MiB ((size_t)1 << 20)
#define G (2 * MiB)

static cham_device_t *open_sim(bool data, uint64_t capacity)
{
    cham_device_config_t c = cham_device_config_default();
    c.preset = "a100-80g";
    c.capacity = capacity;
    c.data = data;
    cham_device_t *dev;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    return dev;
}

/* A kernel over [p, p + bytes) taking about `us` microseconds. */
static cham_status_t touch(cham_stream_t *s, void *p, size_t bytes, cham_access_mode_t mode,
                           double us)
{
    cham_access_t a = {p, bytes, mode};
    cham_kernel_t k = {.label = "touch", .flops = us * 312e6, .accesses = &a, .n_accesses = 1};
    return cham_kernel_launch(s, &k);
}

static void test_reserve_map_unmap(void **state)
{
    (void)state;
    cham_device_t *dev = open_sim(false, 16 * MiB);
    assert_int_equal(cham_vm_granularity(dev), G);
    void *va;
    assert_int_equal(cham_vm_reserve(dev, 64 * MiB, &va), CHAM_OK);  /* more than the device */
    assert_int_equal((uintptr_t)va % G, 0);
    cham_phys_t *a, *b;
    assert_int_equal(cham_phys_create(dev, G, &a), CHAM_OK);
    assert_int_equal(cham_phys_create(dev, 2 * G, &b), CHAM_OK);
    assert_int_equal(cham_phys_size(b), 2 * G);
    char *base = va;
    assert_int_equal(cham_vm_map(a, base), CHAM_OK);
    assert_int_equal(cham_vm_map(b, base + G), CHAM_OK);
    assert_ptr_equal(cham_phys_mapped_at(b), base + G);

    cham_stream_t *s;
    assert_int_equal(cham_stream_new(dev, "compute", &s), CHAM_OK);
    /* Across two adjacent mappings: one contiguous range. */
    assert_int_equal(touch(s, base + G / 2, 2 * G, CHAM_ACCESS_WRITE, 1), CHAM_OK);
    /* Past the mapped part of the reservation: refused, with the range. */
    assert_int_equal(touch(s, base + 2 * G, 2 * G, CHAM_ACCESS_READ, 1), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "not inside one device memory segment "
                                                        "or mapping"));
    cham_sim_stats_t st;
    assert_int_equal(cham_sim_get_stats(dev, &st), CHAM_OK);
    assert_int_equal(st.vm_maps, 2);
    assert_int_equal(st.phys_creates, 2);
    assert_int_equal(st.mem_in_use, 3 * G);     /* chunks count, reservations do not */

    assert_int_equal(cham_device_synchronize(dev), CHAM_OK);
    assert_int_equal(cham_vm_unmap(a), CHAM_OK);
    assert_null(cham_phys_mapped_at(a));
    /* The chunk goes elsewhere in the same reservation. */
    assert_int_equal(cham_vm_map(a, base + 5 * G), CHAM_OK);
    assert_int_equal(touch(s, base + 5 * G, G, CHAM_ACCESS_READ, 1), CHAM_OK);
    assert_int_equal(cham_device_synchronize(dev), CHAM_OK);
    assert_int_equal(cham_vm_unmap(a), CHAM_OK);
    assert_int_equal(cham_vm_unmap(b), CHAM_OK);
    cham_phys_release(a);
    cham_phys_release(b);
    assert_int_equal(cham_vm_release(dev, va, 64 * MiB), CHAM_OK);
    assert_int_equal(cham_sim_get_stats(dev, &st), CHAM_OK);
    assert_int_equal(st.vm_unmaps, 3);
    assert_int_equal(st.phys_releases, 2);
    assert_int_equal(st.mem_in_use, 0);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_stream_free(s);
    cham_device_close(dev);
}

static void test_errors_name_the_problem(void **state)
{
    (void)state;
    cham_device_t *dev = open_sim(false, 8 * MiB);
    void *va, *p;
    char *base;
    cham_phys_t *a, *b;
    assert_int_equal(cham_vm_reserve(dev, G + 4096, &va), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "multiples of the granularity"));
    assert_int_equal(cham_vm_reserve(dev, 4 * G, &va), CHAM_OK);
    base = va;
    assert_int_equal(cham_phys_create(dev, G, &a), CHAM_OK);
    assert_int_equal(cham_phys_create(dev, G, &b), CHAM_OK);
    assert_int_equal(cham_vm_map(a, base + 4096), CHAM_ERR_INVALID_ARG);
    assert_int_equal(cham_vm_map(a, base + 4 * G), CHAM_ERR_INVALID_ARG);   /* outside */
    assert_non_null(strstr(cham_device_last_error(dev), "not inside one reservation"));
    assert_int_equal(cham_vm_map(a, base), CHAM_OK);
    assert_int_equal(cham_vm_map(b, base), CHAM_ERR_INVALID_ARG);           /* over a */
    assert_non_null(strstr(cham_device_last_error(dev), "over the chunk mapped at"));
    assert_int_equal(cham_vm_map(a, base + G), CHAM_ERR_INVALID_ARG);       /* twice */
    assert_non_null(strstr(cham_device_last_error(dev), "already mapped"));
    assert_int_equal(cham_vm_unmap(b), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "not mapped"));
    assert_int_equal(cham_vm_release(dev, va, 4 * G), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "while a chunk is mapped"));
    assert_int_equal(cham_vm_release(dev, base + G, 2 * G), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "not a reservation"));
    /* 8 MiB: two chunks and a 2 MiB segment hold 6; 4 MiB more do not fit. */
    assert_int_equal(cham_device_mem_alloc(dev, G, &p), CHAM_OK);
    cham_phys_t *c;
    assert_int_equal(cham_phys_create(dev, 2 * G, &c), CHAM_ERR_OUT_OF_MEMORY);
    assert_null(c);
    assert_non_null(strstr(cham_device_last_error(dev), "out of device memory"));
    assert_int_equal(cham_device_mem_alloc(dev, 2 * G, &p), CHAM_ERR_OUT_OF_MEMORY);
    assert_int_equal(cham_vm_unmap(a), CHAM_OK);
    cham_phys_release(a);
    cham_phys_release(b);
    assert_int_equal(cham_vm_release(dev, va, 4 * G), CHAM_OK);
    cham_device_close(dev);

    /* Bad granularities refuse the device, naming the field. */
    cham_device_config_t cfg = cham_device_config_default();
    cfg.vm_granularity = 3 * MiB;
    assert_int_equal(cham_device_open(&cfg, &dev), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(NULL), "vm_granularity must be a power of "
                                                         "two"));
    cfg.vm_granularity = 1024;
    cfg.data = true;
    assert_int_equal(cham_device_open(&cfg, &dev), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(NULL), "page size"));
}

/* With data, a chunk's bytes are the same wherever it is mapped. */
static void test_data_survives_remap(void **state)
{
    (void)state;
    cham_device_config_t cfg = cham_device_config_default();
    cfg.capacity = 1 * MiB;
    cfg.data = true;
    cfg.vm_granularity = 64 * 1024;
    cham_device_t *dev;
    assert_int_equal(cham_device_open(&cfg, &dev), CHAM_OK);
    size_t g = cham_vm_granularity(dev), n = 2 * g;
    char *va;
    assert_int_equal(cham_vm_reserve(dev, 8 * g, (void **)&va), CHAM_OK);
    cham_phys_t *c;
    assert_int_equal(cham_phys_create(dev, n, &c), CHAM_OK);
    assert_int_equal(cham_vm_map(c, va), CHAM_OK);
    unsigned char *host, *back;
    assert_int_equal(cham_device_host_alloc(dev, n, (void **)&host), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(dev, n, (void **)&back), CHAM_OK);
    cham_stream_t *s;
    assert_int_equal(cham_stream_new(dev, "copy", &s), CHAM_OK);
    /* A new chunk reads as the sim's poison. */
    assert_int_equal(cham_copy_async(s, back, va, n, CHAM_COPY_D2H, "fresh"), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(s), CHAM_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(back[i], 0xA5);
    for (size_t i = 0; i < n; i++)
        host[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(cham_copy_async(s, va, host, n, CHAM_COPY_H2D, "in"), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(s), CHAM_OK);
    assert_int_equal(cham_vm_unmap(c), CHAM_OK);
    assert_int_equal(cham_vm_map(c, va + 5 * g), CHAM_OK);   /* elsewhere, 2 granules on */
    memset(back, 0, n);
    assert_int_equal(cham_copy_async(s, back, va + 5 * g, n, CHAM_COPY_D2H, "out"), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(s), CHAM_OK);
    assert_memory_equal(back, host, n);
    assert_int_equal(cham_vm_unmap(c), CHAM_OK);
    cham_phys_release(c);
    assert_int_equal(cham_vm_release(dev, va, 8 * g), CHAM_OK);
    cham_stream_free(s);
    cham_device_host_free(dev, host);
    cham_device_host_free(dev, back);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_device_close(dev);
}

static int hazards_seen;
static char hazard_kind[64];
static void on_hazard(const cham_hazard_t *h, void *user)
{
    (void)user;
    hazards_seen++;
    snprintf(hazard_kind, sizeof hazard_kind, "%s", h->kind);
}

/* cuMemUnmap does not wait: unmapping under a running copy is a race. */
static void test_unmap_under_running_work_is_a_hazard(void **state)
{
    (void)state;
    cham_device_t *dev = open_sim(false, 64 * MiB);
    assert_int_equal(cham_device_set_hazard_hook(dev, on_hazard, NULL), CHAM_OK);
    void *va, *host;
    assert_int_equal(cham_vm_reserve(dev, 8 * G, &va), CHAM_OK);
    cham_phys_t *c;
    assert_int_equal(cham_phys_create(dev, 4 * G, &c), CHAM_OK);
    assert_int_equal(cham_vm_map(c, va), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(dev, 4 * G, &host), CHAM_OK);
    cham_stream_t *s;
    assert_int_equal(cham_stream_new(dev, "swap-out", &s), CHAM_OK);
    /* 8 MiB at 32 GB/s: about 260 us, still running when the host unmaps. */
    assert_int_equal(cham_copy_async(s, host, va, 4 * G, CHAM_COPY_D2H, "activation"), CHAM_OK);
    hazards_seen = 0;
    assert_int_equal(cham_vm_unmap(c), CHAM_OK);
    assert_int_equal(hazards_seen, 1);
    assert_string_equal(hazard_kind, "unmap-while-in-use");
    assert_int_equal(cham_device_hazard_count(dev), 1);
    /* After a wait, the same is fine. */
    assert_int_equal(cham_vm_map(c, va), CHAM_OK);
    assert_int_equal(cham_copy_async(s, host, va, 4 * G, CHAM_COPY_D2H, "activation"), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(s), CHAM_OK);
    assert_int_equal(cham_vm_unmap(c), CHAM_OK);
    assert_int_equal(hazards_seen, 1);
    cham_phys_release(c);
    assert_int_equal(cham_vm_release(dev, va, 8 * G), CHAM_OK);
    cham_device_host_free(dev, host);
    cham_stream_free(s);
    cham_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_map_unmap),
        cmocka_unit_test(test_errors_name_the_problem),
        cmocka_unit_test(test_data_survives_remap),
        cmocka_unit_test(test_unmap_under_running_work_is_a_hazard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
