#pragma once
// Helpers for the tests of saving and loading: a directory per test, files as bytes, tensors of
// every dtype, and NumPy run through Debian's Python.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace kiln::test {

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string name = (std::filesystem::temp_directory_path() / "kiln_io_test_XXXXXX").string();
    if (!mkdtemp(name.data())) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> listing() const {  // sorted, hidden files too
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline const std::vector<DType>& every_dtype() {
  static const std::vector<DType> all{f32, f64, i32, i64, b8};
  return all;
}

// Distinct values that every dtype holds exactly: halves for floats, signed integers, both booleans.
inline Tensor sample(DType dtype, const Shape& shape, int seed = 1) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    const double k = static_cast<double>((static_cast<int64_t>(i) * 37 + seed * 11) % 101) - 50;
    v[i] = dtype == b8 ? (k > 0 ? 1 : 0) : is_float(dtype) ? k / 2 : k * 1000;
  }
  return Tensor::from(v, shape).to(dtype);
}

inline void expect_same_tensor(const Tensor& got, const Tensor& expected) {
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.dtype(), expected.dtype()) << got.str() << " vs " << expected.str();
  EXPECT_EQ(got.shape(), expected.shape()) << got.str() << " vs " << expected.str();
  EXPECT_EQ(got.to_vector<double>(), expected.to_vector<double>()) << got.values_str() << " vs " << expected.values_str();
}

// The bytes of a .npy file with the given header dict and elements, as NumPy lays them out.
inline std::vector<uint8_t> npy_file(const std::string& dict, const std::vector<uint8_t>& elements, int major = 1) {
  const size_t length_width = major == 1 ? 2 : 4;
  std::string header = dict;
  while ((6 + 2 + length_width + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::vector<uint8_t> bytes{0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t i = 0; i < length_width; ++i) bytes.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), elements.begin(), elements.end());
  return bytes;
}

template <class T> std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Debian's Python, which Debian's python3-numpy serves (another python3 first on the PATH may lack it).
inline constexpr const char* kNumpyPython = "/usr/bin/python3";

struct PythonRun {
  int status = -1;
  std::string output;  // stdout and stderr
};

inline PythonRun run_python(const std::string& script, const TempDir& dir) {
  const std::string script_path = dir.file("script.py"), output_path = dir.file("script.out");
  std::ofstream(script_path) << script;
  const std::string command = std::string(kNumpyPython) + " " + script_path + " > " + output_path + " 2>&1";
  PythonRun run;
  run.status = std::system(command.c_str());
  const std::vector<uint8_t> output = read_bytes(output_path);
  run.output.assign(output.begin(), output.end());
  std::filesystem::remove(script_path);
  std::filesystem::remove(output_path);
  return run;
}

// The interoperability tests need NumPy: its absence fails them (the suite runs after setup.sh).
inline ::testing::AssertionResult numpy_is_installed(const TempDir& dir) {
  const PythonRun run = run_python("import numpy\n", dir);
  if (run.status == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << kNumpyPython << " cannot import numpy (" << run.output
                                       << "); run scripts/setup.sh, which installs Debian's python3-numpy";
}

}  // namespace kiln::test
