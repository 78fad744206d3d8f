/* Reading a whole file with a size cap, and writing one whole or not at
 * all (file.h). */
#define _XOPEN_SOURCE 700           /* realpath */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/message.h"

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISREG(m)  ? "a regular file"
                         : "not a regular file";
}

const char *cham_file_kind(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 ? kind_of(s.st_mode) : "a file";
}

/* "1048576 bytes (1 MiB)": a cap for messages. */
static void cap_str(char *buf, size_t size, size_t cap)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    int u = -1;
    size_t v = cap;
    while (u < 3 && v >= 1024 && v % 1024 == 0)
        v /= 1024, u++;
    if (u < 0)
        snprintf(buf, size, "%zu bytes", cap);
    else
        snprintf(buf, size, "%zu bytes (%zu %s)", cap, v, units[u]);
}

cham_status_t cham_file_read(const char *path, size_t max_bytes, const char *what, char **out,
                             size_t *len, char *err, size_t err_size)
{
    *out = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        cham_set_err(err, err_size, "%s: cannot open: %s", path, strerror(e));
        return e == ENOENT || e == ENOTDIR ? CHAM_ERR_NOT_FOUND : CHAM_ERR_INVALID_ARG;
    }
    struct stat s;
    char capbuf[64];
    memset(&s, 0, sizeof s);
    bool regular = false;
    size_t cap = 0, n = 0;
    if (fstat(fileno(fp), &s) == 0) {
        if (S_ISDIR(s.st_mode)) {
            fclose(fp);
            cham_set_err(err, err_size, "%s: cannot read: %s", path, strerror(EISDIR));
            return CHAM_ERR_INVALID_ARG;
        }
        /* Devices and sockets are no files to load: /dev/zero would
         * never end. FIFOs (a pipe, a shell's <(...)) are read, up to the
         * cap. */
        if (S_ISCHR(s.st_mode) || S_ISBLK(s.st_mode) || S_ISSOCK(s.st_mode)) {
            fclose(fp);
            cham_set_err(err, err_size, "%s: cannot read: it is %s, not a regular file", path,
                         kind_of(s.st_mode));
            return CHAM_ERR_INVALID_ARG;
        }
        regular = S_ISREG(s.st_mode);
        if (regular && s.st_size > 0 && (uintmax_t)s.st_size > max_bytes) {
            fclose(fp);
            cap_str(capbuf, sizeof capbuf, max_bytes);
            cham_set_err(err, err_size, "%s: file too large: %ju bytes, over the limit of %s "
                         "for %s", path, (uintmax_t)s.st_size, capbuf, what);
            return CHAM_ERR_INVALID_ARG;
        }
    }
    char *buf = NULL;
    for (;;) {
        /* Room for one byte past the cap, to tell "exactly the cap" from "more". */
        size_t want = n + 65536 + 1;
        if (want > max_bytes + 2)
            want = max_bytes + 2;
        size_t first = regular && (size_t)s.st_size + 2 > 4096 ? (size_t)s.st_size + 2 : 4096;
        char *grown = cham_grow(buf, &cap, want, 1, first);
        if (!grown) {
            free(buf);
            fclose(fp);
            cham_set_err(err, err_size, "%s: out of host memory reading the file", path);
            return CHAM_ERR_HOST_OOM;
        }
        buf = grown;
        size_t room = cap - n - 1;
        if (room > max_bytes + 1 - n)
            room = max_bytes + 1 - n;
        errno = 0;
        size_t got = fread(buf + n, 1, room, fp);
        n += got;
        if (n > max_bytes) {
            free(buf);
            fclose(fp);
            cap_str(capbuf, sizeof capbuf, max_bytes);
            if (regular)                      /* it grew while we read it */
                cham_set_err(err, err_size, "%s: file too large: over the limit of %s for %s",
                             path, capbuf, what);
            else
                cham_set_err(err, err_size, "%s: %s, not a regular file, gave more than %s, "
                             "the limit for %s", path, kind_of(s.st_mode), capbuf, what);
            return CHAM_ERR_INVALID_ARG;
        }
        if (got == 0) {
            if (ferror(fp)) {
                int e = errno ? errno : EIO;
                free(buf);
                fclose(fp);
                cham_set_err(err, err_size, "%s: cannot read: %s", path, strerror(e));
                return CHAM_ERR_INVALID_ARG;
            }
            break;
        }
    }
    fclose(fp);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CHAM_OK;
}

/* ---- writing (file.h) ---------------------------------------------------------------*/

#define OUT_PATH 4096

struct cham_out {
    FILE *f;
    char name[OUT_PATH];         /* the path as given: messages name it */
    char final[OUT_PATH];        /* the file replaced: name, or what its link points to */
    char tmp[OUT_PATH];          /* the temporary file; "" when written in place */
    int err;                     /* the first failed write's errno (0: none yet) */
    int slot;                    /* in the pending table, or -1 */
};

/* Temporary files not yet committed, for cham_out_remove_pending. A slot is
 * 0 free, 1 being filled, 2 holding a path; a signal handler reads only
 * slots in state 2 and calls only unlink. A process with more outputs open
 * at once than slots still writes them, without the clean-up on a signal. */
#define PENDING_SLOTS 16
static char pending_path[PENDING_SLOTS][OUT_PATH];
static atomic_int pending_state[PENDING_SLOTS];
static atomic_uint temp_counter;

static int pending_add(const char *path)
{
    for (int i = 0; i < PENDING_SLOTS; i++) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&pending_state[i], &expect, 1)) {
            cham_copy_str(pending_path[i], OUT_PATH, path);
            atomic_store(&pending_state[i], 2);
            return i;
        }
    }
    return -1;
}

static void pending_drop(int slot)
{
    if (slot >= 0)
        atomic_store(&pending_state[slot], 0);
}

void cham_out_remove_pending(void)
{
    for (int i = 0; i < PENDING_SLOTS; i++)
        if (atomic_load(&pending_state[i]) == 2)
            unlink(pending_path[i]);
}

/* "DIR/.NAME.tmp-PID-N" beside final: the same directory, so that rename
 * replaces the file atomically; hidden, and named after the file it will
 * become. false when it would be too long. */
static bool temp_name(char *buf, size_t size, const char *final)
{
    const char *slash = strrchr(final, '/');
    const char *base = slash ? slash + 1 : final;
    int dir_len = slash ? (int)(slash - final + 1) : 0;
    /* NAME_MAX is 255 on Linux: room for the suffix. */
    int base_len = (int)strnlen(base, 200);
    int n = snprintf(buf, size, "%.*s.%.*s.tmp-%ld-%u", dir_len, final, base_len, base,
                     (long)getpid(), atomic_fetch_add(&temp_counter, 1u));
    return n > 0 && (size_t)n < size;
}

/* Creates o->tmp beside o->final, with mode (new_file: 0666 less the
 * umask), registered for the clean-up. -1 with errno on failure. */
static int create_temp(cham_out_t *o, bool new_file, mode_t mode)
{
    for (int tries = 0; tries < 100; tries++) {
        if (!temp_name(o->tmp, sizeof o->tmp, o->final)) {
            o->tmp[0] = '\0';        /* cut short: never unlinked */
            errno = ENAMETOOLONG;
            return -1;
        }
        o->slot = pending_add(o->tmp);
        int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL, new_file ? 0666 : 0600);
        int e = errno;
        if (fd >= 0) {
            /* An existing file keeps its permissions. */
            if (!new_file)
                (void)fchmod(fd, mode);
            return fd;
        }
        pending_drop(o->slot);
        o->slot = -1;
        o->tmp[0] = '\0';
        if (e != EEXIST) {
            errno = e;
            return -1;
        }
    }
    errno = EEXIST;
    return -1;
}

/* Opens path itself: a device, a FIFO, or a file whose directory takes no
 * new files. */
static cham_status_t open_in_place(cham_out_t *o, char *err, size_t err_size)
{
    o->tmp[0] = '\0';
    if (!(o->f = fopen(o->name, "w"))) {
        int e = errno;
        cham_set_err(err, err_size, "%s: cannot open for writing: %s", o->name, strerror(e));
        return e == ENOENT || e == ENOTDIR ? CHAM_ERR_NOT_FOUND : CHAM_ERR_INVALID_ARG;
    }
    return CHAM_OK;
}

/* Where the file goes: o->final, and whether it is written in place (not a
 * regular file) and whether it is new; *mode the permissions it keeps. */
static cham_status_t resolve(cham_out_t *o, bool *in_place, bool *new_file, mode_t *mode,
                             char *err, size_t err_size)
{
    struct stat s;
    *in_place = *new_file = false;
    *mode = 0666;
    cham_copy_str(o->final, sizeof o->final, o->name);
    if (stat(o->name, &s) != 0) {
        int e = errno;
        if (e != ENOENT) {
            cham_set_err(err, err_size, "%s: cannot write: %s", o->name, strerror(e));
            return e == ENOTDIR ? CHAM_ERR_NOT_FOUND : CHAM_ERR_INVALID_ARG;
        }
        *new_file = true;         /* a dangling link is replaced by the file */
        return CHAM_OK;
    }
    if (S_ISDIR(s.st_mode)) {
        cham_set_err(err, err_size, "%s: cannot write: %s", o->name, strerror(EISDIR));
        return CHAM_ERR_INVALID_ARG;
    }
    if (!S_ISREG(s.st_mode)) {
        *in_place = true;
        return CHAM_OK;
    }
    *mode = s.st_mode & 07777;
    struct stat ls;
    char *real;
    if (lstat(o->name, &ls) == 0 && S_ISLNK(ls.st_mode) && (real = realpath(o->name, NULL))) {
        cham_copy_str(o->final, sizeof o->final, real);
        free(real);
    }
    return CHAM_OK;
}

cham_status_t cham_out_open(const char *path, cham_out_t **out, char *err, size_t err_size)
{
    *out = NULL;
    if (strlen(path) >= OUT_PATH) {
        cham_set_err(err, err_size, "%.200s...: cannot write: %s", path, strerror(ENAMETOOLONG));
        return CHAM_ERR_INVALID_ARG;
    }
    cham_out_t *o = calloc(1, sizeof *o);
    if (!o) {
        cham_set_err(err, err_size, "%s: out of host memory", path);
        return CHAM_ERR_HOST_OOM;
    }
    o->slot = -1;
    cham_copy_str(o->name, sizeof o->name, path);
    bool in_place, new_file;
    mode_t mode;
    cham_status_t st = resolve(o, &in_place, &new_file, &mode, err, err_size);
    if (st == CHAM_OK && in_place) {
        st = open_in_place(o, err, err_size);
    } else if (st == CHAM_OK) {
        int fd = create_temp(o, new_file, mode);
        int e = errno;
        /* No new files there (no permission, read-only, or no directory at
         * all: /proc/self/fd/N of a memfd), but the file itself takes
         * writes. */
        if (fd < 0 && !new_file && (e == EACCES || e == EPERM || e == EROFS || e == ENOENT) &&
            access(o->name, W_OK) == 0) {
            st = open_in_place(o, err, err_size);
        } else if (fd < 0) {
            cham_set_err(err, err_size, "%s: cannot create: %s", o->name, strerror(e));
            st = e == ENOENT || e == ENOTDIR ? CHAM_ERR_NOT_FOUND : CHAM_ERR_INVALID_ARG;
        } else if (!(o->f = fdopen(fd, "w"))) {
            cham_set_err(err, err_size, "%s: out of host memory", o->name);
            close(fd);
            st = CHAM_ERR_HOST_OOM;
        }
    }
    if (st != CHAM_OK) {
        int e = errno;
        cham_out_abort(o);
        errno = e;                /* for callers without a message buffer */
        return st;
    }
    *out = o;
    return CHAM_OK;
}

FILE *cham_out_file(cham_out_t *o)
{
    return o->f;
}

bool cham_out_ok(cham_out_t *o)
{
    if (!o->err && o->f && ferror(o->f))
        o->err = errno ? errno : EIO;
    return o->err == 0;
}

/* Frees o after its stream is closed and its temporary file dealt with. */
static void out_free(cham_out_t *o)
{
    pending_drop(o->slot);
    free(o);
}

void cham_out_abort(cham_out_t *o)
{
    if (!o)
        return;
    if (o->f)
        fclose(o->f);
    if (o->tmp[0])
        unlink(o->tmp);
    out_free(o);
}

/* Closes the stream, syncs and renames; the errno of the first failure
 * (0: none). */
static int finish(cham_out_t *o)
{
    int e = o->err;
    errno = 0;
    if (fflush(o->f) != 0 && !e)
        e = errno ? errno : EIO;
    if (ferror(o->f) && !e)
        e = EIO;
    /* On disk before it takes the name: a crash after the rename must not
     * leave an empty file there. Devices and FIFOs are not synced. */
    if (!e && o->tmp[0] && fsync(fileno(o->f)) != 0)
        e = errno;
    if (fclose(o->f) != 0 && !e)
        e = errno ? errno : EIO;
    o->f = NULL;
    if (!e && o->tmp[0] && rename(o->tmp, o->final) != 0)
        e = errno;
    return e;
}

cham_status_t cham_out_commit(cham_out_t *o, char *err, size_t err_size)
{
    CHAM_ASSERT(o && o->f);
    cham_out_ok(o);
    int e = finish(o);
    if (e) {
        cham_set_err(err, err_size, "%s: cannot write: %s", o->name, strerror(e));
        if (o->tmp[0])
            unlink(o->tmp);
        out_free(o);
        errno = e;
        return CHAM_ERR_INVALID_ARG;
    }
    o->tmp[0] = '\0';
    out_free(o);
    return CHAM_OK;
}
