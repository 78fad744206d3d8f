/* Files for tests: a mkdtemp directory under $TMPDIR (or /tmp) and its
 * removal, paths inside it, writing and reading whole files, and a
 * substring assertion for messages. Failures are cmocka assertions. */
#ifndef CHAM_TESTS_FILES_H
#define CHAM_TESTS_FILES_H

#include <stddef.h>

/* Makes dir = $TMPDIR/PREFIX-XXXXXX (or /tmp/...) with mkdtemp; 0 or -1
 * (after a message on stderr). */
int test_tmpdir_make(char *dir, size_t n, const char *prefix);

/* Removes the files and empty directories in dir (one level deep), then
 * dir itself; 0 or -1. */
int test_tmpdir_remove(const char *dir);

/* buf = dir/name. */
void test_path(char *buf, size_t n, const char *dir, const char *name);

/* Writes len bytes of text to path. */
void test_write_file(const char *path, const char *text, size_t len);

/* The whole file, NUL-terminated, in a malloc'd buffer (free it). */
char *test_read_text(const char *path);

/* Fails the test unless part occurs in text. */
void test_assert_contains(const char *text, const char *part);

#endif
