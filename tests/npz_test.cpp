// .npz archives (zip files of .npy entries) and the atomic writing every save shares.
#include <gtest/gtest.h>

#include "io/npy.hpp"
#include "io/zip.hpp"
#include "io_test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

NamedTensors every_kind_of_tensor() {
  NamedTensors tensors;
  for (DType dtype : every_dtype()) tensors.set(dtype_name(dtype), sample(dtype, {3, 5}, static_cast<int>(dtype)));
  tensors.set("scalar", sample(f64, {}));
  tensors.set("empty", sample(f32, {0, 4}));
  tensors.set("transposed", sample(i64, {3, 4}).view({4, 3}, {1, 4}, 0));
  return tensors;
}

void expect_same_tensors(const NamedTensors& got, const NamedTensors& expected) {
  ASSERT_EQ(got.names(), expected.names());
  for (const auto& [name, value] : expected) {
    SCOPED_TRACE(name);
    expect_same_tensor(got[name], value.clone());
  }
}

uint32_t field32(const std::vector<uint8_t>& bytes, size_t at) {
  return bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (uint32_t{bytes[at + 3]} << 24);
}

void put32(std::vector<uint8_t>& bytes, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

// Where the central directory's first header is, from the end record (the last 22 bytes).
size_t central_directory(const std::vector<uint8_t>& bytes) { return field32(bytes, bytes.size() - 22 + 16); }

// The archive at path with its bytes changed by patch, then loaded: the IOError's message.
template <class Patch> void expect_patched_archive_error(const std::string& path, Patch patch, const std::vector<std::string>& fragments) {
  std::vector<uint8_t> bytes = read_bytes(path);
  patch(bytes);
  const std::string patched = path + ".patched.npz";
  write_bytes(patched, bytes);
  std::vector<std::string> all{"load_npz", patched};
  all.insert(all.end(), fragments.begin(), fragments.end());
  expect_error<IOError>([&] { load_npz(patched); }, all);
}

}  // namespace

TEST(Npz, StoredAndCompressedArchivesRoundTripInOrder) {
  const TempDir dir;
  const NamedTensors tensors = every_kind_of_tensor();
  for (const bool compressed : {false, true}) {
    const std::string path = dir.file(compressed ? "compressed.npz" : "stored.npz");
    save_npz(path, tensors, {.compressed = compressed});
    expect_same_tensors(load_npz(path), tensors);
  }
  const auto size = [&](const char* name) { return std::filesystem::file_size(dir.file(name)); };
  EXPECT_LT(size("compressed.npz"), size("stored.npz"));
}

TEST(Npz, AnEmptyArchiveRoundTrips) {
  const TempDir dir;
  save_npz(dir.file("none.npz"), {});
  EXPECT_EQ(load_npz(dir.file("none.npz")).size(), 0u);
}

TEST(Npz, TheSameTensorsMakeTheSameFile) {
  const TempDir dir;
  save_npz(dir.file("a.npz"), every_kind_of_tensor(), {.compressed = true});
  save_npz(dir.file("b.npz"), every_kind_of_tensor(), {.compressed = true});
  EXPECT_EQ(read_bytes(dir.file("a.npz")), read_bytes(dir.file("b.npz")));
}

TEST(Npz, AnEmptyKeyIsAnIOErrorAndWritesNothing) {
  const TempDir dir;
  expect_error<IOError>([&] { save_npz(dir.file("m.npz"), {{"", Tensor::zeros({2})}}); }, {"save_npz", "m.npz", "empty name"});
  EXPECT_TRUE(dir.listing().empty());
}

TEST(ZipArchive, ATruncatedOrForeignFileIsAnIOErrorNamingIt) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  save_npz(path, {{"W", sample(f32, {8, 8})}});
  const std::vector<uint8_t> good = read_bytes(path);
  for (const size_t kept : {size_t{0}, size_t{10}, good.size() / 2, good.size() - 1}) {
    write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + kept));
    expect_error<IOError>([&] { load_npz(path); }, {"load_npz", path, "no end-of-central-directory record"});
  }
  // The end record intact but the entries cut away: the directory points past the start.
  std::vector<uint8_t> tail(good.end() - 22, good.end());
  write_bytes(path, tail);
  expect_error<IOError>([&] { load_npz(path); }, {"load_npz", path, "truncated or corrupt"});
}

TEST(ZipArchive, ACrcMismatchIsAnIOErrorNamingTheEntry) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  save_npz(path, {{"a", sample(f64, {16})}, {"b", sample(f64, {16})}});
  std::vector<uint8_t> bytes = read_bytes(path);
  const size_t second_entry = 30 + 5 + 128 + 128;  // a's local header, name, .npy header and elements
  ASSERT_EQ(field32(bytes, second_entry), 0x04034b50u);
  bytes[second_entry + 30 + 5 + 128 + 3] ^= 0x10;  // one bit of b's elements
  write_bytes(path, bytes);
  expect_error<IOError>([&] { load_npz(path); }, {path, "entry 'b.npy'", "CRC-32", "corrupt"});
}

TEST(ZipArchive, CorruptDeflateDataIsAnIOErrorNamingTheEntry) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  save_npz(path, {{"a", sample(f64, {64})}}, {.compressed = true});
  std::vector<uint8_t> bytes = read_bytes(path);
  for (size_t i = 30 + 5; i < 30 + 5 + 24; ++i) bytes[i] = 0xff;
  write_bytes(path, bytes);
  expect_error<IOError>([&] { load_npz(path); }, {path, "entry 'a.npy'", "corrupt"});
}

TEST(ZipArchive, OnlyStoredAndDeflatedEntriesAreRead) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  save_npz(path, {{"a", sample(f32, {2})}});
  std::vector<uint8_t> bytes = read_bytes(path);
  const size_t directory = field32(bytes, bytes.size() - 22 + 16);
  bytes[8] = bytes[directory + 10] = 12;  // bzip2, in the local and the central header
  write_bytes(path, bytes);
  expect_error<IOError>([&] { load_npz(path); }, {path, "entry 'a.npy'", "compression method 12"});
}

TEST(ZipArchive, AnEntryThatIsNotANpyFileIsAnIOErrorNamingIt) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  ZipWriter archive(path, "test");
  const std::string text = "not an array";
  archive.add("readme.txt", {std::as_bytes(std::span(text))}, false);
  archive.finish();
  expect_error<IOError>([&] { load_npz(path); }, {"load_npz", path, "entry 'readme.txt'", "not a .npy file"});
}

TEST(AtomicSave, AFailedSaveLeavesTheExistingFileAsItWas) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  save_npz(path, {{"W", sample(f32, {4, 4})}});
  const std::vector<uint8_t> before = read_bytes(path);
  Tensor gone = sample(f32, {4});
  gone.dispose();
  // The first entry is written before the second fails.
  EXPECT_THROW(save_npz(path, {{"W", sample(f64, {100})}, {"b", gone}}), DisposedError);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"m.npz"}) << "the temporary file is removed";
  EXPECT_THROW(save_npz(dir.file("new.npz"), {{"W", sample(f64, {100})}, {"b", gone}}), DisposedError);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"m.npz"});
}

TEST(AtomicSave, AFailedRenameRemovesTheTemporaryFile) {
  const TempDir dir;
  const std::string path = dir.file("taken.npy");
  std::filesystem::create_directory(path);
  expect_error<IOError>([&] { save_npy(path, sample(f32, {4})); }, {"save_npy", "cannot rename", path, "as it was"});
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"taken.npy"});
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

TEST(AtomicSave, AMissingDirectoryIsAnIOErrorNamingIt) {
  const TempDir dir;
  expect_error<IOError>([&] { save_npy(dir.file("no/such/dir/t.npy"), sample(f32, {4})); },
                        {"save_npy", "cannot create a temporary file in", "no/such/dir"});
  EXPECT_TRUE(dir.listing().empty());
}

TEST(AtomicSave, ASaveReplacesALongerFileWhole) {
  const TempDir dir;
  const std::string path = dir.file("t.npy");
  save_npy(path, sample(f64, {1000}));
  save_npy(path, sample(i32, {3}));
  expect_same_tensor(load_npy(path), sample(i32, {3}));
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"t.npy"});
}

TEST(ZipArchive, DamagedHeadersAreIOErrorsNamingTheEntry) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  save_npz(path, {{"a", sample(f64, {16})}});
  // The central header's fields: flags at 8, compressed size at 20, size at 24.
  expect_patched_archive_error(path, [](auto& b) { b[central_directory(b)] = 'X'; }, {"central directory has no header"});
  expect_patched_archive_error(path, [](auto& b) { b[central_directory(b) + 8] |= 1; }, {"entry 'a.npy' is encrypted"});
  expect_patched_archive_error(path, [](auto& b) { b[30] = 'b'; }, {"entry 'a.npy'", "its local header names 'b.npy'"});
  expect_patched_archive_error(path, [](auto& b) { put32(b, central_directory(b) + 20, 200); },
                               {"entry 'a.npy'", "stored, yet its sizes differ (200 and 256 bytes)"});
}

TEST(ZipArchive, DamagedDeflatedEntriesAreIOErrorsNamingTheEntry) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  save_npz(path, {{"a", sample(f64, {64})}}, {.compressed = true});
  const std::vector<uint8_t> bytes = read_bytes(path);
  const uint32_t compressed = field32(bytes, central_directory(bytes) + 20), size = field32(bytes, central_directory(bytes) + 24);
  ASSERT_EQ(size, 128u + 64 * 8);
  expect_patched_archive_error(path, [&](auto& b) { put32(b, central_directory(b) + 20, compressed / 2); },
                               {"entry 'a.npy' is truncated", "end after"});
  expect_patched_archive_error(path, [&](auto& b) { put32(b, central_directory(b) + 24, size - 1); },
                               {"entry 'a.npy' is corrupt", "inflates to more than the 639 bytes"});
  expect_patched_archive_error(path, [&](auto& b) { put32(b, central_directory(b) + 24, size + 1); },
                               {"entry 'a.npy' is corrupt", "inflates to 640 bytes, the archive says 641"});
  expect_patched_archive_error(path, [&](auto& b) { put32(b, central_directory(b) + 24, 0xfffffff0); },
                               {"entry 'a.npy' is corrupt", "more than deflate can expand"});
}

TEST(ZipArchive, EntriesThatShareANameOrAKeyAreIOErrors) {
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  const NpyBytes npy(sample(f32, {2}));
  ZipWriter twice(path, "test");
  twice.add("a.npy", npy.pieces(), false);
  twice.add("a.npy", npy.pieces(), true);
  twice.finish();
  expect_error<IOError>([&] { load_npz(path); }, {path, "entry 'a.npy'", "two entries of that name"});
  ZipWriter one_key(path, "test");
  one_key.add("a.npy", npy.pieces(), false);
  one_key.add("a", npy.pieces(), false);
  one_key.finish();
  expect_error<IOError>([&] { load_npz(path); }, {path, "the entries 'a' and 'a.npy' both give the key 'a'"});
}

TEST(ZipArchive, ANameLongerThanAZipAllowsIsAnIOError) {
  const TempDir dir;
  expect_error<IOError>([&] { save_npz(dir.file("m.npz"), {{std::string(70000, 'w'), sample(f32, {2})}}); },
                        {"save_npz", "m.npz", "longer than a zip allows"});
  EXPECT_TRUE(dir.listing().empty());
}

TEST(Npz, ADisposedTensorIsNamedWithItsKeyAndTheFileIsLeftAlone) {
  // The DisposedError named neither save_npz, the file nor the entry's key.
  const TempDir dir;
  const std::string path = dir.file("m.npz");
  const Tensor gone = Tensor::ones({2});
  gone.dispose();
  expect_error<DisposedError>([&] { save_npz(path, {{"W", Tensor::ones({2})}, {"b", gone}}); }, {"save_npz", "m.npz", "entry 'b'"});
  EXPECT_FALSE(std::filesystem::exists(path));
  expect_error<DisposedError>([&] { save_npy(dir.file("b.npy"), gone); }, {"save_npy", "b.npy"});
}
