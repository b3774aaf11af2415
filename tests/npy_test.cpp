// .npy files: one tensor, its dtype, shape and elements, and every way a file can be wrong.
#include <gtest/gtest.h>

#include "io_test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Npy, EveryDtypeRoundTrips) {
  const TempDir dir;
  for (DType dtype : every_dtype()) {
    const Tensor value = sample(dtype, {2, 3});
    const std::string path = dir.file(std::string(dtype_name(dtype)) + ".npy");
    save_npy(path, value);
    expect_same_tensor(load_npy(path), value);
  }
}

TEST(Npy, ScalarsAndEmptyTensorsRoundTrip) {
  const TempDir dir;
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{2, 0, 3}, Shape{1, 1, 1, 1}}) {
    const Tensor value = sample(f64, shape);
    save_npy(dir.file("t.npy"), value);
    expect_same_tensor(load_npy(dir.file("t.npy")), value);
  }
}

TEST(Npy, NonContiguousViewsAreSavedInRowMajorOrder) {
  const TempDir dir;
  const Tensor base = sample(i32, {3, 4});
  const Tensor transposed = base.view({4, 3}, {1, 4}, 0);
  const Tensor column = base.view({3}, {4}, 2);  // every row's third element
  ASSERT_FALSE(transposed.is_contiguous());
  for (const Tensor& view : {transposed, column}) {
    save_npy(dir.file("view.npy"), view);
    expect_same_tensor(load_npy(dir.file("view.npy")), view.clone());
  }
}

TEST(Npy, TheFileIsNumPysFormatOnePointZero) {
  const TempDir dir;
  save_npy(dir.file("t.npy"), Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}));
  const std::vector<uint8_t> bytes = read_bytes(dir.file("t.npy"));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::vector<uint8_t> expected = npy_file(dict, bytes_of(std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ((bytes.size() - 24) % 64, 0u) << "the elements start on a 64-byte boundary";
}

TEST(Npy, ReadsVersionsTwoAndThreeFortranOrderAndBigEndian) {
  const TempDir dir;
  const std::vector<int32_t> elements{1, 2, 3, 4, 5, 6};
  write_bytes(dir.file("v2.npy"), npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }", bytes_of(elements), 2));
  expect_same_tensor(load_npy(dir.file("v2.npy")), Tensor::from(elements, {3, 2}));
  write_bytes(dir.file("v3.npy"), npy_file("{\"shape\": (6,), \"fortran_order\": False, \"descr\": \"<i4\"}", bytes_of(elements), 3));
  expect_same_tensor(load_npy(dir.file("v3.npy")), Tensor::from(elements, {6}));
  // Column by column: the C-order array is [[1, 3, 5], [2, 4, 6]].
  write_bytes(dir.file("fortran.npy"), npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", bytes_of(elements)));
  expect_same_tensor(load_npy(dir.file("fortran.npy")), Tensor::from(std::vector<int32_t>{1, 3, 5, 2, 4, 6}, {2, 3}));
  write_bytes(dir.file("big.npy"), npy_file("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }",
                                            {0x3f, 0xf8, 0, 0, 0, 0, 0, 0}));
  expect_same_tensor(load_npy(dir.file("big.npy")), Tensor::from(std::vector<double>{1.5}));
}

TEST(Npy, BooleansAreZeroOrOne) {
  const TempDir dir;
  write_bytes(dir.file("b.npy"), npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", {0, 1, 7}));
  const Tensor loaded = load_npy(dir.file("b.npy"));
  const auto* bytes = reinterpret_cast<const uint8_t*>(loaded.raw_data());
  EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + 3), (std::vector<uint8_t>{0, 1, 1}));
}

TEST(Npy, ALoadedTensorBelongsToTheCallersDisposeScope) {
  const TempDir dir;
  save_npy(dir.file("t.npy"), sample(f32, {4}));
  Tensor loaded;
  {
    DisposeScope scope;
    loaded = load_npy(dir.file("t.npy"));
  }
  EXPECT_TRUE(loaded.is_disposed());
}

TEST(Npy, AMissingFileIsAnIOErrorNamingIt) {
  const TempDir dir;
  expect_error<IOError>([&] { load_npy(dir.file("absent.npy")); }, {"load_npy", "absent.npy", "cannot open"});
  expect_error<IOError>([&] { load_npy(dir.file("")); }, {"load_npy", "not a regular file"});
}

TEST(Npy, ForeignTruncatedAndCorruptFilesAreIOErrorsNamingTheFile) {
  const TempDir dir;
  const std::string path = dir.file("bad.npy");
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const auto expect_file_error = [&](const std::vector<uint8_t>& bytes, const std::vector<std::string>& fragments) {
    write_bytes(path, bytes);
    std::vector<std::string> all{"load_npy", path};
    all.insert(all.end(), fragments.begin(), fragments.end());
    expect_error<IOError>([&] { load_npy(path); }, all);
  };
  expect_file_error({}, {"not a .npy file"});
  expect_file_error({'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}, {"not a .npy file", "magic"});
  const std::vector<uint8_t> good = npy_file(dict, bytes_of(std::vector<float>{1, 2}));
  expect_file_error(std::vector<uint8_t>(good.begin(), good.begin() + 9), {"truncated inside its .npy header"});
  expect_file_error(std::vector<uint8_t>(good.begin(), good.begin() + 40), {"truncated inside its .npy header"});
  expect_file_error(std::vector<uint8_t>(good.begin(), good.end() - 1), {"promises 8 bytes", "7 follow", "truncated"});
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  expect_file_error(longer, {"9 follow", "corrupt"});
  std::vector<uint8_t> version = good;
  version[6] = 4;
  expect_file_error(version, {"version 4.0", "1.0, 2.0, 3.0"});
  expect_file_error(npy_file("{'descr': '<f4', 'fortran_order': False}", {}), {"malformed", "'shape'"});
  expect_file_error(npy_file("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", {}), {"malformed", "True or False"});
  expect_file_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", {}),
                    {"malformed", "'extra'"});
  expect_file_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", {}), {"malformed", "dimension"});
  expect_file_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", {}),
                    {"overflows"});
}

TEST(Npy, ADtypeKilnLacksIsAnIOErrorNamingIt) {
  const TempDir dir;
  const std::string path = dir.file("complex.npy");
  write_bytes(path, npy_file("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", std::vector<uint8_t>(16)));
  expect_error<IOError>([&] { load_npy(path); }, {path, "'<c16'", "not one kiln has", "astype"});
  write_bytes(path, npy_file("{'descr': [('x', '<f4'), ('y', '<i4')], 'fortran_order': False, 'shape': (1,), }", {}));
  expect_error<IOError>([&] { load_npy(path); }, {path, "[('x', '<f4'), ('y', '<i4')]", "not one kiln has"});
}
