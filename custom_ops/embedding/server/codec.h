// Packing and unpacking of the parameter server's payloads: plain values in
// host byte order (every process of a job runs on the same architecture)
// appended one after the other; an array is its int64 count, then its values. The Reader checks every length against what
// is left, so a truncated or forged payload is an error, never a read past
// the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace tfx::ps {

class Writer {
 public:
  template <typename T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, size_t len) : data_(data), left_(len) {}

  template <typename T>
  bool Get(T* value) {
    if (left_ < sizeof(T)) return false;
    std::memcpy(value, data_, sizeof(T));
    Skip(sizeof(T));
    return true;
  }
  bool GetString(std::string* s, uint32_t max_len = 4096) {
    uint32_t n;
    if (!Get(&n) || n > max_len || n > left_) return false;
    s->assign(data_, n);
    Skip(n);
    return true;
  }
  // Points *values at n values of T inside the payload (no copy). Only for
  // types whose alignment the payload's layout guarantees or that are read
  // with memcpy; int64 and float arrays follow 8-byte fields here.
  template <typename T>
  bool GetArray(const T** values, int64_t* n, int64_t max_n = INT64_MAX / 16) {
    if (!Get(n) || *n < 0 || *n > max_n) return false;
    const size_t bytes = static_cast<size_t>(*n) * sizeof(T);
    if (bytes > left_) return false;
    *values = reinterpret_cast<const T*>(data_);
    Skip(bytes);
    return true;
  }
  bool done() const { return left_ == 0; }

 private:
  void Skip(size_t n) {
    data_ += n;
    left_ -= n;
  }
  const char* data_;
  size_t left_;
};

}  // namespace tfx::ps
