/* Where the library's messages go when no hook of a context or device takes
 * them (include/chameleon/status.h, cham_set_output). */
#include "common/output.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "chameleon/status.h"

/* Read and written under the lock: a message is rare (log lines without a
 * hook, hazards, last words before an abort), so a lock costs nothing that
 * matters, and it keeps the function and its user pointer one pair. */
static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;
static cham_output_fn output_fn;
static void *output_user;

void cham_set_output(cham_output_fn fn, void *user)
{
    pthread_mutex_lock(&output_lock);
    output_fn = fn;
    output_user = fn ? user : NULL;
    pthread_mutex_unlock(&output_lock);
}

void cham_output(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    cham_format_line(line, sizeof line, fmt, ap);
    va_end(ap);
    cham_output_line(line);
}

void cham_output_line(const char *line)
{
    pthread_mutex_lock(&output_lock);
    cham_output_fn fn = output_fn;
    void *user = output_user;
    pthread_mutex_unlock(&output_lock);
    /* Called outside the lock: the output may set another. */
    if (fn) {
        fn(line, user);
    } else {
        fprintf(stderr, "chameleon: %s\n", line);
        fflush(stderr);
    }
}
