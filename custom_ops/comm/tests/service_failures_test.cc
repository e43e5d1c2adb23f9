// The service when a peer fails: a client or server that vanishes, one that
// is stuck, garbage on a connection, a server stopped under its clients.
#include "custom_ops/comm/tests/service_job.h"

namespace {

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

// Garbage from one (raw) client drops that client, and (abort_on_client_loss)
// stops the other at once, saying why.
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
  Status other;
  for (int i = 0; i < 300 && other.ok(); ++i) {  // served until the server's ABORT arrives
    Request r{0, kEcho, "ok", 2};
    Response resp;
    other = job.clients[0]->Call(&r, 1, &resp);
    if (other.ok()) std::free(resp.data);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK_CONTAINS(other.message(), "client 1 (worker 1) sent");
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
  CHECK_CONTAINS(st.message(), "stopped serving: the server was stopped");
  CHECK(st.message().find("tfx_dist service:") == st.message().rfind("tfx_dist service:"));  // the prefix once
}

}  // namespace

TEST(ServiceFailures, ClientVanishesTcp) { TestClientVanishes(false); }

TEST(ServiceFailures, ClientVanishesShm) { TestClientVanishes(true); }

TEST(ServiceFailures, ServerVanishesTcp) { TestServerVanishes(false); }

TEST(ServiceFailures, ServerVanishesShm) { TestServerVanishes(true); }

TEST(ServiceFailures, StuckClient) { TestStuckClient(); }

TEST(ServiceFailures, StuckServer) { TestStuckServer(); }

TEST(ServiceFailures, GarbageMagic) { TestGarbage("magic"); }

TEST(ServiceFailures, GarbageVersion) { TestGarbage("version"); }

TEST(ServiceFailures, GarbageOversized) { TestGarbage("oversized"); }

TEST(ServiceFailures, GarbageTruncated) { TestGarbage("truncated"); }

TEST(ServiceFailures, GarbageReserved) { TestGarbage("reserved"); }

TEST(ServiceFailures, Stop) { TestStop(); }
