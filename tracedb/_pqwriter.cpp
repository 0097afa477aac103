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
#include <arrow/util/io_util.h>
#include <parquet/arrow/writer.h>
#include <parquet/exception.h>
#include <parquet/properties.h>

namespace {

struct Writer {
    PyObject_HEAD
    parquet::arrow::FileWriter *writer;
};

// An I/O error as OSError, with its errno where the status has one (a full
// disk: ENOSPC, which store.cannot_write turns into one line, as it does
// pyarrow's); the rest as ValueError.
PyObject *raise(const arrow::Status &st) {
    int err = arrow::internal::ErrnoFromStatus(st);
    if (err > 0) {
        PyObject *args = Py_BuildValue("(is)", err, st.ToString().c_str());
        if (args) {
            PyErr_SetObject(PyExc_OSError, args);
            Py_DECREF(args);
        }
    } else {
        PyErr_SetString(st.IsIOError() ? PyExc_OSError : PyExc_ValueError, st.ToString().c_str());
    }
    return nullptr;
}

// Runs f (which returns a Status) without the GIL; a C++ exception that
// escapes Arrow's API comes back as a Status, never past this module.
template <typename F>
arrow::Status without_gil(F f) {
    arrow::Status st;
    Py_BEGIN_ALLOW_THREADS
    try {
        st = f();
    } catch (const parquet::ParquetStatusException &e) {
        st = e.status();
    } catch (const std::exception &e) {
        st = arrow::Status::IOError(e.what());
    }
    Py_END_ALLOW_THREADS
    return st;
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
    PyObject *fs_path, *capsule, *dictionary, *delta, *statistics;
    // The path as the file system's bytes (os.fsencode), whatever its name holds.
    if (!PyArg_ParseTuple(args, "O&OOOO", PyUnicode_FSConverter, &fs_path, &capsule, &dictionary, &delta,
                          &statistics))
        return -1;
    std::string path(PyBytes_AS_STRING(fs_path), PyBytes_GET_SIZE(fs_path));
    Py_DECREF(fs_path);
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

    arrow::Status st = without_gil([&]() -> arrow::Status {
        // The capsule's schema is moved out by the import (its release nulled).
        ARROW_ASSIGN_OR_RAISE(auto schema, arrow::ImportSchema(c_schema));
        ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::FileOutputStream::Open(path));
        ARROW_ASSIGN_OR_RAISE(auto writer, parquet::arrow::FileWriter::Open(
            *schema, arrow::default_memory_pool(), sink, props.build(), arrow_props.build()));
        self->writer = writer.release();
        return arrow::Status::OK();
    });
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
    arrow::Status st = without_gil([&]() -> arrow::Status {
        ARROW_ASSIGN_OR_RAISE(auto reader, arrow::ImportRecordBatchReader(c_stream));
        ARROW_RETURN_NOT_OK(self->writer->NewBufferedRowGroup());
        for (;;) {
            std::shared_ptr<arrow::RecordBatch> batch;
            ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
            if (!batch)
                return arrow::Status::OK();
            ARROW_RETURN_NOT_OK(self->writer->WriteRecordBatch(*batch));
        }
    });
    if (!st.ok())
        return raise(st);
    Py_RETURN_NONE;
}

// close(): the footer written and the file closed; further calls do nothing.
PyObject *Writer_close(Writer *self, PyObject *) {
    if (!self->writer)
        Py_RETURN_NONE;
    arrow::Status st = without_gil([&] { return self->writer->Close(); });
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
