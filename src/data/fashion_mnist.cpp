// Fashion-MNIST's IDX files: a big-endian header (magic 0x00000800 | ndim for unsigned bytes,
// then ndim sizes), then the bytes; Debian ships them gzip-compressed.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "kiln/data.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

const char* kInstallHint = "; Debian installs Fashion-MNIST with: apt-get install dataset-fashion-mnist";

// An IDX file of unsigned bytes: its sizes and its values in row-major order.
struct Idx {
  std::vector<int64_t> sizes;
  std::vector<uint8_t> values;
};

uint32_t big_endian(const uint8_t* d) {
  return (uint32_t{d[0]} << 24) | (uint32_t{d[1]} << 16) | (uint32_t{d[2]} << 8) | d[3];
}

// The IDX file with ndim dimensions at path, gunzipped when it is compressed (zlib reads plain
// files as they are); path becomes the name of the file read. It reads what the header promises
// and one byte more, never the whole of a file that is not what it claims (/dev/zero, a pipe,
// gzip's zeros that never end).
Idx read_idx(std::string& path, uint32_t ndim) {
  auto regular = [](const std::string& p) {
    std::error_code ignored;
    return std::filesystem::is_regular_file(p, ignored);
  };
  auto exists = [](const std::string& p) {
    std::error_code ignored;
    return std::filesystem::exists(p, ignored);
  };
  if (!regular(path) && path.ends_with(".gz") && (regular(path.substr(0, path.size() - 3)) || !exists(path)))
    path.resize(path.size() - 3);  // the same file gunzipped, under the name gunzip gives it
  if (exists(path) && !regular(path))
    throw IOError("FashionMnist: " + path + " is not a regular file (a device, a pipe or a directory)" + kInstallHint);
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  if (!f) throw IOError("FashionMnist: cannot open " + path + " (nor it with .gz)" + kInstallHint);
  auto read = [&](uint8_t* into, size_t n) {
    size_t got = 0;
    while (got < n) {
      const int k = gzread(f.get(), into + got, static_cast<unsigned>(std::min<size_t>(n - got, size_t{1} << 20)));
      if (k < 0) {
        int err = 0;
        throw IOError("FashionMnist: " + path + " is not a readable gzip file (" + gzerror(f.get(), &err) + ")" + kInstallHint);
      }
      if (k == 0) break;
      got += static_cast<size_t>(k);
    }
    return got;
  };
  std::vector<uint8_t> header(4 + 4 * size_t{ndim});
  if (read(header.data(), header.size()) != header.size() || big_endian(header.data()) != (0x800u | ndim))
    throw IOError("FashionMnist: " + path + " is not an IDX file of unsigned bytes with " + std::to_string(ndim) +
                  " dimensions" + kInstallHint);
  Idx idx;
  uint64_t total = 1;
  for (uint32_t i = 0; i < ndim; ++i) {
    idx.sizes.push_back(big_endian(header.data() + 4 + 4 * size_t{i}));
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(idx.sizes.back()), &total))
      throw IOError("FashionMnist: " + path + " is malformed: the sizes in its header overflow a 64-bit count");
  }
  // Grown as the values arrive: a header promising more than the file holds allocates no more
  // than the file's size.
  for (uint64_t held = 0; held < total;) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(total - held, uint64_t{1} << 24));
    idx.values.resize(static_cast<size_t>(held) + step);
    const size_t got = read(idx.values.data() + held, step);
    held += got;
    if (got < step)
      throw IOError("FashionMnist: " + path + " is truncated or malformed: its header promises " + std::to_string(total) +
                    " values, the file holds " + std::to_string(held));
  }
  uint8_t more = 0;
  if (read(&more, 1) != 0)
    throw IOError("FashionMnist: " + path + " is malformed: it holds more than the " + std::to_string(total) +
                  " values its header promises");
  return idx;
}

Tensor read_images(std::string& path) {
  const Idx idx = read_idx(path, 3);
  const int64_t n = idx.sizes[0], pixels = idx.sizes[1] * idx.sizes[2];
  Tensor images = Tensor::empty({n, pixels}, f32);
  float* p = images.data<float>();
  for (int64_t i = 0; i < n * pixels; ++i) p[i] = static_cast<float>(idx.values[static_cast<size_t>(i)]) / 255.0f;
  return images;
}

Tensor read_labels(std::string& path) {
  const Idx idx = read_idx(path, 1);
  const int64_t n = idx.sizes[0];
  Tensor labels = Tensor::empty({n}, i64);
  int64_t* p = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = idx.values[static_cast<size_t>(i)];
    if (p[i] > 9)
      throw IOError("FashionMnist: " + path + " is malformed: label " + std::to_string(i) + " is " + std::to_string(p[i]) +
                    ", not a class in 0..9" + kInstallHint);
  }
  return labels;
}

NamedTensors read_split(Split split, const std::string& directory) {
  const std::string prefix = directory + (split == Split::train ? "/train" : "/t10k");
  const InternalTensors internal;
  std::string images_path = prefix + "-images-idx3-ubyte.gz", labels_path = prefix + "-labels-idx1-ubyte.gz";
  Tensor images = read_images(images_path);
  Tensor labels = read_labels(labels_path);
  if (images.shape()[0] != labels.shape()[0])
    throw IOError("FashionMnist: " + images_path + " holds " + std::to_string(images.shape()[0]) + " images but " + labels_path +
                  " holds " + std::to_string(labels.shape()[0]) + " labels");
  return {{"image", images}, {"label", labels}};
}

}  // namespace

FashionMnist::FashionMnist(Split split, const std::string& directory) : TensorDataset(read_split(split, directory)) {}

}  // namespace kiln
