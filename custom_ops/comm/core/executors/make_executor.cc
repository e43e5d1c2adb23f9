// Which executor runs each op: the one place that names them all.
#include "custom_ops/comm/core/executors/executor.h"

namespace tfx::comm {

// Each in its own file under executors/.
std::unique_ptr<Executor> MakeAllreduceExecutor();
std::unique_ptr<Executor> MakeAllgatherExecutor();
std::unique_ptr<Executor> MakeBroadcastExecutor();
std::unique_ptr<Executor> MakeAlltoallExecutor();
std::unique_ptr<Executor> MakeReducescatterExecutor();
std::unique_ptr<Executor> MakeJoinExecutor();

std::unique_ptr<Executor> MakeExecutor(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return MakeAllreduceExecutor();
    case OpType::kAllgather: return MakeAllgatherExecutor();
    case OpType::kBroadcast: return MakeBroadcastExecutor();
    case OpType::kAlltoall: return MakeAlltoallExecutor();
    case OpType::kReducescatter: return MakeReducescatterExecutor();
    case OpType::kJoin: return MakeJoinExecutor();
  }
  return nullptr;
}

}  // namespace tfx::comm
