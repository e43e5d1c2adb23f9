#include "custom_ops/comm/core/negotiation/messages.h"

#include <cstring>

#include "custom_ops/comm/core/protocol/op_traits.h"

namespace tfx::comm {
namespace {

class Writer {
 public:
  template <typename T> void Put(T v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
  void PutString(const std::string& s) { Put<uint32_t>(static_cast<uint32_t>(s.size())); out_ += s; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T> bool Get(T* v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || pos_ + n > in_.size()) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

// A call's tag is a short label ("predict call 12"); tfx_comm_set_call cuts longer ones.
constexpr size_t kMaxCallChars = 256;

Status Malformed(const char* what) {
  return Status(Code::kDataLoss, std::string("malformed ") + what + " message on the control connection");
}

void PutMeta(Writer& w, const EntryMeta& m) {
  w.PutString(m.key);
  w.Put<uint8_t>(static_cast<uint8_t>(m.op));
  w.Put<int32_t>(static_cast<int32_t>(m.dtype));
  w.Put<int32_t>(static_cast<int32_t>(m.reduction));
  w.Put<int64_t>(m.mean_divisor);
  w.Put<int32_t>(static_cast<int32_t>(m.compression));
  w.Put<int32_t>(m.root);
  w.Put<uint32_t>(static_cast<uint32_t>(m.shape.size()));
  for (int64_t d : m.shape) w.Put<int64_t>(d);
  w.Put<uint32_t>(static_cast<uint32_t>(m.splits.size()));
  for (int64_t d : m.splits) w.Put<int64_t>(d);
  w.PutString(m.call);
}

bool GetMeta(Reader& r, EntryMeta* m) {
  uint8_t op;
  int32_t dtype, red, comp;
  uint32_t ndims;
  if (!r.GetString(&m->key) || !r.Get(&op) || !r.Get(&dtype) || !r.Get(&red) || !r.Get(&m->mean_divisor) ||
      !r.Get(&comp) || !r.Get(&m->root) || !r.Get(&ndims) || ndims > 64 || FindOp(op) == nullptr ||
      !ValidDataType(dtype) || !ValidReduceOp(red) || m->mean_divisor < 0 || !ValidCompression(comp))
    return false;
  m->op = static_cast<OpType>(op);
  m->dtype = static_cast<DataType>(dtype);
  m->reduction = static_cast<ReduceOp>(red);
  m->compression = static_cast<Compression>(comp);
  m->shape.resize(ndims);
  for (auto& d : m->shape)
    if (!r.Get(&d)) return false;
  uint32_t nsplits;
  if (!r.Get(&nsplits) || nsplits > (1u << 16)) return false;
  m->splits.resize(nsplits);
  for (auto& d : m->splits)
    if (!r.Get(&d)) return false;
  return r.GetString(&m->call) && m->call.size() <= kMaxCallChars;
}

}  // namespace

std::string EncodeReady(const std::vector<EntryMeta>& metas) {
  Writer w;
  w.Put<uint32_t>(static_cast<uint32_t>(metas.size()));
  for (const EntryMeta& m : metas) PutMeta(w, m);
  return w.Take();
}

Status DecodeReady(const std::string& payload, std::vector<EntryMeta>* metas) {
  Reader r(payload);
  uint32_t n;
  if (!r.Get(&n)) return Malformed("READY");
  for (uint32_t i = 0; i < n; ++i) {
    EntryMeta m;
    if (!GetMeta(r, &m)) return Malformed("READY");
    metas->push_back(std::move(m));
  }
  return r.done() ? Status::Ok() : Malformed("READY");
}

std::string EncodeExecute(const std::vector<Response>& responses) {
  Writer w;
  w.Put<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const Response& resp : responses) {
    w.Put<uint8_t>(static_cast<uint8_t>(resp.op));
    w.Put<uint32_t>(static_cast<uint32_t>(resp.keys.size()));
    for (const auto& k : resp.keys) w.PutString(k);
    w.PutString(resp.error);
    w.Put<uint32_t>(static_cast<uint32_t>(resp.dim0s.size()));
    for (int64_t d : resp.dim0s) w.Put<int64_t>(d);
    w.Put<uint32_t>(static_cast<uint32_t>(resp.joined.size()));
    for (int32_t j : resp.joined) w.Put<int32_t>(j);
    w.Put<uint32_t>(static_cast<uint32_t>(resp.metas.size()));
    for (const EntryMeta& m : resp.metas) PutMeta(w, m);
  }
  return w.Take();
}

Status DecodeExecute(const std::string& payload, std::vector<Response>* responses) {
  Reader r(payload);
  uint32_t n;
  if (!r.Get(&n)) return Malformed("EXECUTE");
  for (uint32_t i = 0; i < n; ++i) {
    Response resp;
    uint8_t op;
    uint32_t nkeys, ndims;
    if (!r.Get(&op) || FindOp(op) == nullptr || !r.Get(&nkeys)) return Malformed("EXECUTE");
    resp.op = static_cast<OpType>(op);
    for (uint32_t k = 0; k < nkeys; ++k) {
      std::string key;
      if (!r.GetString(&key)) return Malformed("EXECUTE");
      resp.keys.push_back(std::move(key));
    }
    if (!r.GetString(&resp.error) || !r.Get(&ndims) || ndims > (1u << 20)) return Malformed("EXECUTE");
    resp.dim0s.resize(ndims);
    for (auto& d : resp.dim0s)
      if (!r.Get(&d)) return Malformed("EXECUTE");
    uint32_t njoined, nmetas;
    if (!r.Get(&njoined) || njoined > (1u << 20)) return Malformed("EXECUTE");
    resp.joined.resize(njoined);
    for (auto& j : resp.joined)
      if (!r.Get(&j)) return Malformed("EXECUTE");
    if (!r.Get(&nmetas) || nmetas > nkeys) return Malformed("EXECUTE");
    resp.metas.resize(nmetas);
    for (auto& m : resp.metas)
      if (!GetMeta(r, &m)) return Malformed("EXECUTE");
    responses->push_back(std::move(resp));
  }
  return r.done() ? Status::Ok() : Malformed("EXECUTE");
}

std::string EncodeBroken(const std::string& reason) {
  Writer w;
  w.PutString(reason);
  return w.Take();
}

Status DecodeBroken(const std::string& payload, std::string* reason) {
  Reader r(payload);
  if (!r.GetString(reason) || !r.done()) return Malformed("BROKEN");
  return Status::Ok();
}

}  // namespace tfx::comm
