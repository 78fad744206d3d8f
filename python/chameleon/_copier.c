/* The Copier: host copies on worker threads, with events, for the CPU path of
 * chameleon.torch (chameleon._moves.CpuMoves). It stands where CUDA's side
 * streams stand on a GPU, so the glue's ordering logic runs with real
 * concurrency in the tests on this CPU-only machine: a copy-out runs while the
 * glue goes on, a copy-in lands while the compute goes on, and every use must
 * wait for the copy's event. Built with CHAM_DEBUG_CHECKS (the tests' builds),
 * new and freed host buffers and storages given back memory are poisoned
 * (POISON below), so a missing wait changes the bytes a test sees; without
 * it they are not, as no GPU spends a pass over the bytes on it.
 *
 * Two lanes, one worker thread each, like _CudaMoves' two side streams: "out"
 * copies raw addresses into host buffers the Copier owns, "in" copies them
 * back. Each lane runs its jobs in FIFO order. A copy-in starts only once its
 * host buffer's copy-out is done (the in lane waits for that event, as the
 * CUDA path's in stream waits for the out stream's event).
 *
 * Threads: the worker threads never touch Python objects or the GIL. All the
 * shared state below is under the Copier's one mutex; the Python objects are
 * used under the GIL only. Waits release the GIL.
 *
 * Built two ways: into the extension (the default), and with
 * CHAM_COPIER_NO_PYTHON defined, the engine alone, which the C driver
 * python/tests/copier_tsan.c includes to run it under ThreadSanitizer (the
 * interpreter is not built with it). */
#ifndef CHAM_COPIER_NO_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#else
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef CHAM_COPIER_NO_PYTHON
#include "copier.h"
#endif

#ifndef CHAM_DEBUG_CHECKS
#define CHAM_DEBUG_CHECKS 0
#endif

/* Always on: a broken invariant here is memory corruption later. */
#define COPIER_ASSERT(cond)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: copier invariant failed: %s\n", __FILE__, __LINE__, #cond);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ---- the poison -------------------------------------------------------------
 * Bytes F5 7F repeated from the start of the region: the 16-bit word 0x7FF5
 * (little-endian), a quiet NaN as float16, bfloat16, float32 (0x7FF57FF5) and
 * float64 (0x7FF57FF57FF57FF5) at any even offset, so released floats read as
 * NaN; as integers it is 32757 (int16), 2146795509 (int32), -11 and 127
 * (int8), none of them a value a test or a model is likely to hold. */
static const unsigned char copier_poison_bytes[2] = {0xF5, 0x7F};

static void copier_poison(void *p, size_t n)
{
    unsigned char *b = p;
    if (n == 0)
        return;
    b[0] = copier_poison_bytes[0];
    if (n > 1)
        b[1] = copier_poison_bytes[1];
    /* Doubling copies: the filled prefix is always even, so the pattern
     * stays in phase. */
    for (size_t filled = 2; filled < n; filled *= 2)
        memcpy(b + filled, b, filled < n - filled ? filled : n - filled);
}

/* ---- the engine -------------------------------------------------------------*/

/* The done flag of one job. refs: the Python Event, and each queued or running
 * job that sets it or waits for it; the last one frees it. Under mu. */
typedef struct {
    int refs;
    int done;
} cham_copy_event_t;

#define COPIER_BUF_MAGIC 0x43484d42u /* "CHMB": a live host buffer */

/* A host buffer the Copier owns. users: queued or running jobs that read or
 * write bytes; orphan: its HostCopy is gone. It is freed (poisoned first) when
 * both say nobody needs it: by the HostCopy's release if no job uses it, else
 * by the worker that finishes the last job. Under mu. */
typedef struct {
    unsigned magic;
    unsigned char *bytes;
    size_t nbytes;
    int users;
    int orphan;
} cham_host_buf_t;

enum { COPIER_OUT, COPIER_IN, COPIER_LANES };

typedef struct cham_copy_job {
    struct cham_copy_job *next;
    unsigned char *raw;         /* the address outside the Copier */
    cham_host_buf_t *buf;
    cham_copy_event_t *signal;  /* set when the copy is done */
    cham_copy_event_t *after;   /* NULL, or the copy starts once this is set */
} cham_copy_job_t;

typedef struct cham_copier cham_copier_t;

/* One lane: a FIFO and the thread that runs it. */
typedef struct {
    cham_copier_t *owner;
    int dir;                    /* COPIER_OUT or COPIER_IN */
    cham_copy_job_t *head, *tail;
    pthread_t thread;
    int started;
} cham_copy_lane_t;

struct cham_copier {
    pthread_mutex_t mu;
    pthread_cond_t changed;     /* broadcast at each job queued or done, pause and stop */
    cham_copy_lane_t lane[COPIER_LANES];
    unsigned delay_us;          /* every job sleeps this long before its copy */
    int paused;                 /* a test hook: workers start no job while set */
    int stop;                   /* set once, by cham_copier_free: drain and exit */
    size_t pending;             /* jobs queued or running */
    /* Counters, for stats and for the checks at shutdown. */
    size_t live_bufs, live_events;
    unsigned long long live_buf_bytes, jobs_done, bytes_copied;
};

static void copier_sleep_us(unsigned us)
{
    struct timespec left = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

static cham_copy_event_t *copier_event_new(cham_copier_t *c)
{
    cham_copy_event_t *ev = calloc(1, sizeof *ev);
    if (!ev)
        return NULL;
    ev->refs = 1;
    pthread_mutex_lock(&c->mu);
    c->live_events++;
    pthread_mutex_unlock(&c->mu);
    return ev;
}

/* Drops one reference; under mu. */
static void copier_event_unref_locked(cham_copier_t *c, cham_copy_event_t *ev)
{
    COPIER_ASSERT(ev->refs > 0);
    if (--ev->refs == 0) {
        c->live_events--;
        free(ev);
    }
}

static void copier_event_unref(cham_copier_t *c, cham_copy_event_t *ev)
{
    pthread_mutex_lock(&c->mu);
    copier_event_unref_locked(c, ev);
    pthread_mutex_unlock(&c->mu);
}

static cham_host_buf_t *copier_buf_new(cham_copier_t *c, size_t nbytes)
{
    cham_host_buf_t *buf = calloc(1, sizeof *buf);
    if (!buf)
        return NULL;
    buf->bytes = malloc(nbytes ? nbytes : 1);
    if (!buf->bytes) {
        free(buf);
        return NULL;
    }
    /* Poisoned until its copy-out lands: a copy-in that ran first would
     * write poison, not whatever malloc left there. */
    if (CHAM_DEBUG_CHECKS)
        copier_poison(buf->bytes, nbytes);
    buf->magic = COPIER_BUF_MAGIC;
    buf->nbytes = nbytes;
    pthread_mutex_lock(&c->mu);
    c->live_bufs++;
    c->live_buf_bytes += nbytes;
    pthread_mutex_unlock(&c->mu);
    return buf;
}

/* Outside mu: the buffer is nobody's any more. Poisoned first, so a reader
 * that kept its address reads NaNs, not the data it expected. */
static void copier_buf_destroy(cham_host_buf_t *buf)
{
    COPIER_ASSERT(buf->magic == COPIER_BUF_MAGIC && buf->users == 0 && buf->orphan);
    if (CHAM_DEBUG_CHECKS)
        copier_poison(buf->bytes, buf->nbytes);
    buf->magic = 0;
    free(buf->bytes);
    free(buf);
}

/* The HostCopy lets go of buf: freed now if no job uses it, else by the
 * worker that finishes its last job. */
static void copier_buf_release(cham_copier_t *c, cham_host_buf_t *buf)
{
    pthread_mutex_lock(&c->mu);
    COPIER_ASSERT(buf->magic == COPIER_BUF_MAGIC && !buf->orphan);
    buf->orphan = 1;
    int now = buf->users == 0;
    if (now) {
        c->live_bufs--;
        c->live_buf_bytes -= buf->nbytes;
    }
    pthread_mutex_unlock(&c->mu);
    if (now)
        copier_buf_destroy(buf);
}

/* Appends a job to its lane; the caller holds references for it (buf->users,
 * signal and after refs) taken here under mu. */
static void copier_enqueue(cham_copier_t *c, int dir, cham_copy_job_t *job)
{
    cham_copy_lane_t *lane = &c->lane[dir];
    pthread_mutex_lock(&c->mu);
    COPIER_ASSERT(!c->stop);
    COPIER_ASSERT(job->buf->magic == COPIER_BUF_MAGIC && !job->buf->orphan);
    job->buf->users++;
    job->signal->refs++;
    if (job->after)
        job->after->refs++;
    job->next = NULL;
    if (lane->tail)
        lane->tail->next = job;
    else
        lane->head = job;
    lane->tail = job;
    c->pending++;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
}

/* Under mu: the job's copy is done. Returns the buffer to destroy (outside
 * mu) if this job was its last user and its HostCopy is gone. */
static cham_host_buf_t *copier_finish_locked(cham_copier_t *c, cham_copy_job_t *job)
{
    cham_host_buf_t *buf = job->buf, *dead = NULL;
    job->signal->done = 1;
    copier_event_unref_locked(c, job->signal);
    if (job->after)
        copier_event_unref_locked(c, job->after);
    COPIER_ASSERT(buf->users > 0);
    if (--buf->users == 0 && buf->orphan) {
        c->live_bufs--;
        c->live_buf_bytes -= buf->nbytes;
        dead = buf;
    }
    c->jobs_done++;
    c->bytes_copied += buf->nbytes;
    COPIER_ASSERT(c->pending > 0);
    c->pending--;
    pthread_cond_broadcast(&c->changed);
    return dead;
}

/* The job a lane may start now, or NULL: its head, unless paused or the head
 * waits for an event not yet set. Under mu. */
static cham_copy_job_t *copier_next_locked(cham_copier_t *c, cham_copy_lane_t *lane)
{
    cham_copy_job_t *job = lane->head;
    if (!job || (c->paused && !c->stop) || (job->after && !job->after->done))
        return NULL;
    lane->head = job->next;
    if (!lane->head)
        lane->tail = NULL;
    return job;
}

static void copier_run(cham_copier_t *c, int dir, cham_copy_job_t *job)
{
    if (c->delay_us)
        copier_sleep_us(c->delay_us);
    /* Only this job touches these bytes of buf now: the HostCopy's owner
     * reads them only after the out event, and a copy-in starts after it. */
    if (dir == COPIER_OUT)
        memcpy(job->buf->bytes, job->raw, job->buf->nbytes);
    else
        memcpy(job->raw, job->buf->bytes, job->buf->nbytes);
}

static void *copier_worker(void *arg)
{
    cham_copy_lane_t *lane = arg;
    cham_copier_t *c = lane->owner;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        cham_copy_job_t *job = copier_next_locked(c, lane);
        if (!job) {
            /* Stop drains: the lane exits once it is empty. */
            if (c->stop && !lane->head)
                break;
            pthread_cond_wait(&c->changed, &c->mu);
            continue;
        }
        if (CHAM_DEBUG_CHECKS)
            COPIER_ASSERT(job->buf->magic == COPIER_BUF_MAGIC && job->buf->users > 0);
        pthread_mutex_unlock(&c->mu);
        copier_run(c, lane->dir, job);
        pthread_mutex_lock(&c->mu);
        cham_host_buf_t *dead = copier_finish_locked(c, job);
        free(job);
        if (dead) {
            pthread_mutex_unlock(&c->mu);
            copier_buf_destroy(dead);
            pthread_mutex_lock(&c->mu);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Drains every lane, joins the workers and frees the Copier. Nothing may use
 * it afterwards; every HostCopy and Event must be gone (they own references
 * to the Python Copier, so its dealloc comes after theirs). */
static void cham_copier_free(cham_copier_t *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    c->paused = 0;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < COPIER_LANES; i++)
        if (c->lane[i].started)
            pthread_join(c->lane[i].thread, NULL);
    /* Every job ran: its buffer, if orphaned, and its events are freed. */
    COPIER_ASSERT(c->pending == 0 && !c->lane[0].head && !c->lane[1].head);
    COPIER_ASSERT(c->live_bufs == 0 && c->live_events == 0);
    pthread_cond_destroy(&c->changed);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* A Copier with its two workers running, or NULL with errno set. */
static cham_copier_t *cham_copier_new(unsigned delay_us)
{
    cham_copier_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->delay_us = delay_us;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (pthread_cond_init(&c->changed, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    for (int i = 0; i < COPIER_LANES; i++) {
        c->lane[i].owner = c;
        c->lane[i].dir = i;
        int err = pthread_create(&c->lane[i].thread, NULL, copier_worker, &c->lane[i]);
        if (err) {
            cham_copier_free(c); /* joins the lanes already started */
            errno = err;
            return NULL;
        }
        c->lane[i].started = 1;
    }
    return c;
}

/* Queues src -> a new host buffer of nbytes. Returns the buffer (the caller's
 * reference: copier_buf_release) and sets *copied to the event of the copy
 * (the caller's reference: copier_event_unref); NULL if out of memory. The
 * nbytes at src must stay unchanged until *copied is set. */
static cham_host_buf_t *cham_copier_out(cham_copier_t *c, const void *src, size_t nbytes,
                                        cham_copy_event_t **copied)
{
    cham_copy_job_t *job = calloc(1, sizeof *job);
    cham_host_buf_t *buf = job ? copier_buf_new(c, nbytes) : NULL;
    cham_copy_event_t *ev = buf ? copier_event_new(c) : NULL;
    if (!ev) {
        if (buf) {
            buf->orphan = 1;
            pthread_mutex_lock(&c->mu);
            c->live_bufs--;
            c->live_buf_bytes -= nbytes;
            pthread_mutex_unlock(&c->mu);
            copier_buf_destroy(buf);
        }
        free(job);
        return NULL;
    }
    job->raw = (unsigned char *)(uintptr_t)src;
    job->buf = buf;
    job->signal = ev;
    copier_enqueue(c, COPIER_OUT, job);
    *copied = ev;
    return buf;
}

/* Queues buf -> dst (buf->nbytes), after the event `copied` (buf's copy-out).
 * Returns the event of this copy (the caller's reference) or NULL if out of
 * memory. buf stays alive until the copy read it, whatever its owner does;
 * dst must stay valid until the event is set. */
static cham_copy_event_t *cham_copier_into(cham_copier_t *c, cham_host_buf_t *buf,
                                           cham_copy_event_t *copied, void *dst)
{
    cham_copy_job_t *job = calloc(1, sizeof *job);
    cham_copy_event_t *ev = job ? copier_event_new(c) : NULL;
    if (!ev) {
        free(job);
        return NULL;
    }
    job->raw = dst;
    job->buf = buf;
    job->signal = ev;
    job->after = copied;
    copier_enqueue(c, COPIER_IN, job);
    return ev;
}

static int cham_copier_done(cham_copier_t *c, cham_copy_event_t *ev)
{
    pthread_mutex_lock(&c->mu);
    int done = ev->done;
    pthread_mutex_unlock(&c->mu);
    return done;
}

/* Blocks until ev is set. Returns 0, or -1 if the Copier is paused and ev is
 * not set (the wait would never end). */
static int cham_copier_wait(cham_copier_t *c, cham_copy_event_t *ev)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    while (!ev->done) {
        if (c->paused) {
            rc = -1;
            break;
        }
        pthread_cond_wait(&c->changed, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Blocks until every queued job is done; -1 as cham_copier_wait. */
static int cham_copier_synchronize(cham_copier_t *c)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    while (c->pending) {
        if (c->paused) {
            rc = -1;
            break;
        }
        pthread_cond_wait(&c->changed, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void cham_copier_pause(cham_copier_t *c, int paused)
{
    pthread_mutex_lock(&c->mu);
    c->paused = paused;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
}

#ifndef CHAM_COPIER_NO_PYTHON
/* ---- Python objects ---------------------------------------------------------
 * Copier owns the engine. Event and HostCopy own a reference to their Copier,
 * so it is deallocated (drained and joined) only after them. */

typedef struct {
    PyObject_HEAD
    cham_copier_t *c;
} CopierObject;

typedef struct {
    PyObject_HEAD
    CopierObject *owner;
    cham_copy_event_t *ev;
} EventObject;

typedef struct {
    PyObject_HEAD
    CopierObject *owner;
    cham_host_buf_t *buf;
    Py_ssize_t nbytes;
    PyObject *copied;           /* EventObject: the copy-out */
} HostCopyObject;

static PyTypeObject CopierType;
static PyTypeObject EventType;
static PyTypeObject HostCopyType;

static const char paused_msg[] =
    "the copier is paused (Copier.pause()): this wait would never return; resume() first";

/* ---- Event ------------------------------------------------------------------*/

/* Takes the caller's reference to ev. */
static PyObject *event_wrap(CopierObject *owner, cham_copy_event_t *ev)
{
    EventObject *e = PyObject_New(EventObject, &EventType);
    if (!e) {
        copier_event_unref(owner->c, ev);
        return NULL;
    }
    Py_INCREF(owner);
    e->owner = owner;
    e->ev = ev;
    return (PyObject *)e;
}

static void event_dealloc(EventObject *e)
{
    copier_event_unref(e->owner->c, e->ev);
    Py_DECREF(e->owner);
    PyObject_Free(e);
}

static PyObject *event_wait(EventObject *e, PyObject *unused)
{
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cham_copier_wait(e->owner->c, e->ev);
    Py_END_ALLOW_THREADS
    if (rc) {
        PyErr_SetString(PyExc_RuntimeError, paused_msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *event_done(EventObject *e, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(cham_copier_done(e->owner->c, e->ev));
}

static PyMethodDef event_methods[] = {
    {"wait", (PyCFunction)event_wait, METH_NOARGS,
     "wait(): returns once the copy is done (the GIL is released meanwhile)"},
    {"done", (PyCFunction)event_done, METH_NOARGS, "done() -> bool: the copy is done"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chameleon._chameleon.Event",
    .tp_doc = "The end of one Copier job: done() and wait(). Made by the Copier.",
    .tp_basicsize = sizeof(EventObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)event_dealloc,
    .tp_methods = event_methods,
};

/* ---- HostCopy ---------------------------------------------------------------*/

static void hostcopy_dealloc(HostCopyObject *h)
{
    /* A copy-in may still read the buffer: then its worker frees it. */
    copier_buf_release(h->owner->c, h->buf);
    Py_XDECREF(h->copied);
    Py_DECREF(h->owner);
    PyObject_Free(h);
}

/* tobytes(): the host copy's bytes, once the copy-out is done. */
static PyObject *hostcopy_tobytes(HostCopyObject *h, PyObject *unused)
{
    (void)unused;
    EventObject *copied = (EventObject *)h->copied;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cham_copier_wait(h->owner->c, copied->ev);
    Py_END_ALLOW_THREADS
    if (rc) {
        PyErr_SetString(PyExc_RuntimeError, paused_msg);
        return NULL;
    }
    /* Written only by the copy-out, which is done; copy-ins only read it. */
    return PyBytes_FromStringAndSize((const char *)h->buf->bytes, h->nbytes);
}

static PyMethodDef hostcopy_methods[] = {
    {"tobytes", (PyCFunction)hostcopy_tobytes, METH_NOARGS,
     "tobytes() -> bytes: the copy, after waiting for the copy-out"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef hostcopy_members[] = {
    {"nbytes", T_PYSSIZET, offsetof(HostCopyObject, nbytes), READONLY, "bytes held"},
    {"copied", T_OBJECT_EX, offsetof(HostCopyObject, copied), READONLY,
     "the Event of the copy-out"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HostCopyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chameleon._chameleon.HostCopy",
    .tp_doc = "A host buffer the Copier owns, filled by Copier.out(). Released while a "
              "copy-in still reads it, it is freed after that copy.",
    .tp_basicsize = sizeof(HostCopyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)hostcopy_dealloc,
    .tp_methods = hostcopy_methods,
    .tp_members = hostcopy_members,
};

/* ---- Copier -----------------------------------------------------------------*/

static PyObject *copier_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"delay_us", NULL};
    long long delay = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|L:Copier", kwlist, &delay))
        return NULL;
    if (delay < 0 || delay > 60 * 1000000LL) {
        PyErr_Format(PyExc_ValueError, "Copier: delay_us=%lld: expected 0 to 60000000", delay);
        return NULL;
    }
    CopierObject *self = (CopierObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->c = cham_copier_new((unsigned)delay);
    if (!self->c) {
        Py_DECREF(self);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return (PyObject *)self;
}

static void copier_dealloc(CopierObject *self)
{
    /* Jobs still queued run first: their buffers and events are the
     * workers' to free. */
    if (self->c) {
        Py_BEGIN_ALLOW_THREADS
        cham_copier_free(self->c);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_region(const char *what, unsigned long long ptr, Py_ssize_t n)
{
    if (n < 0 || (!ptr && n > 0)) {
        PyErr_Format(PyExc_ValueError, "%s: bad region (address %llu, %zd bytes)", what, ptr, n);
        return -1;
    }
    return 0;
}

/* out(ptr, nbytes) -> HostCopy */
static PyObject *copier_out(CopierObject *self, PyObject *args)
{
    unsigned long long ptr;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Kn:out", &ptr, &n) || parse_region("out", ptr, n))
        return NULL;
    HostCopyObject *h = PyObject_New(HostCopyObject, &HostCopyType);
    if (!h)
        return NULL;
    cham_copy_event_t *ev;
    cham_host_buf_t *buf = cham_copier_out(self->c, (const void *)(uintptr_t)ptr, (size_t)n, &ev);
    if (!buf) {
        PyObject_Free(h);
        return PyErr_NoMemory();
    }
    Py_INCREF(self);
    h->owner = self;
    h->buf = buf;
    h->nbytes = n;
    h->copied = event_wrap(self, ev);
    if (!h->copied) {
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

/* into(hostcopy, ptr, nbytes) -> Event */
static PyObject *copier_into(CopierObject *self, PyObject *args)
{
    PyObject *o;
    unsigned long long ptr;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!Kn:into", &HostCopyType, &o, &ptr, &n) ||
        parse_region("into", ptr, n))
        return NULL;
    HostCopyObject *h = (HostCopyObject *)o;
    if (h->owner != self) {
        PyErr_SetString(PyExc_ValueError, "into: the HostCopy was made by another Copier");
        return NULL;
    }
    if (n != h->nbytes) {
        PyErr_Format(PyExc_ValueError,
                     "into: the destination holds %zd bytes, the host copy %zd: a copy "
                     "goes back into a region of its own size",
                     n, h->nbytes);
        return NULL;
    }
    cham_copy_event_t *ev =
        cham_copier_into(self->c, h->buf, ((EventObject *)h->copied)->ev, (void *)(uintptr_t)ptr);
    if (!ev)
        return PyErr_NoMemory();
    return event_wrap(self, ev);
}

/* poison(ptr, nbytes): fills the region with POISON, now, in this thread. */
static PyObject *copier_poison_py(CopierObject *self, PyObject *args)
{
    (void)self;
    unsigned long long ptr;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Kn:poison", &ptr, &n) || parse_region("poison", ptr, n))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    copier_poison((void *)(uintptr_t)ptr, (size_t)n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *copier_synchronize_py(CopierObject *self, PyObject *unused)
{
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cham_copier_synchronize(self->c);
    Py_END_ALLOW_THREADS
    if (rc) {
        PyErr_SetString(PyExc_RuntimeError, paused_msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *copier_pause_py(CopierObject *self, PyObject *unused)
{
    (void)unused;
    cham_copier_pause(self->c, 1);
    Py_RETURN_NONE;
}

static PyObject *copier_resume_py(CopierObject *self, PyObject *unused)
{
    (void)unused;
    cham_copier_pause(self->c, 0);
    Py_RETURN_NONE;
}

static PyObject *copier_stats(CopierObject *self, PyObject *unused)
{
    (void)unused;
    cham_copier_t *c = self->c;
    pthread_mutex_lock(&c->mu);
    size_t pending = c->pending, bufs = c->live_bufs, events = c->live_events;
    unsigned long long buf_bytes = c->live_buf_bytes, done = c->jobs_done,
                       copied = c->bytes_copied;
    int paused = c->paused;
    pthread_mutex_unlock(&c->mu);
    return Py_BuildValue("{s:n,s:n,s:K,s:n,s:K,s:K,s:O}", "pending", (Py_ssize_t)pending,
                         "host_buffers", (Py_ssize_t)bufs, "host_bytes", buf_bytes, "events",
                         (Py_ssize_t)events, "jobs_done", done, "bytes_copied", copied, "paused",
                         paused ? Py_True : Py_False);
}

static PyMethodDef copier_methods[] = {
    {"out", (PyCFunction)copier_out, METH_VARARGS,
     "out(ptr, nbytes) -> HostCopy: queues a copy of nbytes at ptr into a new host buffer; "
     "the bytes at ptr must stay unchanged until HostCopy.copied is done"},
    {"into", (PyCFunction)copier_into, METH_VARARGS,
     "into(hostcopy, ptr, nbytes) -> Event: queues the copy back to ptr (nbytes must be "
     "hostcopy.nbytes), after the copy-out; ptr must stay valid until the Event is done"},
    {"poison", (PyCFunction)copier_poison_py, METH_VARARGS,
     "poison(ptr, nbytes): fills the bytes with POISON now"},
    {"synchronize", (PyCFunction)copier_synchronize_py, METH_NOARGS,
     "synchronize(): returns once every queued copy is done"},
    {"pause", (PyCFunction)copier_pause_py, METH_NOARGS,
     "pause(): a test hook: the workers start no copy until resume()"},
    {"resume", (PyCFunction)copier_resume_py, METH_NOARGS, "resume(): undoes pause()"},
    {"stats", (PyCFunction)copier_stats, METH_NOARGS,
     "stats() -> dict: pending jobs, live host buffers and bytes, live events, jobs done, "
     "bytes copied, paused"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CopierType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chameleon._chameleon.Copier",
    .tp_doc = "Copier(delay_us=0): host copies on two worker threads (out and in), with "
              "events. delay_us: every copy sleeps that long first (tests widen races with "
              "it). Released, it runs the copies still queued and joins its threads.",
    .tp_basicsize = sizeof(CopierObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = copier_new,
    .tp_dealloc = (destructor)copier_dealloc,
    .tp_methods = copier_methods,
};

int cham_py_copier_init(PyObject *module)
{
    if (PyType_Ready(&CopierType) < 0 || PyType_Ready(&EventType) < 0 ||
        PyType_Ready(&HostCopyType) < 0)
        return -1;
    PyObject *poison =
        PyBytes_FromStringAndSize((const char *)copier_poison_bytes, sizeof copier_poison_bytes);
    if (!poison)
        return -1;
    int rc = PyModule_AddObjectRef(module, "Copier", (PyObject *)&CopierType) ||
             PyModule_AddObjectRef(module, "HostCopy", (PyObject *)&HostCopyType) ||
             PyModule_AddObjectRef(module, "Event", (PyObject *)&EventType) ||
             PyModule_AddObjectRef(module, "POISON", poison) ||
             PyModule_AddObjectRef(module, "DEBUG_CHECKS", CHAM_DEBUG_CHECKS ? Py_True : Py_False);
    Py_DECREF(poison);
    return rc ? -1 : 0;
}
#endif /* CHAM_COPIER_NO_PYTHON */
