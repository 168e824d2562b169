// TensorBoard's event file, by hand: TFRecord framing around tensorflow.Event protobufs
// (tensorflow/core/util/event.proto, summary.proto, tensor.proto), encoded field by field.
// What a protobuf serializer would write: fields in number order, proto3 defaults omitted
// (step 0), oneof members always present (simple_value 0.0).
#include "vescale/train/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "vescale/common/check.h"
#include "vescale/common/utf8.h"

namespace vescale::train {

namespace {

// CRC-32C, one table lookup per byte (the reflected Castagnoli polynomial).
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (uint64_t{field} << 3) | wire_type);
}

// Little-endian, whatever the host.
void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_fixed64(out, bits);
}

void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_fixed32(out, bits);
}

// Event { double wall_time = 1; int64 step = 2; oneof what { string file_version = 3;
// Summary summary = 5; } }. A negative step is a 10-byte varint (two's complement), as int64.
std::string event(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

// Summary { repeated Value value = 1; } holding one Value.
std::string summary_event(double wall_time, int64_t step, const std::string& value) {
  std::string summary;
  put_bytes(summary, 1, value);
  std::string e = event(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

// A TFRecord: uint64 length, masked crc of the length's 8 bytes, data, masked crc of data.
std::string record(const std::string& data) {
  std::string r;
  put_fixed64(r, data.size());
  put_fixed32(r, masked_crc32c(r.data(), 8));
  r += data;
  put_fixed32(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// TensorBoard's own writers number their files per process from 0.
std::atomic<int> next_writer{0};

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

double TensorBoardWriter::now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  namespace fs = std::filesystem;
  VESCALE_CHECK(!log_dir.empty(),
                "tensorboard: the log folder is empty; name a folder, e.g. runs/x");
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  VESCALE_CHECK(!ec && fs::is_directory(log_dir, ec), "tensorboard: cannot create the log folder '",
                log_dir, "'", ec ? ": " + ec.message() : std::string(": it is not a folder"),
                "; name a folder you can write to");
  char name[512];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%lld.%d",
                static_cast<long long>(std::time(nullptr)), host_name().c_str(),
                static_cast<long long>(getpid()), next_writer.fetch_add(1));
  path_ = (fs::path(log_dir) / name).string();
  file_ = std::fopen(path_.c_str(), "wb");
  VESCALE_CHECK(file_ != nullptr, "tensorboard: cannot create the event file '", path_,
                "': ", std::strerror(errno), "; name a log folder you can write to");
  std::string first = event(now(), 0);
  put_bytes(first, 3, "brain.Event:2");
  append_event(first);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    flush();
  } catch (const std::exception&) {
    // a destructor must not throw; flush() is where errors are reported
  }
  if (file_) std::fclose(file_);
}

// Value { string tag = 1; oneof value { float simple_value = 2; } }
void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value,
                                   double wall_time) {
  std::string v;
  put_bytes(v, 1, tag);
  put_float(v, 2, static_cast<float>(value));
  append_event(summary_event(wall_time, step, v));
}

// Value { string tag = 1; TensorProto tensor = 8; SummaryMetadata metadata = 9; } with
// metadata.plugin_data.plugin_name "text" and the tensor { dtype DT_STRING (7), tensor_shape {}
// (a scalar), string_val = 8 }: what tensorboard's text_summary writes.
void TensorBoardWriter::add_text(const std::string& tag, int64_t step, const std::string& text,
                                 double wall_time) {
  std::string tensor;
  put_key(tensor, 1, kVarint);
  put_varint(tensor, 7);
  put_bytes(tensor, 2, "");
  put_bytes(tensor, 8, valid_utf8(text));  // the text plugin decodes UTF-8
  std::string plugin_data;
  put_bytes(plugin_data, 1, "text");
  std::string metadata;
  put_bytes(metadata, 1, plugin_data);
  std::string v;
  put_bytes(v, 1, tag);
  put_bytes(v, 8, tensor);
  put_bytes(v, 9, metadata);
  append_event(summary_event(wall_time, step, v));
}

void TensorBoardWriter::append_event(const std::string& event) {
  pending_ += record(event);
  if (pending_.size() > (1u << 20)) flush();  // bounded, should a caller never flush
}

void TensorBoardWriter::flush() {
  if (!file_) return;
  const size_t n = pending_.size();
  const bool ok = std::fwrite(pending_.data(), 1, n, file_) == n && std::fflush(file_) == 0;
  pending_.clear();
  VESCALE_CHECK(ok, "tensorboard: cannot write the event file '", path_,
                "': ", std::strerror(errno), "; is the disk full or the folder gone?");
}

}  // namespace vescale::train
