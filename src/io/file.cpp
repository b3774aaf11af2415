#include "io/file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "kiln/errors.hpp"

namespace kiln {
namespace {

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const std::string& who) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IOError(who + ": cannot open " + path + ": " + std::strerror(errno));
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    throw IOError(who + ": " + path + " is not a regular file");
  }
  size_ = static_cast<size_t>(status.st_size);
  if (size_ > 0) {  // mmap refuses a length of 0; an empty file has no bytes to map
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int error_number = errno;
      ::close(fd);
      throw IOError(who + ": cannot read " + path + ": " + std::strerror(error_number));
    }
    data_ = static_cast<const std::byte*>(mapped);
  }
  ::close(fd);  // the mapping keeps the file's bytes
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

AtomicFile::AtomicFile(std::string path, std::string who) : path_(std::move(path)), who_(std::move(who)) {
  // The temporary must be in the target's directory: rename replaces atomically only within one
  // file system. A name of our own with O_EXCL (not mkstemp) lets the umask set its permissions
  // as for any new file.
  static std::atomic<uint64_t> counter{0};
  const std::string stem = directory_of(path_) + "/." + base_name_of(path_) + ".tmp-" + std::to_string(::getpid()) + "-";
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temporary_ = stem + std::to_string(counter.fetch_add(1));
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt == 100)) {
      const int error_number = errno;
      temporary_.clear();
      fail("cannot create a temporary file in " + directory_of(path_), error_number);
    }
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void AtomicFile::fail(const std::string& what, int error_number) {
  discard();
  throw IOError(who_ + ": " + what + " while writing " + path_ + ": " + std::strerror(error_number) + "; " + path_ +
                " is as it was before");
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + std::to_string(bytes.size()) + " bytes to " + temporary_, n < 0 ? errno : EIO);
    bytes = bytes.subspan(static_cast<size_t>(n));
    size_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("cannot sync " + temporary_, errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail("cannot close " + temporary_, errno);
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail("cannot rename " + temporary_ + " to " + path_, errno);
  committed_ = true;
  // The rename is durable once the directory is synced. The new file is in place whether or not
  // this succeeds, so a failure here is not reported as a failed save.
  const int directory = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory >= 0) {
    ::fsync(directory);
    ::close(directory);
  }
}

}  // namespace kiln
