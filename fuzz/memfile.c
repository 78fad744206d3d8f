/* The in-memory input file of memfile.h. */
#define _GNU_SOURCE /* memfd_create */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memfile.h"

void fuzz_fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

void fuzz_note(const char *what, const char *detail)
{
    static int verbose = -1;
    if (verbose < 0) {
        const char *v = getenv("FUZZ_VERBOSE");
        verbose = v && v[0] && strcmp(v, "0") != 0;
    }
    if (verbose)
        fprintf(stderr, "fuzz: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
}

void fuzz_memfile_open(fuzz_memfile_t *f, const char *name)
{
    f->fd = memfd_create(name, 0);
    if (f->fd < 0)
        fuzz_fail("memfd_create failed", name);
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

void fuzz_memfile_set(fuzz_memfile_t *f, const uint8_t *data, size_t size)
{
    if (ftruncate(f->fd, 0) != 0)
        fuzz_fail("ftruncate failed", f->path);
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(f->fd, data + done, size - done, (off_t)done);
        if (w <= 0)
            fuzz_fail("pwrite failed", f->path);
        done += (size_t)w;
    }
}

char *fuzz_memfile_get(const fuzz_memfile_t *f, size_t *size)
{
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        fuzz_fail("fstat failed", f->path);
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf)
        fuzz_fail("out of memory", NULL);
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, buf + done, n - done, (off_t)done);
        if (r <= 0)
            fuzz_fail("pread failed", f->path);
        done += (size_t)r;
    }
    buf[n] = '\0';
    *size = n;
    return buf;
}
