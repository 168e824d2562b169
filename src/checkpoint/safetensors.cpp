#include "vescale/checkpoint/safetensors.h"

#include "vescale/common/check.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include <cerrno>
#include <cstring>
#include <functional>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/io.h"

namespace vescale::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors: the raw data is little-endian; add byte swaps");

using json = nlohmann::json;
constexpr uint64_t kMaxHeader = 100u << 20;  // the reference implementation's limit

struct DType {
  const char* name;
  at::ScalarType type;
};
constexpr DType kDTypes[] = {{"F64", at::kDouble},    {"F32", at::kFloat}, {"F16", at::kHalf},
                             {"BF16", at::kBFloat16}, {"I64", at::kLong},  {"I32", at::kInt},
                             {"I16", at::kShort},     {"I8", at::kChar},   {"U8", at::kByte},
                             {"BOOL", at::kBool}};

const char* dtype_name(at::ScalarType t, const std::string& path, const std::string& name) {
  for (const auto& d : kDTypes) {
    if (d.type == t) return d.name;
  }
  VESCALE_FAIL("safetensors: cannot write '", name, "' to ", path, ": dtype ", t,
               " has no safetensors name here (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 "
               "BOOL); convert it first");
}

at::ScalarType dtype_of(const std::string& s, const std::string& path, const std::string& name) {
  for (const auto& d : kDTypes) {
    if (s == d.name) return d.type;
  }
  VESCALE_FAIL("safetensors: ", path, ": tensor '", name, "' has unknown dtype '", s,
               "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

struct Entry {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const json& v) {
  auto where = [&] { return "safetensors: " + path + ": tensor '" + name + "'"; };
  VESCALE_CHECK(
      v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
      where(), " needs an object with dtype, shape and data_offsets; got ", v.dump());
  VESCALE_CHECK(v["dtype"].is_string(), where(), ": dtype must be a string, got ",
                v["dtype"].dump());
  Entry e{name, dtype_of(v["dtype"].get<std::string>(), path, name), {}, 0, 0};
  VESCALE_CHECK(v["shape"].is_array(), where(), ": shape must be an array, got ",
                v["shape"].dump());
  for (const auto& d : v["shape"]) {
    VESCALE_CHECK(d.is_number_unsigned(), where(), ": shape ", v["shape"].dump(),
                  " must hold non-negative integers");
    e.shape.push_back(d.get<int64_t>());
  }
  const auto& off = v["data_offsets"];
  VESCALE_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                    off[1].is_number_unsigned(),
                where(), ": data_offsets must be [begin, end], got ", off.dump());
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  VESCALE_CHECK(e.begin <= e.end, where(), ": data_offsets ", off.dump(), " end before they begin");
  uint64_t bytes = at::elementSize(e.type);
  for (int64_t d : e.shape) bytes *= static_cast<uint64_t>(d);
  VESCALE_CHECK(e.end - e.begin == bytes, where(), ": data_offsets ", off.dump(), " span ",
                e.end - e.begin, " bytes but shape ", v["shape"].dump(), " x ",
                v["dtype"].get<std::string>(), " needs ", bytes);
  return e;
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType type, const std::string& where) {
  for (const auto& d : kDTypes) {
    if (d.type == type) return d.name;
  }
  VESCALE_FAIL(where, ": dtype ", type,
               " has no safetensors name (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

at::ScalarType safetensors_dtype(const std::string& name, const std::string& where) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return d.type;
  }
  VESCALE_FAIL(where, ": unknown dtype '", name,
               "' (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
}

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// ---- reading ---------------------------------------------------------------------------

struct SafetensorsFile::Impl {
  std::string path;
  int fd = -1;
  std::shared_ptr<const std::string> bytes;  // a file held in memory (fd -1)
  uint64_t file_size = 0, header_length = 0;
  std::string header_text;
  std::vector<Entry> entries;  // in file order
  std::map<std::string, size_t> by_name;
  std::map<std::string, std::string> metadata;

  void pread_all(void* dst, uint64_t bytes, uint64_t at, const std::string& what) const {
    if (this->bytes) {
      VESCALE_CHECK(at + bytes <= this->bytes->size(), "safetensors: ", path, ": reading ", what,
                    " past its end (truncated?)");
      std::memcpy(dst, this->bytes->data() + at, bytes);
      return;
    }
    auto* p = static_cast<char*>(dst);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(at));
      VESCALE_CHECK(
          n > 0, "safetensors: ", path, ": reading ", what, " failed",
          n < 0 ? std::string(": ") + std::strerror(errno) : std::string(" (truncated?)"));
      p += n, at += static_cast<uint64_t>(n), bytes -= static_cast<uint64_t>(n);
      detail::count_bytes_read(static_cast<uint64_t>(n));
    }
  }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& f = *impl_;
  f.path = path;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VESCALE_CHECK(f.fd >= 0, "safetensors: cannot open ", path, ": no such file or not readable");
  struct stat st {};
  VESCALE_CHECK(::fstat(f.fd, &st) == 0, "safetensors: cannot stat ", path);
  f.file_size = static_cast<uint64_t>(st.st_size);
  read_header();
}

SafetensorsFile::SafetensorsFile(const std::string& name, std::shared_ptr<const std::string> bytes)
    : impl_(std::make_unique<Impl>()) {
  Impl& f = *impl_;
  f.path = name;
  VESCALE_CHECK(bytes, "safetensors: ", name, ": no bytes");
  f.file_size = bytes->size();
  f.bytes = std::move(bytes);
  read_header();
}

void SafetensorsFile::read_header() {
  Impl& f = *impl_;
  const std::string& path = f.path;
  VESCALE_CHECK(f.file_size >= 8, "safetensors: ", path, " is truncated: ", f.file_size,
                " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  f.pread_all(&n, 8, 0, "the header length");
  VESCALE_CHECK(n <= kMaxHeader, "safetensors: ", path, ": header length ", n, " exceeds ",
                kMaxHeader, " bytes; not a safetensors file?");
  VESCALE_CHECK(n <= f.file_size - 8, "safetensors: ", path, " is truncated: the header needs ", n,
                " bytes, only ", f.file_size - 8, " follow");
  f.header_length = n;
  f.header_text.assign(n, '\0');
  if (n > 0) f.pread_all(f.header_text.data(), n, 8, "the header");
  VESCALE_CHECK(!f.header_text.empty() && f.header_text[0] == '{', "safetensors: ", path,
                ": bad header: it must be a JSON object");
  json header;
  try {
    header = json::parse(f.header_text);
  } catch (const json::exception& e) {
    VESCALE_FAIL("safetensors: ", path, ": bad header JSON: ", e.what());
  }
  VESCALE_CHECK(header.is_object(), "safetensors: ", path,
                ": bad header: it must be a JSON object");
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      VESCALE_CHECK(v.is_object(), "safetensors: ", path,
                    ": __metadata__ must be an object of strings");
      for (const auto& [k, s] : v.items()) {
        VESCALE_CHECK(s.is_string(), "safetensors: ", path, ": __metadata__ value of '", k,
                      "' must be a string");
        f.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    f.entries.push_back(parse_entry(path, name, v));
  }
  // The data buffer is exactly covered: tensors sorted by offset touch end to begin.
  const uint64_t data_size = f.file_size - 8 - n;
  std::sort(f.entries.begin(), f.entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : f.entries) {
    VESCALE_CHECK(e.end <= data_size, "safetensors: ", path, " is truncated or tensor '", e.name,
                  "' is out of range: its data_offsets end at ", e.end, " but the data holds ",
                  data_size, " bytes");
    VESCALE_CHECK(e.begin >= pos, "safetensors: ", path, ": tensors '", prev ? prev->name : "",
                  "' and '", e.name, "' overlap (", e.name, " begins at ", e.begin, ", before ",
                  pos, ")");
    VESCALE_CHECK(e.begin == pos, "safetensors: ", path, ": a hole of ", e.begin - pos,
                  " bytes before tensor '", e.name, "' (offset ", pos, " to ", e.begin,
                  "); the format allows none");
    pos = e.end;
    prev = &e;
  }
  VESCALE_CHECK(pos == data_size, "safetensors: ", path, ": ", data_size - pos,
                " bytes after the last tensor belong to no tensor; the file is corrupt");
  for (size_t i = 0; i < f.entries.size(); ++i) f.by_name[f.entries[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() {
  if (impl_ && impl_->fd >= 0) ::close(impl_->fd);
}

uint64_t SafetensorsFile::file_size() const { return impl_->file_size; }

bool SafetensorsFile::contains(const std::string& name) const {
  return impl_->by_name.count(name) > 0;
}

at::Tensor SafetensorsFile::tensor(const std::string& name, uint32_t* crc) const {
  const Impl& f = *impl_;
  auto it = f.by_name.find(name);
  VESCALE_CHECK(it != f.by_name.end(), "safetensors: ", f.path, " has no tensor '", name, "'");
  const Entry& e = f.entries[it->second];
  auto t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
  f.pread_all(t.data_ptr(), e.end - e.begin, 8 + f.header_length + e.begin,
              "tensor '" + name + "'");
  if (crc) *crc = crc32_update(0, t.data_ptr(), e.end - e.begin);
  return t;
}

std::map<std::string, at::Tensor> map_safetensors(const std::string& path) {
  SafetensorsFile file(path);
  const auto& f = *file.impl_;
  std::map<std::string, at::Tensor> out;
  if (f.file_size == 0) return out;
  void* base = ::mmap(nullptr, f.file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, f.fd, 0);
  VESCALE_CHECK(base != MAP_FAILED, "safetensors: cannot map ", path, ": ", std::strerror(errno));
  const uint64_t size = f.file_size;
  auto mapping = std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); });
  for (const Entry& e : f.entries) {
    char* data = static_cast<char*>(base) + 8 + f.header_length + e.begin;
    out.emplace(e.name, at::from_blob(
                            data, e.shape, [mapping](void*) {}, at::TensorOptions().dtype(e.type)));
  }
  return out;
}

Safetensors read_safetensors(const std::string& path, FileDigest* digest) {
  SafetensorsFile file(path);
  const auto& f = *file.impl_;
  // In file order, which covers the data exactly: the digest sees every byte once.
  const uint64_t n = f.header_length;
  FileDigest d{8 + n, crc32_update(crc32_update(0, &n, 8), f.header_text.data(), n), {}};
  Safetensors out;
  out.metadata = f.metadata;
  for (const Entry& e : f.entries) {
    at::Tensor t = file.tensor(e.name);
    if (digest) d.crc32 = crc32_update(d.crc32, t.data_ptr(), e.end - e.begin);
    d.bytes += e.end - e.begin;
    out.tensors.emplace(e.name, std::move(t));
  }
  if (digest) *digest = d;
  return out;
}

std::map<std::string, at::Tensor> load_safetensors(const std::string& path) {
  return read_safetensors(path).tensors;
}

namespace {

// The format's bytes, in order, to `write` (with their digest): the file writer's and memory's.
FileDigest write_safetensors(const std::string& path,
                             const std::map<std::string, at::Tensor>& tensors,
                             const std::map<std::string, std::string>& metadata,
                             const std::function<void(const void*, uint64_t)>& sink) {
  json header = json::object();
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    VESCALE_CHECK(name != "__metadata__", "safetensors: cannot write ", path,
                  ": '__metadata__' is reserved");
    VESCALE_CHECK(t.defined(), "safetensors: cannot write ", path, ": tensor '", name,
                  "' is undefined");
    auto c = t.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = c.numel() * c.element_size();
    header[name] = {{"dtype", dtype_name(c.scalar_type(), path, name)},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(c));
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  FileDigest digest;
  const uint64_t n = text.size();
  auto write = [&](const void* p, uint64_t bytes) {
    sink(p, bytes);
    digest.crc32 = crc32_update(digest.crc32, p, bytes);
    digest.bytes += bytes;
  };
  write(&n, 8);
  write(text.data(), n);
  auto name = tensors.begin();
  for (const auto& c : data) {
    const uint64_t bytes = c.numel() * c.element_size();
    write(c.data_ptr(), bytes);
    digest.tensor_crc32[(name++)->first] = crc32_update(0, c.data_ptr(), bytes);
  }
  return digest;
}

}  // namespace

FileDigest safetensors_bytes(const std::map<std::string, at::Tensor>& tensors, std::string& out) {
  out.clear();
  return write_safetensors("(memory)", tensors, {}, [&](const void* p, uint64_t bytes) {
    out.append(static_cast<const char*>(p), bytes);
  });
}

FileDigest save_safetensors(const std::string& path,
                            const std::map<std::string, at::Tensor>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  const std::string tmp = path + ".tmp";
  FileDigest digest;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    VESCALE_CHECK(out, "safetensors: cannot create ", tmp,
                  ": check that the folder exists and is writable");
    digest = write_safetensors(path, tensors, metadata, [&](const void* p, uint64_t bytes) {
      out.write(static_cast<const char*>(p), static_cast<std::streamsize>(bytes));
    });
    out.flush();
    VESCALE_CHECK(out, "safetensors: writing ", tmp, " failed (disk full?)");
  }
  // On disk before the name points at it: a power loss leaves the old file or the whole new one.
  detail::fsync_path(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  VESCALE_CHECK(!ec, "safetensors: cannot rename ", tmp, " to ", path, ": ", ec.message());
  detail::fsync_parent(path);
  return digest;
}

}  // namespace vescale::checkpoint

namespace vescale::checkpoint {

namespace {
std::atomic<uint64_t> g_bytes_read{0}, g_fsyncs{0};
}

IoCounters io_counters() { return {g_bytes_read.load(), g_fsyncs.load()}; }

void write_text_durably(const std::string& path, const std::string& text, const std::string& what) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    VESCALE_CHECK(out, what, ": cannot create ", tmp,
                  ": check that the folder exists and is writable");
    out << text;
    out.flush();
    VESCALE_CHECK(out, what, ": writing ", tmp, " failed (disk full?)");
  }
  detail::fsync_path(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  VESCALE_CHECK(!ec, what, ": cannot rename ", tmp, " to ", path, ": ", ec.message());
  detail::fsync_parent(path);
}

namespace detail {

void count_bytes_read(uint64_t bytes) { g_bytes_read += bytes; }

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VESCALE_CHECK(fd >= 0, "checkpoint: cannot open ", path, " to sync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  VESCALE_CHECK(rc == 0, "checkpoint: fsync of ", path, " failed: ", std::strerror(err),
                "; the disk may be full or failing");
  ++g_fsyncs;
}

void fsync_parent(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
}

}  // namespace detail
}  // namespace vescale::checkpoint
