// A parameter server's sessions (elastic jobs): one per generation of workers,
// the tables and the version carried over (parameter_server.h).
#include <cstring>

#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/parameter_server.h"
#include "custom_ops/embedding/server/protocol.h"

namespace tfx::ps {

using tfx::Code;
using tfx::Status;

std::string ParameterServer::BeginSession(int num_workers, bool apply_ended) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string ended_by;
  for (size_t w = 0; w < closed_.size(); ++w)
    if (closed_[w] > version_) ended_by += (ended_by.empty() ? "" : ", ") + std::to_string(w);
  std::string what;
  if (!ended_by.empty() && apply_ended && failed_.ok()) {
    // Ended by a worker: its all-reduce completed, so every worker's pushes of it arrived.
    const Status st = ApplyStep(version_);
    if (!st.ok()) failed_ = st;
    what = "step " + std::to_string(version_) + " applied (ended by worker(s) " + ended_by + " of the last session)";
    ++version_;
  } else if (HasPending()) {
    what = "step " + std::to_string(version_) + " dropped (" +
           (ended_by.empty() ? std::string("ended by no worker: its pushes were partial")
                             : "ended by worker(s) " + ended_by + " only: they run it again") + ")";
  }
  DiscardPending();
  closed_.assign(static_cast<size_t>(num_workers), version_);
  stopping_ = false;
  stop_reason_.clear();
  return what;
}

Status ParameterServer::Session(int worker, const char* payload, size_t len, const ReplyBuffer& reply) {
  Reader r(payload, len);
  int64_t generation;
  if (!r.Get(&generation) || !r.done())
    return Status(Code::kInvalidArgument, "malformed SESSION request from worker " + std::to_string(worker));
  int64_t version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    version = version_;
  }
  std::memcpy(reply(sizeof(version)), &version, sizeof(version));
  return Status::Ok();
}

}  // namespace tfx::ps
