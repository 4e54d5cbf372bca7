// kiln._tools: the converter (tools layer, which links OpenCV) for kiln.pack(). The package
// imports this module only when pack() is called, so a training process that reads datasets
// never loads OpenCV.
//
// PackOptions is kiln::PackOptions (tools/pack/pack_options.h) bound field by field, in its C++
// types (checked conversion: python/py_args.h); Pack validates it with ValidatePackOptions, the
// function `kiln pack` goes through, so both refuse the same options with the same message.
// Only values that are text on the command line too are parsed from text here: a byte size
// ("64MiB", tools/cli/cli_parsing.h) and a compression ("zstd:3", formats/record_codec.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "python/py_args.h"
#include "python/py_status.h"
#include "tools/cli/cli_parsing.h"
#include "tools/pack/pack_option_table.h"
#include "tools/pack/packer.h"
#include "tools/sources/tar_source.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// mean/std: one number (every channel) or a sequence of 1 or 3.
std::array<float, 3> ChannelValues(py::handle value, const std::string& name) {
  std::vector<float> values;
  if (PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(value);
    for (size_t i = 0; i < seq.size(); ++i) {
      values.push_back(static_cast<float>(ToDouble(seq[i], name + "[" + std::to_string(i) + "]")));
    }
  } else {
    values.push_back(static_cast<float>(ToDouble(value, name)));
  }
  if (values.size() == 1) return {values[0], values[0], values[0]};
  if (values.size() != 3) {
    ThrowStatus(Status::InvalidArgument(name + " takes 1 or 3 values, got " +
                                        std::to_string(values.size())));
  }
  return {values[0], values[1], values[2]};
}

// size: an int (square), (height, width) or the text of `kiln pack --size` ("H" or "HxW").
void SetSize(PackOptions& o, py::handle value) {
  uint32_t& h = o.preprocess.schema.height;
  uint32_t& w = o.preprocess.schema.width;
  if (PyUnicode_Check(value.ptr())) {
    const Status s = ParseImageSize(value.cast<std::string>(), &h, &w);
    if (!s.ok()) ThrowStatus(s);
  } else if (PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(value);
    if (seq.size() != 2) {
      ThrowStatus(Status::InvalidArgument("size must be an int, (height, width) or 'HxW', got " +
                                          std::to_string(seq.size()) + " values"));
    }
    h = ToInteger<uint32_t>(seq[0], "size[0]");
    w = ToInteger<uint32_t>(seq[1], "size[1]");
  } else {
    h = w = ToInteger<uint32_t>(value, "size");
  }
}

py::tuple ChannelTuple(const std::array<float, 3>& v) { return py::make_tuple(v[0], v[1], v[2]); }

// Packs like `kiln pack` and returns PackReportJson's object as text. Pack runs on a thread of
// its own without the GIL, while this (the caller's) thread waits for it and, every 50 ms, takes
// the GIL to run Python's signal handlers (PyErr_CheckSignals: only the main thread runs them,
// so elsewhere it is a no-op). When a handler raises (KeyboardInterrupt for Ctrl-C), the pack is
// cancelled as `kiln pack` cancels it on SIGINT (PackOptions::cancel: it stops between images
// and keeps the finished shards in OUT.partial for resume=True), and the handler's exception is
// raised once Pack has returned, with Pack's Cancelled message added as a note.
std::string PackJson(PackOptions options) {
  std::atomic<bool> cancel{false};
  options.cancel = &cancel;
  Result<PackReport> report = Status::Internal("unset");
  PyObject* raised_type = nullptr;  // the handler's exception (PyErr_Fetch), or null
  PyObject* raised_value = nullptr;
  PyObject* raised_traceback = nullptr;
  {
    py::gil_scoped_release release;
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;  // guarded by mu
    std::thread worker([&] {
      Result<PackReport> r = Pack(options);
      std::lock_guard<std::mutex> lock(mu);
      report = std::move(r);
      done = true;
      done_cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    while (!done) {
      if (done_cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return done; })) break;
      if (raised_type != nullptr) continue;  // already cancelled: wait for Pack to stop
      lock.unlock();
      {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) {
          PyErr_Fetch(&raised_type, &raised_value, &raised_traceback);
          cancel = true;
        }
      }
      lock.lock();
    }
    lock.unlock();
    worker.join();
  }
  if (raised_type != nullptr) {
    PyErr_NormalizeException(&raised_type, &raised_value, &raised_traceback);
    if (!report.ok() && raised_value != nullptr &&
        PyObject_HasAttrString(raised_value, "add_note")) {
      const std::string note = "kiln.pack: " + report.status().message() +
                               " (from Python: the same kiln.pack call with resume=True)";
      PyObject* r = PyObject_CallMethod(raised_value, "add_note", "s", note.c_str());
      if (r == nullptr) PyErr_Clear();
      Py_XDECREF(r);
    }
    PyErr_Restore(raised_type, raised_value, raised_traceback);
    throw py::error_already_set();
  }
  return PackReportJson(ValueOrThrow(std::move(report)));
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_tools, m) {
  using kiln::PackOptions;
  using kiln::python::ToInteger;
  using kiln::python::ToString;
  m.doc() = "kiln's converter (links OpenCV). Use kiln.pack(), not this.";
  py::class_<PackOptions>(
      m, "PackOptions",
      "kiln::PackOptions (tools/pack/pack_options.h), field by field, with the defaults "
      "of `kiln pack` (kiln::DefaultPackOptions, tools/pack/pack_option_table.h).")
      .def(py::init(&kiln::DefaultPackOptions))
      .KILN_STR_FIELD(PackOptions, "input", input, "ImageFolder directory or list file.")
      .KILN_STR_FIELD(PackOptions, "output", output, "The dataset directory to create.")
      .KILN_STR_FIELD(PackOptions, "root", root, "Root of the list file's paths ('' = its folder).")
      .def_property(
          "size",
          [](const PackOptions& o) {
            return py::make_tuple(o.preprocess.schema.height, o.preprocess.schema.width);
          },
          &kiln::python::SetSize, "(height, width); set from an int, a pair or 'HxW'.")
      .KILN_INT_FIELD(PackOptions, "height", preprocess.schema.height, "Final height. Default 224.")
      .KILN_INT_FIELD(PackOptions, "width", preprocess.schema.width, "Final width. Default 224.")
      .KILN_INT_FIELD(PackOptions, "channels", preprocess.schema.channels, "1 or 3. Default 3.")
      .KILN_INT_FIELD(PackOptions, "resize", preprocess.resize_shorter,
                      "Shorter side before the crop; 0 = cover the size.")
      .def_property(
          "crop",
          [](const PackOptions& o) { return std::string(kiln::CropModeName(o.preprocess.crop)); },
          [](PackOptions& o, py::handle v) {
            const std::string crop = ToString(v, "crop");
            if (!kiln::ParseCropMode(crop, &o.preprocess.crop)) {
              kiln::python::ThrowStatus(
                  kiln::Status::InvalidArgument("crop '" + crop + "' must be center or none"));
            }
          },
          "'center' or 'none'. Default 'center'.")
      .def_property(
          "layout",
          [](const PackOptions& o) {
            return std::string(kiln::LayoutName(o.preprocess.schema.layout));
          },
          [](PackOptions& o, py::handle v) {
            o.preprocess.schema.layout =
                kiln::python::ValueOrThrow(kiln::ParseLayout(ToString(v, "layout")));
          },
          "'hwc' or 'chw'. Default 'hwc'.")
      .def_property(
          "dtype",
          [](const PackOptions& o) {
            return std::string(kiln::DTypeName(o.preprocess.schema.dtype));
          },
          [](PackOptions& o, py::handle v) {
            o.preprocess.schema.dtype =
                kiln::python::ValueOrThrow(kiln::ParseDType(ToString(v, "dtype")));
          },
          "'uint8', 'float16' or 'float32'. Default 'uint8'.")
      .def_property(
          "mean",
          [](const PackOptions& o) { return kiln::python::ChannelTuple(o.preprocess.mean); },
          [](PackOptions& o, py::handle v) {
            o.preprocess.mean = kiln::python::ChannelValues(v, "mean");
          },
          "Per-channel mean in [0, 1] (float dtypes): a number or 1 or 3 of them.")
      .def_property(
          "std", [](const PackOptions& o) { return kiln::python::ChannelTuple(o.preprocess.std); },
          [](PackOptions& o, py::handle v) {
            o.preprocess.std = kiln::python::ChannelValues(v, "std");
          },
          "Per-channel std (float dtypes): a number or 1 or 3 of them.")
      .KILN_STR_FIELD(PackOptions, "format", format, "A storage format name (kiln.formats()).")
      .def_property(
          "shard_size", [](const PackOptions& o) { return o.shard_size_bytes; },
          [](PackOptions& o, py::handle v) {
            if (PyUnicode_Check(v.ptr())) {
              o.shard_size_bytes =
                  kiln::python::ValueOrThrow(kiln::ParseByteSize(v.cast<std::string>()));
            } else {
              o.shard_size_bytes = ToInteger<uint64_t>(v, "shard_size");
            }
          },
          "Maximum shard size in bytes (an int, or text such as '64MiB'). Default 128 MiB.")
      .def_property(
          "compress", [](const PackOptions& o) { return o.compression.ToString(); },
          [](PackOptions& o, py::handle v) {
            o.compression =
                kiln::python::ValueOrThrow(kiln::Compression::Parse(ToString(v, "compress")));
          },
          "'none', 'zstd' or 'zstd:LEVEL'. Default 'none'.")
      .KILN_INT_FIELD(PackOptions, "threads", threads, "Worker threads; 0 = every core.")
      .def_property(
          "shuffle_seed", [](const PackOptions& o) { return o.shuffle_seed; },
          [](PackOptions& o, py::handle v) {
            if (v.is_none()) {
              o.shuffle_seed.reset();
            } else {
              o.shuffle_seed = ToInteger<uint64_t>(v, "shuffle_seed");
            }
          },
          "Write-time shuffle seed, or None. Default None.")
      .def_property(
          "on_error",
          [](const PackOptions& o) { return std::string(kiln::OnErrorName(o.on_error)); },
          [](PackOptions& o, py::handle v) {
            const std::string text = ToString(v, "on_error");
            if (!kiln::ParseOnError(text, &o.on_error)) {
              kiln::python::ThrowStatus(
                  kiln::Status::InvalidArgument("on_error '" + text + "' must be skip or fail"));
            }
          },
          "'skip' (report and go on) or 'fail'. Default 'skip'.")
      .KILN_INT_FIELD(PackOptions, "max_pixels", decode.max_pixels,
                      "The one pixel limit: decoded and resized images (0: none).")
      .KILN_BOOL_FIELD(PackOptions, "overwrite", overwrite,
                       "Replace an existing dataset at output.")
      .KILN_BOOL_FIELD(PackOptions, "resume", resume,
                       "Continue an interrupted pack from OUT.partial (shards format).")
      .KILN_BOOL_FIELD(PackOptions, "exact_decode", exact_decode,
                       "Decode every JPEG at full size (no shrink-on-load). Default False.")
      .def_property(
          "codec",
          [](const PackOptions& o) {
            return o.jpeg.enabled() ? o.jpeg.ToString() : std::string("none");
          },
          [](PackOptions& o, py::handle v) {
            const std::string text = ToString(v, "codec");
            o.jpeg.quality =
                text == "none"
                    ? kiln::JpegRecordOptions{}.quality
                    : kiln::python::ValueOrThrow(kiln::JpegRecordOptions::ParseQuality(text));
          },
          "'none' (tensors) or 'jpeg' / 'jpeg:QUALITY' (one JPEG per record; needs max_side). "
          "Reads 'none' until max_side is set. Default 'none'.")
      .KILN_INT_FIELD(PackOptions, "max_side", jpeg.max_side,
                      "JPEG records: the longest image side in pixels; 0 = not JPEG records.")
      .def_property(
          "image_ext",
          [](const PackOptions& o) {
            std::string text;
            for (const std::string& e : o.tar.image_exts) text += (text.empty() ? "" : ",") + e;
            return text;
          },
          [](PackOptions& o, py::handle v) {
            o.tar.image_exts =
                kiln::python::ValueOrThrow(kiln::ParseImageExtensions(ToString(v, "image_ext")));
          },
          "Tar shards: the member extensions that hold the image, e.g. 'jpg,png'.")
      .def_property(
          "label_from", [](const PackOptions& o) { return o.tar.label_from; },
          [](PackOptions& o, py::handle v) { o.tar.label_from = ToString(v, "label_from"); },
          "Tar shards: 'cls', 'json:FIELD' or 'class-folder'. Default 'cls'.")
      .def_property(
          "feature_image", [](const PackOptions& o) { return o.tfrecord.feature_image; },
          [](PackOptions& o, py::handle v) {
            o.tfrecord.feature_image = ToString(v, "feature_image");
          },
          "TFRecord files: the bytes feature holding the image. Default 'image/encoded'.")
      .def_property(
          "feature_label", [](const PackOptions& o) { return o.tfrecord.feature_label; },
          [](PackOptions& o, py::handle v) {
            o.tfrecord.feature_label = ToString(v, "feature_label");
          },
          "TFRecord files: the int64 feature holding the label. Default 'image/class/label'.")
      .def_property(
          "feature_key", [](const PackOptions& o) { return o.tfrecord.feature_key; },
          [](PackOptions& o, py::handle v) { o.tfrecord.feature_key = ToString(v, "feature_key"); },
          "TFRecord files: a bytes feature to use as the key ('': FILE:RECORD_INDEX).")
      .def(
          "validate",
          [](const PackOptions& o) {
            kiln::Status s = kiln::ValidateTarListOptions(o.tar);
            if (s.ok()) s = kiln::ValidateTFRecordListOptions(o.tfrecord);
            if (s.ok()) s = kiln::ValidatePackOptions(o);
            if (!s.ok()) kiln::python::ThrowStatus(s);
          },
          "Raises kiln.InvalidArgumentError naming the first option `kiln pack` would refuse.");
  m.def("pack_json", &kiln::python::PackJson, py::arg("options"));
  m.def(
      "pack_option_table",
      [] {
        py::list rows;
        for (const kiln::PackOptionInfo& info : kiln::PackOptionTable()) {
          py::dict row;
          row["name"] = info.name;
          row["flag"] = info.flag;
          row["part_key"] = info.part_key;
          row["manifest_key"] = info.manifest_key;
          row["fingerprinted"] = info.fingerprinted;
          rows.append(row);
        }
        return rows;
      },
      "kiln::PackOptionTable() (tools/pack/pack_option_table.h): one dict per pack option (name, "
      "flag, part_key, manifest_key, fingerprinted); name is kiln.pack()'s keyword and "
      "PackOptions' property, '' for an option Python does not set.");
}
