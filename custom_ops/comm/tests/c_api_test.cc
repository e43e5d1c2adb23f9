// The C API (options, errors) and the timeline file of a one-rank communicator.
#include "custom_ops/comm/tests/runtime_job.h"

namespace {

// The entry of a one-tensor collective (float32[4]); the rest as the caller sets.
tfx_entry OneTensor(const char* name, int32_t op, const int64_t* dims, const void* in, void* out) {
  tfx_entry e{};
  e.name = name;
  e.op = op;
  e.dtype = TFX_DTYPE_FLOAT32;
  e.ndims = 1;
  e.dims = dims;
  e.input = in;
  e.output = out;
  return e;
}

void TestCApi() {
  const tfx_comm_options d = tfx_comm_default_options();
  const CommunicatorOptions core;
  CHECK(d.timeout_s == core.timeout_s && d.bucket_bytes == static_cast<int64_t>(core.bucket_bytes) &&
            d.chunk_bytes == static_cast<int64_t>(core.chunk_bytes) && d.use_shm == 1 &&
            d.hierarchical == TFX_HIERARCHICAL_AUTO,
        "default options");
  CHECK(tfx_comm_abi_value("sizeof(tfx_entry)") == sizeof(tfx_entry), "abi sizeof");
  CHECK(tfx_comm_abi_value("TFX_OP_BROADCAST") == TFX_OP_BROADCAST, "abi op");
  CHECK(tfx_comm_abi_value("nonsense") == -1, "abi unknown");
  {  // all-to-all splits are checked where they are submitted
    const int32_t none[1] = {-1}, alone[1] = {0};
    char why[512] = {0};
    const int64_t id = tfx_comm_create(0, 1, none, none, alone, nullptr, why, sizeof(why));
    CHECK(id > 0, why);
    const float in[4] = {1, 2, 3, 4};
    int64_t got[1] = {-1};
    const int64_t dims[1] = {4};
    auto submit = [&](int32_t nsplits, const int64_t* splits) {
      tfx_entry e = OneTensor("bad", TFX_OP_ALLTOALL, dims, in, nullptr);
      e.alloc = [](void*, int64_t) -> void* { return nullptr; };
      e.done = [](void*, int32_t, const char*) {};
      e.nsplits = nsplits;
      e.splits = splits;
      e.received_splits = got;
      why[0] = '\0';
      const int32_t rc = tfx_comm_submit(id, &e, 1, why, sizeof(why));
      return rc == TFX_STATUS_INVALID_ARGUMENT ? std::string(why) : "accepted";
    };
    const int64_t three[1] = {3}, negative[1] = {-4}, two[2] = {2, 2};
    CHECK(submit(1, three).find("sum to 3, not to the tensor's first dimension 4") != std::string::npos,
          submit(1, three));
    CHECK(submit(1, negative).find("must be >= 0") != std::string::npos, submit(1, negative));
    CHECK(submit(2, two).find("one split per rank (1); got 2") != std::string::npos, submit(2, two));
    float out[4] = {0};
    tfx_entry mean = OneTensor("mean", TFX_OP_ALLREDUCE, dims, in, out);
    mean.reduction = TFX_REDUCE_MEAN;
    mean.mean_divisor = -2;
    mean.done = [](void*, int32_t, const char*) {};
    CHECK(tfx_comm_submit(id, &mean, 1, why, sizeof(why)) == TFX_STATUS_INVALID_ARGUMENT &&
              std::string(why).find("divisor must be >= 0") != std::string::npos,
          why);
    tfx_comm_destroy(id);
  }
  tfx_comm_options bad = d;
  bad.chunk_bytes = 0;
  char err[256] = {0};
  const int32_t fds[1] = {-1}, same[1] = {0};
  CHECK(tfx_comm_create(0, 1, fds, fds, same, &bad, err, sizeof(err)) == 0 &&
            std::string(err).find("chunk_bytes") != std::string::npos,
        err);
}

// A one-rank communicator with a timeline: its file is a JSON array naming
// the tensor, its negotiation and its run, closed when the communicator is.
void TestTimeline() {
  char path[] = "/tmp/tfx_timeline_test_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  tfx_comm_options o = tfx_comm_default_options();
  o.timeline_path = path;
  char err[256] = {0};
  const int32_t fds[1] = {-1}, same[1] = {0};
  const int64_t id = tfx_comm_create(0, 1, fds, fds, same, &o, err, sizeof(err));
  CHECK(id > 0, err);
  if (id <= 0) return;
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  const int64_t dims[1] = {4};
  tfx_entry e = OneTensor("timeline.tensor", TFX_OP_ALLREDUCE, dims, in, out);
  CHECK(tfx_comm_run(id, &e, 1, nullptr, nullptr, err, sizeof(err)) == 0, err);
  CHECK(out[3] == 4.0f, "one-rank all-reduce");
  tfx_comm_destroy(id);
  std::FILE* f = std::fopen(path, "r");
  std::string text;
  char buf[4096];
  for (size_t n; f != nullptr && (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  if (f != nullptr) std::fclose(f);
  std::remove(path);
  CHECK(text.rfind("[", 0) == 0 && text.find("]\n", text.size() - 3) != std::string::npos,
        "timeline is a closed JSON array: " + text.substr(0, 200));
  for (const char* want : {"\"NEGOTIATE_ALLREDUCE\"", "\"ALLREDUCE\"", "\"timeline.tensor\"",
                           "\"bytes\":16", "\"thread_name\""})
    CHECK(text.find(want) != std::string::npos, std::string("timeline lacks ") + want);
}

}  // namespace

TEST(CApi, OptionsAndErrors) { TestCApi(); }

TEST(Timeline, OneRank) { TestTimeline(); }
