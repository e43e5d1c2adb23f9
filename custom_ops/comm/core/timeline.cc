#include "custom_ops/comm/core/timeline.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace tfx::comm {
namespace {

// The writer wakes this often, or sooner when this many events wait.
constexpr auto kFlushEvery = std::chrono::milliseconds(200);
constexpr size_t kFlushEvents = 4096;

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// "name#3" -> ("name", "3")
std::pair<std::string, std::string> SplitKey(const std::string& key) {
  const size_t hash = key.rfind('#');
  if (hash == std::string::npos) return {key, "0"};
  return {key.substr(0, hash), key.substr(hash + 1)};
}

std::string Upper(const char* s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string Shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Status Timeline::Start(const std::string& path, bool mark_cycles) {
  Stop();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr)
    return Status(Code::kInvalidArgument, "tfx_dist rank " + std::to_string(rank_) +
                                              ": cannot open the timeline file '" + path +
                                              "': " + std::strerror(errno));
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    file_ = f;
    first_event_ = true;
    std::fputs("[\n", file_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  origin_steady_ = Clock::now();
  origin_unix_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  rows_.clear();
  last_ready_.clear();
  buffered_.clear();
  stop_writer_ = false;
  AddLocked("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
            ",\"args\":{\"name\":\"rank " + std::to_string(rank_) + "\"}}");
  AddLocked("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
            ",\"args\":{\"sort_index\":" + std::to_string(rank_) + "}}");
  mark_cycles_.store(mark_cycles, std::memory_order_relaxed);
  writer_ = std::thread([this] { WriterLoop(); });
  enabled_.store(true, std::memory_order_release);
  return Status::Ok();
}

void Timeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writer_.joinable()) return;
    enabled_.store(false, std::memory_order_release);
    stop_writer_ = true;
  }
  wake_.notify_all();
  writer_.join();  // it writes what is left
  std::lock_guard<std::mutex> lock(writer_mu_);
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

int64_t Timeline::Micros(Clock::time_point t) const {
  return origin_unix_us_ + std::chrono::duration_cast<std::chrono::microseconds>(t - origin_steady_).count();
}

int Timeline::RowLocked(const std::string& row_name) {
  auto it = rows_.find(row_name);
  if (it != rows_.end()) return it->second;
  const int tid = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(row_name, tid);
  AddLocked("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank_) +
            ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + Quote(row_name) + "}}");
  return tid;
}

void Timeline::AddLocked(std::string event) {
  buffered_.push_back(std::move(event));
  if (buffered_.size() >= kFlushEvents) wake_.notify_one();
}

void Timeline::Ready(const std::string& key, int from, Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled()) return;
  last_ready_[key] = at;
  const int tid = RowLocked(SplitKey(key).first);
  AddLocked("{\"name\":\"READY\",\"ph\":\"i\",\"s\":\"t\",\"pid\":" + std::to_string(rank_) +
            ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + std::to_string(Micros(at)) +
            ",\"args\":{\"rank\":" + std::to_string(from) + "}}");
}

void Timeline::Collective(const EntryMeta& meta, Clock::time_point submitted, Clock::time_point start,
                          Clock::time_point end, size_t fused, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled()) return;
  const auto [name, occurrence] = SplitKey(meta.key);
  const std::string op = Upper(OpTypeName(meta.op));
  const std::string head = ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(RowLocked(name));
  auto span = [&](const std::string& what, Clock::time_point b, Clock::time_point e, const std::string& args) {
    const int64_t ts = Micros(b);
    AddLocked("{\"name\":" + Quote(what) + ",\"ph\":\"X\"" + head + ",\"ts\":" + std::to_string(ts) +
              ",\"dur\":" + std::to_string(std::max<int64_t>(0, Micros(e) - ts)) + ",\"args\":{" + args + "}}");
  };
  const std::string tensor = "\"tensor\":" + Quote(name) + ",\"occurrence\":" + occurrence;
  std::string negotiated = tensor;
  if (!error.empty()) negotiated += ",\"error\":" + Quote(error);
  span("NEGOTIATE_" + op, submitted, start, negotiated);
  auto ready = last_ready_.find(meta.key);
  if (ready != last_ready_.end()) {
    span("WAIT_FOR_PEERS", submitted, std::max(submitted, ready->second), tensor);
    last_ready_.erase(ready);
  }
  if (!error.empty()) return;
  span(op, start, end,
       tensor + ",\"dtype\":\"" + DataTypeName(meta.dtype) + "\",\"shape\":\"" + Shape(meta.shape) +
           "\",\"bytes\":" + std::to_string(meta.bytes()) + ",\"fused_tensors\":" + std::to_string(fused));
}

void Timeline::Cycle(Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled()) return;
  const int tid = RowLocked("negotiation cycles");
  AddLocked("{\"name\":\"CYCLE\",\"ph\":\"i\",\"s\":\"t\",\"pid\":" + std::to_string(rank_) +
            ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + std::to_string(Micros(at)) + "}");
}

void Timeline::WriterLoop() {
  std::vector<std::string> events;
  for (;;) {
    bool last;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, kFlushEvery, [this] { return stop_writer_ || buffered_.size() >= kFlushEvents; });
      events.swap(buffered_);
      last = stop_writer_;
    }
    {
      std::lock_guard<std::mutex> lock(writer_mu_);
      WriteLocked(&events);
    }
    events.clear();
    if (last) return;
  }
}

void Timeline::WriteLocked(std::vector<std::string>* events) {
  for (const std::string& e : *events) {
    if (!first_event_) std::fputs(",\n", file_);
    first_event_ = false;
    std::fputs(e.c_str(), file_);
  }
  if (!events->empty()) std::fflush(file_);
}

}  // namespace tfx::comm
