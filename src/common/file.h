/* Reading a whole file with a size cap: the one reader behind every file
 * the library and the command take in (configs, profiles, policies, run
 * JSON, training data), so that a directory, a device such as /dev/zero or
 * a file far larger than any real one gets a clear message instead of an
 * endless read. The caps are documented in docs/cli.md ("Files"). And the
 * one writer behind every file they write (below): complete under its
 * name or not there. */
#ifndef CHAM_COMMON_FILE_H
#define CHAM_COMMON_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

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

/* ---- writing ------------------------------------------------------------------------
 * Every file the library and the command write (traces, profiles and
 * policies, memory curves, reports) goes through one
 * writer, so that a file is either complete under its name or not there,
 * and every failed write, flush or close is an error with its errno:
 *
 *   cham_out_open    a temporary file beside the final path
 *                    ("DIR/.NAME.tmp-PID-N", same directory, so the rename
 *                    is atomic), created with the final file's permissions
 *                    (0666 less the umask for a new file);
 *   cham_out_file    the stream to write;
 *   cham_out_commit  flush, check the stream's error flag, fsync, close and
 *                    rename over the final path; on any failure the
 *                    temporary file is removed and the final path is left as
 *                    it was;
 *   cham_out_abort   close and remove the temporary file (a run that failed).
 *
 * A path that exists and is not a regular file (/dev/null, /dev/stdout, a
 * FIFO) is written in place: it cannot be replaced, and it holds nothing
 * to protect. A regular file in a directory where no file can be created
 * (but that is itself writable: a read-only directory, /proc/self/fd/N of
 * a memfd) is written in place too, as before.
 * A symbolic link to a regular file replaces the file it points to.
 *
 * A process that is killed between open and commit leaves the temporary
 * file, never a truncated file under the final name; the command removes
 * the temporaries on SIGINT, SIGTERM and SIGHUP (cham_out_remove_pending).
 * Messages start with the final path: "PATH: cannot write: No space left
 * on device". */
typedef struct cham_out cham_out_t;

/* CHAM_ERR_NOT_FOUND when the directory does not exist, CHAM_ERR_INVALID_ARG
 * when the file cannot be created (a directory, no permission),
 * CHAM_ERR_HOST_OOM. */
cham_status_t cham_out_open(const char *path, cham_out_t **out, char *err, size_t err_size);
FILE *cham_out_file(cham_out_t *o);
/* Whether every write so far succeeded; the first failure's errno is kept
 * for the message of cham_out_commit. Cheap: a writer that produces a lot
 * (the trace) calls it to stop writing once the disk is full. */
bool cham_out_ok(cham_out_t *o);
/* Finishes the file (above) and frees o; CHAM_ERR_INVALID_ARG with
 * "PATH: cannot write: WHY" (and errno set to why) when any write, the
 * flush, fsync, close or rename failed. */
cham_status_t cham_out_commit(cham_out_t *o, char *err, size_t err_size);
/* Drops the file (above) and frees o; NULL is fine. */
void cham_out_abort(cham_out_t *o);

/* Removes every temporary file still open in this process; only unlink(2),
 * so a signal handler may call it. */
void cham_out_remove_pending(void);

#endif
