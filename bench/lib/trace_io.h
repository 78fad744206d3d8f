/* The recorded-trace text format: reading a trace from a file and writing
 * one (bench_alloc --trace and --save).
 *
 * One operation per line; `#` starts a comment line, blank lines are
 * ignored:
 *     a ID BYTES STREAM     allocate BYTES (1 .. 2^50) on STREAM (0..15) as ID
 *     f ID                  free the block allocated as ID
 * ID is any unsigned 64-bit integer; it may be reused once its block has
 * been freed. Blocks still live at the end of a file are allowed (the
 * replayer frees them outside the timed region). */
#ifndef BENCH_LIB_TRACE_IO_H
#define BENCH_LIB_TRACE_IO_H

#include "lib/trace.h"

/* Reads a recorded trace. On bad input returns false with a message naming
 * the file and line ("FILE:LINE: ...") in err. */
bool bench_trace_load(const char *path, bench_trace_t *trace, char *err, size_t err_size);

/* Writes the trace in the text format (slots are written as IDs), after a
 * comment line with the given text. */
bool bench_trace_save(const char *path, const bench_trace_t *trace, const char *comment,
                      char *err, size_t err_size);

#endif
