//===- MappedFile.cpp - Read-only memory-mapped files -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "MappedFile.h"

#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace shoal::rt;

MappedFile::MappedFile(const std::string &path, const char *what)
    : filePath(path) {
  // O_NONBLOCK: opening a FIFO no one writes must not block (it is refused
  // below as not a regular file).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw Error(
        fmt::format("cannot open {} {}: {}", what, path, std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(
        fmt::format("cannot stat {} {}: {}", what, path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{} {} is not a regular file", what, path));
  }
  length = static_cast<std::size_t>(st.st_size);
  device = static_cast<uint64_t>(st.st_dev);
  inode = static_cast<uint64_t>(st.st_ino);
  mtimeNs = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (length > 0) {
    void *p = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(
          fmt::format("cannot map {} {}: {}", what, path, std::strerror(err)));
    }
    base = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile &&other) noexcept
    : filePath(std::move(other.filePath)), base(other.base),
      length(other.length), device(other.device), inode(other.inode),
      mtimeNs(other.mtimeNs) {
  other.base = nullptr;
  other.length = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    release();
    filePath = std::move(other.filePath);
    base = other.base;
    length = other.length;
    device = other.device;
    inode = other.inode;
    mtimeNs = other.mtimeNs;
    other.base = nullptr;
    other.length = 0;
  }
  return *this;
}

void MappedFile::release() {
  if (base)
    ::munmap(const_cast<uint8_t *>(base), length);
  base = nullptr;
  length = 0;
}

bool MappedFile::changedOnDisk() const {
  struct stat st;
  if (::stat(filePath.c_str(), &st) != 0)
    return true;
  return static_cast<uint64_t>(st.st_dev) != device ||
         static_cast<uint64_t>(st.st_ino) != inode ||
         static_cast<std::size_t>(st.st_size) != length ||
         int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec !=
             mtimeNs;
}

namespace {

/// The jump of the copyOut running on this thread, if any.
/// (volatile, and fenced below: the compiler may neither drop the store
/// nor move the copy past it).
thread_local sigjmp_buf *volatile busJump = nullptr;

/// The SIGBUS handler that was installed before ours (a sanitizer's, a
/// host application's): a SIGBUS outside a guarded copy goes to it.
struct sigaction previousBus;

void onBusError(int sig, siginfo_t *info, void *context) {
  if (busJump)
    siglongjmp(*busJump, 1);
  // Not a guarded read: what would have happened without us.
  if (previousBus.sa_flags & SA_SIGINFO) {
    if (previousBus.sa_sigaction) {
      previousBus.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previousBus.sa_handler != SIG_DFL &&
             previousBus.sa_handler != SIG_IGN && previousBus.sa_handler) {
    previousBus.sa_handler(sig);
    return;
  }
  // The default action: the process dies of SIGBUS (the fault repeats when
  // the handler returns, now with the default disposition).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void installBusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = onBusError;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &previousBus);
  });
}

} // namespace

void MappedFile::copyOut(void *dst, std::size_t offset, std::size_t n,
                         const char *what) const {
  if (offset > length || n > length - offset)
    throw Error(fmt::format("{} {}: a read of {} bytes at {} past its {} "
                            "bytes",
                            what, filePath, n, offset, length));
  installBusHandler();
  sigjmp_buf jump;
  // Nothing with a destructor lives between here and the jump back.
  if (sigsetjmp(jump, 1) != 0) {
    busJump = nullptr;
    throw Error(fmt::format("{} {} was truncated while the run read it (it "
                            "was rewritten in place); give each run a file "
                            "that stays as it is, or write a new file and "
                            "rename it over the old one",
                            what, filePath));
  }
  busJump = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, base + offset, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  busJump = nullptr;
}
