// A Pair over one connected, authenticated TCP socket (nonblocking).
#pragma once

#include <memory>
#include <vector>

#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

class TcpPair : public Pair {
 public:
  // Takes ownership of fd (already connected and authenticated by the rendezvous).
  TcpPair(int rank, int peer, int fd);
  ~TcpPair() override;

  const char* transport() const override { return "tcp"; }
  Status TrySend(const char* data, size_t n, size_t* moved) override;
  Status TryRecv(RecvConsumer& consumer, size_t n, size_t* moved) override;
  int poll_fd() const override { return fd_; }
  void Shutdown() override;

 private:
  Status SocketError(const char* what, int err) const;

  int fd_;
  // Received bytes for a consumer without a destination, and a partial element carried
  // over to the next call (TCP does not preserve element boundaries).
  std::vector<char> staging_;
  size_t carry_ = 0;
};

}  // namespace tfx::comm
