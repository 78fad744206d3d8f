/* Reading a whole file with a size cap (file.h). */
#include "common/file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
