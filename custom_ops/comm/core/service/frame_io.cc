#include "custom_ops/comm/core/service/frame_io.h"

#include <unistd.h>

#include "custom_ops/comm/core/transport/connect_pair.h"
#include "custom_ops/comm/core/transport/wait.h"

namespace tfx::comm::service {

Status ConnectPairs(const std::vector<int>& fds, const std::vector<bool>& same_host, bool use_shm,
                    const std::vector<std::string>& who, const Deadline& deadline,
                    std::vector<std::unique_ptr<Pair>>* pairs, const std::vector<WireKeys>& keys) {
  pairs->clear();
  pairs->resize(fds.size());
  Status status;
  // Each shm handshake sends its few bytes before it receives, so the order
  // in which the two ends take their peers cannot deadlock.
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!status.ok()) {
      if (fds[i] >= 0) close(fds[i]);
      continue;
    }
    if (fds[i] < 0) {
      status = Status(Code::kInvalidArgument, "no connection to " + who[i]);
    } else if (!keys.empty() && keys.size() != fds.size()) {
      close(fds[i]);
      status = Status(Code::kInvalidArgument, "wire keys for " + std::to_string(keys.size()) + " of " +
                                                  std::to_string(fds.size()) + " connections");
    } else {
      status = ConnectPair(/*rank=*/-1, static_cast<int>(i), fds[i], use_shm && same_host[i], deadline,
                           &(*pairs)[i], keys.empty() ? nullptr : &keys[i])
                   .WithPrefix(who[i] + ": ");
    }
  }
  if (!status.ok()) pairs->clear();
  return status;
}

Status SendBytes(Pair* pair, const char* data, size_t n, const Deadline& deadline) {
  IoWaiter waiter(deadline);
  size_t done = 0;
  while (done < n) {
    size_t moved = 0;
    TFX_RETURN_IF_ERROR(pair->TrySend(data + done, n - done, &moved));
    done += moved;
    if (moved > 0) {
      waiter.Progressed();
    } else if (done < n) {
      TFX_RETURN_IF_ERROR(waiter.Wait(nullptr, pair));
    }
  }
  return Status::Ok();
}

Status RecvBytes(Pair* pair, char* dst, size_t n, const Deadline& deadline, size_t* got) {
  IoWaiter waiter(deadline);
  *got = 0;
  while (*got < n) {
    size_t moved = 0;
    CopyInto into(dst + *got);
    Status st = pair->TryRecv(into, n - *got, &moved);
    *got += moved;  // also what came before an EOF
    TFX_RETURN_IF_ERROR(st);
    if (moved > 0) {
      waiter.Progressed();
    } else if (*got < n) {
      TFX_RETURN_IF_ERROR(waiter.Wait(pair, nullptr));
    }
  }
  return Status::Ok();
}

std::string CheckHeader(const FrameHeader& h, uint64_t max_frame_bytes) {
  if (h.magic != kFrameMagic) {
    char buf[16];
    snprintf(buf, sizeof(buf), "0x%08x", h.magic);
    return std::string("bytes that are not a tfx_dist service frame (magic ") + buf + ")";
  }
  if (h.version != kWireVersion)
    return "a frame of wire version " + std::to_string(h.version) + ", expected " +
           std::to_string(kWireVersion) + " (mixed tfx_dist versions?)";
  if (h.payload_bytes > max_frame_bytes)
    return "a frame of " + std::to_string(h.payload_bytes) + " payload bytes, over the limit of " +
           std::to_string(max_frame_bytes) + " (max_frame_bytes)";
  return "";
}

Status SendFrame(Pair* pair, const FrameHeader& h, const char* payload, const Deadline& deadline) {
  TFX_RETURN_IF_ERROR(SendBytes(pair, reinterpret_cast<const char*>(&h), sizeof(h), deadline));
  return SendBytes(pair, payload, h.payload_bytes, deadline);
}

std::string Describe(const char* role, int index, const std::vector<std::string>& labels) {
  std::string s = std::string(role) + " " + std::to_string(index);
  if (index >= 0 && static_cast<size_t>(index) < labels.size() && !labels[index].empty())
    s += " (" + labels[index] + ")";
  return s;
}

}  // namespace tfx::comm::service
