#include "formats/interrupt.h"

#include <utility>

namespace kiln {
namespace {

thread_local const ScopedInterruptCheck* t_current = nullptr;

}  // namespace

ScopedInterruptCheck::ScopedInterruptCheck(std::function<bool()> check)
    : check_(std::move(check)), outer_(t_current) {
  t_current = this;
}

ScopedInterruptCheck::~ScopedInterruptCheck() { t_current = outer_; }

bool InterruptRequested() {
  return t_current != nullptr && t_current->check_ && t_current->check_();
}

}  // namespace kiln
