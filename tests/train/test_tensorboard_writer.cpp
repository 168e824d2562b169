// TensorBoardWriter: CRC-32C against published values, the TFRecord framing and the Event
// protobuf bytes parsed back by hand, the errors. The hidden case [.tensorboard_export] writes
// known scalars for the ctest train.tensorboard_reads, where the tensorboard package's reader
// must return them exactly (tests/train/read_tensorboard.py --check).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/train/tensorboard_writer.h"

using namespace vescale;
using namespace vescale::train;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  return dir;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint64_t le(const std::vector<uint8_t>& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | b.at(at + i);
  return v;
}

// One TFRecord from `at`: checks both masked CRCs and returns the data.
std::vector<uint8_t> next_record(const std::vector<uint8_t>& file, size_t& at) {
  REQUIRE(at + 12 <= file.size());
  const uint64_t len = le(file, at, 8);
  CHECK(le(file, at + 8, 4) == masked_crc32c(file.data() + at, 8));
  REQUIRE(at + 12 + len + 4 <= file.size());
  std::vector<uint8_t> data(file.begin() + at + 12, file.begin() + at + 12 + len);
  CHECK(le(file, at + 12 + len, 4) == masked_crc32c(data.data(), data.size()));
  at += 12 + len + 4;
  return data;
}

std::vector<uint8_t> bytes(std::initializer_list<int> b) { return {b.begin(), b.end()}; }
void append(std::vector<uint8_t>& v, const std::vector<uint8_t>& more) {
  v.insert(v.end(), more.begin(), more.end());
}
void append(std::vector<uint8_t>& v, const std::string& s) {
  v.insert(v.end(), s.begin(), s.end());
}

std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";  // Python's json reads these
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // a float, so -0 keeps its sign
  return s;
}

}  // namespace

TEST_CASE("crc32c matches the published check values", "[tensorboard]") {
  const std::string check = "123456789";
  CHECK(crc32c(check.data(), check.size()) == 0xE3069283u);  // the CRC catalogue's check value
  CHECK(crc32c("", 0) == 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of ones, ascending.
  std::vector<uint8_t> b(32, 0);
  CHECK(crc32c(b.data(), b.size()) == 0x8A9136AAu);
  std::fill(b.begin(), b.end(), 0xFF);
  CHECK(crc32c(b.data(), b.size()) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<uint8_t>(i);
  CHECK(crc32c(b.data(), b.size()) == 0x46DD794Eu);
  // Masked: rotate right by 15 (0xE3069283 -> 0x2507C60D), add 0xA282EAD8.
  CHECK(masked_crc32c(check.data(), check.size()) == 0xC78AB0E5u);
}

TEST_CASE("tensorboard events are TFRecords of tensorflow.Event protobufs", "[tensorboard]") {
  const fs::path dir = fresh_dir("vescale_tb_bytes") / "nested" / "run";
  std::string path;
  {
    TensorBoardWriter w(dir.string());  // creates both missing folders
    path = w.path();
    w.add_scalar("loss", 300, 2.5, 1234.5);
    w.add_scalar("lr", -1, 0.0, 1234.5);
    w.add_scalar("x", 0, -2.5, 1234.5);
    w.flush();
  }
  const std::string name = fs::path(path).filename().string();
  CHECK(fs::path(path).parent_path() == dir);
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  const std::string tail = "." + std::to_string(getpid()) + ".";
  CHECK(name.find(tail) != std::string::npos);

  const auto file = read_bytes(path);
  size_t at = 0;
  // 1: Event{wall_time (field 1, fixed64: key 0x09), file_version (field 3, string: 0x1A)}.
  auto first = next_record(file, at);
  REQUIRE(first.size() == 1 + 8 + 2 + 13);
  CHECK(first[0] == 0x09);
  std::vector<uint8_t> version = bytes({0x1A, 13});
  append(version, std::string("brain.Event:2"));
  CHECK(std::vector<uint8_t>(first.begin() + 9, first.end()) == version);

  // 2: wall_time 1234.5 = 0x40934A0000000000 (little-endian), step 300 (field 2, varint: key
  // 0x10; 300 = 0b10_0101100 -> 0xAC 0x02), summary (field 5: 0x2A, 13 bytes) = value (field
  // 1: 0x0A, 11 bytes) = tag "loss" (0x0A 0x04 ...) + simple_value 2.5 (field 2, fixed32: key
  // 0x15; 2.5f = 0x40200000).
  const auto wall = bytes({0x09, 0, 0, 0, 0, 0, 0x4A, 0x93, 0x40});
  std::vector<uint8_t> want = wall;
  append(want, bytes({0x10, 0xAC, 0x02, 0x2A, 13, 0x0A, 11, 0x0A, 4}));
  append(want, std::string("loss"));
  append(want, bytes({0x15, 0, 0, 0x20, 0x40}));
  CHECK(next_record(file, at) == want);

  // 3: step -1 is int64's 10-byte varint; simple_value 0.0 is still written (a oneof member).
  want = wall;
  append(want, bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
  append(want, bytes({0x2A, 11, 0x0A, 9, 0x0A, 2, 'l', 'r', 0x15, 0, 0, 0, 0}));
  CHECK(next_record(file, at) == want);

  // 4: step 0 is proto3's default, so no step field (as a protobuf serializer writes it).
  want = wall;
  append(want, bytes({0x2A, 10, 0x0A, 8, 0x0A, 1, 'x', 0x15, 0, 0, 0x20, 0xC0}));
  CHECK(next_record(file, at) == want);
  CHECK(at == file.size());
  fs::remove_all(dir.parent_path().parent_path());
}

TEST_CASE("tensorboard writer buffers until flush and numbers its files", "[tensorboard]") {
  const fs::path dir = fresh_dir("vescale_tb_flush");
  TensorBoardWriter a(dir.string());
  TensorBoardWriter b(dir.string());
  CHECK(a.path() != b.path());  // ...<pid>.N, one N per writer of this process
  const auto size0 = fs::file_size(a.path());
  CHECK(size0 == 12 + 24 + 4);  // the file_version record is written at once
  a.add_scalar("loss", 1, 1.0);
  CHECK(fs::file_size(a.path()) == size0);
  a.flush();
  CHECK(fs::file_size(a.path()) > size0);
  fs::remove_all(dir);
}

TEST_CASE("tensorboard writer names a folder it cannot create", "[tensorboard]") {
  const fs::path dir = fresh_dir("vescale_tb_bad");
  fs::create_directories(dir);
  const fs::path file = dir / "a_file";
  std::ofstream(file) << "not a folder";
  const std::string bad = (file / "run").string();
  CHECK_THROWS_AS(TensorBoardWriter(bad), Error);
  CHECK_THROWS_WITH(TensorBoardWriter(bad),
                    Catch::Contains("cannot create the log folder '" + bad + "'"));
  CHECK_THROWS_WITH(TensorBoardWriter(file.string()),  // exists, as a file
                    Catch::Contains("cannot create the log folder '" + file.string() + "'"));
  CHECK_THROWS_WITH(TensorBoardWriter(""), Catch::Contains("the log folder is empty"));
  fs::remove_all(dir);
}

#ifdef TENSORBOARD_EXPORT_DIR
// Known scalars and a text for the tensorboard package to read back (train.tensorboard_reads):
// the event file in TENSORBOARD_EXPORT_DIR, and expected.json beside it with the values as
// written (doubles; the reader compares them at float32).
TEST_CASE("tensorboard export for the python reader", "[.tensorboard_export]") {
  const fs::path dir = TENSORBOARD_EXPORT_DIR;
  fs::remove_all(dir);
  struct Series {
    std::string tag;
    std::vector<std::pair<int64_t, double>> points;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Series> series = {
      {"loss", {{0, 5.5625}, {1, 4.912345678901234}, {2, 3.1415926535}, {10, 2.33}}},
      {"val_loss", {{2, 5.0}, {10, 2.5}}},
      {"lr", {{1, 1e-4}, {2, 3e-4}, {10, 1.17549435e-38}}},  // the smallest normal float
      {"grad_norm", {{1, -0.0}, {2, -1.5e-7}, {10, -123456.789}}},
      {"tokens_per_s", {{1, 3.0e38}, {2, 16777217.0}, {4000000000LL, 1e20}}},
      {"diverged/loss", {{1, inf}, {2, -inf}, {3, std::nan("")}}},
  };
  std::string json = "{\"scalars\": {";
  {
    TensorBoardWriter w(dir.string());
    for (size_t i = 0; i < series.size(); ++i) {
      json += (i ? ", \"" : "\"") + series[i].tag + "\": [";
      for (size_t j = 0; j < series[i].points.size(); ++j) {
        const auto [step, value] = series[i].points[j];
        w.add_scalar(series[i].tag, step, value);
        json += (j ? ", [" : "[") + std::to_string(step) + ", " + json_number(value) + "]";
      }
      json += "]";
      w.flush();
    }
    w.add_text("sample", 10, "In the beginning: caf\xC3\xA9, \xE2\x9C\x93");
    w.flush();
  }
  json += "}, \"texts\": {\"sample\": [[10, \"In the beginning: caf\xC3\xA9, \xE2\x9C\x93\"]]}}\n";
  std::ofstream(dir / "expected.json") << json;
  CHECK(fs::exists(dir / "expected.json"));
}
#endif
