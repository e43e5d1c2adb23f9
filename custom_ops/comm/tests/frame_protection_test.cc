// Wire protection's seal/open on their own.
#include "custom_ops/comm/tests/runtime_job.h"

namespace {

// Seal/open on their own: a round trip in both modes, and every kind of
// tampering (a flipped bit in header, payload or tag, a replayed or skipped
// frame) fails the check and delivers nothing.
void TestFrameProtection() {
  uint8_t key[32];
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i * 7);
  for (WireProtection mode : {WireProtection::kIntegrity, WireProtection::kEncrypt}) {
    const std::string m = mode == WireProtection::kIntegrity ? "integrity" : "encrypt";
    std::unique_ptr<FrameProtection> sealer, opener;
    CHECK(FrameProtection::Create(mode, key, true, &sealer).ok(), m);
    CHECK(FrameProtection::Create(mode, key, false, &opener).ok(), m);
    std::vector<std::string> frames;
    for (size_t len : {size_t{0}, size_t{1}, size_t{1000}, size_t{70000}}) {
      std::string payload(len, '\0');
      for (size_t i = 0; i < len; ++i) payload[i] = static_cast<char>(i * 31 + len);
      std::string frame(kFrameHeaderBytes + len + kFrameTagBytes, '\0');
      CHECK(sealer->Seal(payload.data(), len, &frame[0]).ok(), m + " seal");
      CHECK((frame.compare(kFrameHeaderBytes, len, payload) == 0) == (mode == WireProtection::kIntegrity || len == 0),
            m + ": payload in clear exactly in integrity mode");
      std::string out(len, '\0');
      CHECK(opener->Open(frame.data(), len, &out[0]).ok() && out == payload, m + " round trip " + std::to_string(len));
      frames.push_back(frame);
    }
    // frames[3] was frame #3; the opener now expects #4: a replay fails.
    std::string out(70000, 'x');
    Status replay = opener->Open(frames[3].data(), 70000, &out[0]);
    CHECK(!replay.ok() && replay.code() == Code::kDataLoss, m + ": replayed frame accepted");
    CHECK(out.find_first_not_of(mode == WireProtection::kIntegrity ? 'x' : '\0') == std::string::npos,
          m + ": a failed frame delivered bytes");
    for (size_t at : {size_t{0}, size_t{4}, size_t{500}, size_t{4 + 1000 + 3}}) {  // header, payload, tag of #2
      std::unique_ptr<FrameProtection> fresh;
      FrameProtection::Create(mode, key, false, &fresh);
      CHECK(fresh->Open(frames[0].data(), 0, &out[0]).ok() && fresh->Open(frames[1].data(), 1, &out[0]).ok(), m);
      std::string bad = frames[2];
      bad[at] ^= 0x10;
      CHECK(!fresh->Open(bad.data(), 1000, &out[0]).ok(), m + ": flipped bit at " + std::to_string(at) + " accepted");
    }
    std::unique_ptr<FrameProtection> skip;
    FrameProtection::Create(mode, key, false, &skip);
    CHECK(!skip->Open(frames[1].data(), 1, &out[0]).ok(), m + ": frame #1 accepted as #0 (dropped frame)");
  }
}

}  // namespace

TEST(FrameProtection, SealOpenAndTampering) { TestFrameProtection(); }
