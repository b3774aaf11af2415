#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/file.hpp"

namespace kiln {

// A zip archive written atomically (AtomicFile), entry by entry: what NumPy's .npz needs, stored
// or deflated, below 4 GiB (no ZIP64 when writing).
class ZipWriter {
 public:
  ZipWriter(const std::string& path, std::string who);
  // The entry's bytes are the pieces one after the other.
  void add(const std::string& name, const std::vector<std::span<const std::byte>>& pieces, bool deflate);
  void finish();  // the central directory and the end record, then the file replaces path

 private:
  struct Entry {
    std::string name;
    uint16_t method;
    uint32_t crc;
    uint32_t compressed_size, size, offset;
  };
  uint32_t checked_size(uint64_t bytes, const std::string& what) const;
  static void put_common_fields(std::vector<std::byte>& out, const Entry& entry);
  std::string path_, who_;
  AtomicFile file_;
  std::vector<Entry> entries_;
};

// The entries of a zip archive in memory (stored or deflated; ZIP64 read), every header
// bounds-checked. what names the archive in errors: "load_npz: m.npz".
class ZipReader {
 public:
  struct Entry {
    std::string name;
    uint16_t method;
    uint32_t crc;
    uint64_t compressed_size, size;
    uint64_t data_offset;  // in the archive
  };
  ZipReader(std::span<const std::byte> archive, std::string what);
  const std::vector<Entry>& entries() const { return entries_; }
  // The entry's bytes, CRC-checked: in the archive when stored, in `inflated` when deflated.
  std::span<const std::byte> contents(const Entry& entry, std::vector<std::byte>& inflated) const;

 private:
  std::span<const std::byte> archive_;
  std::string what_;
  std::vector<Entry> entries_;
};

}  // namespace kiln
