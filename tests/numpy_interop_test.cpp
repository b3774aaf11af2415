// NumPy itself reads what kiln writes and writes what kiln reads: Debian's python3-numpy, run
// through Debian's python3 (scripts/setup.sh installs it).
#include <gtest/gtest.h>

#include "io_test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// The same values as sample() in io_test_util.hpp.
const char* kPythonSample = R"(
import numpy as np, zipfile

def sample(dtype, shape, seed=1):
    dtype = np.dtype(dtype)
    k = (np.arange(int(np.prod(shape))) * 37 + seed * 11) % 101 - 50
    values = k > 0 if dtype.kind == 'b' else k / 2 if dtype.kind == 'f' else k * 1000
    return values.astype(dtype).reshape(shape)

def model():
    return dict(W=sample('<f4', (3, 5)), b=sample('<f8', (5,)), n=sample('<i8', ()), mask=sample('|b1', (4,)))
)";

NamedTensors model() {
  return {{"W", sample(f32, {3, 5})}, {"b", sample(f64, {5})}, {"n", sample(i64, {})}, {"mask", sample(b8, {4})}};
}

const std::vector<std::pair<DType, std::string>>& descrs() {
  static const std::vector<std::pair<DType, std::string>> all{{f32, "<f4"}, {f64, "<f8"}, {i32, "<i4"}, {i64, "<i8"}, {b8, "|b1"}};
  return all;
}

void expect_runs(const std::string& script, const TempDir& dir) {
  const PythonRun run = run_python(std::string(kPythonSample) + "d = '" + dir.file("") + "'\n" + script, dir);
  ASSERT_EQ(run.status, 0) << run.output;
}

}  // namespace

TEST(NumPyInterop, KilnReadsTheNpyFilesNumPyWrites) {
  const TempDir dir;
  ASSERT_TRUE(numpy_is_installed(dir));
  std::string script;
  for (const auto& [dtype, descr] : descrs())
    script += std::string("np.save(d + '") + dtype_name(dtype) + ".npy', sample('" + descr + "', (2, 3)))\n";
  script += R"(
np.save(d + 'scalar.npy', sample('<f8', ()))
np.save(d + 'empty.npy', sample('<f4', (0, 4)))
np.save(d + 'fortran.npy', np.asfortranarray(sample('<i8', (3, 4))))
np.save(d + 'big_endian.npy', sample('>f8', (5,)))
)";
  expect_runs(script, dir);
  for (const auto& [dtype, descr] : descrs()) {
    SCOPED_TRACE(descr);
    expect_same_tensor(load_npy(dir.file(std::string(dtype_name(dtype)) + ".npy")), sample(dtype, {2, 3}));
  }
  expect_same_tensor(load_npy(dir.file("scalar.npy")), sample(f64, {}));
  expect_same_tensor(load_npy(dir.file("empty.npy")), sample(f32, {0, 4}));
  ASSERT_NE(std::string(reinterpret_cast<const char*>(read_bytes(dir.file("fortran.npy")).data()), 64).find("'fortran_order': True"),
            std::string::npos);
  expect_same_tensor(load_npy(dir.file("fortran.npy")), sample(i64, {3, 4}));
  expect_same_tensor(load_npy(dir.file("big_endian.npy")), sample(f64, {5}));
}

TEST(NumPyInterop, KilnReadsTheNpzFilesNumPyWrites) {
  const TempDir dir;
  ASSERT_TRUE(numpy_is_installed(dir));
  // Python's zipfile writes ZIP64 records only past 2 GiB or 65535 entries; lowered limits make
  // it write them for these small arrays, as NumPy would for large ones.
  expect_runs(R"(
np.savez(d + 'stored.npz', **model())
np.savez_compressed(d + 'compressed.npz', **model())
zipfile.ZIP64_LIMIT = 16
zipfile.ZIP_FILECOUNT_LIMIT = 1
np.savez(d + 'zip64.npz', **model())
)",
              dir);
  const std::vector<uint8_t> zip64 = read_bytes(dir.file("zip64.npz"));
  const std::vector<uint8_t> zip64_end_record{0x50, 0x4b, 0x06, 0x06};
  ASSERT_NE(std::search(zip64.begin(), zip64.end(), zip64_end_record.begin(), zip64_end_record.end()), zip64.end());
  for (const char* name : {"stored.npz", "compressed.npz", "zip64.npz"}) {
    SCOPED_TRACE(name);
    const NamedTensors loaded = load_npz(dir.file(name));
    ASSERT_EQ(loaded.names(), "W, b, n, mask");
    for (const auto& [key, value] : model()) expect_same_tensor(loaded[key], value);
  }
}

TEST(NumPyInterop, NumPyReadsTheFilesKilnWrites) {
  const TempDir dir;
  ASSERT_TRUE(numpy_is_installed(dir));
  std::string script = R"(
def check(a, expected):
    assert a.dtype == expected.dtype and a.shape == expected.shape and np.array_equal(a, expected), (a, expected)

def check_npz(path, expected):
    assert zipfile.ZipFile(path).testzip() is None, path + ': a CRC differs'
    with np.load(path) as z:
        assert list(z.keys()) == list(expected), list(z.keys())
        for key, value in expected.items():
            check(z[key], value)
)";
  for (const auto& [dtype, descr] : descrs()) {
    save_npy(dir.file(std::string(dtype_name(dtype)) + ".npy"), sample(dtype, {2, 3}));
    script += std::string("check(np.load(d + '") + dtype_name(dtype) + ".npy'), sample('" + descr + "', (2, 3)))\n";
  }
  save_npy(dir.file("scalar.npy"), sample(i32, {}));
  save_npy(dir.file("empty.npy"), sample(f64, {3, 0}));
  save_npy(dir.file("transposed.npy"), sample(i64, {3, 4}).view({4, 3}, {1, 4}, 0));
  save_npz(dir.file("stored.npz"), model());
  save_npz(dir.file("compressed.npz"), model(), {.compressed = true});
  std::vector<Shared> variables;
  for (const auto& [key, value] : model()) variables.push_back(shared(value, key));
  save_shared(dir.file("shared.npz"), variables);
  save_npz(dir.file("utf8.npz"), {{"größe", sample(f32, {2})}});
  script += R"(
check(np.load(d + 'scalar.npy'), sample('<i4', ()))
check(np.load(d + 'empty.npy'), sample('<f8', (3, 0)))
check(np.load(d + 'transposed.npy'), sample('<i8', (3, 4)).T)
check(np.load(d + 'f32.npy', mmap_mode='r'), sample('<f4', (2, 3)))
check_npz(d + 'stored.npz', model())
check_npz(d + 'compressed.npz', model())
check_npz(d + 'shared.npz', model())
check_npz(d + 'utf8.npz', {'größe': sample('<f4', (2,))})
)";
  expect_runs(script, dir);
}

TEST(NumPyInterop, ArraysOfADtypeKilnLacksAreIOErrorsNamingTheDtype) {
  const TempDir dir;
  ASSERT_TRUE(numpy_is_installed(dir));
  expect_runs(R"(
np.save(d + 'complex.npy', np.zeros(2, dtype=np.complex128))
np.save(d + 'objects.npy', np.array([{}, 1], dtype=object), allow_pickle=True)
np.savez(d + 'halves.npz', W=np.zeros(2, dtype=np.float16))
)",
              dir);
  expect_error<IOError>([&] { load_npy(dir.file("complex.npy")); }, {"complex.npy", "'<c16'", "not one kiln has"});
  expect_error<IOError>([&] { load_npy(dir.file("objects.npy")); }, {"objects.npy", "'|O'", "not one kiln has"});
  expect_error<IOError>([&] { load_npz(dir.file("halves.npz")); }, {"halves.npz", "entry 'W.npy'", "'<f2'", "not one kiln has"});
}
