// kiln::ScopedInterruptCheck: a way for the thread that makes a blocking call to be asked, while
// the call waits, whether its caller wants it to stop (Python: Ctrl-C while kiln.verify(URL),
// kiln.Loader(URL) or kiln.Dataset(URL)[i] waits on a server that does not answer).
//
//   {
//     ScopedInterruptCheck check([] { return CtrlCPressed(); });
//     Result<std::unique_ptr<Dataset>> ds = Dataset::Open("s3://bucket/ds");  // may be Cancelled
//   }
//
// Long waits inside kiln (the remote client's, reader/remote/remote_client.h) call
// InterruptRequested() at least every 250 ms and end with Status::Cancelled when it is true.
// Thread safety: the check belongs to the thread that installed it (thread-local); checks nest
// (the innermost one is asked). Lifetime: the check must outlive the scope.
#ifndef KILN_FORMATS_INTERRUPT_H_
#define KILN_FORMATS_INTERRUPT_H_

#include <functional>

namespace kiln {

class ScopedInterruptCheck {
 public:
  explicit ScopedInterruptCheck(std::function<bool()> check);
  ~ScopedInterruptCheck();
  ScopedInterruptCheck(const ScopedInterruptCheck&) = delete;
  ScopedInterruptCheck& operator=(const ScopedInterruptCheck&) = delete;

 private:
  std::function<bool()> check_;
  const ScopedInterruptCheck* outer_;
  friend bool InterruptRequested();
};

// True when the calling thread's innermost ScopedInterruptCheck says so; false without one.
bool InterruptRequested();

}  // namespace kiln

#endif  // KILN_FORMATS_INTERRUPT_H_
