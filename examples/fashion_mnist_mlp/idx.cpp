#include "idx.hpp"

#include <zlib.h>

#include <cstdint>
#include <vector>

namespace {

const char* kInstallHint = "; install the data set with: sudo apt-get install dataset-fashion-mnist";

std::vector<uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw kiln::IOError("cannot open " + path + kInstallHint);
  std::vector<uint8_t> data;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) data.insert(data.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || err < 0) throw kiln::IOError(path + " is not a readable gzip file (" + msg + ")" + kInstallHint);
  return data;
}

uint32_t be32(const std::vector<uint8_t>& d, size_t at) {
  return (uint32_t{d[at]} << 24) | (uint32_t{d[at + 1]} << 16) | (uint32_t{d[at + 2]} << 8) | d[at + 3];
}

// Checks the IDX header: magic 0x00000800 | ndim, then ndim big-endian sizes, then the bytes.
std::vector<uint32_t> header(const std::vector<uint8_t>& d, uint32_t ndim, const std::string& path) {
  if (d.size() < 4 + 4 * ndim || be32(d, 0) != (0x800u | ndim))
    throw kiln::IOError(path + " is not an IDX file of unsigned bytes with " + std::to_string(ndim) + " dimensions");
  std::vector<uint32_t> dims;
  uint64_t total = 1;
  for (uint32_t i = 0; i < ndim; ++i) {
    dims.push_back(be32(d, 4 + 4 * i));
    total *= dims.back();
  }
  if (d.size() != 4 + 4 * ndim + total)
    throw kiln::IOError(path + " is truncated or malformed: the header promises " + std::to_string(total) +
                        " values, the file holds " + std::to_string(d.size() - 4 - 4 * ndim));
  return dims;
}

}  // namespace

kiln::Tensor read_idx_images(const std::string& path) {
  std::vector<uint8_t> d = read_gz(path);
  auto dims = header(d, 3, path);
  const int64_t n = dims[0], features = int64_t{dims[1]} * dims[2];
  kiln::Tensor t = kiln::Tensor::empty({n, features}, kiln::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n * features; ++i) p[i] = static_cast<float>(d[16 + i]) / 255.0f;
  return t;
}

kiln::Tensor read_idx_labels(const std::string& path) {
  std::vector<uint8_t> d = read_gz(path);
  auto dims = header(d, 1, path);
  kiln::Tensor t = kiln::Tensor::empty({int64_t{dims[0]}}, kiln::i64);
  int64_t* p = t.data<int64_t>();
  for (uint32_t i = 0; i < dims[0]; ++i) p[i] = d[8 + i];
  return t;
}
