#include "formats/fault_guard.h"

#include <pthread.h>
#include <signal.h>
#include <ucontext.h>

#include <mutex>

namespace kiln {

namespace {

thread_local MappedReadFaultScope* tl_scope = nullptr;
struct sigaction g_previous;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  if (tl_scope != nullptr) {
    // Give the thread back the signal mask it had when it faulted: the jump below does not
    // restore one (sigsetjmp(env, 0) saves none, for speed), and this handler may run with more
    // blocked than our sa_mask/SA_NODEFER ask for. ThreadSanitizer, for one, runs every handler
    // with all signals blocked; jumping out of that left SIGBUS blocked, so the thread's next
    // fault killed the process with "Bus error". Costs a syscall on the fault path only.
    if (context != nullptr) {
      pthread_sigmask(SIG_SETMASK, &static_cast<ucontext_t*>(context)->uc_sigmask, nullptr);
    }
    HandleMappedReadFault(info->si_addr);  // does not return
  }
  // Not a guarded read: give the signal to whoever had it before. With the default action the
  // faulting instruction runs again and the process dies as it would have without kiln.
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(signal, info, context);
  } else if (g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != SIG_DFL) {
    g_previous.sa_handler(signal);
  } else {
    sigaction(SIGBUS, &g_previous, nullptr);
  }
}

void InstallHandlerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    sigemptyset(&action.sa_mask);
    // SA_NODEFER: SIGBUS stays unblocked after the jump out of the handler, so a later fault on
    // the same thread is caught too (sigsetjmp does not save the signal mask, for speed).
    // OnSigbus also restores the faulting thread's mask itself, for when a wrapper (TSan) does not.
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

void HandleMappedReadFault(const void* address) {
  MappedReadFaultScope* scope = tl_scope;
  scope->fault_address_ = address;
  scope->fault_message_[0] = '\0';
  siglongjmp(scope->env, 1);
}

void JumpToFaultScope(const char* message) {
  MappedReadFaultScope* scope = tl_scope;
  if (scope == nullptr) return;
  size_t n = 0;
  for (; message != nullptr && message[n] != '\0' && n + 1 < sizeof(scope->fault_message_); ++n) {
    scope->fault_message_[n] = message[n];
  }
  scope->fault_message_[n] = '\0';
  scope->fault_address_ = nullptr;
  siglongjmp(scope->env, 1);
}

MappedReadFaultScope::MappedReadFaultScope() : outer_(tl_scope) {
  InstallHandlerOnce();
  tl_scope = this;
}

MappedReadFaultScope::~MappedReadFaultScope() { tl_scope = outer_; }

}  // namespace kiln
