// kiln._tools: the converter (tools layer, which links OpenCV) for kiln.pack(). The package
// imports this module only when pack() is called, so a training process that reads datasets
// never loads OpenCV. Flags go through the same ParsePackFlags as `kiln pack`.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "python/py_status.h"
#include "tools/cli_parsing.h"
#include "tools/packer.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// Packs like `kiln pack` and returns PackReportJson's object as text. Runs without the GIL.
std::string PackJson(const std::string& input, const std::string& output, const std::string& root,
                     const std::string& size, uint32_t resize, const std::string& crop,
                     uint32_t channels, const std::string& layout, const std::string& dtype,
                     const std::string& mean, const std::string& std_dev, const std::string& format,
                     const std::string& shard_size, const std::string& compress, uint32_t threads,
                     int64_t shuffle_seed, const std::string& on_error, int64_t max_pixels,
                     bool overwrite, bool exact_decode, const std::string& image_ext,
                     const std::string& label_from) {
  PackOptions o;
  o.input = input;
  o.output = output;
  o.root = root;
  o.threads = threads;
  o.overwrite = overwrite;
  o.format = format;
  if (on_error != "skip" && on_error != "fail") {
    ThrowStatus(Status::InvalidArgument("on_error '" + on_error + "' must be skip or fail"));
  }
  o.on_error = on_error == "fail" ? OnError::kFail : OnError::kSkip;
  if (max_pixels >= 0) o.decode.max_pixels = static_cast<uint64_t>(max_pixels);
  if (shuffle_seed >= 0) o.shuffle_seed = static_cast<uint64_t>(shuffle_seed);
  o.exact_decode = exact_decode;
  o.tar.label_from = label_from;
  if (!image_ext.empty()) o.tar.image_exts = ValueOrThrow(ParseImageExtensions(image_ext));
  if (Status t = ValidateTarListOptions(o.tar); !t.ok()) ThrowStatus(t);
  Status s = ParsePackFlags(size, resize, crop, channels, layout, dtype, mean, std_dev, shard_size,
                            compress, &o);
  if (!s.ok()) ThrowStatus(s);
  Result<PackReport> report = Status::Internal("unset");
  {
    py::gil_scoped_release release;
    report = Pack(o);
  }
  return PackReportJson(ValueOrThrow(std::move(report)));
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_tools, m) {
  m.doc() = "kiln's converter (links OpenCV). Use kiln.pack(), not this.";
  m.def("pack_json", &kiln::python::PackJson, py::arg("input"), py::arg("output"), py::arg("root"),
        py::arg("size"), py::arg("resize"), py::arg("crop"), py::arg("channels"), py::arg("layout"),
        py::arg("dtype"), py::arg("mean"), py::arg("std"), py::arg("format"), py::arg("shard_size"),
        py::arg("compress"), py::arg("threads"), py::arg("shuffle_seed"), py::arg("on_error"),
        py::arg("max_pixels"), py::arg("overwrite"), py::arg("exact_decode"), py::arg("image_ext"),
        py::arg("label_from"));
}
