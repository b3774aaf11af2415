// Fashion-MNIST's IDX files: a big-endian header (magic 0x00000800 | ndim for unsigned bytes,
// then ndim sizes), then the bytes; Debian ships them gzip-compressed.
#include <zlib.h>

#include <cstdint>
#include <vector>

#include "kiln/data.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

const char* kInstallHint = "; Debian installs Fashion-MNIST with: apt-get install dataset-fashion-mnist";

// The file's bytes, gunzipped when they are compressed (zlib reads plain files as they are); path
// becomes the name of the file read.
std::vector<uint8_t> read_file(std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f && path.ends_with(".gz")) {  // the same file gunzipped, under the name gunzip gives it
    if ((f = gzopen(path.substr(0, path.size() - 3).c_str(), "rb"))) path.resize(path.size() - 3);
  }
  if (!f) throw IOError("FashionMnist: cannot open " + path + " (nor it without .gz)" + kInstallHint);
  std::vector<uint8_t> data;
  std::vector<uint8_t> chunk(size_t{1} << 16);
  int n;
  while ((n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0) data.insert(data.end(), chunk.begin(), chunk.begin() + n);
  int err = 0;
  const std::string message = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || err < 0) throw IOError("FashionMnist: " + path + " is not a readable gzip file (" + message + ")" + kInstallHint);
  return data;
}

uint32_t big_endian(const std::vector<uint8_t>& d, size_t at) {
  return (uint32_t{d[at]} << 24) | (uint32_t{d[at + 1]} << 16) | (uint32_t{d[at + 2]} << 8) | d[at + 3];
}

// The sizes in an IDX header of unsigned bytes with ndim dimensions, checked against the file.
std::vector<int64_t> idx_sizes(const std::vector<uint8_t>& d, uint32_t ndim, const std::string& path) {
  if (d.size() < 4 + 4 * size_t{ndim} || big_endian(d, 0) != (0x800u | ndim))
    throw IOError("FashionMnist: " + path + " is not an IDX file of unsigned bytes with " + std::to_string(ndim) +
                  " dimensions" + kInstallHint);
  std::vector<int64_t> sizes;
  uint64_t total = 1;
  for (uint32_t i = 0; i < ndim; ++i) {
    sizes.push_back(big_endian(d, 4 + 4 * size_t{i}));
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(sizes.back()), &total))
      throw IOError("FashionMnist: " + path + " is malformed: the sizes in its header overflow a 64-bit count");
  }
  const uint64_t held = d.size() - 4 - 4 * size_t{ndim};
  if (held != total)
    throw IOError("FashionMnist: " + path + " is truncated or malformed: its header promises " + std::to_string(total) +
                  " values, the file holds " + std::to_string(held));
  return sizes;
}

Tensor read_images(std::string& path) {
  const std::vector<uint8_t> d = read_file(path);
  const std::vector<int64_t> sizes = idx_sizes(d, 3, path);
  const int64_t n = sizes[0], pixels = sizes[1] * sizes[2];
  Tensor images = Tensor::empty({n, pixels}, f32);
  float* p = images.data<float>();
  for (int64_t i = 0; i < n * pixels; ++i) p[i] = static_cast<float>(d[16 + static_cast<size_t>(i)]) / 255.0f;
  return images;
}

Tensor read_labels(std::string& path) {
  const std::vector<uint8_t> d = read_file(path);
  const int64_t n = idx_sizes(d, 1, path)[0];
  Tensor labels = Tensor::empty({n}, i64);
  int64_t* p = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = d[8 + static_cast<size_t>(i)];
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
