// Read-time augmentation cost per sample, without the loader around it: times ApplyAugment on
// stored uint8 HWC samples for a plain crop + flip, RandomResizedCrop + flip (bilinear) and the
// same boxes with area interpolation, to the same output size, alternating them round by round, and
// prints each one's median samples/s over the rounds and the RandomResizedCrop / crop ratio (issue
// 31's goal: >= 0.5 at 224x224 from 256x256x3).
//
//   augment_sample_rate [--size 224] [--stored 256] [--channels 3] [--samples 2000]
//                       [--rounds 7] [--pool 64] [--chw 0|1]
//
// The parameters are DrawAugmentParams's for samples 0..samples-1 (seed 1, epoch 0), the same
// boxes the loader draws; the inputs cycle through `pool` distinct stored samples (random bytes:
// the resize costs the same whatever the pixels) and the outputs through `pool` batch slots, so
// the working set is larger than the caches, as in a batch. --chw 1: CHW samples. Used for
// BENCHMARKS.md, "Read-time RandomResizedCrop and crop + flip (issue 31)".
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reader/augmenter.h"

namespace {

double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 != 0 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t size = 224, stored_side = 256, channels = 3, samples = 2000, rounds = 7, pool = 64;
  uint32_t chw = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const uint32_t v = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    if (flag == "--size") {
      size = v;
    } else if (flag == "--stored") {
      stored_side = v;
    } else if (flag == "--channels") {
      channels = v;
    } else if (flag == "--samples") {
      samples = v;
    } else if (flag == "--rounds") {
      rounds = v;
    } else if (flag == "--pool") {
      pool = v;
    } else if (flag == "--chw") {
      chw = v;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (size == 0 || size > stored_side || channels == 0 || samples == 0 || rounds == 0 ||
      pool == 0) {
    std::fprintf(stderr, "need 0 < size <= stored and nonzero channels, samples, rounds, pool\n");
    return 2;
  }
  kiln::TensorSchema stored;
  stored.height = stored.width = stored_side;
  stored.channels = channels;
  stored.dtype = kiln::DType::kUint8;
  stored.layout = chw != 0 ? kiln::Layout::kCHW : kiln::Layout::kHWC;
  const size_t in_bytes = stored.sample_bytes();
  std::vector<uint8_t> in(in_bytes * pool);
  uint64_t x = 12345;
  for (uint8_t& b : in) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }

  struct Config {
    const char* name;
    kiln::AugmentOptions options;
    kiln::TensorSchema out;
    std::vector<kiln::AugmentParams> params;
    std::vector<double> rates;      // samples per wall-clock second
    std::vector<double> cpu_rates;  // samples per second of this thread's CPU time
  };
  std::vector<Config> configs(3);
  configs[0].name = "crop + flip";
  configs[0].options.crop_height = configs[0].options.crop_width = size;
  configs[1].name = "RandomResizedCrop + flip";
  configs[1].options.resize_height = configs[1].options.resize_width = size;
  configs[2].name = "RRC (area) + flip";
  configs[2].options = configs[1].options;
  configs[2].options.interpolation = kiln::ResizeInterpolation::kArea;
  for (Config& c : configs) {
    c.options.flip = true;
    kiln::Result<kiln::TensorSchema> out = kiln::AugmentedSchema(stored, c.options);
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
      return 1;
    }
    c.out = *out;
    for (uint32_t i = 0; i < samples; ++i) {
      c.params.push_back(kiln::DrawAugmentParams(stored, c.options, 1, 0, i));
    }
  }
  const size_t out_bytes = configs[0].out.sample_bytes();
  std::vector<uint8_t> out(out_bytes * pool);
  uint64_t checksum = 0;
  auto run = [&](const Config& c) {
    for (uint32_t i = 0; i < samples; ++i) {
      const size_t slot = i % pool;
      kiln::ApplyAugment(in.data() + slot * in_bytes, stored, c.params[i], c.out,
                         out.data() + slot * out_bytes);
    }
    checksum += out[out.size() / 2];
  };
  for (const Config& c : configs) run(c);  // warm-up: page in, thread_local scratch
  for (uint32_t r = 0; r < rounds; ++r) {
    for (Config& c : configs) {
      const double start = NowSeconds(), cpu_start = CpuSeconds();
      run(c);
      c.rates.push_back(samples / (NowSeconds() - start));
      c.cpu_rates.push_back(samples / (CpuSeconds() - cpu_start));
    }
  }
  std::printf("%u samples of %ux%ux%u uint8 %s -> %ux%u, pool %u, medians of %u rounds\n", samples,
              stored_side, stored_side, channels, chw != 0 ? "CHW" : "HWC", size, size, pool,
              rounds);
  for (const Config& c : configs) {
    const auto [lo, hi] = std::minmax_element(c.rates.begin(), c.rates.end());
    std::printf("%-26s %8.0f samples/s wall (%.0f-%.0f), %8.0f per CPU second (%.2f us)\n", c.name,
                Median(c.rates), *lo, *hi, Median(c.cpu_rates), 1e6 / Median(c.cpu_rates));
  }
  std::printf("RandomResizedCrop / crop = %.3f wall, %.3f CPU   (checksum %llu)\n",
              Median(configs[1].rates) / Median(configs[0].rates),
              Median(configs[1].cpu_rates) / Median(configs[0].cpu_rates),
              static_cast<unsigned long long>(checksum));
  return 0;
}
