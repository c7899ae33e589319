//===- MappedFile.h - Read-only memory-mapped files -------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Weights and inputs are read through a private read-only mapping, so that a
// rank that copies out only its slice only reads those pages from disk.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_MAPPEDFILE_H
#define SHOAL_RUNTIME_MAPPEDFILE_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace shoal {
namespace rt {

/// A whole file mapped read-only. Move-only; unmaps on destruction.
class MappedFile {
public:
  /// Maps `path`; throws Error naming `what` (e.g. "weight file") and the
  /// path if it cannot be opened or mapped.
  MappedFile(const std::string &path, const char *what);
  ~MappedFile();
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const uint8_t *data() const { return base; }
  std::size_t size() const { return length; }
  const std::string &path() const { return filePath; }

  /// Whether the file at path() is no longer the one mapped: replaced
  /// (another inode), resized or written since (modification time).
  bool changedOnDisk() const;

  /// Copies `n` bytes at `offset` of the mapping into `dst`. A file
  /// truncated under the mapping faults (SIGBUS) when read past its new
  /// end: that becomes an Error naming `what` and the path instead of
  /// killing the process.
  void copyOut(void *dst, std::size_t offset, std::size_t n,
               const char *what) const;

private:
  void release();

  std::string filePath;
  const uint8_t *base = nullptr;
  std::size_t length = 0;
  /// The mapped file's identity when mapped.
  uint64_t device = 0, inode = 0;
  int64_t mtimeNs = 0;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_MAPPEDFILE_H
