// The C API's questions to a live communicator (transport, counters, the
// all-reduce algorithm), its timeline switch, and the SIGINT hook.
#include <cstdint>
#include <memory>
#include <string>

#include "custom_ops/comm/core/c_api.h"
#include "custom_ops/comm/core/c_api_registry.h"
#include "custom_ops/comm/core/interrupt.h"
#include "custom_ops/common/c_api_error.h"

using tfx::Code;
using tfx::Status;

extern "C" {

int32_t tfx_comm_transport(int64_t id, int32_t peer, char* out, int32_t out_len) {
  auto comm = tfx::comm::FindCommunicator(id);
  if (!comm) return static_cast<int32_t>(Code::kInvalidArgument);
  tfx::CopyToC(comm->transport(peer), out, out_len);
  return 0;
}

int32_t tfx_comm_stats(int64_t id, int64_t* out, int32_t n) {
  auto comm = tfx::comm::FindCommunicator(id);
  if (!comm) return static_cast<int32_t>(Code::kInvalidArgument);
  const auto& st = comm->stats();
  const int64_t values[] = {st.responses.load(),       st.allreduce_buckets.load(),
                            st.fused_entries.load(),     st.allreduce_bytes.load(),
                            st.waiting_ns.load(),        st.running_ns.load(),
                            st.hierarchical_buckets.load(),
                            static_cast<int64_t>(comm->names_held()),
                            static_cast<int64_t>(comm->broken_code())};
  const int32_t count = static_cast<int32_t>(sizeof(values) / sizeof(values[0]));
  for (int32_t i = 0; i < n && i < count; ++i) out[i] = values[i];
  return 0;
}

int32_t tfx_comm_allreduce_algorithm(int64_t id, char* out, int32_t out_len) {
  auto comm = tfx::comm::FindCommunicator(id);
  if (!comm) return static_cast<int32_t>(Code::kInvalidArgument);
  tfx::CopyToC(comm->allreduce_algorithm(), out, out_len);
  return 0;
}

int32_t tfx_comm_timeline(int64_t id, const char* path, int32_t mark_cycles, char* err, int32_t err_len) {
  auto comm = tfx::comm::FindCommunicator(id);
  if (!comm) {
    return tfx::ReportToC(tfx::InvalidArgument("tfx_dist: no communicator with id " + std::to_string(id) +
                                               " in this process"),
                          err, err_len);
  }
  Status st = comm->SetTimeline(path != nullptr ? path : "", mark_cycles != 0);
  return tfx::ReportToC(st, err, err_len);
}

int32_t tfx_comm_install_interrupt_hook(void) { return tfx::comm::interrupt::InstallHook() ? 1 : 0; }

int32_t tfx_comm_take_interrupt_message(char* out, int32_t out_len) {
  const std::string message = tfx::comm::interrupt::TakeMessage();
  tfx::CopyToC(message, out, out_len);
  return static_cast<int32_t>(message.size());
}

}  // extern "C"
