/* The Copier of the chameleon extension (python/chameleon/_copier.c): host
 * copies made on worker threads, with events, so that chameleon.torch's CPU
 * path runs the same ordering logic as its CUDA path (side streams, events,
 * pinned buffers) with real concurrency: wait before use, free after the
 * copy, no reuse of a buffer a copy still reads. chameleon._moves is its
 * user; docs/pytorch.md says why it exists.
 *
 * The module's init calls cham_py_copier_init once, after PyModule_Create:
 * it adds the types Copier, HostCopy and Event and the bytes POISON. */
#ifndef CHAM_PY_COPIER_H
#define CHAM_PY_COPIER_H

#ifdef Py_PYTHON_H
/* 0, or -1 with a Python exception set. */
int cham_py_copier_init(PyObject *module);
#endif

#endif
