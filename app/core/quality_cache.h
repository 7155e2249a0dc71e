// The disk cache of finished quality sweeps: the Quality panel's sweep takes minutes on a real
// model, so each finished one is kept on disk, keyed by everything it was computed from (the
// model file and the eval text, each by path, size and modification time; the token count; the
// block size; the variants run), and a restart, or another run on the same model, shows it at
// once. A file that is unreadable, or holds another key, is ignored (and rewritten when the new
// sweep finishes).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "app/core/quality_sweep.h"

namespace kvscope::ui {

// Where the sweeps are kept: $KVSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/kvscope, else
// $HOME/.cache/kvscope; then "/quality". "" when none of them is set.
std::string sweep_cache_dir();

// The key of a sweep: one line per input. "" when the model or text file cannot be read (no
// cache then).
std::string sweep_cache_key(const std::string& model_path, const std::string& text_path,
                            long max_tokens, int block_size, const std::string& variants);
// The cache file of `key` in `dir`: <dir>/<16 hex digits of the key's FNV-1a hash>.json.
std::string sweep_cache_path(const std::string& dir, const std::string& key);

// Bump when what a sweep computes changes (2: windows cut to the sweep's token budget). Part of
// every key, the disk cache's and the shipped files' (app/core/quality_shipped.h).
inline constexpr int kSweepFormatVersion = 2;

// Text fields stored beside a sweep's points, by name (a shipped file's made_by, date, commit).
using SweepFileNotes = std::map<std::string, std::string>;

// Writes `sweep` with its key and `notes` (atomically: never a half-written file). Throws
// kvscope::Error naming the file when it cannot be written.
void save_sweep_cache(const std::string& path, const std::string& key, const QualitySweep& sweep,
                      const SweepFileNotes& notes = {});
// The sweep stored at `path` under `key`, or nullopt with `why` saying what was wrong (missing,
// unreadable JSON, another key, a field of the wrong type, a note missing). With `notes`, each
// name it holds is a required text field, read into its value.
std::optional<QualitySweep> load_sweep_cache(const std::string& path, const std::string& key,
                                             std::string* why, SweepFileNotes* notes = nullptr);

}  // namespace kvscope::ui
