//===- Fingerprint.cpp - A plan's fingerprint of its own contents -*- C++ -*-=//

#include "shoal/Schema/Fingerprint.h"

#include "plan.pb.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <openssl/evp.h>

std::string shoal::rt::planContentSha256(const plan::Plan &plan) {
  plan::Plan copy = plan;
  copy.clear_content_sha256();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    // Maps in field order, so that the writer and the reader agree.
    coded.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&coded);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) !=
      1)
    return std::string();
  return std::string(reinterpret_cast<const char *>(md), len);
}
