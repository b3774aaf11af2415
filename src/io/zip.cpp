// The zip format (PKWARE's APPNOTE): each entry is a local header, its name and its bytes; then
// the central directory repeats every header with the entry's offset, and the end record says
// where the directory is. ZIP64 moves sizes and offsets that do not fit 32 bits into "extra"
// fields and adds a 64-bit end record. Readers trust the central directory, as unzip does.
#include "io/zip.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>

#include "kiln/errors.hpp"

namespace kiln {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEndRecord = 0x06054b50;
constexpr uint32_t kZip64EndRecord = 0x06064b50, kZip64EndLocator = 0x07064b50;
constexpr uint16_t kZip64ExtraField = 0x0001;
constexpr size_t kLocalHeaderSize = 30, kCentralHeaderSize = 46, kEndRecordSize = 22, kZip64EndLocatorSize = 20;
constexpr uint16_t kStored = 0, kDeflated = 8;
constexpr uint16_t kEncrypted = 1 << 0, kUtf8Name = 1 << 11;
constexpr uint16_t kVersion = 20;  // 2.0: deflate
// Every entry is dated 1980-01-01 00:00 (the first date a zip can hold), so that the same tensors
// always make the same file.
constexpr uint16_t kDosTime = 0, kDosDate = (1 << 5) | 1;
// zlib counts bytes in 32 bits; longer buffers go through in steps.
constexpr size_t kZlibStep = size_t{1} << 30;

void put(std::vector<std::byte>& out, uint64_t value, size_t width) {
  for (size_t i = 0; i < width; ++i) out.push_back(static_cast<std::byte>((value >> (8 * i)) & 0xff));
}

void put_name(std::vector<std::byte>& out, const std::string& name) {
  const auto bytes = std::as_bytes(std::span(name));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// Names are bytes; one that is not ASCII is taken to be UTF-8 (the flag tells unzip and Python).
uint16_t flags_for(const std::string& name) {
  return std::ranges::any_of(name, [](char c) { return static_cast<unsigned char>(c) >= 0x80; }) ? kUtf8Name : 0;
}

uint32_t crc_of(const std::vector<std::span<const std::byte>>& pieces) {
  uLong crc = crc32_z(0, nullptr, 0);
  for (const auto& piece : pieces) crc = crc32_z(crc, reinterpret_cast<const Bytef*>(piece.data()), piece.size());
  return static_cast<uint32_t>(crc);
}

// Raw deflate (no zlib or gzip wrapper: windowBits -15), as zip stores it.
std::vector<std::byte> deflated(const std::vector<std::span<const std::byte>>& pieces, const std::string& what) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw IOError(what + ": zlib cannot start compressing (out of memory)");
  struct End {
    z_stream& z;
    ~End() { deflateEnd(&z); }
  } end{z};
  std::vector<std::byte> out;
  std::array<Bytef, 1 << 16> chunk;
  const auto run = [&](int flush) {
    int status;
    do {  // until deflate leaves room in the chunk: it has taken all its input (and, finishing, ended)
      z.next_out = chunk.data();
      z.avail_out = chunk.size();
      status = deflate(&z, flush);
      const auto produced = std::as_bytes(std::span(chunk)).first(chunk.size() - z.avail_out);
      out.insert(out.end(), produced.begin(), produced.end());
    } while (z.avail_out == 0);
    return status;
  };
  for (const auto& piece : pieces)
    for (size_t at = 0; at < piece.size(); at += kZlibStep) {
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(piece.data() + at));
      z.avail_in = static_cast<uInt>(std::min(kZlibStep, piece.size() - at));
      run(Z_NO_FLUSH);
    }
  if (run(Z_FINISH) != Z_STREAM_END) throw IOError(what + ": zlib failed to finish compressing");
  return out;
}

void inflate_into(std::span<const std::byte> in, std::span<std::byte> out, const std::string& what) {
  z_stream z{};
  if (inflateInit2(&z, -15) != Z_OK) throw IOError(what + ": zlib cannot start decompressing (out of memory)");
  struct End {
    z_stream& z;
    ~End() { inflateEnd(&z); }
  } end{z};
  size_t in_at = 0, out_at = 0;
  int status = Z_OK;
  while (status == Z_OK) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + in_at));
    z.avail_in = static_cast<uInt>(std::min(kZlibStep, in.size() - in_at));
    z.next_out = reinterpret_cast<Bytef*>(out.data() + out_at);
    z.avail_out = static_cast<uInt>(std::min(kZlibStep, out.size() - out_at));
    const uInt in_given = z.avail_in, out_given = z.avail_out;
    status = inflate(&z, Z_NO_FLUSH);
    in_at += in_given - z.avail_in;
    out_at += out_given - z.avail_out;
  }
  if (status == Z_STREAM_END && out_at == out.size()) return;
  if (status == Z_STREAM_END)
    throw IOError(what + " is corrupt: it inflates to " + std::to_string(out_at) + " bytes, the archive says " +
                  std::to_string(out.size()));
  if (status == Z_BUF_ERROR && out_at == out.size())
    throw IOError(what + " is corrupt: it inflates to more than the " + std::to_string(out.size()) +
                  " bytes the archive says");
  if (status == Z_BUF_ERROR)
    throw IOError(what + " is truncated: its compressed bytes end after " + std::to_string(out_at) + " of " +
                  std::to_string(out.size()) + " bytes");
  throw IOError(what + " is corrupt: its compressed bytes are not valid deflate data (zlib: " +
                (z.msg ? std::string(z.msg) : "error " + std::to_string(status)) + ")");
}

// Little-endian fields of the archive, every read checked against its end.
class Fields {
 public:
  Fields(std::span<const std::byte> bytes, const std::string& what) : bytes_(bytes), what_(what) {}
  uint64_t get(uint64_t at, size_t width) const {
    check(at, width);
    uint64_t value = 0;
    for (size_t i = 0; i < width; ++i) value |= std::to_integer<uint64_t>(bytes_[at + i]) << (8 * i);
    return value;
  }
  std::string text(uint64_t at, uint64_t length) const {
    check(at, length);
    return std::string(reinterpret_cast<const char*>(bytes_.data() + at), length);
  }
  void check(uint64_t at, uint64_t length) const {
    if (at > bytes_.size() || bytes_.size() - at < length)
      throw IOError(what_ + ": the archive is truncated or corrupt (a header or an entry runs past its end at byte " +
                    std::to_string(bytes_.size()) + ")");
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& what_;
};

// The end record is the last 22 bytes unless the archive has a comment (up to 65535 bytes) after it.
uint64_t find_end_record(const Fields& fields, uint64_t size, const std::string& what) {
  if (size >= kEndRecordSize) {
    const uint64_t lowest = size - kEndRecordSize - std::min<uint64_t>(size - kEndRecordSize, 0xffff);
    for (uint64_t at = size - kEndRecordSize + 1; at-- > lowest;)
      if (fields.get(at, 4) == kEndRecord && fields.get(at + 20, 2) == size - at - kEndRecordSize) return at;
  }
  throw IOError(what + ": not a zip archive, or a truncated one (it has no end-of-central-directory record)");
}

}  // namespace

ZipWriter::ZipWriter(const std::string& path, std::string who) : path_(path), who_(std::move(who)), file_(path, who_) {}

uint32_t ZipWriter::checked_size(uint64_t bytes, const std::string& what) const {
  if (bytes >= std::numeric_limits<uint32_t>::max())
    throw IOError(who_ + ": " + path_ + ": " + what + " reaches 4 GiB; kiln writes archives below 4 GiB (no ZIP64 yet): " +
                  "save the largest tensors with save_npy");
  return static_cast<uint32_t>(bytes);
}

// The fields the local and the central header share, from "version needed" to the extra field's length.
void ZipWriter::put_common_fields(std::vector<std::byte>& out, const Entry& entry) {
  put(out, kVersion, 2);
  put(out, flags_for(entry.name), 2);
  put(out, entry.method, 2);
  put(out, kDosTime, 2);
  put(out, kDosDate, 2);
  put(out, entry.crc, 4);
  put(out, entry.compressed_size, 4);
  put(out, entry.size, 4);
  put(out, entry.name.size(), 2);
  put(out, 0, 2);  // no extra field
}

void ZipWriter::add(const std::string& name, const std::vector<std::span<const std::byte>>& pieces, bool deflate) {
  if (name.size() > 0xffff)
    throw IOError(who_ + ": " + path_ + ": the entry name '" + name.substr(0, 64) + "...' is longer than a zip allows (65535 bytes)");
  uint64_t size = 0;
  for (const auto& piece : pieces) size += piece.size();
  const std::string what = "entry '" + name + "'";
  Entry entry;
  entry.name = name;
  entry.method = deflate ? kDeflated : kStored;
  entry.crc = crc_of(pieces);
  entry.size = checked_size(size, what);
  entry.offset = checked_size(file_.size(), "the archive before " + what);
  std::vector<std::byte> compressed;
  if (deflate) compressed = deflated(pieces, who_ + ": " + path_ + ", " + what);
  entry.compressed_size = deflate ? checked_size(compressed.size(), what) : entry.size;

  std::vector<std::byte> header;
  put(header, kLocalHeader, 4);
  put_common_fields(header, entry);
  put_name(header, name);
  file_.write(header);
  if (deflate) file_.write(compressed);
  else
    for (const auto& piece : pieces) file_.write(piece);
  entries_.push_back(std::move(entry));
}

void ZipWriter::finish() {
  if (entries_.size() >= 0xffff)
    throw IOError(who_ + ": " + path_ + ": " + std::to_string(entries_.size()) +
                  " entries; kiln writes archives of fewer than 65535 (no ZIP64 yet)");
  const uint32_t directory_offset = checked_size(file_.size(), "the archive");
  std::vector<std::byte> directory;
  for (const Entry& entry : entries_) {
    put(directory, kCentralHeader, 4);
    put(directory, kVersion, 2);  // made by: MS-DOS attributes, version 2.0
    put_common_fields(directory, entry);
    put(directory, 0, 2);  // comment
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);  // internal attributes
    put(directory, 0, 4);  // external attributes
    put(directory, entry.offset, 4);
    put_name(directory, entry.name);
  }
  const uint32_t directory_size = checked_size(directory.size(), "the central directory");
  put(directory, kEndRecord, 4);
  put(directory, 0, 2);  // this disk
  put(directory, 0, 2);  // the directory's disk
  put(directory, entries_.size(), 2);
  put(directory, entries_.size(), 2);
  put(directory, directory_size, 4);
  put(directory, directory_offset, 4);
  put(directory, 0, 2);  // comment
  checked_size(uint64_t{directory_offset} + directory.size(), "the archive");
  file_.write(directory);
  file_.commit();
}

ZipReader::ZipReader(std::span<const std::byte> archive, std::string what) : archive_(archive), what_(std::move(what)) {
  const Fields fields(archive, what_);
  const uint64_t end = find_end_record(fields, archive.size(), what_);
  uint64_t count = fields.get(end + 10, 2);
  uint64_t directory_size = fields.get(end + 12, 4);
  uint64_t directory_offset = fields.get(end + 16, 4);
  if (end >= kZip64EndLocatorSize && fields.get(end - kZip64EndLocatorSize, 4) == kZip64EndLocator) {
    const uint64_t record = fields.get(end - kZip64EndLocatorSize + 8, 8);
    if (fields.get(record, 4) != kZip64EndRecord)
      throw IOError(what_ + ": the archive is corrupt (its ZIP64 end record is not where its locator says)");
    count = fields.get(record + 32, 8);
    directory_size = fields.get(record + 40, 8);
    directory_offset = fields.get(record + 48, 8);
  }
  fields.check(directory_offset, directory_size);

  uint64_t at = directory_offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (fields.get(at, 4) != kCentralHeader)
      throw IOError(what_ + ": the archive is corrupt (entry " + std::to_string(i) + " of its central directory has no header)");
    Entry entry;
    const uint64_t flags = fields.get(at + 8, 2);
    entry.method = static_cast<uint16_t>(fields.get(at + 10, 2));
    entry.crc = static_cast<uint32_t>(fields.get(at + 16, 4));
    entry.compressed_size = fields.get(at + 20, 4);
    entry.size = fields.get(at + 24, 4);
    const uint64_t name_length = fields.get(at + 28, 2), extra_length = fields.get(at + 30, 2);
    const uint64_t comment_length = fields.get(at + 32, 2);
    uint64_t local_offset = fields.get(at + 42, 4);
    entry.name = fields.text(at + kCentralHeaderSize, name_length);
    const std::string where = what_ + ", entry '" + entry.name + "'";
    // A field too large for 32 bits is all ones, and its 64-bit value is in the ZIP64 extra
    // field, in this order.
    const uint64_t extra_end = at + kCentralHeaderSize + name_length + extra_length;
    for (uint64_t extra = at + kCentralHeaderSize + name_length; extra + 4 <= extra_end;) {
      const uint64_t id = fields.get(extra, 2), length = fields.get(extra + 2, 2);
      uint64_t value = extra + 4;
      if (id == kZip64ExtraField)
        for (uint64_t* field : {&entry.size, &entry.compressed_size, &local_offset})
          if (*field == 0xffffffff && value + 8 <= extra + 4 + length) {
            *field = fields.get(value, 8);
            value += 8;
          }
      extra += 4 + length;
    }
    if (flags & kEncrypted) throw IOError(where + " is encrypted; kiln reads only unencrypted archives");
    if (entry.method != kStored && entry.method != kDeflated)
      throw IOError(where + " uses compression method " + std::to_string(entry.method) +
                    "; kiln reads stored (0) and deflated (8) entries, as NumPy writes them");
    if (fields.get(local_offset, 4) != kLocalHeader)
      throw IOError(where + ": the archive is corrupt (no local header where the central directory says)");
    const uint64_t local_name_length = fields.get(local_offset + 26, 2), local_extra_length = fields.get(local_offset + 28, 2);
    if (fields.text(local_offset + kLocalHeaderSize, local_name_length) != entry.name)
      throw IOError(where + ": the archive is corrupt (its local header names '" +
                    fields.text(local_offset + kLocalHeaderSize, local_name_length) + "')");
    entry.data_offset = local_offset + kLocalHeaderSize + local_name_length + local_extra_length;
    fields.check(entry.data_offset, entry.compressed_size);
    if (std::ranges::any_of(entries_, [&](const Entry& e) { return e.name == entry.name; }))
      throw IOError(where + ": the archive is corrupt (it holds two entries of that name)");
    entries_.push_back(std::move(entry));
    at = extra_end + comment_length;
  }
}

std::span<const std::byte> ZipReader::contents(const Entry& entry, std::vector<std::byte>& inflated) const {
  const std::string where = what_ + ", entry '" + entry.name + "'";
  std::span<const std::byte> bytes = archive_.subspan(entry.data_offset, entry.compressed_size);
  if (entry.method == kDeflated) {
    // Deflate expands at most 1032-fold: a larger claim is a corrupt header, not memory to allocate.
    if (entry.size / 1032 > entry.compressed_size)
      throw IOError(where + " is corrupt: it claims " + std::to_string(entry.size) + " bytes from " +
                    std::to_string(entry.compressed_size) + " compressed, more than deflate can expand");
    inflated.resize(entry.size);
    inflate_into(bytes, inflated, where);
    bytes = inflated;
  } else if (entry.compressed_size != entry.size) {
    throw IOError(where + " is corrupt: stored, yet its sizes differ (" + std::to_string(entry.compressed_size) + " and " +
                  std::to_string(entry.size) + " bytes)");
  }
  const uint32_t crc = crc_of({bytes});
  if (crc != entry.crc) {
    const auto hex = [](uint32_t v) {
      char text[11];
      std::snprintf(text, sizeof text, "0x%08x", v);
      return std::string(text);
    };
    throw IOError(where + " is corrupt: its CRC-32 is " + hex(crc) + ", the archive says " + hex(entry.crc) +
                  "; the file was damaged after it was written");
  }
  return bytes;
}

}  // namespace kiln
