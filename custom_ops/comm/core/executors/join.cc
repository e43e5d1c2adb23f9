// Horovod's join once every rank joined: the coordinator put the last rank
// to join in the response; each rank's join entry gets it. Nothing travels
// on the data connections (the negotiation did the work, negotiation/coordinator.cc).
#include <cstring>

#include "custom_ops/comm/core/executors/executor.h"

namespace tfx::comm {
namespace {

class JoinExecutor : public Executor {
 public:
  Status Execute(const Response& resp, std::vector<Entry*>& entries, ExecContext&) override {
    if (resp.dim0s.size() != 1)
      return Status(Code::kDataLoss, "tfx_dist: the coordinator's answer to join carries no last rank");
    const int32_t last = static_cast<int32_t>(resp.dim0s[0]);
    for (Entry* e : entries) std::memcpy(e->output, &last, sizeof(last));
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Executor> MakeJoinExecutor() { return std::make_unique<JoinExecutor>(); }

}  // namespace tfx::comm
