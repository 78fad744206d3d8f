/* Status codes returned by every public Chameleon function that can fail.
 *
 * Failures a caller can handle come back as a cham_status_t; programmer
 * errors (a NULL handle, a block freed twice) stop the program with a message
 * naming the file and line. */
#ifndef CHAMELEON_STATUS_H
#define CHAMELEON_STATUS_H

/* CHAM_API marks what libchameleon.so exports: the library is compiled with
 * -fvisibility=hidden, so a function without it stays internal and cannot
 * collide with a user's symbols. Every public header includes this one.
 * tests/test_exports.sh checks that the exports and the CHAM_API
 * declarations are the same set. */
#if defined(__GNUC__) || defined(__clang__)
#define CHAM_API __attribute__((visibility("default")))
#else
#define CHAM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cham_status {
    CHAM_OK = 0,
    CHAM_NOT_READY,            /* event or stream has work still pending */
    CHAM_ERR_INVALID_ARG,      /* a value out of range or inconsistent */
    CHAM_ERR_NOT_FOUND,        /* unknown backend, preset or name */
    CHAM_ERR_UNSUPPORTED,      /* the backend cannot do this */
    CHAM_ERR_OUT_OF_MEMORY,    /* device memory exhausted */
    CHAM_ERR_HOST_BUDGET,      /* pinned host memory budget exhausted */
    CHAM_ERR_HOST_OOM,         /* the host's own allocator failed */
    CHAM_ERR_DEVICE_UNAVAILABLE, /* no usable device (for example no driver) */
    CHAM_ERR_BACKEND,          /* the backend reported an error */
    CHAM_ERR_HAZARD,           /* the sim backend's hazard detector fired */
    CHAM_ERR_POLICY_MISMATCH,  /* a static policy names a tensor the step does not have */
} cham_status_t;

/* A short constant description of the status, never NULL. */
CHAM_API const char *cham_status_string(cham_status_t status);

/* Where the library's own messages go when no hook takes them: a
 * context's log lines without cham_context_set_log's hook, the sim's
 * hazard reports without cham_device_set_hazard_hook's, and an internal
 * error's last line before the program stops. By default (and after
 * cham_set_output(NULL, NULL)) each is a line "chameleon: ..." on stderr;
 * a registered output gets the line, without that prefix or a newline,
 * and user. Process-wide; safe to call from any thread, and from the
 * output itself. */
typedef void (*cham_output_fn)(const char *line, void *user);
CHAM_API void cham_set_output(cham_output_fn fn, void *user);

/* "MAJOR.MINOR.PATCH" of the library actually linked (CHAM_VERSION_* in
 * chameleon.h are the headers'). */
CHAM_API const char *cham_version(void);

#ifdef __cplusplus
}
#endif

#endif
