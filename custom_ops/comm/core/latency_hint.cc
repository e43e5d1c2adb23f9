#include "custom_ops/comm/core/latency_hint.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace tfx::comm {
namespace {

// The kernel's struct sched_attr (linux/sched/types.h), declared here because
// glibc before 2.41 has neither it nor the calls.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;  // for the normal policies: the requested slice, ns
  uint64_t sched_deadline;
  uint64_t sched_period;
};

}  // namespace

bool RequestShortTimeSlice(int slice_us) {
#if defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
  SchedAttr attr{};
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0) return false;
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) return false;
  attr.size = sizeof(attr);
  attr.sched_flags = 0;
  attr.sched_runtime = static_cast<uint64_t>(slice_us) * 1000;
  return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
#else
  (void)slice_us;
  return false;
#endif
}

}  // namespace tfx::comm
