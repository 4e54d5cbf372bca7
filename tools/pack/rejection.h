// kiln::Rejection: one input a pack did not pack, with the reason (PackReport::rejections,
// the dataset's rejected.tsv, the resume journal, a plan's listing problems).
// Thread safety: plain data.
#ifndef KILN_TOOLS_PACK_REJECTION_H_
#define KILN_TOOLS_PACK_REJECTION_H_

#include <cstdint>
#include <string>

namespace kiln {

struct Rejection {
  std::string path;   // the input file (or list file)
  uint64_t line = 0;  // list-file line, 0 if none
  std::string reason;
};

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_REJECTION_H_
