// kiln._core: the reader and formats layers for Python. No OpenCV: this is what a training
// process loads. The public API (argument defaults, torch conversion, docs) lives in
// python/kiln/*.py; this module is the thin, typed layer beneath it.
//
// Batches leave as DLPack capsules (for torch.utils.dlpack.from_dlpack) or NumPy arrays. Either
// way they point into the loader's batch slot (zero-copy) or into a buffer of their own (copy
// mode), and hold a reference that keeps that memory allocated: a view never dangles, it only
// sees the slot refilled once the loader has moved two batches on.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/fault_guard.h"
#include "formats/format_registry.h"
#include "formats/inspector.h"
#include "formats/verifier.h"
#include "formats/version.h"
#include "python/py_args.h"
#include "python/py_status.h"
#include "reader/cuda_handles.h"
#include "reader/host_buffer.h"
#include "reader/loader.h"
#include "reader/mixture.h"
#include "reader/mixture_dataset.h"
#include "reader/normalize_kernel.h"
#include "reader/stats_export.h"
#include "reader/world.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// Locks `mu` (a LoaderState's) from a thread that holds the GIL, releasing the GIL while it
// waits: a consumer blocked in NextInterruptible holds mu and takes the GIL to run signal
// handlers, so waiting for mu with the GIL held could deadlock.
std::unique_lock<std::mutex> LockReleasingGil(std::mutex& mu) {
  std::unique_lock<std::mutex> lock(mu, std::defer_lock);
  if (!lock.try_lock()) {
    py::gil_scoped_release release;
    lock.lock();
  }
  return lock;
}

// Loader::Next for a thread that has released the GIL: every 20 ms of waiting it takes the GIL
// and runs Python's signal handlers (PyErr_CheckSignals; a no-op outside the main thread). When
// one raises (KeyboardInterrupt for Ctrl-C) the wait ends with Cancelled and *raised is true:
// the handler's exception is then the pending Python error, which the caller raises
// (py::error_already_set) once it holds the GIL again.
Result<bool> NextInterruptible(Loader& loader, Batch* batch, bool* raised) {
  *raised = false;
  return loader.Next(
      batch,
      [raised] {
        py::gil_scoped_acquire gil;
        *raised = PyErr_CheckSignals() != 0;
        return *raised;
      },
      /*poll_ms=*/20);
}

// Shared by the Python Loader and every batch view made from it, so that slot memory outlives
// both the Python object and the last view. Destroying it joins the fetch threads, which never
// touch Python: it is safe without the GIL (a DLPack deleter may run on any thread).
struct LoaderState {
  std::unique_ptr<Loader> loader;
  std::mutex mu;           // serialises SetEpoch/Next: the Loader serves one consumer thread
  Batch batch;             // guarded by mu: the batch the last Next() returned
  bool has_batch = false;  // guarded by mu
  // device="cuda:N" with normalize: the fused kernel (its device memory is on loader's device).
  std::unique_ptr<NormalizeKernel> kernel;
  ~LoaderState() {
    // Any thread may run this (a DLPack deleter, the garbage collector): free device memory
    // with the loader's device current, creating no context on another GPU.
    if (kernel != nullptr && loader != nullptr && !loader->CheckProcess().ok()) {
      (void)kernel.release();  // a forked child's copy: the memory is the parent's context's
    } else if (kernel != nullptr && loader != nullptr && loader->device_batches()) {
      CudaDeviceGuard guard(loader->options().device);
      kernel.reset();
    }
  }
};

std::shared_ptr<uint8_t> AllocateAligned(uint64_t bytes) {
  constexpr uint64_t kAlign = 64;
  const uint64_t rounded = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

DLDataType ToDLDataType(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return DLDataType{kDLUInt, 8, 1};
    case DType::kFloat16:
      return DLDataType{kDLFloat, 16, 1};
    case DType::kFloat32:
      return DLDataType{kDLFloat, 32, 1};
  }
  return DLDataType{kDLUInt, 8, 1};
}

// NumPy's name of `dtype`: kiln's dtype names (formats/tensor_schema.h: DTypeName) are NumPy's.
std::string NumpyTypeName(DType dtype) { return std::string(DTypeName(dtype)); }

// [batch, dims of one sample in layout order].
std::vector<int64_t> BatchShape(uint32_t size, const TensorSchema& s) {
  if (s.layout == Layout::kHWC) return {size, s.height, s.width, s.channels};
  return {size, s.channels, s.height, s.width};
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {  // in elements
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// Owns what one DLManagedTensor points at: shape, strides and a reference to the memory.
struct DLPackContext {
  std::shared_ptr<void> owner;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

// Returns a "dltensor" capsule over `data` (a C-contiguous CPU tensor). The consumer (torch)
// renames it "used_dltensor" and calls the deleter when its tensor dies; a capsule never consumed
// calls the deleter itself.
py::capsule MakeDLPackCapsule(void* data, DLDataType dtype, std::vector<int64_t> shape,
                              std::shared_ptr<void> owner) {
  auto* ctx = new DLPackContext;
  ctx->owner = std::move(owner);
  ctx->shape = std::move(shape);
  ctx->strides = ContiguousStrides(ctx->shape);
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(ctx->shape.size());
  t.dtype = dtype;
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<DLPackContext*>(self->manager_ctx);
  };
  PyObject* capsule = PyCapsule_New(&ctx->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {  // never consumed
      auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      managed->deleter(managed);
    }
  });
  if (capsule == nullptr) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

// Returns a NumPy array over `data` whose base object holds `owner`.
py::array MakeNumpyArray(void* data, const std::string& dtype_name,
                         const std::vector<int64_t>& shape, std::shared_ptr<void> owner) {
  py::dtype dtype(dtype_name);
  std::vector<int64_t> strides = ContiguousStrides(shape);
  for (int64_t& s : strides) s *= dtype.itemsize();
  auto* holder = new std::shared_ptr<void>(std::move(owner));
  py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  return py::array(dtype, shape, strides, data, base);
}

// A dataset opened for random access: kiln.Dataset's map-style view. Holds no threads, so a
// forked child may keep using it; kiln.Dataset still reopens per process (see _dataset.py).
class PyDataset {
 public:
  explicit PyDataset(const std::string& path) {
    Result<std::unique_ptr<Dataset>> dataset = Status::Internal("unset");
    PyInterruptCheck interrupt;
    {
      py::gil_scoped_release release;
      dataset = Dataset::Open(path);
    }
    interrupt.Rethrow();
    dataset_ = std::shared_ptr<const Dataset>(ValueOrThrow(std::move(dataset)));
  }

  // Returns (sample, label): sample `index` (< num_samples) as a DLPack capsule or a NumPy
  // array of the stored shape and dtype that owns its memory, and its int64 label.
  py::tuple Read(py::handle index_object, bool dlpack) const {
    const uint64_t index = ToInteger<uint64_t>(index_object, "index");
    const TensorSchema& schema = dataset_->schema();
    std::shared_ptr<uint8_t> buffer = AllocateAligned(schema.sample_bytes());
    if (!buffer) throw std::bad_alloc();
    int64_t label = 0;
    Status status;
    PyInterruptCheck interrupt;
    {
      py::gil_scoped_release release;
      status = ReadGuarded(index, buffer.get(), &label);
    }
    interrupt.Rethrow();
    if (!status.ok()) ThrowStatus(status);
    std::vector<int64_t> shape = BatchShape(1, schema);
    shape.erase(shape.begin());
    if (dlpack) {
      return py::make_tuple(
          MakeDLPackCapsule(buffer.get(), ToDLDataType(schema.dtype), shape, buffer), label);
    }
    return py::make_tuple(MakeNumpyArray(buffer.get(), NumpyTypeName(schema.dtype), shape, buffer),
                          label);
  }

  const Dataset& dataset() const { return *dataset_; }

 private:
  Status ReadGuarded(uint64_t index, uint8_t* out, int64_t* label) const {
    if (index >= dataset_->num_samples()) {
      return Status::OutOfRange(dataset_->dir() + ": sample " + std::to_string(index) +
                                " is out of range (the dataset has " +
                                std::to_string(dataset_->num_samples()) + " samples)");
    }
    RecordDecoder decoder;
    // A mapped file that shrank under us raises SIGBUS: reported against the sample.
    MappedReadFaultScope fault_scope;
    if (KILN_MAPPED_READ_FAULTED(fault_scope)) {
      return Status::IOError(dataset_->SampleLocation(index) +
                             ": the mapped file could not be read (SIGBUS): it was truncated or "
                             "replaced while open, or its storage failed");
    }
    return dataset_->ReadSample(index, &decoder, out, label);
  }

  std::shared_ptr<const Dataset> dataset_;
};

py::dict SchemaDict(const TensorSchema& s) {
  py::dict d;
  d["dtype"] = std::string(DTypeName(s.dtype));
  d["layout"] = std::string(LayoutName(s.layout));
  std::vector<int64_t> shape = BatchShape(1, s);
  shape.erase(shape.begin());
  d["shape"] = py::tuple(py::cast(shape));
  d["sample_bytes"] = s.sample_bytes();
  return d;
}

// LoaderOptions::resume as the bytes of ReaderState::Encode (b"" for none).
py::bytes ResumeBytes(const LoaderOptions& o) {
  return py::bytes(o.resume ? o.resume->Encode() : std::string());
}

void SetResume(LoaderOptions& o, py::handle value) {
  if (value.is_none()) {
    o.resume.reset();
    return;
  }
  if (!PyBytes_Check(value.ptr())) {
    ThrowTypeError("resume must be bytes (Loader.state()) or None, got " + PyTypeName(value));
  }
  const std::string blob = value.cast<std::string>();
  if (blob.empty()) {
    o.resume.reset();
  } else {
    o.resume = ValueOrThrow(ReaderState::Decode(blob));
  }
}

std::string LoaderOptionsRepr(const LoaderOptions& o) {
  return "LoaderOptions(batch_size=" + std::to_string(o.batch_size) + ", shuffle='" +
         ShuffleModeName(o.shuffle) + "', seed=" + std::to_string(o.seed) +
         ", rank=" + std::to_string(o.rank) + ", world_size=" + std::to_string(o.world_size) +
         ", num_threads=" + std::to_string(o.num_threads) +
         ", prefetch=" + std::to_string(o.prefetch) + ", tail='" + TailPolicyName(o.tail_policy) +
         "', device=" + std::to_string(o.device) + ")";
}

class PyLoader {
 public:
  // Opens `path` with `options` (validated by Loader::Create: ValidateLoaderOptions).
  PyLoader(const std::string& path, const LoaderOptions& options)
      : state_(std::make_shared<LoaderState>()) {
    CheckCuda(options);
    Result<std::unique_ptr<Loader>> loader = Status::Internal("unset");
    PyInterruptCheck interrupt;
    {
      py::gil_scoped_release release;  // opening maps and checks every file: O(files)
      loader = Loader::Open(path, options);
    }
    interrupt.Rethrow();
    state_->loader = ValueOrThrow(std::move(loader));
  }

  // Opens a mixture of the datasets at `paths` (Loader::OpenMixture, reader/mixture.md): one of
  // `weights` and `repeats` non-empty (one value per path), `samples_per_epoch` 0 for the
  // default. Refusals (schemas that differ, weights out of range, block order) are
  // OpenMixture's InvalidArgument, raised as kiln.InvalidArgumentError.
  PyLoader(const std::vector<std::string>& paths, const std::vector<double>& weights,
           const std::vector<double>& repeats, uint64_t samples_per_epoch,
           const LoaderOptions& options)
      : state_(std::make_shared<LoaderState>()) {
    CheckCuda(options);
    MixtureOptions mixture;
    mixture.weights = weights;
    mixture.repeats = repeats;
    mixture.samples_per_epoch = samples_per_epoch;
    Result<std::unique_ptr<Loader>> loader = Status::Internal("unset");
    PyInterruptCheck interrupt;
    {
      py::gil_scoped_release release;  // opens every source: O(files)
      loader = Loader::OpenMixture(paths, mixture, options);
    }
    interrupt.Rethrow();
    state_->loader = ValueOrThrow(std::move(loader));
  }

  static void CheckCuda(const LoaderOptions& options) {
    if (options.device >= 0) {
      std::string why;
      if (!CudaDeviceAvailable(&why)) {
        ThrowStatus(Status::NotSupported(
            "kiln.Loader(device='cuda:" + std::to_string(options.device) + "'): no GPU: " + why));
      }
    }
  }

  // device="cuda" with normalize: the fused kernel for this loader's stored samples, with the
  // crop and flip drawn from `seed` (the loader itself then does no crop). Returns the output
  // sample shape (C, H, W).
  py::tuple SetNormalize(const std::vector<float>& mean, const std::vector<float>& std,
                         const std::string& dtype, uint32_t crop_height, uint32_t crop_width,
                         bool flip, uint64_t seed) {
    CheckProcess();
    NormalizeOptions no;
    no.out_dtype = dtype == "float16" ? DType::kFloat16 : DType::kFloat32;
    const TensorSchema& stored = loader().sample_schema();
    for (uint32_t c = 0; c < kMaxNormalizeChannels; ++c) {
      if (c < mean.size()) no.mean[c] = mean[c];
      if (c < std.size()) no.std[c] = std[c];
    }
    AugmentOptions aug;
    aug.crop_height = crop_height;
    aug.crop_width = crop_width;
    aug.flip = flip;
    CudaDeviceGuard guard(loader().options().device);
    if (!guard.status().ok()) ThrowStatus(guard.status());
    state_->kernel = ValueOrThrow(NormalizeKernel::Create(
        stored, aug, no, std::max<uint32_t>(1, loader().options().batch_size), seed));
    const TensorSchema& out = state_->kernel->output_schema();
    return py::make_tuple(out.channels, out.height, out.width);
  }

  // device="cuda": the next batch written, on torch's stream `stream` (a cudaStream_t as an
  // integer; 0 the legacy default stream), into torch-allocated device memory `images` and
  // `labels` (room for batch_size samples): normalised by the kernel when SetNormalize was
  // called, else the uploaded bytes copied. Ordered after kiln's upload by Batch::WaitOn on
  // `stream`, which is also the stream the loader waits for before reusing its device buffer;
  // no host synchronisation. Returns the batch's size, or -1 at the end of the epoch.
  int64_t NextDevice(uintptr_t stream, uintptr_t images, uintptr_t labels) {
    CheckProcess();
    Status status;
    bool raised = false;
    int64_t size = -1;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->has_batch = false;
      Batch batch;
      Result<bool> r = NextInterruptible(*state_->loader, &batch, &raised);
      if (!r.ok()) {
        status = r.status();
      } else if (*r) {
        state_->batch = batch;
        state_->has_batch = true;
        status = batch.device_data == nullptr
                     ? Status::Internal("kiln.Loader: batch without a device copy")
                     : Status::Ok();
        CudaDeviceGuard guard(batch.device);
        if (status.ok()) status = guard.status();
        auto* s = reinterpret_cast<cudaStream_t>(stream);
        if (status.ok() && state_->kernel != nullptr) {
          status = state_->kernel->Run(batch, reinterpret_cast<void*>(images), s);
        } else if (status.ok()) {
          status = batch.WaitOn(s);
          if (status.ok()) {
            status = CudaCopyDeviceToDeviceAsync(reinterpret_cast<void*>(images), batch.device_data,
                                                 batch.bytes(), s);
          }
        }
        if (status.ok()) {
          status = CudaCopyDeviceToDeviceAsync(reinterpret_cast<void*>(labels), batch.device_labels,
                                               uint64_t{batch.size} * sizeof(int64_t), s);
        }
        size = batch.size;
      }
    }
    if (raised) throw py::error_already_set();
    if (!status.ok()) ThrowStatus(status);
    return size;
  }

  // Raises NotSupportedError in a process forked after the loader was created (reader/loader.h,
  // "Processes"). Called first by every method that would lock state_->mu, which the forked
  // copy may hold locked.
  void CheckProcess() const {
    const Status status = state_->loader->CheckProcess();
    if (!status.ok()) ThrowStatus(status);
  }

  uint64_t BeginEpoch() {
    CheckProcess();
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->has_batch = false;
    return state_->loader->BeginEpoch();
  }

  void SetEpoch(uint64_t epoch) {
    CheckProcess();
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->has_batch = false;
    state_->loader->SetEpoch(epoch);
  }

  // Returns (images, labels) for the next batch, or None at the end of the epoch.
  py::object Next(bool copy, bool dlpack) {
    CheckProcess();
    Status status;
    bool raised = false;
    bool more = false;
    Batch batch;
    std::shared_ptr<uint8_t> images_copy, labels_copy;
    {
      // Waiting for the fetch threads (and copying) runs without the GIL.
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->has_batch = false;
      Result<bool> r = NextInterruptible(*state_->loader, &batch, &raised);
      if (!r.ok()) {
        status = r.status();
      } else if (*r) {
        more = true;
        state_->batch = batch;
        state_->has_batch = true;
        if (copy) {
          images_copy = AllocateAligned(batch.bytes());
          labels_copy = AllocateAligned(uint64_t{batch.size} * sizeof(int64_t));
          if (images_copy && labels_copy) {
            std::memcpy(images_copy.get(), batch.data, batch.bytes());
            std::memcpy(labels_copy.get(), batch.labels, batch.size * sizeof(int64_t));
          }
        }
      }
    }
    if (raised) throw py::error_already_set();  // Ctrl-C while waiting: KeyboardInterrupt
    if (!status.ok()) ThrowStatus(status);
    if (!more) return py::none();
    if (copy && (!images_copy || !labels_copy)) throw std::bad_alloc();

    void* images = copy ? images_copy.get() : const_cast<uint8_t*>(batch.data);
    void* labels = copy ? static_cast<void*>(labels_copy.get())
                        : static_cast<void*>(const_cast<int64_t*>(batch.labels));
    std::shared_ptr<void> images_owner =
        copy ? std::shared_ptr<void>(images_copy) : std::shared_ptr<void>(state_);
    std::shared_ptr<void> labels_owner =
        copy ? std::shared_ptr<void>(labels_copy) : std::shared_ptr<void>(state_);
    const std::vector<int64_t> shape = BatchShape(batch.size, batch.schema);
    const std::vector<int64_t> label_shape = {batch.size};
    if (dlpack) {
      return py::make_tuple(
          MakeDLPackCapsule(images, ToDLDataType(batch.schema.dtype), shape, images_owner),
          MakeDLPackCapsule(labels, DLDataType{kDLInt, 64, 1}, label_shape, labels_owner));
    }
    return py::make_tuple(
        MakeNumpyArray(images, NumpyTypeName(batch.schema.dtype), shape, images_owner),
        MakeNumpyArray(labels, "int64", label_shape, labels_owner));
  }

  // Returns a copy of the dataset indices (int64 [size]) of the batch last returned, or None.
  py::object Indices() {
    CheckProcess();
    std::unique_lock<std::mutex> lock = LockReleasingGil(state_->mu);
    if (!state_->has_batch) return py::none();
    const Batch& b = state_->batch;
    py::array_t<int64_t> out(b.size);
    for (uint32_t i = 0; i < b.size; ++i)
      out.mutable_at(i) = static_cast<int64_t>(b.sample_indices[i]);
    return out;
  }

  // Returns a copy of the sources (int64 [size]) of the batch last returned: each sample's
  // dataset, its position in the mixture's list of paths (all 0 for a loader over one dataset);
  // None between epochs.
  py::object Sources() {
    CheckProcess();
    std::unique_lock<std::mutex> lock = LockReleasingGil(state_->mu);
    if (!state_->has_batch) return py::none();
    const Batch& b = state_->batch;
    py::array_t<int64_t> out(b.size);
    for (uint32_t i = 0; i < b.size; ++i) {
      out.mutable_at(i) = b.sources != nullptr ? static_cast<int64_t>(b.sources[i]) : 0;
    }
    return out;
  }

  // None for a loader over one dataset; for a mixture a dict: "paths" (each source's directory),
  // "num_samples" (n_s), "quotas" (c_s, samples drawn per epoch), "classes" (each source's class
  // names) and "samples_per_epoch" (N, all ranks together).
  py::object Mixture() const {
    const MixtureSchedule* m = loader().mixture();
    if (m == nullptr) return py::none();
    const auto& joined = static_cast<const MixtureDataset&>(loader().dataset());
    py::list paths, sizes, quotas, classes;
    for (size_t s = 0; s < m->num_sources(); ++s) {
      paths.append(joined.source(s).dir());
      sizes.append(m->source_samples(s));
      quotas.append(m->quota(s));
      classes.append(py::cast(joined.source(s).manifest().classes));
    }
    py::dict d;
    d["paths"] = paths;
    d["num_samples"] = sizes;
    d["quotas"] = quotas;
    d["classes"] = classes;
    d["samples_per_epoch"] = m->samples_per_epoch();
    return d;
  }

  // Returns a copy of the padding flags (bool [size]) of the batch last returned, or None.
  py::object IsPadding() {
    CheckProcess();
    std::unique_lock<std::mutex> lock = LockReleasingGil(state_->mu);
    if (!state_->has_batch) return py::none();
    const Batch& b = state_->batch;
    py::array_t<bool> out(b.size);
    for (uint32_t i = 0; i < b.size; ++i) out.mutable_at(i) = b.is_padding[i] != 0;
    return out;
  }

  // The loader's ReaderState in its binary form (reader/reader_state.md).
  py::bytes State() {
    CheckProcess();
    std::unique_lock<std::mutex> lock = LockReleasingGil(state_->mu);
    return py::bytes(state_->loader->state().Encode());
  }

  // The key of sample `index`; in a mixture, of sample `index` of source `source` (an index as
  // batch_indices() gives it). `source` None: a loader over one dataset (or source 0).
  std::string Key(py::handle index_object, py::handle source_object) const {
    uint64_t index = ToInteger<uint64_t>(index_object, "index");
    const MixtureSchedule* m = loader().mixture();
    if (source_object.is_none()) {
      if (m != nullptr && m->num_sources() > 1) {
        ThrowStatus(Status::InvalidArgument(
            "key(): this loader mixes " + std::to_string(m->num_sources()) +
            " datasets; give source= (batch_sources()) with the index within that dataset"));
      }
      return ValueOrThrow(loader().dataset().Key(index));
    }
    const uint64_t source = ToInteger<uint64_t>(source_object, "source");
    const uint64_t sources = m != nullptr ? m->num_sources() : 1;
    if (source >= sources) {
      ThrowStatus(Status::OutOfRange("key(): source " + std::to_string(source) +
                                     " is out of range (the loader reads " +
                                     std::to_string(sources) + " dataset(s))"));
    }
    if (m != nullptr) {
      if (index >= m->source_samples(source)) {
        const auto& joined = static_cast<const MixtureDataset&>(loader().dataset());
        ThrowStatus(Status::OutOfRange(joined.source(source).dir() + ": sample " +
                                       std::to_string(index) +
                                       " is out of range (the dataset has " +
                                       std::to_string(m->source_samples(source)) + " samples)"));
      }
      index += m->offset(source);
    }
    return ValueOrThrow(loader().dataset().Key(index));
  }

  // LoaderStats as a flat dict: the counters of the statistics export, by the names of its
  // JSON lines (reader/stats_export.md, same order), then the derived stage times and the
  // counters only kiln bench prints, then epoch and io_path.
  py::dict Stats() const {
    LoaderStats s;
    {
      py::gil_scoped_release release;  // the loader's mutex may be held by a fetch thread
      s = loader().stats();
    }
    py::dict d;
    for (const StatsCounter& c : StatsCounters(s)) d[c.name] = c.value;
    d["storage_ns"] = s.storage_ns();
    d["copy_ns"] = s.copy_ns();
    d["read_ahead_samples"] = s.read_ahead_samples;
    d["read_ahead_ns"] = s.read_ahead_ns;
    d["read_ahead_max_lead_samples"] = s.read_ahead_max_lead_samples;
    d["direct_max_in_flight"] = s.direct_max_in_flight;
    d["remote_cache_pieces_held"] = s.remote_cache_pieces_held;
    d["remote_cache_pieces_total"] = s.remote_cache_pieces_total;
    d["remote_cache_fill_done"] = s.remote_cache_fill_done;
    d["remote_cache_fill_error"] = s.remote_cache_fill_error;
    d["epoch"] = s.epoch;
    d["io_path"] = std::string(IoModeName(s.io_path));
    return d;
  }

  const Loader& loader() const { return *state_->loader; }

 private:
  std::shared_ptr<LoaderState> state_;
};

// The fields of a binary ReaderState as the plain dict of kiln.Loader.state_dict().
py::dict StateToDict(const py::bytes& blob) {
  const ReaderState s = ValueOrThrow(ReaderState::Decode(std::string(blob)));
  py::dict d;
  d["kiln_reader_state"] = kReaderStateVersion;
  d["order_version"] = s.order_version;
  d["epoch"] = s.epoch;
  d["samples_consumed"] = s.samples_consumed;
  d["seed"] = s.seed;
  d["shuffle"] = std::string(ShuffleModeName(s.shuffle));
  d["block_samples"] = s.block_samples;
  d["window"] = s.window_blocks;
  d["batch_size"] = s.batch_size;
  d["world_size"] = s.world_size;
  d["tail"] = std::string(TailPolicyName(s.tail));
  d["drop_last"] = s.drop_last;
  py::list crop;
  crop.append(s.crop_height);
  crop.append(s.crop_width);
  d["crop"] = crop;
  d["flip"] = s.flip;
  if (s.resized_crop) {  // only then, so other states' dicts keep their keys
    d["resized_crop"] = true;
    d["resized_crop_digest"] = s.resized_crop_digest;
  }
  d["num_samples"] = s.num_samples;
  d["dataset_fingerprint"] = HexDigest(s.dataset_fingerprint);
  if (!s.mixture_sources.empty()) {  // version 2 (reader/reader_state.md, "Version 2")
    d["kiln_reader_state"] = kReaderStateMixtureVersion;
    d["mixture_version"] = s.mixture_version;
    py::list sources;
    for (const MixtureSourceState& src : s.mixture_sources) {
      py::dict e;
      e["fingerprint"] = HexDigest(src.fingerprint);
      e["num_samples"] = src.num_samples;
      e["quota"] = src.quota;
      sources.append(e);
    }
    d["mixture_sources"] = sources;
  }
  return d;
}

// The inverse of StateToDict; refuses a dict with missing or ill-typed fields by name.
py::bytes StateFromDict(const py::dict& d) {
  auto field = [&](const char* name) -> py::object {
    if (!d.contains(name)) {
      ThrowStatus(
          Status::InvalidArgument(std::string("reader state dict: missing field '") + name + "'"));
    }
    return d[name];
  };
  auto label = [](const char* name) {
    return std::string("reader state dict: field '") + name + "'";
  };
  auto integer = [&](const char* name) -> uint64_t {
    return ToInteger<uint64_t>(field(name), label(name));
  };
  auto u32 = [&](const char* name) -> uint32_t {
    return ToInteger<uint32_t>(field(name), label(name));
  };
  auto text = [&](const char* name) { return ToString(field(name), label(name)); };
  auto boolean = [&](const char* name) { return ToBool(field(name), label(name)); };
  const uint64_t version = integer("kiln_reader_state");
  if (version != kReaderStateVersion && version != kReaderStateMixtureVersion) {
    ThrowStatus(Status::NotSupported("reader state dict: version " + std::to_string(version) +
                                     "; this kiln reads versions " +
                                     std::to_string(kReaderStateVersion) + " and " +
                                     std::to_string(kReaderStateMixtureVersion)));
  }
  ReaderState s;
  s.order_version = u32("order_version");
  s.epoch = integer("epoch");
  s.samples_consumed = integer("samples_consumed");
  s.seed = integer("seed");
  s.shuffle = ValueOrThrow(ParseShuffleMode(text("shuffle")));
  s.block_samples = integer("block_samples");
  s.window_blocks = u32("window");
  s.batch_size = u32("batch_size");
  s.world_size = u32("world_size");
  s.tail = ValueOrThrow(ParseTailPolicy(text("tail")));
  s.drop_last = boolean("drop_last");
  py::object crop = field("crop");
  if (!PyList_Check(crop.ptr()) && !PyTuple_Check(crop.ptr())) {
    ThrowTypeError("reader state dict: field 'crop' must be [height, width], got " +
                   PyTypeName(crop));
  }
  py::sequence crop_seq = crop.cast<py::sequence>();
  if (crop_seq.size() != 2) {
    ThrowStatus(Status::InvalidArgument("reader state dict: 'crop' must be [height, width]"));
  }
  s.crop_height = ToInteger<uint32_t>(crop_seq[0], label("crop") + "[0]");
  s.crop_width = ToInteger<uint32_t>(crop_seq[1], label("crop") + "[1]");
  s.flip = boolean("flip");
  if (d.contains("resized_crop")) {  // optional: absent in dicts of loaders without it
    s.resized_crop = boolean("resized_crop");
    s.resized_crop_digest = u32("resized_crop_digest");
  }
  s.num_samples = integer("num_samples");
  const std::string hex = text("dataset_fingerprint");
  if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    ThrowStatus(
        Status::InvalidArgument("reader state dict: 'dataset_fingerprint' must be 16 "
                                "lower-case hex digits, got '" +
                                hex + "'"));
  }
  s.dataset_fingerprint = std::stoull(hex, nullptr, 16);
  const bool has_sources = d.contains("mixture_sources");
  if (has_sources != (version == kReaderStateMixtureVersion)) {
    ThrowStatus(Status::InvalidArgument(
        version == kReaderStateMixtureVersion
            ? "reader state dict: version 2 (a mixture's) without field 'mixture_sources'"
            : "reader state dict: field 'mixture_sources' in a version-1 state (one dataset's); "
              "a mixture's state has kiln_reader_state 2"));
  }
  if (has_sources) {
    s.mixture_version = u32("mixture_version");
    py::object list = field("mixture_sources");
    if (!PyList_Check(list.ptr()) && !PyTuple_Check(list.ptr())) {
      ThrowTypeError("reader state dict: field 'mixture_sources' must be a list, got " +
                     PyTypeName(list));
    }
    py::sequence seq = list.cast<py::sequence>();
    if (seq.size() == 0 || seq.size() > kMaxMixtureSources) {
      ThrowStatus(Status::InvalidArgument(
          "reader state dict: 'mixture_sources' has " + std::to_string(seq.size()) +
          " entries; a mixture has 1 to " + std::to_string(kMaxMixtureSources)));
    }
    for (size_t k = 0; k < seq.size(); ++k) {
      const std::string where = "reader state dict: mixture_sources[" + std::to_string(k) + "]";
      py::object entry = seq[k];
      if (!PyDict_Check(entry.ptr())) {
        ThrowTypeError(where + " must be a dict, got " + PyTypeName(entry));
      }
      py::dict e = entry.cast<py::dict>();
      for (const char* name : {"fingerprint", "num_samples", "quota"}) {
        if (!e.contains(name)) {
          ThrowStatus(Status::InvalidArgument(where + ": missing field '" + name + "'"));
        }
      }
      MixtureSourceState src;
      const std::string fp = ToString(e["fingerprint"], where + "['fingerprint']");
      if (fp.size() != 16 || fp.find_first_not_of("0123456789abcdef") != std::string::npos) {
        ThrowStatus(Status::InvalidArgument(where +
                                            ": 'fingerprint' must be 16 lower-case hex "
                                            "digits, got '" +
                                            fp + "'"));
      }
      src.fingerprint = std::stoull(fp, nullptr, 16);
      src.num_samples = ToInteger<uint64_t>(e["num_samples"], where + "['num_samples']");
      src.quota = ToInteger<uint64_t>(e["quota"], where + "['quota']");
      s.mixture_sources.push_back(src);
    }
  }
  if (s.batch_size == 0 || s.world_size == 0) {
    ThrowStatus(
        Status::InvalidArgument("reader state dict: batch_size and world_size must be "
                                "at least 1"));
  }
  return py::bytes(s.Encode());
}

// The same JSON object as `kiln inspect --json`: both call formats/inspector.h.
std::string InspectJson(const std::string& dir) {
  Result<std::string> text = Status::Internal("unset");
  PyInterruptCheck interrupt;
  {
    py::gil_scoped_release release;
    text = Inspect(dir, /*json=*/true);
  }
  interrupt.Rethrow();
  return ValueOrThrow(std::move(text));
}

std::string VerifyJson(const std::string& dir, bool deep) {
  VerifyOptions options;
  options.deep = deep;
  // Deep verification decodes JPEG records with the reader's decoder, as kiln verify --deep.
  options.image_decoder = std::make_shared<JpegSampleDecoder>(/*channels=*/0);
  PyInterruptCheck interrupt;
  VerifyReport report;
  {
    py::gil_scoped_release release;
    report = VerifyDataset(dir, options);
  }
  interrupt.Rethrow();
  return VerifyReportToJson(report);
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_core, m) {
  using kiln::python::PyLoader;
  m.doc() = "kiln's reader and formats layers (no OpenCV). Use the `kiln` package, not this.";
  m.attr("__version__") = kiln::kVersionString;
  kiln::EnableRemoteDatasets();  // kiln.Loader / kiln.Dataset / kiln.verify take URLs too

  using kiln::LoaderOptions;
  using kiln::python::ToBool;
  using kiln::python::ToDouble;
  using kiln::python::ToInteger;
  using kiln::python::ToString;
  // One Python property per LoaderOptions field, read and written in its C++ type (checked
  // conversion: python/py_args.h). Ranges are ValidateLoaderOptions'.
  py::class_<LoaderOptions>(m, "LoaderOptions",
                            "kiln::LoaderOptions (reader/loader.h), field by field; the "
                            "defaults are the C++ ones.")
      .def(py::init<>())
      .KILN_INT_FIELD(LoaderOptions, "batch_size", batch_size,
                      "Samples per batch, >= 1. Default 256.")
      .def_property(
          "shuffle",
          [](const LoaderOptions& o) { return std::string(kiln::ShuffleModeName(o.shuffle)); },
          [](LoaderOptions& o, py::handle v) {
            o.shuffle = kiln::python::ValueOrThrow(kiln::ParseShuffleMode(ToString(v, "shuffle")));
          },
          "'exact', 'block' or 'none'. Default 'exact'.")
      .KILN_INT_FIELD(LoaderOptions, "block_bytes", block_bytes,
                      "shuffle='block': bytes per block. Default 4 MiB.")
      .KILN_INT_FIELD(LoaderOptions, "shuffle_window", shuffle_window,
                      "shuffle='block': blocks per window. Default 16.")
      .KILN_INT_FIELD(LoaderOptions, "seed", seed, "Permutation and augmentation seed. Default 0.")
      .KILN_BOOL_FIELD(LoaderOptions, "drop_last", drop_last,
                       "Drop each rank's last partial batch.")
      .def_property(
          "tail",
          [](const LoaderOptions& o) { return std::string(kiln::TailPolicyName(o.tail_policy)); },
          [](LoaderOptions& o, py::handle v) {
            o.tail_policy = kiln::python::ValueOrThrow(kiln::ParseTailPolicy(ToString(v, "tail")));
          },
          "'short', 'drop' or 'pad' (reader/sampler.h). Default 'short'.")
      .KILN_INT_FIELD(LoaderOptions, "rank", rank,
                      "This process's rank, below world_size. Default 0.")
      .KILN_INT_FIELD(LoaderOptions, "world_size", world_size,
                      "Ranks reading together, >= 1. Default 1.")
      .KILN_INT_FIELD(LoaderOptions, "num_threads", num_threads,
                      "Fetch threads; 0 = hardware threads. Max 256.")
      .KILN_INT_FIELD(LoaderOptions, "prefetch", prefetch,
                      "Batches filled ahead, [1, 64]. Default 2.")
      .KILN_BOOL_FIELD(LoaderOptions, "pin_memory", pin_memory,
                       "Pinned slots when a CUDA device is present.")
      .KILN_INT_FIELD(LoaderOptions, "crop_height", augment.crop_height,
                      "Random crop height; 0 = no crop.")
      .KILN_INT_FIELD(LoaderOptions, "crop_width", augment.crop_width,
                      "Random crop width; 0 = no crop.")
      .KILN_BOOL_FIELD(LoaderOptions, "flip", augment.flip, "Random horizontal flip.")
      .KILN_INT_FIELD(LoaderOptions, "resize_height", augment.resize_height,
                      "RandomResizedCrop output height; 0 = off.")
      .KILN_INT_FIELD(LoaderOptions, "resize_width", augment.resize_width,
                      "RandomResizedCrop output width; 0 = off.")
      .KILN_DOUBLE_FIELD(LoaderOptions, "scale_min", augment.scale_min,
                         "RandomResizedCrop scale lower bound. Default 0.08.")
      .KILN_DOUBLE_FIELD(LoaderOptions, "scale_max", augment.scale_max,
                         "RandomResizedCrop scale upper bound. Default 1.0.")
      .KILN_DOUBLE_FIELD(LoaderOptions, "ratio_min", augment.ratio_min,
                         "RandomResizedCrop aspect ratio lower bound. Default 3/4.")
      .KILN_DOUBLE_FIELD(LoaderOptions, "ratio_max", augment.ratio_max,
                         "RandomResizedCrop aspect ratio upper bound. Default 4/3.")
      .def_property(
          "interpolation",
          [](const LoaderOptions& o) {
            return std::string(
                o.augment.interpolation == kiln::ResizeInterpolation::kArea ? "area" : "bilinear");
          },
          [](LoaderOptions& o, py::handle v) {
            const std::string name = ToString(v, "interpolation");
            if (name == "bilinear") {
              o.augment.interpolation = kiln::ResizeInterpolation::kBilinear;
            } else if (name == "area") {
              o.augment.interpolation = kiln::ResizeInterpolation::kArea;
            } else {
              kiln::python::ThrowStatus(kiln::Status::InvalidArgument(
                  "interpolation must be 'bilinear' or 'area', got '" + name + "'"));
            }
          },
          "RandomResizedCrop's resampling: 'bilinear' or 'area' (reader/augmenter.h, "
          "ResizeInterpolation). Default 'bilinear'.")
      .KILN_INT_FIELD(LoaderOptions, "center_crop_height", augment.center_crop_height,
                      "Center crop + resize output height; 0 = off.")
      .KILN_INT_FIELD(LoaderOptions, "center_crop_width", augment.center_crop_width,
                      "Center crop + resize output width; 0 = off.")
      .KILN_DOUBLE_FIELD(LoaderOptions, "center_crop_ratio", augment.center_crop_ratio,
                         "Center crop box side over the largest fitting box, (0, 1]. "
                         "Default 224/256.")
      .KILN_INT_FIELD(LoaderOptions, "start_epoch", start_epoch,
                      "The epoch the first batch belongs to.")
      .KILN_INT_FIELD(LoaderOptions, "read_ahead_bytes", read_ahead_bytes,
                      "Read-ahead, [0, 4 GiB]. Default 16 MiB.")
      .def_property(
          "io", [](const LoaderOptions& o) { return std::string(kiln::IoModeName(o.io)); },
          [](LoaderOptions& o, py::handle v) {
            o.io = kiln::python::ValueOrThrow(kiln::ParseIoMode(ToString(v, "io")));
          },
          "'auto', 'mmap' or 'direct' (reader/loader.h, IoMode). Default 'auto'.")
      .KILN_INT_FIELD(LoaderOptions, "device", device,
                      "CUDA device for device batches; -1 = host. Default -1.")
      .KILN_INT_FIELD(LoaderOptions, "pin_device", pin_device,
                      "With device -1: the CUDA device current while pinned slots are "
                      "allocated; -1 = the current device. Default -1.")
      .KILN_STR_FIELD(LoaderOptions, "stats_dir", stats_dir,
                      "Statistics export directory (reader/stats_export.md); '' = "
                      "KILN_STATS_DIR, else off. Default ''.")
      .KILN_DOUBLE_FIELD(LoaderOptions, "stats_interval_s", stats_interval_s,
                         "Seconds between export lines; 0 = KILN_STATS_INTERVAL, else 10. "
                         "Default 0.")
      .KILN_STR_FIELD(LoaderOptions, "remote_cache_dir", remote_cache_dir,
                      "A dataset at a URL: local cache directory (reader/remote/disk_cache.md); "
                      "'' = KILN_REMOTE_CACHE_DIR, else none. Default ''.")
      .KILN_OPTIONAL_FIELD(LoaderOptions, "remote_cache_bytes", remote_cache_bytes,
                           ToInteger<uint64_t>,
                           "The local cache's size limit in bytes; None = KILN_REMOTE_CACHE_BYTES, "
                           "else as much as the file system allows (0 too). Default None.")
      .KILN_OPTIONAL_FIELD(
          LoaderOptions, "remote_hedge_p95_multiple", remote_hedge_p95_multiple, ToDouble,
          "Hedged requests' threshold in multiples of the p95 latency, [0, 1000] "
          "(0 = off); None = KILN_REMOTE_HEDGE_P95_MULTIPLE, else 3. Default None.")
      .KILN_OPTIONAL_FIELD(LoaderOptions, "remote_hedge_min_ms", remote_hedge_min_ms,
                           ToInteger<int64_t>,
                           "Hedged requests' threshold floor in ms, [0, 3600000]; None = "
                           "KILN_REMOTE_HEDGE_MIN_MS, else 100. Default None.")
      .def_property("resume", &kiln::python::ResumeBytes, &kiln::python::SetResume,
                    "A saved ReaderState (Loader.state()), or b'' / None for none.")
      .def(
          "validate",
          [](const LoaderOptions& o) {
            const kiln::Status s = kiln::ValidateLoaderOptions(o);
            if (!s.ok()) kiln::python::ThrowStatus(s);
          },
          "Raises kiln.InvalidArgumentError naming the first option out of range.")
      .def("copy", [](const LoaderOptions& o) { return LoaderOptions(o); })
      .def("__repr__", &kiln::python::LoaderOptionsRepr);

  py::class_<PyLoader>(m, "Loader")
      .def(py::init<const std::string&, const LoaderOptions&>(), py::arg("path"),
           py::arg("options"))
      .def(py::init<const std::vector<std::string>&, const std::vector<double>&,
                    const std::vector<double>&, uint64_t, const LoaderOptions&>(),
           py::arg("paths"), py::arg("weights"), py::arg("repeats"), py::arg("samples_per_epoch"),
           py::arg("options"),
           "A mixture of datasets (reader/loader.h: Loader::OpenMixture); one of weights and "
           "repeats non-empty.")
      .def("begin_epoch", &PyLoader::BeginEpoch,
           "Starts a pass (reader/loader.h: Loader::BeginEpoch) and returns its epoch.")
      .def_property_readonly("at_epoch_start",
                             [](const PyLoader& l) { return l.loader().at_epoch_start(); })
      .def("state", &PyLoader::State,
           "The ReaderState: 96 bytes, a mixture's 104 + 24 per source (reader/reader_state.md).")
      .def("set_epoch", &PyLoader::SetEpoch, py::arg("epoch"))
      .def("check_process", &PyLoader::CheckProcess,
           "Raises NotSupportedError in a process forked after the loader was created.")
      .def("next", &PyLoader::Next, py::arg("copy"), py::arg("dlpack"),
           "(images, labels) as DLPack capsules or NumPy arrays, or None at the epoch's end. "
           "Releases the GIL while waiting.")
      .def("indices", &PyLoader::Indices)
      .def("is_padding", &PyLoader::IsPadding)
      .def("sources", &PyLoader::Sources)
      .def_property_readonly("mixture", &PyLoader::Mixture)
      .def("key", &PyLoader::Key, py::arg("index"), py::arg("source") = py::none())
      .def("stats", &PyLoader::Stats)
      .def("set_normalize", &PyLoader::SetNormalize, py::arg("mean"), py::arg("std"),
           py::arg("dtype"), py::arg("crop_height"), py::arg("crop_width"), py::arg("flip"),
           py::arg("seed"))
      .def("next_device", &PyLoader::NextDevice, py::arg("stream"), py::arg("images"),
           py::arg("labels"))
      .def_property_readonly("device_batches",
                             [](const PyLoader& l) { return l.loader().device_batches(); })
      .def("__len__", [](const PyLoader& l) { return l.loader().batches_per_epoch(); })
      .def_property_readonly("samples_per_epoch",
                             [](const PyLoader& l) { return l.loader().samples_per_epoch(); })
      .def_property_readonly("epoch", [](const PyLoader& l) { return l.loader().epoch(); })
      .def_property_readonly("num_samples",
                             [](const PyLoader& l) { return l.loader().dataset().num_samples(); })
      .def_property_readonly(
          "classes", [](const PyLoader& l) { return l.loader().dataset().manifest().classes; })
      .def_property_readonly("dir", [](const PyLoader& l) { return l.loader().dataset().dir(); })
      .def_property_readonly("num_threads",
                             [](const PyLoader& l) { return l.loader().num_threads(); })
      .def_property_readonly("pinned", [](const PyLoader& l) { return l.loader().pinned(); })
      .def_property_readonly(
          "io_path",
          [](const PyLoader& l) { return std::string(IoModeName(l.loader().io_path())); })
      .def_property_readonly("io_reason", [](const PyLoader& l) { return l.loader().io_reason(); })
      .def_property_readonly("sample_schema", [](const PyLoader& l) {
        return kiln::python::SchemaDict(l.loader().sample_schema());
      });

  py::class_<kiln::python::PyDataset>(m, "Dataset")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("read", &kiln::python::PyDataset::Read, py::arg("index"), py::arg("dlpack"),
           "(sample, label) of sample `index`; releases the GIL while reading.")
      .def(
          "key",
          [](const kiln::python::PyDataset& d, py::handle index) {
            return kiln::python::ValueOrThrow(d.dataset().Key(ToInteger<uint64_t>(index, "index")));
          })
      .def("__len__", [](const kiln::python::PyDataset& d) { return d.dataset().num_samples(); })
      .def_property_readonly(
          "classes",
          [](const kiln::python::PyDataset& d) { return d.dataset().manifest().classes; })
      .def_property_readonly("dir",
                             [](const kiln::python::PyDataset& d) { return d.dataset().dir(); })
      .def_property_readonly("sample_schema", [](const kiln::python::PyDataset& d) {
        return kiln::python::SchemaDict(d.dataset().schema());
      });

  m.def("cuda_unavailable_reason", [] {
    std::string why;
    return kiln::CudaDeviceAvailable(&why) ? std::string() : why;
  });
  m.def("state_to_dict", &kiln::python::StateToDict, py::arg("blob"));
  m.def("state_from_dict", &kiln::python::StateFromDict, py::arg("state"));
  m.def("inspect_json", &kiln::python::InspectJson, py::arg("path"));
  m.def(
      "formats",
      [] {
        py::list rows;
        for (const kiln::StorageFormat& f : kiln::StorageFormats()) {
          py::dict row;
          row["name"] = f.name;
          row["description"] = f.description;
          row["compiled_in"] = f.compiled_in;
          row["missing"] = f.missing;
          rows.append(row);
        }
        return rows;
      },
      "The format registry: one dict per storage format (name, description, compiled_in, "
      "missing).");
  m.def("verify_json", &kiln::python::VerifyJson, py::arg("path"), py::arg("deep"));
  m.def(
      "world_from_environment",
      [] {
        const kiln::World w =
            kiln::python::ValueOrThrow(kiln::WorldFromEnvironment(kiln::ProcessEnvironment()));
        py::dict d;
        d["rank"] = w.rank;
        d["world_size"] = w.world_size;
        d["local_rank"] = w.local_rank;
        d["source"] = w.source;
        return d;
      },
      "{rank, world_size, local_rank, source} from torchrun, Open MPI, PMI or an srun step's "
      "variables (reader/world.h); raises ValueError for a half-set launcher environment.");
}
