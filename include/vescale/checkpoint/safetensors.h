// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the raw little-endian data, offsets relative to its
// start. Our own reader and writer (no dependency): dtypes F64 F32 F16 BF16 I64 I32 I16 I8 U8
// BOOL. Reading checks everything the format promises (a JSON object header, known dtypes,
// sizes that match shape x dtype, offsets inside the file, no overlaps and no holes) and names
// the file and the tensor when something is wrong.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

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
};
// CRC-32 of `n` more bytes after a run whose CRC-32 is `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

// Reads every tensor of a file; with `digest`, also the whole file's size and CRC-32.
Safetensors read_safetensors(const std::string& path, FileDigest* digest = nullptr);
// Just the tensors.
std::map<std::string, at::Tensor> load_safetensors(const std::string& path);

// Writes tensors (any device, any strides; copied to contiguous CPU) sorted by name, the header
// padded with spaces to a multiple of 8 bytes as the reference writer does. Written to
// path + ".tmp" and renamed, so a crash never leaves a half-written file under `path`.
// Returns the written file's size and CRC-32.
FileDigest save_safetensors(const std::string& path,
                            const std::map<std::string, at::Tensor>& tensors,
                            const std::map<std::string, std::string>& metadata = {});

// The format's dtype names ("F32", "BF16", ...); `where` names the caller's file and tensor in
// the error for a dtype without one, or for an unknown name.
std::string safetensors_dtype_name(at::ScalarType type, const std::string& where);
at::ScalarType safetensors_dtype(const std::string& name, const std::string& where);

}  // namespace vescale::checkpoint
