/* Files for tests (support/files.h). */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/files.h"

int test_tmpdir_make(char *dir, size_t n, const char *prefix)
{
    const char *base = getenv("TMPDIR");
    int len = snprintf(dir, n, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
    if (len < 0 || (size_t)len >= n) {
        fprintf(stderr, "temporary directory name too long: %s\n", dir);
        return -1;
    }
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int test_tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char path[1024];
            test_path(path, sizeof path, dir, e->d_name);
            if (unlink(path) != 0)
                rmdir(path);
        }
        closedir(d);
    }
    return rmdir(dir) == 0 ? 0 : -1;
}

void test_path(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

void test_write_file(const char *path, const char *text, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

char *test_read_text(const char *path)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, fp)) > 0) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    fclose(fp);
    buf[n] = '\0';
    return buf;
}

void test_assert_contains(const char *text, const char *part)
{
    if (!strstr(text, part)) {
        print_error("expected \"%s\"\n     in \"%s\"\n", part, text);
        fail();
    }
}
