//===- Files.h - Checked reads and symlink-safe writes ----------*- C++ -*-===//
//
// Every file shoal's tools read goes through checkRegularFile first: a FIFO,
// a device (/dev/zero), a socket or a folder named where a file is expected
// gets an error instead of a hang or an endless read. Every file they write
// goes through AtomicFile: the bytes go to a fresh temporary file in the same
// folder (created with O_EXCL, so a planted symlink is never followed) that
// is renamed over the destination once complete; a symlink at the
// destination is replaced, never written through, and a failed write leaves
// the old file as it was.
//
// No LLVM and no MLIR: the runtime, the planner and the compiler all use it.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SUPPORT_FILES_H
#define SHOAL_SUPPORT_FILES_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shoal {

/// The largest YAML spec (annotation, cluster, training) the tools read.
inline constexpr std::uint64_t kMaxSpecBytes = std::uint64_t(64) << 20;

/// Empty when `path` names a regular file (after following symlinks, as a
/// read does); otherwise why it cannot be read as one, for the caller to put
/// after the path: "it is a FIFO (named pipe), not a regular file".
std::string checkRegularFile(const std::string &path);

/// As checkRegularFile, for a folder.
std::string checkDirectory(const std::string &path);

/// Reads the regular file `path` into `out`, refusing files over `maxBytes`.
/// Returns "" or, as checkRegularFile, why not (without the path).
std::string readRegularFile(const std::string &path, std::string &out,
                            std::uint64_t maxBytes);

/// A file written under a temporary name next to its destination and
/// renamed over it by commit(). Errors are kept (the first one) rather than
/// thrown, so that both the runtime (exceptions) and the compiler
/// (diagnostics) can use it.
class AtomicFile {
public:
  explicit AtomicFile(std::string path);
  ~AtomicFile(); // removes the temporary file unless committed
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  bool ok() const { return error_.empty(); }
  /// The first error, starting with the destination path.
  const std::string &error() const { return error_; }

  void write(const void *data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  std::uint64_t size() const { return written_; }
  /// The open temporary file (-1 after commit or on error), for code that
  /// writes through a path of its own: /dev/fd/<descriptor> names it.
  int descriptor() const { return fd_; }

  /// Flushes (and with `durable`, fsyncs the file and its folder) and renames
  /// the file into place. Returns false (see error()) on any failure.
  bool commit(bool durable = false);

private:
  void fail(const std::string &what, int err);

  std::string path_, tmp_, error_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

/// Writes `bytes` to `path` through an AtomicFile; returns "" or the error.
std::string writeFileAtomically(const std::string &path, std::string_view bytes,
                                bool durable = false);

} // namespace shoal

#endif // SHOAL_SUPPORT_FILES_H
