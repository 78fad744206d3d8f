/* The Copier's engine (python/chameleon/_copier.c) without Python, for
 * ThreadSanitizer: the interpreter is not built with it, so test_moves.py
 * cannot run under TSan. This driver makes the same kinds of calls from
 * several threads (out, into, early release of host buffers, waits, pause,
 * shutdown with jobs queued) and checks the bytes.
 *
 *   cc -std=c11 -g -O1 -fsanitize=thread -DCHAM_DEBUG_CHECKS=1 \
 *      python/tests/copier_tsan.c -o copier_tsan -lpthread && ./copier_tsan
 *
 * Prints "copier_tsan: ok" and exits 0, or names the first wrong byte. */
#define CHAM_COPIER_NO_PYTHON
#include "../chameleon/_copier.c"

enum { THREADS = 4, ROUNDS = 400, MAX_BYTES = 3000 };

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

typedef struct {
    cham_copier_t *c;
    unsigned seed;              /* advances: the thread's generator */
    int id, failed;
} client_t;

/* One round: a source copied out, released by its owner at once or later,
 * copied into a fresh destination, waited for, compared. */
static void *client(void *arg)
{
    client_t *cl = arg;
    unsigned char src[MAX_BYTES], dst[MAX_BYTES];
    for (int r = 0; r < ROUNDS && !cl->failed; r++) {
        size_t n = 1 + next_rand(&cl->seed) % MAX_BYTES;
        for (size_t i = 0; i < n; i++)
            src[i] = (unsigned char)next_rand(&cl->seed);
        cham_copy_event_t *copied, *in;
        cham_host_buf_t *buf = cham_copier_out(cl->c, src, n, &copied);
        COPIER_ASSERT(buf);
        int early = next_rand(&cl->seed) & 1;
        if (!early) /* the caller's rule: src unchanged until copied */
            cham_copier_wait(cl->c, copied);
        in = cham_copier_into(cl->c, buf, copied, dst);
        COPIER_ASSERT(in);
        if (early) {
            /* Released while both copies may still use it: the worker
             * frees it after the copy-in. */
            copier_buf_release(cl->c, buf);
            cham_copier_wait(cl->c, copied);
        }
        cham_copier_wait(cl->c, in);
        COPIER_ASSERT(cham_copier_done(cl->c, in) && cham_copier_done(cl->c, copied));
        if (memcmp(src, dst, n) != 0) {
            fprintf(stderr, "copier_tsan: thread %d round %d: bytes differ\n", cl->id, r);
            cl->failed = 1;
        }
        if (!early)
            copier_buf_release(cl->c, buf);
        copier_event_unref(cl->c, copied);
        copier_event_unref(cl->c, in);
    }
    return NULL;
}

/* Jobs queued while paused run at shutdown; their buffers and events were
 * released before, so the workers free them. */
static int shutdown_drains(void)
{
    static unsigned char src[64][128], dst[64][128];
    cham_copier_t *c = cham_copier_new(50);
    COPIER_ASSERT(c);
    cham_copier_pause(c, 1);
    for (int i = 0; i < 64; i++) {
        memset(src[i], i + 1, sizeof src[i]);
        cham_copy_event_t *copied;
        cham_host_buf_t *buf = cham_copier_out(c, src[i], sizeof src[i], &copied);
        cham_copy_event_t *in = cham_copier_into(c, buf, copied, dst[i]);
        copier_buf_release(c, buf);
        copier_event_unref(c, copied);
        copier_event_unref(c, in);
    }
    cham_copier_free(c); /* asserts every buffer and event freed */
    for (int i = 0; i < 64; i++)
        if (memcmp(src[i], dst[i], sizeof src[i]) != 0) {
            fprintf(stderr, "copier_tsan: shutdown lost job %d\n", i);
            return 1;
        }
    return 0;
}

int main(void)
{
    cham_copier_t *c = cham_copier_new(0);
    COPIER_ASSERT(c);
    pthread_t th[THREADS];
    client_t cl[THREADS];
    for (int i = 0; i < THREADS; i++) {
        cl[i] = (client_t){c, 1000u + (unsigned)i, i, 0};
        pthread_create(&th[i], NULL, client, &cl[i]);
    }
    int failed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        failed |= cl[i].failed;
    }
    COPIER_ASSERT(cham_copier_synchronize(c) == 0 && c->pending == 0);
    cham_copier_free(c);
    failed |= shutdown_drains();
    printf("copier_tsan: %s\n", failed ? "FAILED" : "ok");
    return failed;
}
