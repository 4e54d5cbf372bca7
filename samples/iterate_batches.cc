// A minimal C++ training-side program: opens a packed dataset and iterates shuffled batches for
// a few epochs, the way a training loop would, printing what it receives.
//
//   build/samples/iterate_batches DATASET_DIR [EPOCHS]
//
// Outside this tree the same code builds against an installed kiln:
//   find_package(kiln REQUIRED)
//   target_link_libraries(my_trainer PRIVATE kiln::reader)
#include <cstdio>
#include <cstdlib>

#include "reader/loader.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASET_DIR [EPOCHS]\n", argv[0]);
    return 2;
  }
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 2;

  kiln::LoaderOptions options;
  options.batch_size = 64;
  options.shuffle = kiln::ShuffleMode::kExact;
  options.seed = 42;
  options.prefetch = 4;  // batches filled while the previous one trains
  kiln::Result<std::unique_ptr<kiln::Loader>> loader = kiln::Loader::Open(argv[1], options);
  if (!loader.ok()) {
    std::fprintf(stderr, "cannot open %s: %s\n", argv[1], loader.status().ToString().c_str());
    return 1;
  }
  const kiln::TensorSchema& schema = (*loader)->sample_schema();
  std::printf("%llu samples of %s %s, %llu batches per epoch\n",
              static_cast<unsigned long long>((*loader)->dataset().num_samples()),
              schema.ShapeString().c_str(), std::string(kiln::DTypeName(schema.dtype)).c_str(),
              static_cast<unsigned long long>((*loader)->batches_per_epoch()));

  for (int epoch = 0; epoch < epochs; ++epoch) {
    (*loader)->SetEpoch(epoch);  // the order depends only on (seed, epoch)
    kiln::Batch batch;
    uint64_t samples = 0, label_sum = 0;
    while (true) {
      kiln::Result<bool> more = (*loader)->Next(&batch);  // waits for the batch; never copies it
      if (!more.ok()) {  // a corrupt record: the message names file, record and offset
        std::fprintf(stderr, "batch %llu: %s\n", static_cast<unsigned long long>(batch.index),
                     more.status().ToString().c_str());
        return 1;
      }
      if (!*more) break;  // end of epoch
      // A training step would read batch.data ([size, shape] contiguous) here; it stays valid
      // until the next Next() call.
      samples += batch.size;
      for (uint32_t k = 0; k < batch.size; ++k) label_sum += static_cast<uint64_t>(batch.labels[k]);
    }
    std::printf("epoch %d: %llu samples, label sum %llu\n", epoch,
                static_cast<unsigned long long>(samples),
                static_cast<unsigned long long>(label_sum));
  }
  return 0;
}
