//===- Files.cpp - Checked reads and symlink-safe writes --------*- C++ -*-===//

#include "shoal/Support/Files.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

using namespace shoal;

namespace {

/// What a file of mode `mode` is, for messages ("a FIFO (named pipe)").
const char *kindOf(mode_t mode) {
  if (S_ISDIR(mode))
    return "a folder";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe)";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

/// Why a file of `mode` is not what was expected ("" when it is).
std::string mismatch(mode_t mode, bool folder) {
  if (folder ? S_ISDIR(mode) : S_ISREG(mode))
    return "";
  if (folder)
    return std::string("it is ") + (S_ISREG(mode) ? "a file" : kindOf(mode)) +
           ", not a folder";
  return std::string("it is ") + kindOf(mode) +
         (S_ISDIR(mode) ? ", not a file" : ", not a regular file");
}

std::string check(const std::string &path, bool folder) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return std::strerror(errno);
  return mismatch(st.st_mode, folder);
}

std::string folderOf(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

std::string shoal::checkRegularFile(const std::string &path) {
  return check(path, false);
}

std::string shoal::checkDirectory(const std::string &path) {
  return check(path, true);
}

std::string shoal::readRegularFile(const std::string &path, std::string &out,
                                   std::uint64_t maxBytes) {
  // O_NONBLOCK: opening a FIFO that no one writes must not block; the type
  // is then checked on the open descriptor (no swap between check and open).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return std::strerror(errno);
  struct stat st;
  std::string e = ::fstat(fd, &st) != 0 ? std::strerror(errno)
                                        : mismatch(st.st_mode, false);
  if (!e.empty()) {
    ::close(fd);
    return e;
  }
  if (static_cast<std::uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    return "it is " + std::to_string(st.st_size) + " bytes, more than the " +
           std::to_string(maxBytes) + " such a file may have";
  }
  out.clear();
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, &out[got], out.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return std::strerror(err);
    }
    if (n == 0)
      break; // shrank while read: keep what is there
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  ::close(fd);
  return "";
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::string folder = folderOf(path_);
  std::string base = path_.substr(
      path_.rfind('/') == std::string::npos ? 0 : path_.rfind('/') + 1);
  if (base.empty()) {
    error_ = path_ + ": names a folder, not a file";
    return;
  }
  static std::atomic<unsigned> counter{0};
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, ".tmp-%d-%u-%08x",
                  static_cast<int>(::getpid()), counter++, random());
    tmp_ = folder + "/." + base + suffix;
    // O_EXCL|O_NOFOLLOW: a fresh file, never a link someone left there; the
    // mode is the usual 0666 less the umask.
    fd_ = ::open(tmp_.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ >= 0 || errno != EEXIST)
      break;
  }
  if (fd_ < 0) {
    fail("cannot create a file in " + folder, errno);
    tmp_.clear();
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!committed_ && !tmp_.empty())
    ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string &what, int err) {
  if (error_.empty())
    error_ = path_ + ": " + what +
             (err ? ": " + std::string(std::strerror(err)) : std::string());
}

void AtomicFile::write(const void *data, std::size_t size) {
  const char *p = static_cast<const char *>(data);
  while (ok() && size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      fail("cannot write it", n < 0 ? errno : ENOSPC);
      return;
    }
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<std::uint64_t>(n);
  }
}

bool AtomicFile::commit(bool durable) {
  if (!ok())
    return false;
  if (durable && ::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
    fail("cannot sync it", errno);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0)
    fail("cannot write it", errno);
  if (!ok())
    return false;
  // rename replaces whatever is at path_ (a symlink included) without
  // following it.
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    fail("cannot write it", errno);
    return false;
  }
  committed_ = true;
  if (durable) {
    int dir = ::open(folderOf(path_).c_str(), O_RDONLY | O_DIRECTORY);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  return true;
}

std::string shoal::writeFileAtomically(const std::string &path,
                                       std::string_view bytes, bool durable) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit(durable);
  return file.error();
}
