// Internal: durable writes and the I/O counters (safetensors.h: io_counters).
#pragma once
#include <cstdint>
#include <string>

namespace vescale::checkpoint::detail {

// fsync a file or a folder by path (its data and metadata reach the disk); throws naming it.
void fsync_path(const std::string& path);
// fsync the folder that holds `path`: a rename into it is durable once this returns.
void fsync_parent(const std::string& path);
void count_bytes_read(uint64_t bytes);

}  // namespace vescale::checkpoint::detail
