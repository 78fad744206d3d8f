/* Reading a whole file with a size cap: the one reader behind every file
 * the library and the command take in (configs, profiles, policies, run
 * JSON, training data), so that a directory, a device such as /dev/zero or
 * a file far larger than any real one gets a clear message instead of an
 * endless read. The caps are documented in docs/cli.md ("Files"). */
#ifndef CHAM_COMMON_FILE_H
#define CHAM_COMMON_FILE_H

#include <stddef.h>

#include "chameleon/status.h"

/* A config file: one small JSON object (docs/config.md). */
#define CHAM_FILE_MAX_CONFIG ((size_t)1 << 20)
/* Profiles, policies and run JSON: a detailed profile takes about 700
 * bytes an op (Llama 2 7B's 884-op step 0.6 MB, an 80-layer model with 16
 * micro-batches, 32,405 ops, 22 MB), so 256 MiB holds some 380,000 ops. */
#define CHAM_FILE_MAX_JSON ((size_t)256 << 20)

/* Reads the file at path into *out, NUL-terminated, *len bytes before the
 * NUL; the caller frees *out. what names the kind of file in the message
 * ("a config file"). On failure *out is NULL and err holds one line that
 * starts with the path:
 *   CHAM_ERR_NOT_FOUND    "PATH: cannot open: No such file or directory"
 *                         (ENOENT, ENOTDIR)
 *   CHAM_ERR_INVALID_ARG  "PATH: cannot open: Permission denied",
 *                         "PATH: cannot read: Is a directory",
 *                         "PATH: file too large: N bytes, over the limit of
 *                          CAP bytes (1 MiB) for WHAT" (a regular file, from
 *                          its size, before reading),
 *                         "PATH: cannot read: it is a character device, not a
 *                          regular file" (also block devices and sockets),
 *                         "PATH: a FIFO, not a regular file, gave more than
 *                          CAP bytes (...), the limit for WHAT" (a pipe, after
 *                          reading that much),
 *                         "PATH: cannot read: ..."
 *   CHAM_ERR_HOST_OOM     "PATH: out of host memory reading the file" */
cham_status_t cham_file_read(const char *path, size_t max_bytes, const char *what, char **out,
                             size_t *len, char *err, size_t err_size);

/* What the file at path is, for messages: "a directory", "a character
 * device", "a block device", "a FIFO", "a socket", "a regular file" (or
 * "a file" when it cannot be examined). */
const char *cham_file_kind(const char *path);

#endif
