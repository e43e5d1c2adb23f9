// The service's calls over TCP-style sockets and shared memory: round trips,
// scattered and streamed replies, a handler's error, parallel clients, one
// client from many threads. The benchmark is a disabled case:
// service_calls... --gtest_filter='ServiceBench.*' --gtest_also_run_disabled_tests
#include "custom_ops/comm/tests/service_job.h"

namespace {

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

}  // namespace

TEST(ServiceCalls, RoundTripsTcp) { TestRoundTrips(false); }

TEST(ServiceCalls, RoundTripsShm) { TestRoundTrips(true); }

TEST(ServiceCalls, ScatterReplyTcp) { TestScatterReply(false); }

TEST(ServiceCalls, ScatterReplyShm) { TestScatterReply(true); }

TEST(ServiceCalls, StreamedReplyTcp) { TestStreamedReply(false); }

TEST(ServiceCalls, StreamedReplyShm) { TestStreamedReply(true); }

TEST(ServiceCalls, HandlerError) { TestHandlerError(); }

TEST(ServiceCalls, ParallelClientsTcp) { TestParallelClients(false); }

TEST(ServiceCalls, ParallelClientsShm) { TestParallelClients(true); }

TEST(ServiceCalls, ClientThreadSafety) { TestClientThreadSafety(); }

TEST(ServiceBench, DISABLED_BenchTcp) { Bench(false); }

TEST(ServiceBench, DISABLED_BenchShm) { Bench(true); }
