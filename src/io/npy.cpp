// NumPy's .npy format: the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), the length of the
// header (2 bytes little-endian in 1.0, 4 after), the header: a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces to a multiple of
// 64 bytes and ended by '\n', then the elements.
#include "io/npy.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <string_view>

#include "io/file.hpp"
#include "kiln/io.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

static_assert(std::endian::native == std::endian::little, "kiln writes .npy files in the host's byte order, little-endian");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kAlignment = 64;  // NumPy aligns the elements so that a mapped file can be used in place

const char* descr_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::b8: return "|b1";
  }
  return "";
}

struct ElementType {
  DType dtype;
  bool big_endian;
};

// The byte order ('<', '>', '=' native, '|' not applicable) may be left out; the rest is the kind
// and the size in bytes.
std::optional<ElementType> element_type_of(std::string_view descr) {
  bool big_endian = false;
  if (!descr.empty() && std::string_view("<>=|").find(descr[0]) != std::string_view::npos) {
    big_endian = descr[0] == '>';
    descr.remove_prefix(1);
  }
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::b8})
    if (descr == std::string_view(descr_of(dtype)).substr(1)) return ElementType{dtype, big_endian && dtype_size(dtype) > 1};
  return std::nullopt;
}

std::string shape_tuple(const Shape& shape) {  // as Python prints a tuple: (), (3,), (2, 3)
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

struct Header {
  ElementType element;
  Shape shape;
  bool fortran_order = false;
};

// Reads the header's dict literal: string keys, and values that are strings, True/False or tuples
// of integers, which is all NumPy writes.
class HeaderReader {
 public:
  HeaderReader(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  Header read() {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<Shape> shape;
    expect('{');
    while (!consume('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr") descr = peek() == '\'' || peek() == '"' ? quoted() : raw_value();
      else if (key == "fortran_order") fortran_order = boolean();
      else if (key == "shape") shape = tuple();
      else malformed("the key '" + key + "' (a .npy header has only 'descr', 'fortran_order' and 'shape')");
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    if (!descr || !fortran_order || !shape) malformed("all of 'descr', 'fortran_order' and 'shape'");
    const std::optional<ElementType> element = element_type_of(*descr);
    if (!element)
      throw IOError(what_ + ": the dtype '" + *descr + "' is not one kiln has (kiln reads " + descr_of(f32) + ", " +
                    descr_of(f64) + ", " + descr_of(i32) + ", " + descr_of(i64) + " and " + descr_of(b8) +
                    ", either byte order); convert the array in NumPy first, e.g. a.astype(np.float64)");
    return Header{*element, *shape, *fortran_order};
  }

 private:
  char peek() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n')) ++at_;
    return at_ < text_.size() ? text_[at_] : '\0';
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++at_;
    return true;
  }
  void expect(char c) {
    if (!consume(c)) malformed(std::string("'") + c + "'");
  }
  std::string quoted() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') malformed("a quoted string");
    const size_t end = text_.find(quote, at_ + 1);
    if (end == std::string_view::npos) malformed("the end of a quoted string");
    std::string value(text_.substr(at_ + 1, end - at_ - 1));
    at_ = end + 1;
    return value;
  }
  bool boolean() {
    peek();
    for (const bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (text_.substr(at_, word.size()) == word) {
        at_ += word.size();
        return value;
      }
    }
    malformed("True or False");
  }
  Shape tuple() {
    Shape shape;
    expect('(');
    while (!consume(')')) {
      shape.push_back(integer());
      consume('L');  // Python 2 wrote long integers with a suffix
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }
  int64_t integer() {
    peek();
    const size_t start = at_;
    int64_t value = 0;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
      if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, text_[at_] - '0', &value))
        malformed("a dimension below 2^63");
      ++at_;
    }
    if (at_ == start) malformed("a dimension (a non-negative integer)");
    return value;
  }
  // A value that is not a string, kept as text for the error message: a structured dtype's list.
  std::string raw_value() {
    const size_t start = at_;
    int depth = 0;
    for (; at_ < text_.size(); ++at_) {
      const char c = text_[at_];
      if (c == '[' || c == '(') ++depth;
      if (c == ']' || c == ')') --depth;
      if (depth == 0 && (c == ',' || c == '}')) break;
    }
    return std::string(text_.substr(start, at_ - start));
  }
  [[noreturn]] void malformed(const std::string& expected) {
    throw IOError(what_ + ": the .npy header is malformed: expected " + expected + " at character " +
                  std::to_string(at_) + " of " + std::string(text_) + "; the file is corrupt or not a .npy file");
  }

  std::string_view text_;
  const std::string& what_;
  size_t at_ = 0;
};

uint32_t little_endian(std::span<const std::byte> bytes, size_t at, size_t width) {
  uint32_t value = 0;
  for (size_t i = 0; i < width; ++i) value |= std::to_integer<uint32_t>(bytes[at + i]) << (8 * i);
  return value;
}

void swap_bytes(Tensor& t) {
  std::byte* p = t.raw_data();
  const size_t width = dtype_size(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i, p += width) std::reverse(p, p + width);
}

}  // namespace

NpyBytes::NpyBytes(const Tensor& value) : elements_(value.contiguous()) {
  const std::string dict = std::string("{'descr': '") + descr_of(value.dtype()) +
                           "', 'fortran_order': False, 'shape': " + shape_tuple(value.shape()) + ", }";
  const bool fits_version_1 = dict.size() + kAlignment <= 0xffff;  // the padded header's length in 2 bytes
  const size_t length_width = fits_version_1 ? 2 : 4;
  const size_t unpadded = kMagic.size() + 2 + length_width + dict.size() + 1;
  const size_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;
  const size_t header_length = dict.size() + padding + 1;
  header_ = std::string(kMagic) + char(fits_version_1 ? 1 : 2) + char(0);
  for (size_t i = 0; i < length_width; ++i) header_ += static_cast<char>((header_length >> (8 * i)) & 0xff);
  header_ += dict + std::string(padding, ' ') + '\n';
}

std::vector<std::span<const std::byte>> NpyBytes::pieces() const {
  return {std::as_bytes(std::span(header_)), std::span(static_cast<const std::byte*>(elements_.raw_data()), elements_.nbytes())};
}

Tensor parse_npy(std::span<const std::byte> bytes, const std::string& what) {
  const std::string_view magic(reinterpret_cast<const char*>(bytes.data()), std::min(bytes.size(), kMagic.size()));
  if (magic != kMagic) throw IOError(what + ": not a .npy file (it does not begin with NumPy's magic \"\\x93NUMPY\")");
  if (bytes.size() < kMagic.size() + 4) throw IOError(what + ": the file is truncated inside its .npy header");
  const int major = std::to_integer<int>(bytes[6]), minor = std::to_integer<int>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3)
    throw IOError(what + ": .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                  " is not one kiln reads (1.0, 2.0, 3.0)");
  const size_t length_width = major == 1 ? 2 : 4;
  const size_t header_start = kMagic.size() + 2 + length_width;
  if (bytes.size() < header_start) throw IOError(what + ": the file is truncated inside its .npy header");
  const size_t header_length = little_endian(bytes, 8, length_width);
  if (bytes.size() - header_start < header_length)
    throw IOError(what + ": the file is truncated inside its .npy header (it promises " + std::to_string(header_length) +
                  " bytes of header, " + std::to_string(bytes.size() - header_start) + " follow)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + header_start, header_length);
  const Header header = HeaderReader(text, what).read();
  const DType dtype = header.element.dtype;

  int64_t expected = 0;
  try {
    expected = shape_nbytes(header.shape, dtype);
  } catch (const ShapeError&) {
    throw IOError(what + ": the .npy header's shape " + shape_tuple(header.shape) + " overflows a 64-bit size");
  }
  const std::span<const std::byte> data = bytes.subspan(header_start + header_length);
  if (data.size() != static_cast<uint64_t>(expected))
    throw IOError(what + ": the header promises " + std::to_string(expected) + " bytes of " + dtype_name(dtype) +
                  shape_str(header.shape) + " elements and " + std::to_string(data.size()) + " follow; the file is " +
                  (data.size() < static_cast<uint64_t>(expected) ? "truncated" : "corrupt"));

  // A Fortran-order array's bytes are the C-order array of the reversed shape, transposed.
  Shape stored_shape = header.shape;
  if (header.fortran_order) std::reverse(stored_shape.begin(), stored_shape.end());
  Tensor t = Tensor::empty(stored_shape, dtype);
  if (!data.empty()) std::memcpy(t.raw_data(), data.data(), data.size());
  if (header.element.big_endian) swap_bytes(t);
  if (dtype == DType::b8) {  // kiln's booleans are 0 or 1; a byte NumPy would read as True may be any non-zero
    std::byte* p = t.raw_data();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::byte{p[i] != std::byte{0}};
  }
  if (header.fortran_order && t.ndim() > 1) {
    Shape strides = contiguous_strides(stored_shape);
    std::reverse(strides.begin(), strides.end());
    t = t.view(header.shape, strides, 0).clone();
  }
  return t;
}

void save_npy(const std::string& path, const Tensor& value) {
  const InternalTensors internal;
  std::optional<NpyBytes> npy;
  try {
    npy.emplace(value);
  } catch (const Error& e) {
    e.rethrow_with("save_npy: " + path + ": " + e.what());
  }
  AtomicFile file(path, "save_npy");
  for (const auto& piece : npy->pieces()) file.write(piece);
  file.commit();
}

Tensor load_npy(const std::string& path, Loc loc) {
  Tensor value;
  {
    const InternalTensors internal;
    const MappedFile file(path, "load_npy");
    value = parse_npy(file.bytes(), "load_npy: " + path);
  }
  return TensorBook::handed_over(std::move(value), loc);
}

}  // namespace kiln
