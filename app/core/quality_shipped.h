// Shipped quality sweeps: finished sweeps that kvscope itself computed on the shipped models, kept
// in the repository (assets/quality/*.json) so that the Quality panel shows figures at once on a
// fresh machine (a first SmolLM2 sweep takes 12 minutes) while the live sweep recomputes them.
// Unlike the disk cache (app/core/quality_cache.h: path, size and mtime), a shipped file is keyed
// by content: the SHA-256 of the model file, of its tokenizer file and of the eval text, plus the
// weight format, the tokens scored, the block size and the variants run, so any copy of the same
// model matches and any other file does not. Each file names the command that made it, when, and
// at which commit; tests/app/quality_shipped_test.cpp recomputes some of its points.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "app/core/quality_sweep.h"
#include "engine/model/checkpoint.h"
#include "engine/model/tokenizer.h"

namespace kvscope::ui {

// A shipped file: the sweep (its model and text fields hold file names, not this machine's paths)
// and where it came from.
struct ShippedSweep {
  std::string file;       // the file it was read from ("" before it is written)
  std::string made_by;    // the exact command that wrote it
  std::string date;       // when, UTC: "2025-01-31 12:34:56 UTC"
  std::string commit;     // the kvscope commit it was made at (git rev-parse HEAD, and whether
                          // the working tree had uncommitted changes)
  std::string wall_time;  // how long the sweep took ("12 min 41 s, 1 thread")
  QualitySweep sweep;
};

// <source>/assets/quality: where the shipped files are, as assets/text/eval_stories.txt is found.
std::string shipped_sweeps_dir();

// The content key, one line per input. The tokenizer file is hashed too when it is another file
// (llama2.c's tok512.bin; a GGUF carries its own). Throws kvscope::Error when a file cannot be
// read.
std::string shipped_sweep_key(const std::string& model_path, const std::string& tokenizer_path,
                              const std::string& weight_format, const std::string& text_path,
                              long max_tokens, int block_size, const std::string& variants);
// The key of a sweep of `model` (its source file, its weight format, the variants the sweep runs
// on it).
std::string shipped_sweep_key(const Model& model, const Tokenizer& tokenizer,
                              const std::string& text_path, long max_tokens, int block_size);

// The sweep in `path` under `key`, or nullopt with `why` (missing, unreadable, another key: a
// model, text or setup other than the one asked for; a field missing).
std::optional<ShippedSweep> load_shipped_sweep(const std::string& path, const std::string& key,
                                               std::string* why);
// The first *.json file of `dir`, in name order, that holds `key`; nullopt (with `why` naming each
// file looked at and why it did not match) when none does or `dir` does not exist.
std::optional<ShippedSweep> find_shipped_sweep(const std::string& dir, const std::string& key,
                                               std::string* why);
// Writes `s` under `key` (atomically). Throws kvscope::Error naming the file.
void save_shipped_sweep(const std::string& path, const std::string& key, const ShippedSweep& s);

// The panel's line: "shipped results: `<command>`, <date>".
std::string shipped_note(const ShippedSweep& s);
// Its tooltip: "<file>: made at commit <commit> in <wall time>".
std::string shipped_detail(const ShippedSweep& s);

// What `kvscope-ui --write-quality-sweep FILE [--model M]` asks for.
struct ShippedSweepRequest {
  std::string out_path;
  std::string model_arg;  // as --model takes it ("" = stories260K, "smollm2", a path)
  std::string made_by;    // the command line, written into the file
  long max_tokens = kQualitySweepTokens;
  int block_size = kQualitySweepBlockSize;
};

// Runs the sweep the panel runs (QualityJob on the native weights, one thread, no disk cache) and
// writes it with its content key, the command, the date, the commit and the time it took. Prints
// a progress line to `log` every 30 s. Throws kvscope::Error (the model does not load, the sweep
// fails, the file cannot be written).
ShippedSweep write_shipped_sweep(const ShippedSweepRequest& request, std::FILE* log);

}  // namespace kvscope::ui
