/* The Python 2.7 C API symbols that libmesos' Python bindings (linked into the same shared
 * object) reference. The master, agents and containerizer never call them; a call would
 * mean the bindings run, which they do not here, so each one stops the process loudly. */
#include <stdio.h>
#include <stdlib.h>

static void never(const char *name)
{
    fprintf(stderr, "realmesos: the Python binding symbol %s was called\n", name);
    abort();
}

#define STUB(name) void name(void) { never(#name); }

STUB(PyArg_ParseTuple)
STUB(PyDict_GetItemString)
STUB(PyErr_Format)
STUB(PyErr_Occurred)
STUB(PyErr_Print)
STUB(PyEval_InitThreads)
STUB(PyEval_RestoreThread)
STUB(PyEval_SaveThread)
STUB(PyGILState_Ensure)
STUB(PyGILState_Release)
STUB(PyImport_ImportModule)
STUB(PyInt_FromLong)
STUB(PyIter_Next)
STUB(PyList_GetItem)
STUB(PyList_New)
STUB(PyList_SetItem)
STUB(PyList_Size)
STUB(PyModule_AddObject)
STUB(PyModule_GetDict)
STUB(PyObject_CallMethod)
STUB(PyObject_GetIter)
STUB(PyString_AsStringAndSize)
STUB(PyType_Ready)
STUB(Py_InitModule4_64)

/* Data the bindings take the address of. */
char PyExc_Exception[64];
char PyExc_TypeError[64];
char _Py_NoneStruct[64];
