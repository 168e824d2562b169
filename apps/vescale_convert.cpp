// vescale-convert: our checkpoints to Hugging Face folders and back.
//   vescale-convert --checkpoint ckpt/latest-or-folder --to-hf out_dir [--dtype bf16]
//                   [--max-shard-size 5GB] [--overwrite]
//   vescale-convert --from-hf hf_dir --to-checkpoint ckpt_root [--overwrite]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
#include "vescale/train/hf_convert.h"

namespace {

// "5GB", "500MB", "64KB", "1000" (bytes); powers of 1024 as transformers' max_shard_size does not,
// but the files stay below either reading.
int64_t parse_size(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    VESCALE_FAIL("--max-shard-size '", s, "': expected a size like 5GB, 500MB or 1000000");
  }
  const std::string unit = s.substr(used);
  double scale = 1;
  if (unit == "KB" || unit == "K")
    scale = 1e3;
  else if (unit == "MB" || unit == "M")
    scale = 1e6;
  else if (unit == "GB" || unit == "G")
    scale = 1e9;
  else
    VESCALE_CHECK(unit.empty() || unit == "B", "--max-shard-size '", s, "': unknown unit '", unit,
                  "' (B, KB, MB, GB)");
  return static_cast<int64_t>(v * scale);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vescale-convert: checkpoints to Hugging Face folders and back"};
  std::string checkpoint, to_hf, from_hf, to_checkpoint, dtype = "fp32", max_shard = "5GB";
  bool overwrite = false;
  app.add_option("--checkpoint", checkpoint,
                 "our checkpoint: a step folder or a root with `latest`");
  app.add_option("--to-hf", to_hf, "write a Hugging Face folder here");
  app.add_option("--from-hf", from_hf, "a Hugging Face folder (config.json, model.safetensors)");
  app.add_option("--to-checkpoint", to_checkpoint, "write our checkpoint under this root");
  app.add_option("--dtype", dtype, "fp32 or bf16 (--to-hf)");
  app.add_option("--max-shard-size", max_shard, "largest safetensors file (--to-hf), e.g. 5GB");
  app.add_flag("--overwrite", overwrite,
               "replace what the destination holds: the model files of a --to-hf folder, the "
               "checkpoints of a --to-checkpoint root");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!checkpoint.empty() && !to_hf.empty()) {
      const auto files =
          vescale::train::export_hf(
          checkpoint, to_hf,
          {vescale::train::parse_dtype(dtype, "--dtype"), parse_size(max_shard), overwrite});
      std::printf("vescale-convert: wrote %s (%zu files: ", to_hf.c_str(), files.size());
      for (size_t i = 0; i < files.size(); ++i)
        std::printf("%s%s", i ? ", " : "", files[i].c_str());
      std::printf(")\n");
      return 0;
    }
    if (!from_hf.empty() && !to_checkpoint.empty()) {
      const auto folder = vescale::train::import_hf(from_hf, to_checkpoint, overwrite);
      std::printf("vescale-convert: wrote %s\n", folder.c_str());
      return 0;
    }
    std::fprintf(
        stderr,
        "vescale-convert: give --checkpoint and --to-hf, or --from-hf and --to-checkpoint\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vescale-convert: %s\n", vescale::error_text(e).c_str());
    return 1;
  }
}
