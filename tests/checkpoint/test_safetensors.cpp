// Our safetensors reader and writer: a round trip of every dtype with metadata, and files that
// are broken in each way the format can be (short, truncated, bad JSON, unknown dtype, sizes
// that disagree, overlaps, holes, offsets out of range) give errors naming the file and tensor.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "vescale/checkpoint/safetensors.h"
#include "vescale/common/check.h"

namespace ckpt = vescale::checkpoint;
using Catch::Matchers::Contains;

namespace {
std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("vescale_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A file from a raw header and data, laid out by hand (independent of our writer).
std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes,
                      int64_t claimed_len = -1) {
  auto path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));  // little-endian
  out << header;
  for (size_t i = 0; i < data_bytes; ++i) out.put(static_cast<char>(i));
  return path;
}
}  // namespace

TEST_CASE("safetensors round trip: every dtype, scalars, empty tensors, metadata", "[checkpoint]") {
  std::map<std::string, at::Tensor> t{
      {"f64", at::randn({3, 2}, at::kDouble)},
      {"f32", at::randn({4}, at::kFloat)},
      {"f16", at::randn({2, 2}).to(at::kHalf)},
      {"bf16", at::randn({5}).to(at::kBFloat16)},
      {"i64", at::randint(-1000000, 1000000, {3}, at::kLong) * 1000000},
      {"i32", at::randint(-100, 100, {2, 3}, at::kInt)},
      {"i16", at::randint(-100, 100, {3}, at::kShort)},
      {"i8", at::randint(-100, 100, {3}, at::kChar)},
      {"u8", at::randint(0, 255, {7}, at::kByte)},
      {"bool", at::rand({6}) > 0.5},
      {"scalar", at::scalar_tensor(2.5)},
      {"empty", at::zeros({0, 3})},
      {"strided", at::arange(12, at::kFloat).view({3, 4}).t()}};
  auto path = temp_path("round.safetensors");
  const ckpt::FileDigest written =
      ckpt::save_safetensors(path, t, {{"format", "pt"}, {"step", "7"}});
  ckpt::FileDigest read;
  auto back = ckpt::read_safetensors(path, &read);
  // The digests taken while writing and while reading are the file's: its size, and the CRC-32
  // of its raw bytes (the check value of "123456789" pins the CRC-32 variant: IEEE, as zlib).
  CHECK(ckpt::crc32_update(0, "123456789", 9) == 0xCBF43926u);
  {
    std::ifstream raw(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(raw)),
                            std::istreambuf_iterator<char>());
    CHECK(written.bytes == bytes.size());
    CHECK(written.crc32 == ckpt::crc32_update(0, bytes.data(), bytes.size()));
    CHECK(ckpt::crc32_update(ckpt::crc32_update(0, bytes.data(), 5), bytes.data() + 5,
                             bytes.size() - 5) == written.crc32);
  }
  CHECK(read.bytes == written.bytes);
  CHECK(read.crc32 == written.crc32);
  CHECK(back.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}});
  REQUIRE(back.tensors.size() == t.size());
  for (const auto& [name, x] : t) {
    INFO(name);
    CHECK(back.tensors.at(name).scalar_type() == x.scalar_type());
    CHECK(back.tensors.at(name).equal(x));
  }
  // The layout: 8-byte length, a header padded to 8 bytes, data right after.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  CHECK(n % 8 == 0);
  CHECK(!std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("safetensors errors name the file and the tensor", "[checkpoint]") {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(ckpt::load_safetensors(write_raw("ok.st", ok, 8)).at("a").numel() == 2);

  auto missing = temp_path("nope.st");
  CHECK_THROWS_WITH(ckpt::load_safetensors(missing), Contains("cannot open " + missing));
  auto tiny = write_raw("tiny.st", "", 0, 0);
  std::filesystem::resize_file(tiny, 5);
  CHECK_THROWS_WITH(ckpt::load_safetensors(tiny), Contains(tiny) && Contains("truncated"));
  auto short_header = write_raw("short.st", ok, 0, 500);
  CHECK_THROWS_WITH(ckpt::load_safetensors(short_header),
                    Contains(short_header) && Contains("header needs 500 bytes"));
  auto truncated = write_raw("trunc.st", ok, 5);
  CHECK_THROWS_WITH(ckpt::load_safetensors(truncated),
                    Contains(truncated) && Contains("'a'") && Contains("truncated"));
  auto bad_json = write_raw("json.st", R"({"a": {"dtype": )", 0);
  CHECK_THROWS_WITH(ckpt::load_safetensors(bad_json),
                    Contains(bad_json) && Contains("bad header JSON"));
  auto not_object = write_raw("arr.st", "[1,2]", 0);
  CHECK_THROWS_WITH(ckpt::load_safetensors(not_object), Contains("must be a JSON object"));
  auto dtype =
      write_raw("dtype.st", R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2);
  CHECK_THROWS_WITH(ckpt::load_safetensors(dtype),
                    Contains(dtype) && Contains("'w' has unknown dtype 'F8_E4M3'"));
  auto size = write_raw("size.st", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  CHECK_THROWS_WITH(ckpt::load_safetensors(size), Contains("'w'") && Contains("needs 12"));
  auto overlap = write_raw(
      "overlap.st",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12);
  CHECK_THROWS_WITH(ckpt::load_safetensors(overlap),
                    Contains(overlap) && Contains("'a' and 'b' overlap"));
  auto hole = write_raw(
      "hole.st",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      12);
  CHECK_THROWS_WITH(ckpt::load_safetensors(hole), Contains("hole of 4 bytes before tensor 'b'"));
  auto range =
      write_raw("range.st", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  CHECK_THROWS_WITH(ckpt::load_safetensors(range), Contains("'a' is out of range"));
  auto trailing = write_raw("trail.st", ok, 12);
  CHECK_THROWS_WITH(ckpt::load_safetensors(trailing), Contains("4 bytes after the last tensor"));
  auto offsets =
      write_raw("off.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);
  CHECK_THROWS_WITH(ckpt::load_safetensors(offsets),
                    Contains("'a'") && Contains("end before they begin"));

  CHECK_THROWS_WITH(
      ckpt::save_safetensors(temp_path("c.st"), {{"z", at::zeros({2}, at::kComplexFloat)}}),
      Contains("'z'") && Contains("no safetensors name"));
  CHECK_THROWS_AS(ckpt::save_safetensors("/nonexistent_dir/x.st", {{"a", at::zeros({1})}}),
                  vescale::Error);
}
