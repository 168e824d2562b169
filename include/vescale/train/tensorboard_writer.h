// TensorBoard event files from C++: no Python, no protobuf library. One file per writer,
// log_dir/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n> (n counts this process's
// writers from 0), TFRecord framing of hand-encoded tensorflow.Event protobufs. Depends on
// common/ only (no libtorch). Not thread-safe; rank 0 writes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace vescale::train {

class TensorBoardWriter {
 public:
  // Creates log_dir (and its parents) and the event file, and writes its first record
  // (file_version "brain.Event:2"). Throws vescale::Error naming the path if either fails.
  explicit TensorBoardWriter(const std::string& log_dir);
  ~TensorBoardWriter();  // flushes; never throws
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar (stored as float32, TensorBoard's simple_value) at `step`. Buffered: call
  // flush() once per step, after its scalars.
  void add_scalar(const std::string& tag, int64_t step, double value, double wall_time = now());
  // A text summary (the text plugin: a scalar DT_STRING tensor), e.g. a generated sample;
  // bytes that are not UTF-8 become U+FFFD.
  void add_text(const std::string& tag, int64_t step, const std::string& text,
                double wall_time = now());
  // Writes the buffered records to the file and flushes it. Throws naming the path on failure.
  void flush();

  const std::string& path() const { return path_; }  // the event file
  static double now();                               // unix seconds, as TensorBoard's wall_time

 private:
  void append_event(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::string pending_;  // framed records not yet written
};

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace vescale::train
