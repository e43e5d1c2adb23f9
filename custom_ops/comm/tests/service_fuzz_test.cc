// In-process fuzzing of the request/response service's decoders and of the
// parameter server's request decoders, run by `make cpp-test`:
//   - a Server reading random, mutated, truncated frames and frames with
//     huge length fields from one client (frame_io.cc CheckHeader, server.cc);
//   - the same bytes on a protected connection (TFX_WIRE_PROTECTION): every
//     one is refused before the handler, which never runs;
//   - a Client reading mutated replies from a fake server (client_receive.cc);
//   - the parameter server's handler (parameter_server.cc, protocol.cc,
//     codec.h) called with mutated LOOKUP / PUSH / STEP_DONE / SET_OPTIMIZER
//     payloads and unknown kinds, and DecodeCreateTable on mutated tables.
// Every input must give an error status (or a valid answer): no crash, no
// hang (each wait is bounded), no wrong table rows. Inputs per part:
// TFX_FUZZ_ITERATIONS (default 1500; seeds fixed, so a failure reproduces).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/comm/core/service/client.h"
#include "custom_ops/comm/core/service/server.h"
#include "custom_ops/comm/core/transport/sealed_stream.h"
#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/parameter_server.h"
#include "custom_ops/embedding/server/protocol.h"
#include "custom_ops/testing/check.h"

namespace svc = tfx::comm::service;
using tfx::Code;
using tfx::Status;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kMaxFrame = 1 << 20;

std::string Frame(uint16_t kind, uint64_t id, const std::string& payload, int32_t status = 0) {
  svc::FrameHeader h;
  h.kind = kind;
  h.request_id = id;
  h.status = status;
  h.payload_bytes = payload.size();
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + payload;
}

// Random bytes, bit flips, a cut, a huge length field, or a repeated slice.
std::string Mutate(std::mt19937_64& rng, std::string s) {
  switch (rng() % 5) {
    case 0: {
      s.assign(rng() % 300, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      break;
    }
    case 1:
      for (int k = rng() % 8 + 1; k > 0 && !s.empty(); --k) s[rng() % s.size()] ^= static_cast<char>(1 << (rng() % 8));
      break;
    case 2:
      s.resize(rng() % (s.size() + 1));
      break;
    case 3: {  // payload_bytes (offset 24) of the first frame, or 0xff bytes anywhere
      const uint64_t huge[] = {kMaxFrame + 1, uint64_t{1} << 40, ~uint64_t{0}, uint64_t{1} << 63, kMaxFrame - 1};
      if (s.size() >= 32 && rng() % 2 == 0) {
        std::memcpy(&s[24], &huge[rng() % 5], 8);
      } else if (s.size() >= 8) {
        std::memset(&s[rng() % (s.size() - 7)], 0xff, 4 + rng() % 5);
      }
      break;
    }
    default:
      if (!s.empty()) {
        const size_t at = rng() % s.size(), n = rng() % (s.size() - at) + 1;
        s.insert(rng() % s.size(), s.substr(at, n));
      }
  }
  return s;
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t r = send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (r <= 0) return false;  // the server dropped us early: fine
    done += static_cast<size_t>(r);
  }
  return true;
}

// Reads what comes until EOF or `done`; false if neither within timeout_ms (a hang).
bool DrainUntilDone(int fd, const std::atomic<bool>& done, int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (Clock::now() < end) {
    if (done) return true;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) return true;
  }
  return false;
}

tfx::comm::WireKeys Keys(bool client_side) {
  tfx::comm::WireKeys k;
  k.mode = tfx::comm::WireProtection::kIntegrity;
  for (int i = 0; i < 32; ++i) {
    (client_side ? k.send : k.recv)[i] = static_cast<uint8_t>(i);
    (client_side ? k.recv : k.send)[i] = static_cast<uint8_t>(100 + i);
  }
  return k;
}

// One server, one client socket writing `input` then closing; returns Serve's status.
Status ServeInput(const std::string& input, bool protect, int* handled) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return Status(Code::kInternal, "socketpair");
  svc::ServerOptions o;
  o.timeout_s = 5;
  o.max_frame_bytes = kMaxFrame;
  o.use_shm = false;
  if (protect) o.wire_keys = {Keys(false)};
  std::unique_ptr<svc::Server> server;
  Status st = svc::Server::Create({sv[0]}, {false}, o, &server);
  if (!st.ok()) { close(sv[1]); return st; }
  std::atomic<int> calls{0};
  std::atomic<bool> done{false};
  Status served;
  std::thread t([&] {
    served = server->Serve([&](int, uint16_t, const char* p, size_t n, svc::Reply* reply) {
      ++calls;
      reply->Assign(p, n);
      return Status::Ok();
    });
    done = true;
  });
  WriteAll(sv[1], input);
  shutdown(sv[1], SHUT_WR);
  const bool ended = DrainUntilDone(sv[1], done, 10000);
  CHECK(ended, "the server neither answered nor closed within 10 s");
  if (!ended) server->Stop();
  t.join();
  close(sv[1]);
  *handled = calls.load();
  return served;
}

void FuzzServer(int iterations, bool protect) {
  std::mt19937_64 rng(protect ? 1919 : 19);
  const std::string seed = Frame(1, 1, "lookup ids") + Frame(7, 2, std::string(300, 'x')) + Frame(svc::kGoodbye, 0, "");
  int refused = 0, served_ok = 0;
  for (int i = 0; i < iterations; ++i) {
    const std::string input = Mutate(rng, seed);
    int handled = 0;
    const Status st = ServeInput(input, protect, &handled);
    const bool known = st.ok() || st.code() == Code::kDataLoss || st.code() == Code::kUnavailable;
    CHECK(known, "Serve failed with an unexpected code: " + st.message());
    if (protect) {  // unsealed bytes never reach the handler
      CHECK(handled == 0, "the handler ran on unsealed bytes");
      CHECK(!st.ok(), "a protected server accepted unsealed bytes");
    }
    if (!protect && input == seed) CHECK(st.ok() && handled == 2, "the unmutated stream failed: " + st.message());
    st.ok() ? ++served_ok : ++refused;
  }
  std::fprintf(stderr, "fuzzed the service server%s: %d inputs, %d refused, %d served to GOODBYE\n",
               protect ? " (wire protection)" : "", iterations, refused, served_ok);
}

// Sealed with the right key, then one bit flipped: refused, the handler sees
// only the frames before the flip.
void FuzzSealedServer(int iterations) {
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int i = 0; i < iterations; ++i) {
    std::unique_ptr<tfx::comm::SealedStream> sealer;
    CHECK(tfx::comm::SealedStream::Create(Keys(true), &sealer).ok(), "sealer");
    std::string wire;
    for (int k = 0; k < 3; ++k) {  // three requests, each its own sealed frame
      const std::string f = Frame(1, k + 1, std::string(64, static_cast<char>('a' + k)));
      sealer->Seal(f.data(), f.size(), &wire);
    }
    const size_t frame = wire.size() / 3;
    const size_t at = rng() % wire.size();
    wire[at] ^= static_cast<char>(1 << (rng() % 8));
    int handled = 0;
    const Status st = ServeInput(wire, true, &handled);
    // A flip in a length field may instead leave the frame waiting for bytes
    // that never come (EOF): also never delivered.
    const bool in_length = at % frame < tfx::comm::kFrameHeaderBytes;
    CHECK(st.code() == Code::kDataLoss || (in_length && st.code() == Code::kUnavailable),
          "a flipped bit was not refused: " + st.message());
    CHECK(handled == static_cast<int>(at / frame), "requests before the flip: " + std::to_string(handled));
    if (!st.ok()) ++refused;
  }
  std::fprintf(stderr, "fuzzed sealed service frames with a flipped bit: %d inputs, %d refused\n", iterations,
               refused);
}

void FuzzClient(int iterations) {
  std::mt19937_64 rng(23);
  int failed = 0, answered = 0;
  for (int i = 0; i < iterations; ++i) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    svc::ClientOptions o;
    o.timeout_s = 5;
    o.max_frame_bytes = kMaxFrame;
    o.use_shm = false;
    std::unique_ptr<svc::Client> client;
    CHECK(svc::Client::Create({sv[0]}, {false}, o, &client).ok(), "client");
    const int fake = sv[1];
    std::thread server([&] {  // reads the request, answers with a mutated reply, closes
      svc::FrameHeader h;
      size_t got = 0;
      while (got < sizeof(h)) {
        ssize_t r = recv(fake, reinterpret_cast<char*>(&h) + got, sizeof(h) - got, 0);
        if (r <= 0) return;
        got += static_cast<size_t>(r);
      }
      std::string skip(h.payload_bytes, '\0');
      for (size_t k = 0; k < skip.size();) {
        ssize_t r = recv(fake, &skip[k], skip.size() - k, 0);
        if (r <= 0) return;
        k += static_cast<size_t>(r);
      }
      const int32_t status = rng() % 4 == 0 ? static_cast<int32_t>(rng() % 12) - 2 : 0;
      WriteAll(fake, Mutate(rng, Frame(h.kind, h.request_id, std::string(24, 'r'), status) +
                                     Frame(h.kind, h.request_id + 1, "extra")));
      shutdown(fake, SHUT_WR);
    });
    svc::Request req;
    req.kind = 1;
    req.payload = "ping";
    req.payload_bytes = 4;
    svc::Response resp;
    const auto start = Clock::now();
    const Status st = client->Call(&req, 1, &resp);
    CHECK(Clock::now() - start < std::chrono::seconds(8), "a call took longer than its timeout");
    if (st.ok()) {
      CHECK(resp.bytes <= kMaxFrame, "a reply over max_frame_bytes was delivered");
      ++answered;
    } else {
      ++failed;
    }
    std::free(resp.data);
    server.join();
    client.reset();
    close(fake);
  }
  std::fprintf(stderr, "fuzzed the service client's replies: %d inputs, %d failed, %d answered\n", iterations,
               failed, answered);
}

void FuzzParameterServer(int iterations) {
  using tfx::ps::Writer;
  tfx::ps::ParameterServerOptions po;
  po.synchronous = false;
  po.timeout_s = 1;
  tfx::ps::ParameterServer ps(po);
  tfx::embedding::TableConfig config;
  config.table_id = 3;
  config.dim = 4;
  config.num_rows = 64;
  const std::string create = tfx::ps::EncodeCreateTable(config);
  std::vector<char> reply_buf;
  auto reply = [&](size_t n) { reply_buf.resize(std::max<size_t>(n, 1)); return reply_buf.data(); };
  CHECK(ps.Handle(0, tfx::ps::kCreateTable, create.data(), create.size(), reply).ok(), "create");
  ps.Stop();  // a LOOKUP for a later version fails at once instead of waiting

  auto lookup_all = [&]() {
    Writer w;
    w.Put<int64_t>(3);
    w.Put<int64_t>(0);
    w.Put<int64_t>(64);
    for (int64_t id = 0; id < 64; ++id) w.Put<int64_t>(id);
    const auto st = ps.Handle(0, tfx::ps::kLookup, w.bytes().data(), w.bytes().size(), reply);
    CHECK(st.ok(), "looking up every row: " + st.message());
    return std::vector<float>(reinterpret_cast<float*>(reply_buf.data()),
                              reinterpret_cast<float*>(reply_buf.data()) + 64 * 4);
  };
  const std::vector<float> before = lookup_all();
  // ASSIGN (table 3, one id, values): bad input is refused and changes no row.
  auto assign = [&](int64_t id, float value, int64_t n_values, uint32_t first) {
    Writer w;
    w.Put<int64_t>(3); w.Put<int64_t>(0); w.Put<uint32_t>(first); w.Put<uint32_t>(0);
    w.Put<int64_t>(1); w.Put<int64_t>(id);
    w.Put<int64_t>(n_values);
    for (int64_t k = 0; k < n_values; ++k) w.Put<float>(value);
    return ps.Handle(0, tfx::ps::kAssign, w.bytes().data(), w.bytes().size(), reply);
  };
  CHECK(!assign(5, std::nanf(""), 4, 1).ok(), "an ASSIGN of NaN is refused");
  CHECK(!assign(64, 1.0f, 4, 1).ok(), "an ASSIGN of an out-of-range id is refused");
  CHECK(!assign(5, 1.0f, 3, 1).ok(), "an ASSIGN with too few values is refused");
  CHECK(!assign(5, 1.0f, 4, 2).ok(), "an ASSIGN with a bad first flag is refused");
  CHECK(lookup_all() == before, "refused ASSIGNs changed the table's rows");

  std::vector<std::pair<uint16_t, std::string>> seeds;
  {
    Writer w;  // LOOKUP
    w.Put<int64_t>(3); w.Put<int64_t>(0); w.Put<int64_t>(2); w.Put<int64_t>(5); w.Put<int64_t>(9);
    seeds.emplace_back(tfx::ps::kLookup, w.bytes());
  }
  {
    Writer w;  // PUSH, with a learning rate of 0: applying it changes no row
    w.Put<int64_t>(3); w.Put<int64_t>(0); w.Put<float>(0.0f); w.Put<float>(0.0f);
    w.Put<int64_t>(2); w.Put<int64_t>(5); w.Put<int64_t>(9);
    w.Put<int64_t>(8); for (int k = 0; k < 8; ++k) w.Put<float>(0.5f);
    seeds.emplace_back(tfx::ps::kPush, w.bytes());
  }
  {
    Writer w;  // STEP_DONE
    w.Put<int64_t>(0);
    seeds.emplace_back(tfx::ps::kStepDone, w.bytes());
  }
  // SAVE and RESTORE are left out: their payloads name files to write and read.
  std::mt19937_64 rng(31);
  int refused = 0, created = 0;
  // First without SET_OPTIMIZER: with the default SGD, a push at learning rate
  // 0 changes nothing, so the rows must be as before. Then with it (a mutated
  // optimizer may rightly change what later pushes do): no crash.
  const int first = iterations * 2 / 3;
  for (int i = 0; i < iterations; ++i) {
    if (i == first) {
      CHECK(lookup_all() == before, "fuzzed requests changed the table's rows");
      seeds.emplace_back(tfx::ps::kSetOptimizer, tfx::ps::EncodeSetOptimizer(3, config.optimizer));
    }
    auto& s = seeds[i % seeds.size()];
    std::string p = Mutate(rng, s.second);
    uint16_t kind = s.first;
    if (rng() % 10 == 0) kind = static_cast<uint16_t>(rng() % 16 == 0 ? rng() : 8 + rng() % 8);
    // ASSIGN rightly changes rows (checked on its own, above and below).
    if (kind == tfx::ps::kSave || kind == tfx::ps::kRestore || kind == tfx::ps::kCreateTable ||
        kind == tfx::ps::kAssign)
      kind = 99;
    // A mutated PUSH with a learning rate other than 0 would rightly change rows: keep it 0.
    if (kind == tfx::ps::kPush && p.size() >= 20) std::memset(&p[16], 0, 4);
    const auto st = ps.Handle(0, kind, p.data(), p.size(), reply);
    if (!st.ok()) ++refused;
    tfx::embedding::TableConfig decoded;  // the CREATE_TABLE decoder on its own
    const std::string c = Mutate(rng, create);
    if (tfx::ps::DecodeCreateTable(c.data(), c.size(), &decoded)) ++created;
  }
  // A valid ASSIGN in two chunks: the first replaces the shard (other rows back to their
  // initial values, whatever the fuzzed requests did), the second adds to it.
  CHECK(assign(5, 1.5f, 4, 1).ok(), "the first chunk of an ASSIGN");
  CHECK(assign(9, 2.5f, 4, 0).ok(), "the second chunk of an ASSIGN");
  std::vector<float> expected = before;
  std::fill(expected.begin() + 5 * 4, expected.begin() + 6 * 4, 1.5f);
  std::fill(expected.begin() + 9 * 4, expected.begin() + 10 * 4, 2.5f);
  CHECK(lookup_all() == expected, "ASSIGN's two chunks set exactly their rows");
  std::fprintf(stderr, "fuzzed parameter server requests: %d inputs, %d refused; %d mutated CREATE_TABLEs "
               "decoded\n", iterations, refused, created);
}

}  // namespace

int Iterations() {
  const char* env = std::getenv("TFX_FUZZ_ITERATIONS");
  return env ? std::atoi(env) : 1500;
}

TEST(ServiceFuzz, Server) { FuzzServer(Iterations(), /*protect=*/false); }

TEST(ServiceFuzz, ProtectedServer) { FuzzServer(Iterations() / 3, /*protect=*/true); }

TEST(ServiceFuzz, SealedServer) { FuzzSealedServer(Iterations() / 3); }

TEST(ServiceFuzz, Client) { FuzzClient(Iterations()); }

TEST(ServiceFuzz, ParameterServer) { FuzzParameterServer(Iterations() * 4); }
