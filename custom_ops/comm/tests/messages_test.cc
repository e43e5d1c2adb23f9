// The control channel's messages on their own: round trips, rejected
// payloads, and the decoders under random and mutated payloads
// (TFX_FUZZ_ITERATIONS, default 20000).
#include "custom_ops/comm/tests/runtime_job.h"

namespace {

// --- The messages on their own ---------------------------------------------

void TestMessages() {
  std::vector<EntryMeta> metas{Meta("a#0", OpType::kAllreduce, DataType::kBFloat16, {2, 3}),
                               Meta("b#1", OpType::kBroadcast, DataType::kUInt8, {})};
  metas[0].reduction = ReduceOp::kMax;
  metas[0].mean_divisor = 12;
  metas[0].compression = Compression::kFloat16;
  metas[1].root = 5;
  const std::string ready = EncodeReady(metas);
  std::vector<EntryMeta> back;
  CHECK(DecodeReady(ready, &back).ok() && back.size() == 2, "READY round trip");
  if (back.size() == 2) {
    CHECK(back[0].key == "a#0" && back[0].shape == metas[0].shape && back[0].reduction == ReduceOp::kMax &&
              back[0].mean_divisor == 12 && back[0].compression == Compression::kFloat16 && back[0].dtype == DataType::kBFloat16,
          "READY fields");
    CHECK(back[1].op == OpType::kBroadcast && back[1].root == 5 && back[1].shape.empty(), "READY fields 2");
  }
  std::vector<Response> resps(2);
  resps[0].op = OpType::kAllgather;
  resps[0].keys = {"g#0"};
  resps[0].dim0s = {1, 0, 7};
  resps[1].keys = {"x#0", "y#3"};
  resps[1].error = "no";
  resps[1].joined = {2, 0};  // joined ranks stand in for the keys, with their metas
  resps[1].metas = {Meta("x#0", OpType::kAllreduce, DataType::kFloat64, {3, 2}),
                    Meta("y#3", OpType::kAllreduce, DataType::kInt32, {})};
  const std::string exec = EncodeExecute(resps);
  std::vector<Response> rback;
  CHECK(DecodeExecute(exec, &rback).ok() && rback.size() == 2, "EXECUTE round trip");
  if (rback.size() == 2) {
    CHECK(rback[0].op == OpType::kAllgather && rback[0].dim0s == resps[0].dim0s && !rback[0].failed(), "EXECUTE 0");
    CHECK(rback[1].keys == resps[1].keys && rback[1].error == "no", "EXECUTE 1");
    CHECK(rback[1].joined == resps[1].joined && rback[1].metas.size() == 2 &&
              rback[1].metas[0].shape == resps[1].metas[0].shape && rback[1].metas[1].dtype == DataType::kInt32,
          "EXECUTE 1 joined");
  }
  std::string reason;
  CHECK(DecodeBroken(EncodeBroken("dead"), &reason).ok() && reason == "dead", "BROKEN round trip");
  // Every truncation and a trailing byte are rejected, with kDataLoss.
  for (const std::string* p : {&ready, &exec}) {
    bool all = true;
    for (size_t len = 0; len < p->size(); ++len) {
      std::vector<EntryMeta> m;
      std::vector<Response> r;
      const std::string cut = p->substr(0, len);
      const Status s = p == &ready ? DecodeReady(cut, &m) : DecodeExecute(cut, &r);
      all = all && s.code() == Code::kDataLoss;
    }
    CHECK(all, "truncated payloads rejected");
    std::vector<EntryMeta> m;
    std::vector<Response> r;
    const Status s = p == &ready ? DecodeReady(*p + "x", &m) : DecodeExecute(*p + "x", &r);
    CHECK(s.code() == Code::kDataLoss, "trailing byte rejected");
  }
  // Unknown codes are rejected.
  std::string bad_op = ready;
  bad_op[4 + 4 + 3] = 99;  // count, key length, "a#0", then the op byte
  CHECK(DecodeReady(bad_op, &back).code() == Code::kDataLoss, "unknown op rejected");
  std::string bad_kind = exec;
  bad_kind[4] = 0;
  CHECK(DecodeExecute(bad_kind, &rback).code() == Code::kDataLoss, "unknown response op rejected");
  // Garbage never crashes and is (almost always) rejected.
  std::mt19937 rng(7);
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    std::vector<EntryMeta> m;
    std::vector<Response> r;
    accepted += DecodeReady(junk, &m).ok() + DecodeExecute(junk, &r).ok();
  }
  CHECK(accepted < 40, "garbage accepted " + std::to_string(accepted) + " times");
}

// The control channel's decoders under random and mutated payloads: every
// input is either decoded or refused with kDataLoss; nothing crashes.
void FuzzMessageDecoders(int iterations) {
  std::mt19937 rng(19);
  std::vector<EntryMeta> metas{Meta("a#0", OpType::kAllreduce, DataType::kFloat32, {2, 3})};
  std::vector<Response> resps(1);
  resps[0].keys = {"x#0"};
  resps[0].dim0s = {1, 2};
  const std::vector<std::string> seeds{EncodeReady(metas), EncodeExecute(resps), EncodeBroken("dead")};
  int refused = 0;
  for (int i = 0; i < iterations; ++i) {
    std::string p = seeds[i % seeds.size()];
    switch (rng() % 4) {
      case 0: p.assign(rng() % 256, '\0'); for (char& c : p) c = static_cast<char>(rng()); break;
      case 1: for (int k = rng() % 8 + 1; k > 0 && !p.empty(); --k) p[rng() % p.size()] ^= static_cast<char>(1 << (rng() % 8)); break;
      case 2: p.resize(rng() % (p.size() + 1)); break;
      default:  // a huge count or length where a field was
        if (p.size() >= 8) std::memset(&p[rng() % (p.size() - 7)], 0xff, 4 + rng() % 4);
    }
    std::vector<EntryMeta> m;
    std::vector<Response> r;
    std::string reason;
    const Status a = DecodeReady(p, &m), b = DecodeExecute(p, &r), c = DecodeBroken(p, &reason);
    for (const Status* s : {&a, &b, &c}) {
      if (!s->ok()) ++refused;
      CHECK(s->ok() || s->code() == Code::kDataLoss, "decoder refused with " + s->message());
    }
  }
  std::fprintf(stderr, "fuzzed message decoders: %d inputs, %d refusals\n", iterations, refused);
}

}  // namespace

TEST(Messages, RoundTripsAndRejects) { TestMessages(); }

TEST(Messages, FuzzedDecoders) { FuzzMessageDecoders(std::getenv("TFX_FUZZ_ITERATIONS") ? std::atoi(std::getenv("TFX_FUZZ_ITERATIONS")) : 20000); }
