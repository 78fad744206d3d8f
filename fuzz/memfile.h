/* Shared by the fuzz targets whose loader takes a path (profiles, policies,
 * configs): the fuzz input becomes the contents of an anonymous in-memory
 * file, opened by its /proc/self/fd/N path. The loaders then run exactly as
 * the library ships them, the public API gains no memory entry point just
 * for fuzzing, and nothing touches the disk. Linux only (memfd_create). */
#ifndef CHAM_FUZZ_MEMFILE_H
#define CHAM_FUZZ_MEMFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct fuzz_memfile {
    int fd;
    char path[40];   /* "/proc/self/fd/N": what the loaders are given */
} fuzz_memfile_t;

/* Creates the file; aborts when it cannot (a target that cannot set up
 * must stop, not report every input as a pass). */
void fuzz_memfile_open(fuzz_memfile_t *f, const char *name);
/* Replaces the contents with data[0 .. size). */
void fuzz_memfile_set(fuzz_memfile_t *f, const uint8_t *data, size_t size);
/* The current contents (as a save through f->path left them), malloc'd and
 * NUL-terminated; *size bytes before the NUL. */
char *fuzz_memfile_get(const fuzz_memfile_t *f, size_t *size);
/* Prints "fuzz: what: detail" to stderr and aborts, so libFuzzer saves the
 * input. */
_Noreturn void fuzz_fail(const char *what, const char *detail);
/* With FUZZ_VERBOSE=1 in the environment, prints "fuzz: what: detail" (for
 * example why a loader rejected an input: is a seed really loadable?). */
void fuzz_note(const char *what, const char *detail);

#endif
