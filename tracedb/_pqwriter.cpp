/* A Parquet file written with its columns encoded on Arrow's threads.

   pyarrow's ParquetWriter writes a row group's columns one after another on
   the calling thread: the events' writer was one core's work for most of a
   1 GiB trace's finalize. Arrow's C++ writer can encode and compress a
   row group's columns in parallel (ArrowWriterProperties::set_use_threads,
   in its buffered row group mode); pyarrow does not expose it
   (apache/arrow#50866). This is that writer, behind the smallest interface
   store.py needs: rows come through the Arrow C stream interface
   (__arrow_c_stream__), so nothing here depends on pyarrow's Python
   internals, only on its C++ libraries (libarrow, libparquet), which are
   loaded by the time pyarrow.parquet is imported.

   The properties mirror what store.py gives pyarrow's writer (zstd, the
   same columns with dictionaries, delta encoding and statistics, the Arrow
   schema stored), applied as pyarrow applies them: dictionaries and
   statistics off, then on for each column named. Optional, like the other
   C parts: where it does not build or load (no C++ compiler, another
   pyarrow than the one it was built against), store.py uses pyarrow's
   writer. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/io/file.h>
#include <arrow/memory_pool.h>
#include <arrow/record_batch.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

namespace {

struct Writer {
    PyObject_HEAD
    parquet::arrow::FileWriter *writer;
};

PyObject *raise(const arrow::Status &st) {
    PyErr_SetString(st.IsIOError() ? PyExc_OSError : PyExc_ValueError, st.ToString().c_str());
    return nullptr;
}

// A list of str as column names; false with a Python error set otherwise.
bool names(PyObject *list, std::vector<std::string> *out) {
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "column names must be a list");
        return false;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        const char *name = PyUnicode_AsUTF8(PyList_GET_ITEM(list, i));
        if (!name)
            return false;
        out->emplace_back(name);
    }
    return true;
}

void Writer_dealloc(Writer *self) {
    delete self->writer;  // a writer not closed leaves its file incomplete
    Py_TYPE(self)->tp_free(reinterpret_cast<PyObject *>(self));
}

// Writer(path, schema, dictionary, delta, statistics): schema an Arrow C
// schema capsule (__arrow_c_schema__()); the three lists name the columns
// with dictionaries, DELTA_BINARY_PACKED encoding and statistics.
int Writer_init(Writer *self, PyObject *args, PyObject *) {
    const char *path;
    PyObject *capsule, *dictionary, *delta, *statistics;
    if (!PyArg_ParseTuple(args, "sOOOO", &path, &capsule, &dictionary, &delta, &statistics))
        return -1;
    if (self->writer) {
        PyErr_SetString(PyExc_RuntimeError, "Writer already opened");
        return -1;
    }
    auto *c_schema = static_cast<ArrowSchema *>(PyCapsule_GetPointer(capsule, "arrow_schema"));
    if (!c_schema)
        return -1;
    std::vector<std::string> dict_cols, delta_cols, stats_cols;
    if (!names(dictionary, &dict_cols) || !names(delta, &delta_cols) || !names(statistics, &stats_cols))
        return -1;

    parquet::WriterProperties::Builder props;
    props.compression(parquet::Compression::ZSTD)->disable_dictionary()->disable_statistics();
    for (const auto &c : dict_cols)
        props.enable_dictionary(c);
    for (const auto &c : delta_cols)
        props.encoding(c, parquet::Encoding::DELTA_BINARY_PACKED);
    for (const auto &c : stats_cols)
        props.enable_statistics(c);
    parquet::ArrowWriterProperties::Builder arrow_props;
    arrow_props.store_schema()->set_use_threads(true);

    arrow::Status st;
    Py_BEGIN_ALLOW_THREADS
    // The capsule's schema is moved out by the import (its release nulled).
    auto schema = arrow::ImportSchema(c_schema);
    if (!schema.ok()) {
        st = schema.status();
    } else {
        auto sink = arrow::io::FileOutputStream::Open(path);
        if (!sink.ok()) {
            st = sink.status();
        } else {
            auto writer = parquet::arrow::FileWriter::Open(**schema, arrow::default_memory_pool(), *sink,
                                                           props.build(), arrow_props.build());
            if (writer.ok())
                self->writer = writer->release();
            else
                st = writer.status();
        }
    }
    Py_END_ALLOW_THREADS
    if (!st.ok()) {
        raise(st);
        return -1;
    }
    return 0;
}

bool opened(Writer *self) {
    if (self->writer)
        return true;
    PyErr_SetString(PyExc_ValueError, "the writer is closed");
    return false;
}

// write(stream): one row group of the stream's batches (an Arrow C stream
// capsule, __arrow_c_stream__()), its columns encoded in parallel.
PyObject *Writer_write(Writer *self, PyObject *capsule) {
    if (!opened(self))
        return nullptr;
    auto *c_stream = static_cast<ArrowArrayStream *>(PyCapsule_GetPointer(capsule, "arrow_array_stream"));
    if (!c_stream)
        return nullptr;
    arrow::Status st;
    Py_BEGIN_ALLOW_THREADS
    auto reader = arrow::ImportRecordBatchReader(c_stream);
    if (!reader.ok()) {
        st = reader.status();
    } else if ((st = self->writer->NewBufferedRowGroup()).ok()) {
        for (;;) {
            std::shared_ptr<arrow::RecordBatch> batch;
            if (!(st = (*reader)->ReadNext(&batch)).ok() || !batch)
                break;
            if (!(st = self->writer->WriteRecordBatch(*batch)).ok())
                break;
        }
    }
    Py_END_ALLOW_THREADS
    if (!st.ok())
        return raise(st);
    Py_RETURN_NONE;
}

// close(): the footer written and the file closed; further calls do nothing.
PyObject *Writer_close(Writer *self, PyObject *) {
    if (!self->writer)
        Py_RETURN_NONE;
    arrow::Status st;
    Py_BEGIN_ALLOW_THREADS
    st = self->writer->Close();
    Py_END_ALLOW_THREADS
    delete self->writer;
    self->writer = nullptr;
    if (!st.ok())
        return raise(st);
    Py_RETURN_NONE;
}

PyMethodDef Writer_methods[] = {
    {"write", reinterpret_cast<PyCFunction>(Writer_write), METH_O,
     "write(stream): one row group of an Arrow C stream's batches"},
    {"close", reinterpret_cast<PyCFunction>(Writer_close), METH_NOARGS, "close(): write the footer, close the file"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject WriterType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pqwriter",
                      "A Parquet writer that encodes a row group's columns on Arrow's threads.", -1, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__pqwriter(void) {
    WriterType.tp_name = "tracedb._pqwriter.Writer";
    WriterType.tp_basicsize = sizeof(Writer);
    WriterType.tp_flags = Py_TPFLAGS_DEFAULT;
    WriterType.tp_doc = "Writer(path, schema, dictionary, delta, statistics)";
    WriterType.tp_new = PyType_GenericNew;
    WriterType.tp_init = reinterpret_cast<initproc>(Writer_init);
    WriterType.tp_dealloc = reinterpret_cast<destructor>(Writer_dealloc);
    WriterType.tp_methods = Writer_methods;
    if (PyType_Ready(&WriterType) < 0)
        return nullptr;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return nullptr;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", reinterpret_cast<PyObject *>(&WriterType)) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
