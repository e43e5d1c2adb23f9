// In-process tests of the service's Server and Client over socketpair(),
// with threads standing in for the processes. Built and run by
// tests/comm/test_service_native.py; prints "ok <test> (<ms> ms)" per test
// and exits non-zero on the first failure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/comm/core/service/client.h"
#include "custom_ops/comm/core/service/server.h"

using namespace tfx;
using namespace tfx::comm;
using namespace tfx::comm::service;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)
#define CHECK_OK(expr)                                                                               \
  do {                                                                                               \
    Status _s = (expr);                                                                              \
    if (!_s.ok()) {                                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, _s.message().c_str());     \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)
#define CHECK_CONTAINS(text, part)                                                                  \
  do {                                                                                              \
    const std::string _t = (text);                                                                  \
    if (_t.find(part) == std::string::npos) {                                                       \
      std::fprintf(stderr, "%s:%d: expected '%s' in: %s\n", __FILE__, __LINE__, part, _t.c_str());   \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

// kEcho: reply[i] = payload[i] ^ 0x5a. kSized: reply of the u64 size in the
// payload, byte i = i * 7. kFail: the handler fails with a message.
constexpr uint16_t kEcho = 1, kSized = 2, kFail = 3, kWaitForOther = 4, kArrive = 5, kStreamed = 6;

Status Echo(const char* payload, size_t len, Reply* reply) {
  char* out = reply->Allocate(len);
  for (size_t i = 0; i < len; ++i) out[i] = payload[i] ^ 0x5a;
  return Status::Ok();
}

Status BasicHandler(int client, uint16_t kind, const char* payload, size_t len, Reply* reply) {
  if (kind == kEcho) return Echo(payload, len, reply);
  if (kind == kSized) {
    uint64_t n;
    std::memcpy(&n, payload, 8);
    char* out = reply->Allocate(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 7);
    return Status::Ok();
  }
  if (kind == kStreamed) {  // kSized's bytes, streamed in records of the u64 after the size
    uint64_t n, record;
    std::memcpy(&n, payload, 8);
    std::memcpy(&record, payload + 8, 8);
    Status st = reply->Stream(n, record, [](size_t offset, char* dst, size_t len) {
      for (size_t i = 0; i < len; ++i) dst[i] = static_cast<char>((offset + i) * 7);
    });
    CHECK_OK(st);
    return Status(Code::kInternal, "ignored: the reply was streamed");
  }
  if (kind == kFail)
    return Status(Code::kInvalidArgument, "table 'x' has no row " + std::string(payload, len) +
                                              " (asked by client " + std::to_string(client) + ")");
  return Status(Code::kInvalidArgument, "unknown kind " + std::to_string(kind));
}

struct Job {
  std::unique_ptr<Server> server;
  std::vector<std::unique_ptr<Client>> clients;  // client c's link to this one server
};

// One server and n clients over socketpairs; shm when use_shm (then the
// handshakes run concurrently, as they would in separate processes).
Job MakeJob(int n, bool use_shm, double timeout_s = 10, std::vector<int>* raw = nullptr) {
  Job job;
  std::vector<int> server_fds, client_fds;
  for (int i = 0; i < n; ++i) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    server_fds.push_back(sv[0]);
    client_fds.push_back(sv[1]);
  }
  ServerOptions so;
  so.timeout_s = timeout_s;
  so.use_shm = use_shm;
  so.max_frame_bytes = 64 << 20;
  for (int i = 0; i < n; ++i) so.client_labels.push_back("worker " + std::to_string(i));
  std::vector<bool> same(n, true);
  std::thread t([&] { CHECK_OK(Server::Create(server_fds, same, so, &job.server)); });
  job.clients.resize(n);
  std::vector<std::thread> ct;
  for (int i = 0; i < n; ++i) {
    if (raw != nullptr && i == n - 1) {  // the last one stays a raw socket
      raw->push_back(client_fds[i]);
      continue;
    }
    ct.emplace_back([&, i] {
      ClientOptions co;
      co.timeout_s = timeout_s;
      co.use_shm = use_shm;
      co.max_frame_bytes = 64 << 20;
      co.server_labels = {"ps 0"};
      CHECK_OK(Client::Create({client_fds[i]}, {true}, co, &job.clients[i]));
    });
  }
  for (auto& c : ct) c.join();
  t.join();
  return job;
}

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) & 0xff);
  return s;
}

void* VectorAlloc(void* arg, size_t len) {
  auto* v = static_cast<std::vector<char>*>(arg);
  v->resize(len);
  return v->data();
}

void TestRoundTrips(bool shm) {
  Job job = MakeJob(1, shm);
  CHECK(std::string(job.server->transport(0)) == (shm ? "shm" : "tcp"));
  std::thread serve([&] { CHECK_OK(job.server->Serve(BasicHandler)); });
  for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, size_t{(5 << 20) + 3}}) {
    const std::string payload = Bytes(n, static_cast<int>(n));
    std::vector<char> out;
    Request r{0, kEcho, payload.data(), payload.size(), &VectorAlloc, &out};
    Response resp;
    CHECK_OK(job.clients[0]->Call(&r, 1, &resp));
    CHECK(resp.bytes == n && out.size() == n);
    for (size_t i = 0; i < n; ++i) CHECK(out[i] == (payload[i] ^ 0x5a));
  }
  // Several requests in one call, large both ways: sending and receiving must
  // overlap or the two ends block on full buffers.
  const uint64_t big = 9 << 20;
  std::vector<Request> reqs;
  std::vector<std::vector<char>> outs(4);
  for (int k = 0; k < 4; ++k) reqs.push_back(Request{0, kSized, reinterpret_cast<const char*>(&big), 8, &VectorAlloc, &outs[k]});
  std::vector<Response> resps(4);
  CHECK_OK(job.clients[0]->Call(reqs.data(), reqs.size(), resps.data()));
  for (auto& o : outs) {
    CHECK(o.size() == big);
    CHECK(o[12345] == static_cast<char>(12345 * 7));
  }
  // Null allocator: malloc.
  Request m{0, kEcho, "abc", 3};
  Response mr;
  CHECK_OK(job.clients[0]->Call(&m, 1, &mr));
  CHECK(mr.bytes == 3 && static_cast<char*>(mr.data)[2] == ('c' ^ 0x5a));
  std::free(mr.data);
  CHECK_OK(job.clients[0]->Close());
  serve.join();
}

// A reply of fixed-size records received straight into their places
// (Request's scatter): records split across transport slots / socket reads
// land whole; a reply of the wrong length fails that request only, and the
// connection stays usable.
void TestScatterReply(bool shm) {
  Job job = MakeJob(1, shm);
  std::thread serve([&] { CHECK_OK(job.server->Serve(BasicHandler)); });
  const size_t record = 260;  // not a divisor of the shm slot: records straddle slots
  const size_t count = 3001;
  std::vector<int64_t> index(count);
  for (size_t k = 0; k < count; ++k) index[k] = static_cast<int64_t>((k * 7919) % count);  // a permutation
  const uint64_t bytes = count * record;
  std::vector<char> out(bytes, 0);
  Request r{0, kSized, reinterpret_cast<const char*>(&bytes), 8};
  r.scatter_base = out.data();
  r.scatter_index = index.data();
  r.scatter_count = count;
  r.scatter_record_bytes = record;
  Response resp;
  CHECK_OK(job.clients[0]->Call(&r, 1, &resp));
  CHECK(resp.bytes == bytes && resp.data == out.data());
  for (size_t k = 0; k < count; ++k)
    for (size_t b = 0; b < record; b += 37)
      CHECK(out[index[k] * record + b] == static_cast<char>((k * record + b) * 7));
  // One record short: that request fails, naming the sizes; the next call works.
  const uint64_t fewer = bytes - record;
  Request bad = r;
  bad.payload = reinterpret_cast<const char*>(&fewer);
  Response br;
  Status st = job.clients[0]->Call(&bad, 1, &br);
  CHECK(st.code() == Code::kInternal);
  CHECK_CONTAINS(st.message(), "where 3001 records of 260 bytes were expected");
  Request echo{0, kEcho, "ok", 2};
  Response er;
  CHECK_OK(job.clients[0]->Call(&echo, 1, &er));
  CHECK(er.bytes == 2);
  std::free(er.data);
  CHECK_OK(job.clients[0]->Close());
  serve.join();
}

// A reply streamed in records (Reply::Stream): over shm straight into the
// slots, several ring-fulls (the client frees slots while the server fills),
// records that do not divide a slot, an empty one; the same bytes as a
// buffered reply, and the handler's status after streaming is ignored.
void TestStreamedReply(bool shm) {
  Job job = MakeJob(1, shm);
  std::thread serve([&] { CHECK_OK(job.server->Serve(BasicHandler)); });
  for (uint64_t record : {uint64_t{256}, uint64_t{260}}) {
    for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{3001}, uint64_t{4 << 13}}) {
      const uint64_t ask[2] = {count * record, record};
      std::vector<char> out;
      Request r{0, kStreamed, reinterpret_cast<const char*>(ask), 16, &VectorAlloc, &out};
      Response resp;
      CHECK_OK(job.clients[0]->Call(&r, 1, &resp));
      CHECK(resp.bytes == count * record && out.size() == count * record);
      for (size_t i = 0; i < out.size(); i += 61) CHECK(out[i] == static_cast<char>(i * 7));
      if (!out.empty()) CHECK(out.back() == static_cast<char>((out.size() - 1) * 7));
    }
  }
  // A record that does not divide the reply is refused to the handler (it
  // then answers with an error, as usual).
  {
    Reply reply;
    CHECK(reply.Stream(10, 3, [](size_t, char*, size_t) {}).code() == Code::kInvalidArgument);
  }
  CHECK_OK(job.clients[0]->Close());
  serve.join();
}

void TestHandlerError() {
  Job job = MakeJob(1, false);
  std::thread serve([&] { CHECK_OK(job.server->Serve(BasicHandler)); });
  Request reqs[2] = {{0, kFail, "42", 2}, {0, kEcho, "z", 1}};
  Response resps[2];
  Status st = job.clients[0]->Call(reqs, 2, resps);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK_CONTAINS(st.message(), "server 0 (ps 0): table 'x' has no row 42 (asked by client 0)");
  CHECK(resps[1].status.ok() && resps[1].bytes == 1);  // the other request is unaffected
  std::free(resps[1].data);
  Request bad{0, kGoodbye, nullptr, 0};
  Response br;
  CHECK(job.clients[0]->Call(&bad, 1, &br).code() == Code::kInvalidArgument);
  CHECK_OK(job.clients[0]->Close());
  serve.join();
}

// Client 0's request waits in the handler until client 1's arrives: a server
// that served one request at a time would time out.
void TestParallelClients(bool shm) {
  Job job = MakeJob(3, shm, 5);
  std::mutex mu;
  std::condition_variable cv;
  bool arrived = false;
  auto handler = [&](int client, uint16_t kind, const char* p, size_t len, Reply* reply) -> Status {
    if (kind == kWaitForOther) {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, std::chrono::seconds(4), [&] { return arrived; }))
        return Status(Code::kDeadlineExceeded, "the other client's request never arrived");
      return Echo(p, len, reply);
    }
    if (kind == kArrive) {
      std::lock_guard<std::mutex> lock(mu);
      arrived = true;
      cv.notify_all();
      return Echo(p, len, reply);
    }
    return BasicHandler(client, kind, p, len, reply);
  };
  std::thread serve([&] { CHECK_OK(job.server->Serve(handler)); });
  std::thread a([&] {
    Request r{0, kWaitForOther, "a", 1};
    Response resp;
    CHECK_OK(job.clients[0]->Call(&r, 1, &resp));
    std::free(resp.data);
    CHECK_OK(job.clients[0]->Close());
  });
  std::thread c([&] {  // a third client is served meanwhile, too
    for (int i = 0; i < 50; ++i) {
      Request r{0, kEcho, "c", 1};
      Response resp;
      CHECK_OK(job.clients[2]->Call(&r, 1, &resp));
      std::free(resp.data);
    }
    CHECK_OK(job.clients[2]->Close());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Request r{0, kArrive, "b", 1};
  Response resp;
  CHECK_OK(job.clients[1]->Call(&r, 1, &resp));
  std::free(resp.data);
  CHECK_OK(job.clients[1]->Close());
  a.join();
  c.join();
  serve.join();
}

// Several threads share one client, each call to both servers.
void TestClientThreadSafety() {
  int sv[2][2];
  for (auto& s : sv) CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0);
  std::unique_ptr<Server> servers[2];
  ServerOptions so;
  so.timeout_s = 10;
  for (int k = 0; k < 2; ++k) CHECK_OK(Server::Create({sv[k][0]}, {false}, so, &servers[k]));
  std::unique_ptr<Client> client;
  ClientOptions co;
  co.timeout_s = 10;
  CHECK_OK(Client::Create({sv[0][1], sv[1][1]}, {false, false}, co, &client));
  std::thread serves[2];
  for (int k = 0; k < 2; ++k) serves[k] = std::thread([&, k] { CHECK_OK(servers[k]->Serve(BasicHandler)); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string p0 = Bytes(100 + t * 7 + i, t), p1 = Bytes(3000 + i, t + 1);
        std::vector<char> o0, o1;
        // Server 1 listed first: the call still locks server 0 first.
        Request reqs[2] = {{1, kEcho, p1.data(), p1.size(), &VectorAlloc, &o1}, {0, kEcho, p0.data(), p0.size(), &VectorAlloc, &o0}};
        Response resps[2];
        CHECK_OK(client->Call(reqs, 2, resps));
        CHECK(o0.size() == p0.size() && o1.size() == p1.size());
        CHECK(o0.back() == (p0.back() ^ 0x5a) && o1.back() == (p1.back() ^ 0x5a));
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK_OK(client->Close());
  for (auto& s : serves) s.join();
}

// A client that goes away without GOODBYE ends the serve, naming it; the
// others are told (ABORT) and their calls fail with the reason.
void TestClientVanishes(bool shm) {
  Job job = MakeJob(2, shm, 10);
  Status result;
  std::vector<std::pair<int, std::string>> lost;
  std::thread serve([&] {
    result = job.server->Serve(BasicHandler, [&](int c, const Status& why) { lost.emplace_back(c, why.message()); });
  });
  Request r{0, kEcho, "x", 1};
  Response resp;
  CHECK_OK(job.clients[1]->Call(&r, 1, &resp));
  std::free(resp.data);
  const auto start = std::chrono::steady_clock::now();
  job.clients[1].reset();  // no Close(): like a killed process
  serve.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took < 1.0);
  CHECK(result.code() == Code::kUnavailable);
  CHECK_CONTAINS(result.message(), "client 1 (worker 1) closed its connection without GOODBYE");
  CHECK(lost.size() == 1 && lost[0].first == 1);
  Status st = job.clients[0]->Call(&r, 1, &resp);
  CHECK(!st.ok());
  CHECK_CONTAINS(st.message(), "server 0 (ps 0)");
  CHECK_CONTAINS(st.message(), "client 1 (worker 1) closed its connection without GOODBYE");
}

void TestServerVanishes(bool shm) {
  Job job = MakeJob(1, shm, 10);
  job.server.reset();  // never serves: the client's call sees EOF
  Request r{0, kEcho, "x", 1};
  Response resp;
  Status st = job.clients[0]->Call(&r, 1, &resp);
  CHECK(st.code() == Code::kUnavailable);
  CHECK_CONTAINS(st.message(), "server 0 (ps 0) closed the connection");
  st = job.clients[0]->Call(&r, 1, &resp);  // and later calls fail at once
  CHECK_CONTAINS(st.message(), "broken by an earlier error");
}

void TestStuckClient() {
  Job job = MakeJob(2, false, 0.5);
  const auto start = std::chrono::steady_clock::now();
  Status result = job.server->Serve(BasicHandler);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(result.code() == Code::kDeadlineExceeded);
  CHECK_CONTAINS(result.message(), "no request from client");
  CHECK_CONTAINS(result.message(), "for 0.5 s");
  CHECK(took > 0.45 && took < 2.0);
}

void TestStuckServer() {
  Job job = MakeJob(1, false, 0.5);  // nobody serves
  Request r{0, kEcho, "x", 1};
  Response resp;
  Status st = job.clients[0]->Call(&r, 1, &resp);
  CHECK(st.code() == Code::kDeadlineExceeded);
  CHECK_CONTAINS(st.message(), "server 0 (ps 0): no reply within");
}

// Garbage from one (raw) client drops that client only.
void TestGarbage(const std::string& what) {
  std::vector<int> raw;
  Job job = MakeJob(2, false, 5, &raw);
  Status result;
  std::thread serve([&] { result = job.server->Serve(BasicHandler); });
  FrameHeader h;
  h.kind = kEcho;
  h.payload_bytes = 10;
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof(h));
  if (what == "magic") bytes[0] = 'X';
  if (what == "version") bytes[4] = 9;
  if (what == "oversized") { h.payload_bytes = uint64_t{1} << 40; bytes.assign(reinterpret_cast<const char*>(&h), sizeof(h)); }
  if (what == "truncated") bytes += "12345";  // 5 of 10 payload bytes, then EOF
  if (what == "reserved") { h.kind = kAbort; h.payload_bytes = 0; bytes.assign(reinterpret_cast<const char*>(&h), sizeof(h)); }
  CHECK(write(raw[0], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  if (what == "truncated") shutdown(raw[0], SHUT_WR);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int i = 0; i < 3; ++i) {  // the other client is still served
    Request r{0, kEcho, "ok", 2};
    Response resp;
    CHECK_OK(job.clients[0]->Call(&r, 1, &resp));
    std::free(resp.data);
  }
  CHECK_OK(job.clients[0]->Close());
  serve.join();
  close(raw[0]);
  CHECK(result.code() == Code::kDataLoss);
  CHECK_CONTAINS(result.message(), "client 1 (worker 1) sent");
  CHECK_CONTAINS(result.message(), what == "magic" ? "not a tfx_dist service frame"
                                   : what == "version" ? "wire version 9"
                                   : what == "oversized" ? "over the limit"
                                   : what == "truncated" ? "truncated frame (5 of 10 payload bytes)"
                                                         : "reserved kind");
}

void TestStop() {
  Job job = MakeJob(1, false, 10);
  Status result;
  std::thread serve([&] { result = job.server->Serve(BasicHandler); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  job.server->Stop();
  serve.join();
  CHECK(result.code() == Code::kAborted);
  Request r{0, kEcho, "x", 1};
  Response resp;
  Status st = job.clients[0]->Call(&r, 1, &resp);
  CHECK(st.code() == Code::kAborted);
  CHECK_CONTAINS(st.message(), "stopped serving: tfx_dist service: the server was stopped");
}


// "service_test bench": round-trip latency of a 4 KiB request with a 4 KiB
// reply over a real loopback TCP connection (and shm over it), native
// handler, 2000 calls after 200 warm-up; both ends in this process.
void Bench(bool shm) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  CHECK(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(listener, 1) == 0);
  CHECK(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  int client_fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(connect(client_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  int server_fd = accept(listener, nullptr, nullptr);
  close(listener);
  std::unique_ptr<Server> server;
  std::unique_ptr<Client> client;
  ServerOptions so;
  so.use_shm = shm;
  ClientOptions co;
  co.use_shm = shm;
  std::thread t([&] { CHECK_OK(Server::Create({server_fd}, {true}, so, &server)); });
  CHECK_OK(Client::Create({client_fd}, {true}, co, &client));
  t.join();
  std::thread serve([&] { CHECK_OK(server->Serve(BasicHandler)); });
  const std::string payload = Bytes(4096, 1);
  std::vector<char> out;
  std::vector<double> us;
  for (int i = 0; i < 2200; ++i) {
    Request r{0, kEcho, payload.data(), payload.size(), &VectorAlloc, &out};
    Response resp;
    const auto start = std::chrono::steady_clock::now();
    CHECK_OK(client->Call(&r, 1, &resp));
    if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  CHECK_OK(client->Close());
  serve.join();
  std::sort(us.begin(), us.end());
  std::printf("bench %s 4KiB/4KiB: p50 %.1f us, p99 %.1f us (%zu calls)\n", client->transport(0),
              us[us.size() / 2], us[us.size() * 99 / 100], us.size());
}

void Run(const char* name, const std::function<void()>& test) {
  const auto start = std::chrono::steady_clock::now();
  test();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("ok %s (%.0f ms)\n", name, ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc > 1 && std::string(argv[1]) == "bench") {
    Bench(false);
    Bench(true);
    return 0;
  }
  Run("round_trips_tcp", [] { TestRoundTrips(false); });
  Run("round_trips_shm", [] { TestRoundTrips(true); });
  Run("scatter_reply_tcp", [] { TestScatterReply(false); });
  Run("scatter_reply_shm", [] { TestScatterReply(true); });
  Run("streamed_reply_tcp", [] { TestStreamedReply(false); });
  Run("streamed_reply_shm", [] { TestStreamedReply(true); });
  Run("handler_error", TestHandlerError);
  Run("parallel_clients_tcp", [] { TestParallelClients(false); });
  Run("parallel_clients_shm", [] { TestParallelClients(true); });
  Run("client_thread_safety", TestClientThreadSafety);
  Run("client_vanishes_tcp", [] { TestClientVanishes(false); });
  Run("client_vanishes_shm", [] { TestClientVanishes(true); });
  Run("server_vanishes_tcp", [] { TestServerVanishes(false); });
  Run("server_vanishes_shm", [] { TestServerVanishes(true); });
  Run("stuck_client", TestStuckClient);
  Run("stuck_server", TestStuckServer);
  for (const char* what : {"magic", "version", "oversized", "truncated", "reserved"})
    Run((std::string("garbage_") + what).c_str(), [what] { TestGarbage(what); });
  Run("stop", TestStop);
  std::printf("all passed\n");
  return 0;
}
