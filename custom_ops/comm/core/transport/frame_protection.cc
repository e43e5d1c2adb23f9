#include "custom_ops/comm/core/transport/frame_protection.h"

#include <openssl/evp.h>

#include <cstring>
#include <vector>

namespace tfx::comm {
namespace {

EVP_CIPHER_CTX* Ctx(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }

void PutU32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

FrameProtection::~FrameProtection() { EVP_CIPHER_CTX_free(Ctx(ctx_)); }

Status FrameProtection::Create(WireProtection mode, const uint8_t key[32], bool sealing,
                               std::unique_ptr<FrameProtection>* out) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const int ok = ctx != nullptr &&
                 (sealing ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nullptr)
                          : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nullptr));
  if (!ok) {
    EVP_CIPHER_CTX_free(ctx);
    return Status(Code::kInternal, "tfx_dist: OpenSSL could not set up AES-256-GCM for wire protection");
  }
  out->reset(new FrameProtection(mode, ctx));
  return Status::Ok();
}

// 96-bit nonce: 4 zero bytes and the frame number. Each direction has its own
// key, so a (key, nonce) pair is never used twice.
void FrameProtection::Nonce(uint8_t iv[12]) const {
  std::memset(iv, 0, 12);
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>((counter_ >> (8 * i)) & 0xff);
}

Status FrameProtection::Seal(const char* in, size_t len, char* out) {
  if (len > kMaxFramePayload) return Status(Code::kInternal, "tfx_dist: frame payload too large to seal");
  uint8_t iv[12];
  Nonce(iv);
  EVP_CIPHER_CTX* ctx = Ctx(ctx_);
  PutU32(out, static_cast<uint32_t>(len));
  auto* header = reinterpret_cast<const unsigned char*>(out);
  auto* src = reinterpret_cast<const unsigned char*>(in);
  auto* dst = reinterpret_cast<unsigned char*>(out + kFrameHeaderBytes);
  int n = 0, fin = 0;
  bool ok = EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv) &&
            EVP_EncryptUpdate(ctx, nullptr, &n, header, kFrameHeaderBytes);
  if (ok && mode_ == WireProtection::kIntegrity) {  // GMAC: the payload is associated data, sent as is
    ok = len == 0 || EVP_EncryptUpdate(ctx, nullptr, &n, src, static_cast<int>(len));
    std::memcpy(dst, in, len);
  } else if (ok && len > 0) {
    ok = EVP_EncryptUpdate(ctx, dst, &n, src, static_cast<int>(len));
  }
  ok = ok && EVP_EncryptFinal_ex(ctx, dst + len, &fin) &&
       EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kFrameTagBytes, dst + len);
  if (!ok) return Status(Code::kInternal, "tfx_dist: OpenSSL failed to seal a frame");
  ++counter_;
  return Status::Ok();
}

Status FrameProtection::SealHeaderAndTag(const char* in, size_t len, char header[kFrameHeaderBytes],
                                         char tag[kFrameTagBytes]) {
  if (mode_ != WireProtection::kIntegrity || len > kMaxFramePayload)
    return Status(Code::kInternal, "tfx_dist: SealHeaderAndTag is for integrity frames only");
  uint8_t iv[12];
  Nonce(iv);
  EVP_CIPHER_CTX* ctx = Ctx(ctx_);
  PutU32(header, static_cast<uint32_t>(len));
  int n = 0, fin = 0;
  const bool ok =
      EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv) &&
      EVP_EncryptUpdate(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(header), kFrameHeaderBytes) &&
      (len == 0 || EVP_EncryptUpdate(ctx, nullptr, &n, reinterpret_cast<const unsigned char*>(in),
                                     static_cast<int>(len))) &&
      EVP_EncryptFinal_ex(ctx, reinterpret_cast<unsigned char*>(tag), &fin) &&
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kFrameTagBytes, tag);
  if (!ok) return Status(Code::kInternal, "tfx_dist: OpenSSL failed to seal a frame");
  ++counter_;
  return Status::Ok();
}

Status FrameProtection::Open(const char* frame, size_t payload_len, char* out) {
  uint8_t iv[12];
  Nonce(iv);
  EVP_CIPHER_CTX* ctx = Ctx(ctx_);
  auto* header = reinterpret_cast<const unsigned char*>(frame);
  auto* src = reinterpret_cast<const unsigned char*>(frame + kFrameHeaderBytes);
  unsigned char tag[kFrameTagBytes];
  std::memcpy(tag, src + payload_len, kFrameTagBytes);
  int n = 0, fin = 0;
  bool ok = EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, iv) &&
            EVP_DecryptUpdate(ctx, nullptr, &n, header, kFrameHeaderBytes);
  if (mode_ == WireProtection::kIntegrity) {
    ok = ok && (payload_len == 0 || EVP_DecryptUpdate(ctx, nullptr, &n, src, static_cast<int>(payload_len))) &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kFrameTagBytes, tag) &&
         EVP_DecryptFinal_ex(ctx, nullptr, &fin) > 0;
    if (ok) std::memcpy(out, src, payload_len);  // only checked bytes are delivered
  } else {
    // GCM decrypts before it can check the tag: decrypt into out, and on a
    // failed check wipe it, so no unchecked plaintext is ever delivered.
    ok = ok && (payload_len == 0 ||
                EVP_DecryptUpdate(ctx, reinterpret_cast<unsigned char*>(out), &n, src,
                                  static_cast<int>(payload_len))) &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kFrameTagBytes, tag) &&
         EVP_DecryptFinal_ex(ctx, reinterpret_cast<unsigned char*>(out) + payload_len, &fin) > 0;
    if (!ok) std::memset(out, 0, payload_len);
  }
  if (!ok)
    return Status(Code::kDataLoss, "frame #" + std::to_string(counter_) +
                                       " failed its integrity check (AES-GCM tag): the data was changed, "
                                       "dropped, reordered or replayed between the ranks");
  ++counter_;
  return Status::Ok();
}

}  // namespace tfx::comm
