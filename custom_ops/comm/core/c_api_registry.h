// The live communicators of the C API, by the id tfx_comm_create returned
// (owned by c_api.cc, looked up by the other c_api_*.cc files).
#pragma once

#include <cstdint>
#include <memory>

#include "custom_ops/comm/core/communicator.h"

namespace tfx::comm {

// The communicator with this id, or null (never created, or destroyed).
std::shared_ptr<Communicator> FindCommunicator(int64_t id);

}  // namespace tfx::comm
