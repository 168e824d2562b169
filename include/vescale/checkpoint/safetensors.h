// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the raw little-endian data, offsets relative to its
// start. Our own reader and writer (no dependency): dtypes F64 F32 F16 BF16 I64 I32 I16 I8 U8
// BOOL. Reading checks everything the format promises (a JSON object header, known dtypes,
// sizes that match shape x dtype, offsets inside the file, no overlaps and no holes) and names
// the file and the tensor when something is wrong.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace vescale::checkpoint {

struct Safetensors {
  std::map<std::string, at::Tensor> tensors;    // CPU, contiguous, owning their memory
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" object
};

// A file's size and CRC-32 (IEEE, as zlib and gzip), taken from the bytes as they are written
// or read, so that checking a file costs no second pass over it.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  std::map<std::string, uint32_t> tensor_crc32;  // save_safetensors: each tensor's data bytes
};
// CRC-32 of `n` more bytes after a run whose CRC-32 is `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

// A file opened for reading some of its tensors: the header is read and checked at once
// (everything read_safetensors checks), then tensor() reads one tensor's bytes alone (pread),
// so a reader that needs a few tensors of a large file reads just those.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  // A file held in memory (safetensors_bytes); `name` is for messages.
  SafetensorsFile(const std::string& name, std::shared_ptr<const std::string> bytes);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  uint64_t file_size() const;
  bool contains(const std::string& name) const;
  // One tensor (CPU, contiguous, owning its memory); with `crc`, the CRC-32 of its bytes.
  at::Tensor tensor(const std::string& name, uint32_t* crc = nullptr) const;

 private:
  friend Safetensors read_safetensors(const std::string& path, FileDigest* digest);
  friend std::map<std::string, at::Tensor> map_safetensors(const std::string& path);
  void read_header();  // checks it all, as the constructors promise
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What this process read from and made durable in checkpoint files: for tests and benchmarks
// (a rank's bytes read during a resharding load, the fsyncs of a save).
struct IoCounters {
  uint64_t bytes_read = 0;  // safetensors headers and data, and checkpoint indexes
  uint64_t fsyncs = 0;      // files and folders
};
IoCounters io_counters();

// Writes `text` to path + ".tmp", fsyncs it, renames it to `path` and fsyncs the folder, so a
// crash or a power loss leaves the old file or the whole new one (index.json, `latest`, a
// timeline trace, an exported config.json). `what` starts the error messages ("checkpoint").
void write_text_durably(const std::string& path, const std::string& text, const std::string& what);

// Reads every tensor of a file; with `digest`, also the whole file's size and CRC-32.
Safetensors read_safetensors(const std::string& path, FileDigest* digest = nullptr);
// Every tensor of a file as a view of one private, copy-on-write memory map of it: nothing is
// read until used, and then only the pages used (a rank copying its shard out of a row-split
// weight reads those rows). The tensors keep the mapping alive; writing to one changes this
// process's copy, never the file. The header is checked as read_safetensors checks it.
std::map<std::string, at::Tensor> map_safetensors(const std::string& path);
// Just the tensors.
std::map<std::string, at::Tensor> load_safetensors(const std::string& path);

// Writes tensors (any device, any strides; copied to contiguous CPU) sorted by name, the header
// padded with spaces to a multiple of 8 bytes as the reference writer does. Written to
// path + ".tmp", fsynced, renamed, and the folder fsynced, so neither a crash nor a power loss
// leaves a half-written file under `path`. Returns the file's size and CRC-32, and each
// tensor's CRC-32.
FileDigest save_safetensors(const std::string& path,
                            const std::map<std::string, at::Tensor>& tensors,
                            const std::map<std::string, std::string>& metadata = {});

// The bytes save_safetensors would write (no metadata), into `out`, and their digest.
FileDigest safetensors_bytes(const std::map<std::string, at::Tensor>& tensors, std::string& out);

// The format's dtype names ("F32", "BF16", ...); `where` names the caller's file and tensor in
// the error for a dtype without one, or for an unknown name.
std::string safetensors_dtype_name(at::ScalarType type, const std::string& where);
at::ScalarType safetensors_dtype(const std::string& name, const std::string& where);

}  // namespace vescale::checkpoint
