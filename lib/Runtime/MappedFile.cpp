//===- MappedFile.cpp - Read-only memory-mapped files -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "MappedFile.h"

#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
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
      length(other.length) {
  other.base = nullptr;
  other.length = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    release();
    filePath = std::move(other.filePath);
    base = other.base;
    length = other.length;
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
