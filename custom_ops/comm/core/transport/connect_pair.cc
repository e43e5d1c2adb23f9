#include "custom_ops/comm/core/transport/connect_pair.h"

#include "custom_ops/comm/core/transport/shm_pair.h"
#include "custom_ops/comm/core/transport/tcp_pair.h"

namespace tfx::comm {

Status ConnectPair(int rank, int peer, int fd, bool try_shm, const Deadline& deadline,
                   std::unique_ptr<Pair>* out, const WireKeys* keys) {
  if (try_shm) {
    std::unique_ptr<ShmPair> shm;
    TFX_RETURN_IF_ERROR(ShmPair::Connect(rank, peer, fd, deadline, &shm));
    if (shm) {
      *out = std::move(shm);
      return Status::Ok();
    }  // either side cannot map shared memory: TCP over the same connection
  }
  return TcpPair::Create(rank, peer, fd, keys, out);
}

}  // namespace tfx::comm
