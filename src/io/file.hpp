#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kiln {

// A whole file's bytes, mapped read-only for as long as this lives.
class MappedFile {
 public:
  // IOError (prefixed with who) when path cannot be opened or is not a regular file.
  MappedFile(const std::string& path, const std::string& who);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Writes a file so that readers see the old file or the complete new one, never a part: the bytes
// go to a temporary file beside path, which commit() syncs and renames over path. Destroyed
// without commit (an error on the way), it removes the temporary file and path is untouched.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string who);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(std::span<const std::byte> bytes);
  uint64_t size() const { return size_; }  // bytes written so far
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what, int error_number);
  void discard();
  std::string path_, who_, temporary_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
};

}  // namespace kiln
