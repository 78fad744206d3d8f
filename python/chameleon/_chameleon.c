/* The CPython extension under chameleon.torch: the runtime API of
 * include/chameleon/runtime.h in advisor mode, as Python objects.
 *
 * Context: one runtime context. Handle: one tensor handle (a view of a
 * storage); the glue keeps Python objects on it (its __dict__). Every call
 * is made for the per-op path of a framework's dispatch, so it does what a
 * Python loop would do in one C call: `Context.op` begins an op, sets its
 * cost, collects its actions and ends it. Handles released while a call is
 * inside the runtime (a log line running Python, say) wait for its end.
 * Why the Python C API and not ctypes: docs/pytorch.md. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "copier.h"

static PyObject *ChameleonError;

typedef struct {
    PyObject_HEAD
    cham_context_t *ctx;
    int busy;                    /* inside a runtime call */
    Py_ssize_t handles;          /* alive: the context cannot close before them */
    cham_tensor_t **deferred;    /* released during one */
    size_t n_deferred, cap_deferred;
    PyObject *log;               /* callable or NULL (stderr) */
    PyObject *lines;             /* log lines of the running call */
    cham_step_ended_t last_step;
} ContextObject;

typedef struct {
    PyObject_HEAD
    ContextObject *owner;
    cham_tensor_t *t;
    PyObject *dict;
    PyObject *weakrefs;
} HandleObject;

static PyTypeObject ContextType;
static PyTypeObject HandleType;

/* ---- errors ---------------------------------------------------------------*/

static PyObject *fail(ContextObject *c, cham_status_t st, const char *what)
{
    const char *msg = c && c->ctx ? cham_context_last_error(c->ctx) : cham_context_last_error(NULL);
    PyObject *type = st == CHAM_ERR_INVALID_ARG || st == CHAM_ERR_NOT_FOUND ? PyExc_ValueError
                     : st == CHAM_ERR_HOST_OOM                              ? PyExc_MemoryError
                                                                            : ChameleonError;
    PyErr_Format(type, "%s: %s (%s)", what, msg && *msg ? msg : "failed", cham_status_string(st));
    return NULL;
}

static int check_open(ContextObject *c)
{
    if (c->ctx)
        return 0;
    PyErr_SetString(ChameleonError, "the context is closed");
    return -1;
}

/* ---- calls into the runtime -----------------------------------------------*/

static void log_line(const char *line, void *user)
{
    ContextObject *c = user;
    if (!c->log) {
        fprintf(stderr, "%s\n", line);
        return;
    }
    /* Python runs after the call, not inside the runtime. */
    PyObject *s = PyUnicode_DecodeUTF8(line, (Py_ssize_t)strlen(line), "replace");
    if (s) {
        PyList_Append(c->lines, s);
        Py_DECREF(s);
    } else {
        PyErr_Clear();
    }
}

static void enter(ContextObject *c)
{
    c->busy++;
}

/* Ends a runtime call: handles released meanwhile go now, log lines go to
 * the callable. Returns -1 if the callable raised. */
static int leave(ContextObject *c)
{
    if (--c->busy)
        return 0;
    for (size_t i = 0; i < c->n_deferred; i++)
        cham_tensor_release(c->deferred[i]);
    c->n_deferred = 0;
    int rc = 0;
    Py_ssize_t n = c->lines ? PyList_GET_SIZE(c->lines) : 0;
    if (n && c->log) {
        PyObject *lines = c->lines;
        c->lines = PyList_New(0);
        if (!c->lines) {
            c->lines = lines;
            return -1;
        }
        for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
            PyObject *r = PyObject_CallOneArg(c->log, PyList_GET_ITEM(lines, i));
            if (!r)
                rc = -1;
            Py_XDECREF(r);
        }
        Py_DECREF(lines);
    }
    return rc;
}

/* leave(), then the failure of the call's status st as an exception:
 * -1 when either set one. */
static int leave_with(ContextObject *c, cham_status_t st, const char *what)
{
    if (leave(c))
        return -1;
    if (st != CHAM_OK) {
        fail(c, st, what);
        return -1;
    }
    return 0;
}

/* ---- Handle -----------------------------------------------------------------*/

static PyObject *handle_new(ContextObject *owner, cham_tensor_t *t)
{
    HandleObject *h = PyObject_GC_New(HandleObject, &HandleType);
    if (!h) {
        cham_tensor_release(t);
        return NULL;
    }
    Py_INCREF(owner);
    owner->handles++;
    h->owner = owner;
    h->t = t;
    h->dict = NULL;
    h->weakrefs = NULL;
    cham_tensor_set_user(t, h);
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

static int handle_traverse(HandleObject *h, visitproc visit, void *arg)
{
    Py_VISIT(h->dict);
    Py_VISIT(h->owner);
    return 0;
}

static int handle_clear(HandleObject *h)
{
    Py_CLEAR(h->dict);
    return 0;
}

static void handle_dealloc(HandleObject *h)
{
    PyObject_GC_UnTrack(h);
    if (h->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)h);
    handle_clear(h);
    ContextObject *c = h->owner;
    if (h->t) {
        cham_tensor_set_user(h->t, NULL);
        if (c->busy) {
            if (c->n_deferred == c->cap_deferred) {
                size_t cap = c->cap_deferred ? 2 * c->cap_deferred : 64;
                cham_tensor_t **d = realloc(c->deferred, cap * sizeof *d);
                if (!d)
                    Py_FatalError("chameleon: out of memory deferring a tensor release");
                c->deferred = d;
                c->cap_deferred = cap;
            }
            c->deferred[c->n_deferred++] = h->t;
        } else {
            cham_tensor_release(h->t);
        }
    }
    c->handles--;
    Py_DECREF(c);
    PyObject_GC_Del(h);
}

static const char *const residency_names[] = {
    [CHAM_RESIDENT_DEVICE] = "device", [CHAM_RESIDENT_MOVING_OUT] = "moving_out",
    [CHAM_RESIDENT_HOST] = "host",     [CHAM_RESIDENT_MOVING_IN] = "moving_in",
    [CHAM_RESIDENT_DROPPED] = "dropped",
};

static PyObject *handle_residency(HandleObject *h, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(residency_names[cham_tensor_residency(h->t)]);
}

static PyObject *handle_nbytes(HandleObject *h, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(cham_tensor_bytes(h->t));
}

static PyObject *handle_storage_nbytes(HandleObject *h, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(cham_tensor_storage_bytes(h->t));
}

static PyObject *handle_label(HandleObject *h, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(cham_tensor_label(h->t));
}

static PyObject *handle_same_storage(HandleObject *h, PyObject *other)
{
    if (!PyObject_TypeCheck(other, &HandleType)) {
        PyErr_SetString(PyExc_TypeError, "same_storage: expected a Handle");
        return NULL;
    }
    return PyBool_FromLong(cham_tensor_same_storage(h->t, ((HandleObject *)other)->t));
}

static PyGetSetDef handle_getset[] = {
    {"residency", (getter)handle_residency, NULL, "device, moving_out, host, moving_in or dropped", NULL},
    {"nbytes", (getter)handle_nbytes, NULL, "bytes of this view", NULL},
    {"storage_nbytes", (getter)handle_storage_nbytes, NULL, "bytes of its storage", NULL},
    {"label", (getter)handle_label, NULL, "the label given when it was made", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef handle_methods[] = {
    {"same_storage", (PyCFunction)handle_same_storage, METH_O,
     "True if both handles are views of one storage."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chameleon._chameleon.Handle",
    .tp_doc = "A tensor handle: a view of a storage the runtime tracks. Made by Context.wrap "
              "and Context.view; released when the object goes.",
    .tp_basicsize = sizeof(HandleObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_getset = handle_getset,
    .tp_methods = handle_methods,
    .tp_dictoffset = offsetof(HandleObject, dict),
    .tp_weaklistoffset = offsetof(HandleObject, weakrefs),
};

static HandleObject *as_handle(ContextObject *c, PyObject *o, const char *what)
{
    if (!PyObject_TypeCheck(o, &HandleType)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a Handle, got %s", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    HandleObject *h = (HandleObject *)o;
    if (h->owner != c) {
        PyErr_Format(PyExc_ValueError, "%s: the handle belongs to another context", what);
        return NULL;
    }
    return h;
}

/* ---- Context ----------------------------------------------------------------*/

static void record_step(cham_context_t *ctx, const cham_step_ended_t *e, void *user)
{
    (void)ctx;
    ((ContextObject *)user)->last_step = *e;
}

static int context_init(ContextObject *c, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"config", "origin", "log", NULL};
    const char *json, *origin = "config";
    Py_ssize_t len;
    PyObject *log = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s#|sO", kw, &json, &len, &origin, &log))
        return -1;
    if (c->ctx) {
        PyErr_SetString(PyExc_RuntimeError, "Context.__init__ called twice");
        return -1;
    }
    if (log != Py_None && !PyCallable_Check(log)) {
        PyErr_SetString(PyExc_TypeError, "log: expected a callable or None");
        return -1;
    }
    cham_config_t cfg = cham_config_default();
    cfg.mode = CHAM_MODE_ADVISOR;
    char err[1024];
    if (cham_config_parse_json(json, (size_t)len, origin, &cfg, err, sizeof err) != CHAM_OK) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    if (cfg.mode != CHAM_MODE_ADVISOR) {
        PyErr_Format(PyExc_ValueError, "%s: key \"mode\": the Python binding runs the runtime "
                     "in advisor mode (the framework owns tensor memory)", origin);
        return -1;
    }
    cham_status_t st = cham_context_new(&cfg, &c->ctx);
    if (st != CHAM_OK) {
        fail(NULL, st, origin);
        return -1;
    }
    c->lines = PyList_New(0);
    if (!c->lines)
        return -1;
    if (log != Py_None) {
        Py_INCREF(log);
        c->log = log;
    }
    cham_context_set_log(c->ctx, log_line, c);
    cham_context_on_step(c->ctx, record_step, c);
    return 0;
}

static void context_close(ContextObject *c)
{
    if (c->ctx)
        cham_context_free(c->ctx);
    c->ctx = NULL;
}

static int context_traverse(ContextObject *c, visitproc visit, void *arg)
{
    Py_VISIT(c->log);
    Py_VISIT(c->lines);
    return 0;
}

static int context_clear(ContextObject *c)
{
    Py_CLEAR(c->log);
    Py_CLEAR(c->lines);
    return 0;
}

static void context_dealloc(ContextObject *c)
{
    PyObject_GC_UnTrack(c);
    /* Handles hold the context, so none is alive here. */
    context_close(c);
    free(c->deferred);
    context_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *context_token(ContextObject *c, PyObject *name)
{
    if (check_open(c))
        return NULL;
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    cham_op_token_t tok;
    cham_status_t st = cham_op_token(c->ctx, s, &tok);
    if (st != CHAM_OK)
        return fail(c, st, "token");
    return PyLong_FromLong(tok);
}

static int parse_dtype(PyObject *o, cham_dtype_t *out)
{
    const char *s = PyUnicode_AsUTF8(o);
    if (!s)
        return -1;
    for (int d = 0; d < CHAM_DTYPE_COUNT_; d++)
        if (strcmp(s, cham_dtype_name((cham_dtype_t)d)) == 0) {
            *out = (cham_dtype_t)d;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "unknown dtype \"%s\"", s);
    return -1;
}

static PyObject *context_wrap(ContextObject *c, PyObject *args)
{
    unsigned long long ptr;
    Py_ssize_t bytes;
    PyObject *dtype;
    const char *label;
    if (!PyArg_ParseTuple(args, "KnOs", &ptr, &bytes, &dtype, &label) || check_open(c))
        return NULL;
    cham_dtype_t d;
    if (parse_dtype(dtype, &d))
        return NULL;
    if (bytes < 0) {
        PyErr_Format(PyExc_ValueError, "wrap \"%s\": negative size %zd", label, bytes);
        return NULL;
    }
    cham_tensor_t *t;
    enter(c);
    cham_status_t st = cham_tensor_wrap(c->ctx, (void *)(uintptr_t)ptr, (size_t)bytes, d, label, &t);
    if (leave_with(c, st, "wrap")) {
        if (st == CHAM_OK)
            cham_tensor_release(t);   /* the log callable raised: no Handle holds it */
        return NULL;
    }
    return handle_new(c, t);
}

static PyObject *context_view(ContextObject *c, PyObject *args)
{
    PyObject *base;
    Py_ssize_t offset, bytes;
    PyObject *dtype;
    const char *label;
    if (!PyArg_ParseTuple(args, "OnnOs", &base, &offset, &bytes, &dtype, &label) || check_open(c))
        return NULL;
    HandleObject *b = as_handle(c, base, "view");
    cham_dtype_t d;
    if (!b || parse_dtype(dtype, &d))
        return NULL;
    if (offset < 0 || bytes < 0) {
        PyErr_Format(PyExc_ValueError, "view \"%s\": negative offset or size (%zd, %zd)", label,
                     offset, bytes);
        return NULL;
    }
    cham_tensor_t *t;
    cham_status_t st = cham_tensor_view(b->t, (size_t)offset, (size_t)bytes, d, label, &t);
    if (st != CHAM_OK)
        return fail(c, st, "view");
    return handle_new(c, t);
}

enum { MAX_DIMS = 64 };

/* A sequence of at most MAX_DIMS ints into out; their number in *n. */
static int int64s(PyObject *seq, int64_t *out, size_t *n, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    int rc = 0;
    if (len > MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: more than %d dimensions", what, MAX_DIMS);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < len; i++) {
        out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred())
            rc = -1;
    }
    *n = (size_t)len;
    Py_DECREF(fast);
    return rc;
}

/* view_strided(base, offset, sizes, strides, dtype, label): offset, sizes
 * and strides in elements, as torch gives them. */
static PyObject *context_view_strided(ContextObject *c, PyObject *args)
{
    PyObject *base, *sizes_obj, *strides_obj, *dtype;
    Py_ssize_t offset;
    const char *label;
    if (!PyArg_ParseTuple(args, "OnOOOs", &base, &offset, &sizes_obj, &strides_obj, &dtype,
                          &label) || check_open(c))
        return NULL;
    HandleObject *b = as_handle(c, base, "view_strided");
    cham_dtype_t d;
    int64_t sizes[MAX_DIMS], strides[MAX_DIMS];
    size_t n, n_strides;
    if (!b || parse_dtype(dtype, &d) || int64s(sizes_obj, sizes, &n, "sizes") ||
        int64s(strides_obj, strides, &n_strides, "strides"))
        return NULL;
    if (offset < 0 || n != n_strides) {
        PyErr_Format(PyExc_ValueError, "view_strided \"%s\": offset %zd, %zu sizes, %zu strides",
                     label, offset, n, n_strides);
        return NULL;
    }
    cham_tensor_t *t;
    cham_status_t st = cham_tensor_view_strided(b->t, (size_t)offset, n, sizes, strides, d,
                                                label, &t);
    if (st != CHAM_OK)
        return fail(c, st, "view_strided");
    return handle_new(c, t);
}

/* A tuple or list of Handles as tensor pointers: into buf when they fit in
 * cap, else into *heap (malloc'ed, the caller frees it); their number in *n. */
static int handles(ContextObject *c, PyObject *seq, cham_tensor_t **buf, size_t cap,
                   cham_tensor_t ***heap, size_t *n, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast)
        return -1;
    size_t len = (size_t)PySequence_Fast_GET_SIZE(fast);
    cham_tensor_t **out = buf;
    if (len > cap) {
        out = *heap = malloc(len * sizeof *out);
        if (!out) {
            Py_DECREF(fast);
            PyErr_NoMemory();
            return -1;
        }
    }
    for (size_t i = 0; i < len; i++) {
        HandleObject *h = as_handle(c, PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i), what);
        if (!h) {
            Py_DECREF(fast);
            return -1;
        }
        out[i] = h->t;
    }
    *n = len;
    Py_DECREF(fast);
    return 0;
}

static const char *const action_names[] = {
    [CHAM_ACTION_SWAP_OUT] = "swap_out", [CHAM_ACTION_SWAP_IN] = "swap_in",
    [CHAM_ACTION_DROP] = "drop",         [CHAM_ACTION_RECOMPUTE] = "recompute",
};

/* Ops with more tensors than this (torch.stack of a long list, a foreach op
 * over every parameter) take their arrays from the heap. */
enum { OP_TENSORS_ON_STACK = 64 };

/* op(token, inputs, outputs, cost_ns=-1, bandwidth=0, comm_ns=0,
 * comm_waited=False, recompute=False): the op ran; reports it and returns
 * the runtime's actions as (kind, handle, needed) tuples. A negative cost
 * with a bandwidth (bytes/s) is the bytes of the inputs and outputs at that
 * bandwidth; without either the op has no cost. comm_ns > 0: the op ran a
 * collective of that time on a communication stream, which the compute
 * stream waited for when comm_waited (cham_op_set_comm). recompute: the
 * caller can run the op again on the same inputs (cham_op_set_recompute;
 * the caller finds its own record from the output's handle, so no tag). */
static PyObject *context_op(ContextObject *c, PyObject *args)
{
    int tok;
    PyObject *in_seq, *out_seq;
    double cost = -1, bandwidth = 0, comm = 0;
    int comm_waited = 0, recompute = 0;
    if (!PyArg_ParseTuple(args, "iOO|dddpp", &tok, &in_seq, &out_seq, &cost, &bandwidth, &comm,
                          &comm_waited, &recompute) ||
        check_open(c))
        return NULL;
    cham_tensor_t *in_buf[OP_TENSORS_ON_STACK], *out_buf[OP_TENSORS_ON_STACK];
    cham_tensor_t **in_heap = NULL, **out_heap = NULL;
    size_t n_in, n_out;
    if (handles(c, in_seq, in_buf, OP_TENSORS_ON_STACK, &in_heap, &n_in, "op inputs") ||
        handles(c, out_seq, out_buf, OP_TENSORS_ON_STACK, &out_heap, &n_out, "op outputs")) {
        free(in_heap);
        free(out_heap);
        return NULL;
    }
    cham_tensor_t **in = in_heap ? in_heap : in_buf, **out = out_heap ? out_heap : out_buf;
    if (cost < 0 && bandwidth > 0) {
        size_t bytes = 0;
        for (size_t i = 0; i < n_in; i++)
            bytes += cham_tensor_bytes(in[i]);
        for (size_t i = 0; i < n_out; i++)
            bytes += cham_tensor_bytes(out[i]);
        cost = (double)bytes / bandwidth * 1e9;
    }
    enter(c);
    cham_status_t st = cham_op_begin(c->ctx, tok, in, n_in, out, n_out);
    PyObject *list = NULL;
    if (st == CHAM_OK) {
        if (cost >= 0)
            st = cham_op_set_cost(c->ctx, cost);
        if (st == CHAM_OK && (comm != 0 || comm_waited))
            st = cham_op_set_comm(c->ctx, comm, comm_waited);
        if (st == CHAM_OK && recompute)
            st = cham_op_set_recompute(c->ctx, 0);
        const cham_action_t *acts;
        size_t n = cham_op_actions(c->ctx, &acts);
        list = PyList_New((Py_ssize_t)n);
        for (size_t i = 0; list && i < n; i++) {
            /* Every view the binding makes carries its Handle. */
            PyObject *h = cham_tensor_user(acts[i].tensor);
            PyObject *a = !h ? PyErr_Format(ChameleonError, "an action names \"%s\", which "
                                            "has no Handle", cham_tensor_label(acts[i].tensor))
                             : Py_BuildValue("(sOO)", action_names[acts[i].kind], h,
                                        acts[i].needed ? Py_True : Py_False);
            if (!a)
                Py_CLEAR(list);
            else
                PyList_SET_ITEM(list, (Py_ssize_t)i, a);
        }
        cham_status_t end = cham_op_end(c->ctx);
        if (st == CHAM_OK)
            st = end;
    }
    free(in_heap);
    free(out_heap);
    const char *name = cham_op_name(c->ctx, tok);
    if (leave_with(c, st, name ? name : "op")) {
        Py_XDECREF(list);
        return NULL;
    }
    return list;
}

/* A report of the caller's move of one storage: fn(tensor). */
static PyObject *report(ContextObject *c, PyObject *h_obj, const char *what,
                        cham_status_t (*fn)(cham_tensor_t *))
{
    HandleObject *h = as_handle(c, h_obj, what);
    if (!h || check_open(c))
        return NULL;
    enter(c);
    cham_status_t st = fn(h->t);
    if (leave_with(c, st, what))
        return NULL;
    Py_RETURN_NONE;
}

/* The same with the storage's new address: args (handle, ptr). */
static PyObject *report_at(ContextObject *c, PyObject *args, const char *what,
                           cham_status_t (*fn)(cham_tensor_t *, void *))
{
    PyObject *h_obj;
    unsigned long long ptr;
    if (!PyArg_ParseTuple(args, "OK", &h_obj, &ptr) || check_open(c))
        return NULL;
    HandleObject *h = as_handle(c, h_obj, what);
    if (!h)
        return NULL;
    enter(c);
    cham_status_t st = fn(h->t, (void *)(uintptr_t)ptr);
    if (leave_with(c, st, what))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *context_swapped_out(ContextObject *c, PyObject *h_obj)
{
    return report(c, h_obj, "swapped_out", cham_tensor_swapped_out);
}

static PyObject *context_swapped_in(ContextObject *c, PyObject *args)
{
    return report_at(c, args, "swapped_in", cham_tensor_swapped_in);
}

static PyObject *context_dropped(ContextObject *c, PyObject *h_obj)
{
    return report(c, h_obj, "dropped", cham_tensor_dropped);
}

static PyObject *context_recomputed(ContextObject *c, PyObject *args)
{
    return report_at(c, args, "recomputed", cham_tensor_recomputed);
}

static PyObject *context_phase(ContextObject *c, PyObject *name)
{
    if (check_open(c))
        return NULL;
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    for (int p = CHAM_PHASE_FORWARD; p <= CHAM_PHASE_EVAL; p++)
        if (strcmp(s, cham_phase_name((cham_phase_t)p)) == 0) {
            cham_status_t st = cham_phase(c->ctx, (cham_phase_t)p);
            if (st != CHAM_OK)
                return fail(c, st, "phase");
            Py_RETURN_NONE;
        }
    PyErr_Format(PyExc_ValueError, "unknown phase \"%s\" (forward, backward, optimizer, other, "
                 "eval)", s);
    return NULL;
}

static PyObject *context_step_end(ContextObject *c, PyObject *unused)
{
    (void)unused;
    if (check_open(c))
        return NULL;
    enter(c);
    cham_status_t st = cham_step_end(c->ctx);
    if (leave_with(c, st, "step end"))
        return NULL;
    const cham_step_ended_t *e = &c->last_step;
    return Py_BuildValue("{sKsssssKsKsK}", "number", (unsigned long long)e->number, "from",
                         cham_stage_name(e->from), "to", cham_stage_name(e->to), "peak_bytes",
                         (unsigned long long)e->peak_bytes, "over_budget_bytes",
                         (unsigned long long)e->over_budget_bytes, "policies_generated",
                         (unsigned long long)e->policies_generated);
}

static PyObject *context_set_budget(ContextObject *c, PyObject *arg)
{
    if (check_open(c))
        return NULL;
    unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred())
        return NULL;
    cham_status_t st = cham_context_set_memory_budget(c->ctx, bytes);
    if (st != CHAM_OK)
        return fail(c, st, "budget");
    Py_RETURN_NONE;
}

static PyObject *context_stats(ContextObject *c, PyObject *unused)
{
    (void)unused;
    if (check_open(c))
        return NULL;
    cham_runtime_stats_t s;
    cham_context_get_stats(c->ctx, &s);
    return Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKss}", "ops", (unsigned long long)s.ops,
        "swaps_out", (unsigned long long)s.swaps_out, "swaps_in", (unsigned long long)s.swaps_in,
        "on_demand_swaps_in", (unsigned long long)s.on_demand_swaps_in, "passive_swaps_out",
        (unsigned long long)s.passive_swaps_out, "planned_swaps_out",
        (unsigned long long)s.planned_swaps_out, "planned_swaps_in",
        (unsigned long long)s.planned_swaps_in, "bytes_out", (unsigned long long)s.bytes_out,
        "bytes_in", (unsigned long long)s.bytes_in, "mem_in_use", (unsigned long long)s.mem_in_use,
        "mem_peak", (unsigned long long)s.mem_peak, "items_matched",
        (unsigned long long)s.items_matched, "items_missed", (unsigned long long)s.items_missed,
        "policies_generated", (unsigned long long)s.policies_generated, "over_budget_steps",
        (unsigned long long)s.over_budget_steps, "drops", (unsigned long long)s.drops,
        "recomputes", (unsigned long long)s.recomputes, "on_demand_recomputes",
        (unsigned long long)s.on_demand_recomputes, "budget_bytes",
        (unsigned long long)cham_context_budget(c->ctx), "stage",
        cham_stage_name(cham_context_stage(c->ctx)));
}

static PyObject *context_device(ContextObject *c, PyObject *unused)
{
    (void)unused;
    if (check_open(c))
        return NULL;
    cham_device_info_t i;
    cham_device_get_info(cham_context_device(c->ctx), &i);
    return Py_BuildValue("{sKsdsdsdsdsdsdsd}", "capacity", (unsigned long long)i.capacity,
                         "peak_flops", i.peak_flops, "hbm_bandwidth", i.hbm_bandwidth,
                         "h2d_bandwidth", i.h2d_bandwidth, "d2h_bandwidth", i.d2h_bandwidth,
                         "p2p_bandwidth", i.p2p_bandwidth, "flops_efficiency",
                         i.flops_efficiency, "hbm_efficiency", i.hbm_efficiency);
}

static PyObject *context_min_swap(ContextObject *c, PyObject *unused)
{
    (void)unused;
    if (check_open(c))
        return NULL;
    return PyLong_FromUnsignedLongLong(cham_context_min_swap(c->ctx));
}

static PyObject *context_close_method(ContextObject *c, PyObject *unused)
{
    (void)unused;
    if (c->handles) {
        PyErr_Format(PyExc_RuntimeError, "close: %zd handles are still alive; release them "
                     "first", c->handles);
        return NULL;
    }
    context_close(c);
    Py_RETURN_NONE;
}

static PyMethodDef context_methods[] = {
    {"token", (PyCFunction)context_token, METH_O, "token(name) -> int: the op token of name."},
    {"wrap", (PyCFunction)context_wrap, METH_VARARGS,
     "wrap(ptr, nbytes, dtype, label) -> Handle: the caller's storage, now tracked."},
    {"view", (PyCFunction)context_view, METH_VARARGS,
     "view(base, offset, nbytes, dtype, label) -> Handle: a view of base's storage."},
    {"view_strided", (PyCFunction)context_view_strided, METH_VARARGS,
     "view_strided(base, offset, sizes, strides, dtype, label) -> Handle: a strided view "
     "(elements)."},
    {"op", (PyCFunction)context_op, METH_VARARGS,
     "op(token, inputs, outputs, cost_ns=-1, bandwidth=0, comm_ns=0, comm_waited=False, "
     "recompute=False) -> [(kind, handle, needed)]: one op that ran."},
    {"swapped_out", (PyCFunction)context_swapped_out, METH_O,
     "swapped_out(handle): the storage is on the host now."},
    {"swapped_in", (PyCFunction)context_swapped_in, METH_VARARGS,
     "swapped_in(handle, ptr): the storage is back at ptr."},
    {"dropped", (PyCFunction)context_dropped, METH_O,
     "dropped(handle): the storage's memory was freed; its op runs again before its next use."},
    {"recomputed", (PyCFunction)context_recomputed, METH_VARARGS,
     "recomputed(handle, ptr): the storage was made again at ptr."},
    {"phase", (PyCFunction)context_phase, METH_O, "phase(name): the phase of the ops that follow."},
    {"step_end", (PyCFunction)context_step_end, METH_NOARGS, "step_end() -> dict: ends a step."},
    {"set_budget", (PyCFunction)context_set_budget, METH_O,
     "set_budget(bytes): the memory budget, before the first policy."},
    {"stats", (PyCFunction)context_stats, METH_NOARGS, "stats() -> dict: the runtime's counters."},
    {"device", (PyCFunction)context_device, METH_NOARGS, "device() -> dict: the device preset."},
    {"min_swap", (PyCFunction)context_min_swap, METH_NOARGS,
     "min_swap() -> int: the smallest storage the planner swaps (cham_context_min_swap)."},
    {"close", (PyCFunction)context_close_method, METH_NOARGS, "close(): frees the context."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "chameleon._chameleon.Context",
    .tp_doc = "Context(config_json, origin='config', log=None): a runtime context in advisor mode.",
    .tp_basicsize = sizeof(ContextObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)context_init,
    .tp_dealloc = (destructor)context_dealloc,
    .tp_traverse = (traverseproc)context_traverse,
    .tp_clear = (inquiry)context_clear,
    .tp_methods = context_methods,
};

/* ---- host copies ------------------------------------------------------------*/

/* save(ptr, nbytes) -> bytearray: a host copy of nbytes at ptr. */
static PyObject *mod_save(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long ptr;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Kn", &ptr, &n))
        return NULL;
    if (!ptr || n < 0) {
        PyErr_Format(PyExc_ValueError, "save: bad source (address %llu, %zd bytes)", ptr, n);
        return NULL;
    }
    return PyByteArray_FromStringAndSize((const char *)(uintptr_t)ptr, n);
}

/* restore(bytearray, ptr): copies the host copy back to ptr. */
static PyObject *mod_restore(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *buf;
    unsigned long long ptr;
    if (!PyArg_ParseTuple(args, "YK", &buf, &ptr))
        return NULL;
    if (!ptr) {
        PyErr_SetString(PyExc_ValueError, "restore: NULL destination");
        return NULL;
    }
    memcpy((void *)(uintptr_t)ptr, PyByteArray_AS_STRING(buf), (size_t)PyByteArray_GET_SIZE(buf));
    Py_RETURN_NONE;
}

static PyObject *mod_dtypes(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < CHAM_DTYPE_COUNT_; i++) {
        PyObject *size = PyLong_FromSize_t(cham_dtype_size((cham_dtype_t)i));
        if (!size || PyDict_SetItemString(d, cham_dtype_name((cham_dtype_t)i), size)) {
            Py_XDECREF(size);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(size);
    }
    return d;
}

static PyMethodDef module_methods[] = {
    {"save", mod_save, METH_VARARGS, "save(ptr, nbytes) -> bytearray"},
    {"restore", mod_restore, METH_VARARGS, "restore(bytearray, ptr)"},
    {"dtypes", mod_dtypes, METH_NOARGS, "dtypes() -> {name: bytes per element}"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chameleon", "The Chameleon runtime (C) for Python.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__chameleon(void);
PyMODINIT_FUNC PyInit__chameleon(void)
{
    if (PyType_Ready(&ContextType) < 0 || PyType_Ready(&HandleType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    /* Not a RuntimeError: a loop that skips a step on torch's errors
     * (except RuntimeError around clip_grad_norm_(error_if_nonfinite=True)
     * and opt.step()) would swallow a budget raised inside the step, with
     * the optimizer half applied (docs/pytorch.md). */
    ChameleonError = PyErr_NewException("chameleon.ChameleonError", PyExc_Exception, NULL);
    if (!ChameleonError || PyModule_AddObjectRef(m, "ChameleonError", ChameleonError) ||
        PyModule_AddObjectRef(m, "Context", (PyObject *)&ContextType) ||
        cham_py_copier_init(m) ||
        PyModule_AddObjectRef(m, "Handle", (PyObject *)&HandleType)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
