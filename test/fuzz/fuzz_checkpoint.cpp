// fuzz-checkpoint: bytes as a checkpoint's manifest.json through the
// runtime's reader (lib/Runtime/Checkpoint.cpp), then every tensor it names
// read from the folder's shards. The folder (a fresh temporary one) holds
// one valid shard, w.0.npy (float32 [2, 3]), so that manifests naming it
// reach the shard reader.
#include "Checkpoint.h"
#include "Npy.h"
#include "shoal/Runtime/Runtime.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {
std::string folder;

void writeFile(const std::string &path, const char *data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(size));
}
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  char tmpl[] = "/tmp/shoal-fuzz-checkpoint-XXXXXX";
  if (!mkdtemp(tmpl))
    std::abort();
  folder = tmpl;
  shoal::rt::writeNpy(folder + "/w.0.npy",
                      shoal::rt::Tensor(shoal::rt::DType::F32, {2, 3}));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  writeFile(folder + "/manifest.json", reinterpret_cast<const char *>(data),
            size);
  try {
    shoal::rt::Checkpoint c = shoal::rt::Checkpoint::open(folder);
    for (const auto &[name, entry] : c.manifest().tensors)
      if (entry.globalType.numBytes() <= (std::size_t(1) << 20))
        c.readTensor(name);
  } catch (const shoal::rt::Error &) {
  }
  return 0;
}
