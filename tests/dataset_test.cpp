// Datasets: named tensors, TensorDataset's rows, Fashion-MNIST's IDX files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_dataset_test_" + name)).string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

// Found by the robustness trial: an .npz of 70 000 entries took 20 s to load, each name searched
// through all the ones before it. Many fields are found by name in one step.
TEST(NamedTensors, ManyFieldsAreFoundAndReplacedByName) {
  NamedTensors many;
  for (int i = 0; i < 5000; ++i) many.set("e" + std::to_string(i), Tensor::scalar(static_cast<double>(i)));
  many.set("e17", Tensor::scalar(-1.0));
  EXPECT_EQ(many.size(), 5000u);
  EXPECT_EQ(many["e4999"].item<double>(), 4999);
  EXPECT_EQ(many["e17"].item<double>(), -1);
  EXPECT_TRUE(many.contains("e0"));
  EXPECT_FALSE(many.contains("e5000"));
  EXPECT_EQ(many.begin()->first, "e0");  // the order they were set in
}

TEST(NamedTensors, AMissingNameIsAnErrorThatListsTheFields) {
  const NamedTensors named{{"image", Tensor::zeros({2})}, {"label", Tensor::scalar(int64_t{1})}};
  EXPECT_EQ(named["label"].item<int64_t>(), 1);
  EXPECT_TRUE(named.contains("image"));
  expect_error<Error>([&] { (void)named["imgae"]; }, {"'imgae'", "image, label"});
}

TEST(TensorDataset, ExamplesAreRowViewsOfTheFields) {
  Tensor images = Tensor::from(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor labels = Tensor::from(std::vector<int64_t>{7, 8, 9});
  TensorDataset dataset({{"image", images}, {"label", labels}});
  ASSERT_EQ(dataset.size(), 3);
  const NamedTensors second = dataset.get(1);
  expect_values(second["image"], {2, 3}, 0);
  EXPECT_EQ(second["label"].shape(), Shape{});
  EXPECT_EQ(second["label"].item<int64_t>(), 8);
  EXPECT_TRUE(second["image"].shares_memory(images));
  images.dispose();  // the dataset keeps its own handle
  expect_values(dataset.get(2)["image"], {4, 5}, 0);
  expect_error<Error>([&] { dataset.get(3); }, {"index 3", "3 examples"});
}

TEST(TensorDataset, FieldsWithDifferentRowCountsOrScalarsAreRejected) {
  expect_error<ShapeError>(
      [] { TensorDataset({{"image", Tensor::zeros({3, 2})}, {"label", Tensor::zeros({4})}}); },
      {"'label'", "4 rows", "'image' has 3"});
  expect_error<ShapeError>([] { TensorDataset({{"x", Tensor::scalar(1.0f)}}); }, {"'x'", "scalar"});
}

TEST(FashionMnist, ReadsPlainAndCompressedIdxFilesAndRejectsOthers) {
  const std::string dir = temp_path("idx");
  std::filesystem::create_directories(dir);
  // Two 2x2 images and their labels, uncompressed (zlib reads plain files as they are).
  write_bytes(dir + "/t10k-images-idx3-ubyte.gz", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 255, 51, 102, 1, 2, 3, 4});
  write_bytes(dir + "/t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 2, 9, 4});
  FashionMnist test_split(Split::test, dir);
  ASSERT_EQ(test_split.size(), 2);
  const std::string gunzipped = temp_path("idx_plain");  // the names gunzip leaves
  std::filesystem::create_directories(gunzipped);
  std::filesystem::copy_file(dir + "/t10k-images-idx3-ubyte.gz", gunzipped + "/t10k-images-idx3-ubyte",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(dir + "/t10k-labels-idx1-ubyte.gz", gunzipped + "/t10k-labels-idx1-ubyte",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(FashionMnist(Split::test, gunzipped).size(), 2);
  // An error names the file read, not the compressed name it was looked for under.
  write_bytes(gunzipped + "/t10k-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0, 0, 3, 9, 4});
  try {
    FashionMnist(Split::test, gunzipped);
    ADD_FAILURE() << "no error";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-labels-idx1-ubyte is truncated"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(gunzipped);
  expect_values(test_split.get(0)["image"], {0, 1, 0.2, 0.4}, 1e-6);
  EXPECT_EQ(test_split.get(1)["label"].item<int64_t>(), 4);
  EXPECT_EQ(test_split.field("image").shape(), (Shape{2, 4}));

  write_bytes(dir + "/t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 3, 9, 4});  // promises 3 labels
  expect_error<IOError>([&] { FashionMnist(Split::test, dir); }, {"t10k-labels", "promises 3", "holds 2"});
  write_bytes(dir + "/t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 2, 5, 200});  // not a class
  expect_error<IOError>([&] { FashionMnist(Split::test, dir); }, {"t10k-labels", "label 1 is 200", "0..9"});
  write_bytes(dir + "/t10k-labels-idx1-ubyte.gz", {'n', 'o', 't', ' ', 'i', 'd', 'x', '!', 9});
  expect_error<IOError>([&] { FashionMnist(Split::test, dir); }, {"t10k-labels", "not an IDX file"});
  expect_error<IOError>([&] { FashionMnist(Split::train, dir); },
                                 {"cannot open", "train-images", "apt-get install dataset-fashion-mnist"});
  std::filesystem::remove_all(dir);
}

// Found by the robustness trial: the whole file was read before its header was checked, so a
// link to /dev/zero allocated until the system refused (std::bad_alloc escaped), a pipe hung, and
// a gzip file of endless zeros took 8 GB before the error.
TEST(FashionMnist, AFileThatIsNotWhatItClaimsIsRefusedWithoutReadingItAll) {
  const std::string dir = temp_path("idx_odd");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_bytes(dir + "/t10k-labels-idx1-ubyte.gz", {0, 0, 8, 1, 0, 0, 0, 2, 9, 4});
  std::filesystem::create_symlink("/dev/zero", dir + "/t10k-images-idx3-ubyte.gz");
  expect_error<IOError>([&] { FashionMnist(Split::test, dir); }, {"t10k-images-idx3-ubyte.gz", "not a regular file"});
  std::filesystem::remove(dir + "/t10k-images-idx3-ubyte.gz");
  // A header promising two 2x2 images, then more bytes than that.
  write_bytes(dir + "/t10k-images-idx3-ubyte.gz", {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  expect_error<IOError>([&] { FashionMnist(Split::test, dir); }, {"t10k-images", "holds more than the 8 values"});
  std::filesystem::remove_all(dir);
}

TEST(FashionMnist, TheInstalledDataSet) {
  if (!std::filesystem::exists(std::string(FashionMnist::kDefaultDirectory) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMnist test_split(Split::test);
  ASSERT_EQ(test_split.size(), 10000);
  const NamedTensors first = test_split.get(0);
  EXPECT_EQ(first["image"].shape(), Shape{784});
  EXPECT_EQ(first["label"].item<int64_t>(), 9);  // the first test image is an ankle boot
  EXPECT_LE(max(test_split.field("image")).item<float>(), 1.0f);
}

TEST(TensorDataset, GetBatchGathersTheRowsAsStackingTheExamplesWould) {
  Tensor images = random_tensor({6, 2, 3}, f32, -1, 1, 3);
  TensorDataset dataset({{"image", images}, {"label", Tensor::from(std::vector<int64_t>{0, 1, 2, 3, 4, 5})}});
  const std::vector<int64_t> indices{4, 0, 4, 2};
  const NamedTensors gathered = dataset.get_batch(indices);
  std::vector<Tensor> rows;
  for (int64_t i : indices) rows.push_back(dataset.get(i)["image"]);
  EXPECT_EQ(gathered["image"].shape(), (Shape{4, 2, 3}));
  expect_values(gathered["image"], stack(rows).to_vector<double>(), 0);
  EXPECT_EQ(gathered["label"].to_vector<int64_t>(), indices);
  EXPECT_FALSE(gathered["image"].shares_memory(images)) << "a batch is a copy";
  const std::vector<int64_t> bad{1, 6};
  expect_error<Error>([&] { dataset.get_batch(bad); }, {"index 6", "6 examples"});
}
