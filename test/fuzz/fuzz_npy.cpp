// fuzz-npy: bytes as a .npy file through shoal-run's header parser and data
// conversion (lib/Runtime/Npy.cpp).
#include "Npy.h"

#include <cstddef>
#include <cstdint>
#include <exception>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    shoal::rt::NpyHeader h = shoal::rt::parseNpyHeader(data, size, "fuzz.npy");
    if (h.type.numBytes() <= (1 << 20)) {
      shoal::rt::convertNpyData(data + h.dataOffset, h.type, h.type.dtype);
      if (h.type.dtype == shoal::rt::DType::F32)
        shoal::rt::convertNpyData(data + h.dataOffset, h.type,
                                  shoal::rt::DType::BF16);
    }
  } catch (const std::exception &) {
  }
  return 0;
}
